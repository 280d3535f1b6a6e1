import re
import shutil
from dataclasses import asdict

import numpy as np
import pytest
import torch
from transformers import (
    AutoModel,
    Data2VecAudioModel,
    HubertConfig,
    HubertModel,
    Wav2Vec2Config,
    Wav2Vec2FeatureExtractor,
    Wav2Vec2Model,
)

from speechmt import load_model
from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.checkpoint import save_checkpoint
from speechmt.decoding.translate import LoadedModel, translate
from speechmt.frontend.waveform import WaveformConfig, WaveformFrontend
from speechmt.models import ModelConfig, build_model
from speechmt.models.encoders.wav2vec2 import Wav2Vec2Options, feature_extractor_settings, wav2vec2_encoder
from speechmt.models.migrate import migrate_model_config
from speechmt.tokenizers.pair import Tokenizers
from speechmt.tokenizers.sentencepiece import Tokenizer
from tests.helpers import tiny_wav2vec2_fields


def _encoder(dim: int = 32, options: Wav2Vec2Options = Wav2Vec2Options(), **fields):
    return wav2vec2_encoder("", tiny_wav2vec2_fields(**fields), dim, options).eval()


LENGTHS = [400, 401, 719, 720, 721, 1039, 1040, 1041, 1999, 2000] + list(range(2100, 9000, 613))


@pytest.mark.parametrize(
    "fields",
    [
        {},  # the base model's geometry: 320 samples a frame
        dict(conv_dim=[16] * 3, conv_kernel=[10, 3, 3], conv_stride=[5, 2, 2]),
        dict(
            conv_dim=[16] * 3,
            conv_kernel=[10, 4, 3],
            conv_stride=[5, 3, 2],
            feat_extract_norm="group",
            do_stable_layer_norm=False,
        ),
        dict(add_adapter=True, num_adapter_layers=2, adapter_stride=2, output_hidden_size=24),
    ],
)
def test_output_lengths_equal_hf_and_real_output_lengths(fields):
    enc = _encoder(**fields)
    for n in LENGTHS:
        ours = int(enc.output_lengths(torch.tensor(n)))
        hf = int(enc.model._get_feat_extract_output_lengths(torch.tensor(n)))
        with torch.no_grad():
            out = enc(torch.randn(1, n), torch.tensor([n]))
        assert ours == hf == out.x.size(1) == int(out.lengths), n
    lengths = torch.tensor(LENGTHS)
    assert torch.equal(enc.output_lengths(lengths), enc.model._get_feat_extract_output_lengths(lengths))


def test_layer_norm_models_get_an_attention_mask_and_batch_like_single_utterances():
    enc = _encoder()
    assert enc.use_attention_mask
    lengths = torch.tensor([8000, 5000, 1200])
    waves = torch.randn(3, 8000)  # padded samples hold random values on purpose
    with torch.no_grad():
        batch = enc(waves, lengths)
        assert batch.lengths.tolist() == [24, 15, 3] and batch.x.shape == (3, 24, 32)
        for i, n in enumerate(lengths.tolist()):
            alone = enc(waves[i : i + 1, :n], lengths[i : i + 1])
            m = int(alone.lengths)
            assert (alone.x[0] - batch.x[i, :m]).abs().max() < 1e-4
            assert torch.all(batch.x[i, m:] == 0)


def test_group_norm_models_get_zero_padded_waves_and_no_mask():
    enc = _encoder(feat_extract_norm="group", do_stable_layer_norm=False)
    assert not enc.use_attention_mask
    lengths = torch.tensor([8000, 5000])
    waves = torch.randn(2, 8000)
    zero_padded = waves.clone()
    zero_padded[1, 5000:] = 0
    with torch.no_grad():
        ours = enc(waves, lengths)
        reference = enc.model(zero_padded).last_hidden_state  # as HF's feature extractor pads these models
        masked = enc.model(zero_padded, attention_mask=(zero_padded != 0).long()).last_hidden_state
    assert torch.allclose(ours.x[0], reference[0], atol=1e-5)
    assert torch.allclose(ours.x[1, :15], reference[1, :15], atol=1e-5) and torch.all(ours.x[1, 15:] == 0)
    assert not torch.allclose(ours.x[1, :15], masked[1, :15], atol=1e-3)  # a mask would change the result


def test_encoder_equals_the_hf_model_and_projects_to_the_model_dimension():
    torch.manual_seed(0)
    enc = _encoder()
    wave = torch.randn(1, 6000)
    with torch.no_grad():
        assert torch.allclose(enc(wave, torch.tensor([6000])).x, enc.model(wave).last_hidden_state, atol=1e-6)
    wide = _encoder(dim=48)
    assert isinstance(wide.proj, torch.nn.Linear) and wide(wave, torch.tensor([6000])).x.shape == (1, 18, 48)


_LAYER_NORM = re.compile(r"(^|\.)(final_)?layer_norm\.(weight|bias)$")
_ATTENTION = re.compile(r"\.attention\.(q|k|v|out)_proj\.(weight|bias)$")


def _trainable(enc) -> set[str]:
    return {n for n, p in enc.model.named_parameters() if p.requires_grad}


def test_freezing_options():
    names = {n for n, _ in _encoder().model.named_parameters()}
    assert _trainable(_encoder()) == names
    cnn = {n for n in names if n.startswith("feature_extractor.")}
    assert cnn and _trainable(_encoder(options=Wav2Vec2Options(freeze_feature_extractor=True))) == names - cnn
    frozen = _encoder(dim=48, options=Wav2Vec2Options(freeze=True))
    assert _trainable(frozen) == set() and all(p.requires_grad for p in frozen.proj.parameters())


def test_lna_trains_only_layer_norms_and_self_attention_projections():
    enc = _encoder(options=Wav2Vec2Options(lna=True))
    names = {n for n, _ in enc.model.named_parameters()}
    expected = {n for n in names if _LAYER_NORM.search(n) or _ATTENTION.search(n)}
    assert _trainable(enc) == expected
    # 2 layers x (4 projections + 2 LayerNorms) x (weight, bias); final, projection and 7 CNN LayerNorms
    assert len(expected) == 2 * 6 * 2 + 2 + 2 + 7 * 2
    assert not any("feed_forward" in n or "pos_conv" in n for n in expected)
    assert "feature_projection.projection.weight" not in expected
    with_cnn_frozen = _encoder(options=Wav2Vec2Options(lna=True, freeze_feature_extractor=True))
    assert _trainable(with_cnn_frozen) == {n for n in expected if not n.startswith("feature_extractor.")}


def test_layerdrop_and_time_masking_are_written_into_the_hf_config():
    enc = _encoder(options=Wav2Vec2Options(layerdrop=0.25, mask_time_prob=0.3, mask_time_length=3))
    config = enc.model.config
    assert (config.layerdrop, config.mask_time_prob, config.mask_time_length) == (0.25, 0.3, 3)
    assert config.apply_spec_augment and enc.model.masked_spec_embed.shape == (32,)


def test_time_masks_cover_unpadded_frames_in_training_only():
    np.random.seed(0)  # HF draws spans from numpy's global generator
    enc = _encoder(options=Wav2Vec2Options(mask_time_prob=0.5, mask_time_length=2))
    lengths = torch.tensor([16000, 6000])
    assert enc._time_mask(lengths, 16000) is None  # eval
    enc.train()
    mask = enc._time_mask(lengths, 16000)
    assert mask.shape == (2, 49) and mask.dtype == torch.bool
    assert mask[0].any() and mask[1, :18].any() and not mask[1, 18:].any()
    wave = torch.randn(2, 16000)
    with torch.no_grad():
        masked = enc(wave, lengths).x
        enc.eval()
        plain = enc(wave, lengths).x
    assert not torch.allclose(masked, plain)
    enc.train()
    short = enc._time_mask(torch.tensor([1000]), 1000)  # 2 frames: HF would raise for a span of 2
    assert short.shape == (1, 2) and not short.any()
    assert enc(torch.randn(1, 1000), torch.tensor([1000])).x.shape == (1, 2, 32)


def test_layerdrop_skips_layers_in_training():
    enc = _encoder(options=Wav2Vec2Options(layerdrop=1.0)).train()
    enc(torch.randn(1, 4000), torch.tensor([4000])).x.sum().backward()
    layers = [p for n, p in enc.model.named_parameters() if n.startswith("encoder.layers.")]
    assert layers and all(p.grad is None for p in layers)
    assert enc.model.feature_projection.projection.weight.grad is not None
    enc.zero_grad()
    enc.eval()
    enc(torch.randn(1, 4000), torch.tensor([4000])).x.sum().backward()
    assert all(p.grad is not None for p in layers)


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        enc = _encoder(options=Wav2Vec2Options(gradient_checkpointing=checkpointing)).train()
        torch.manual_seed(1)
        enc(torch.randn(2, 6000), torch.tensor([6000, 4000])).x.pow(2).sum().backward()
        grads.append({n: p.grad for n, p in enc.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])


def _st_config(**overrides) -> ModelConfig:
    """A config as a user writes it, in the flat names (its options checked against its kinds)."""
    base = dict(
        encoder="wav2vec2",
        d_model=48,
        n_heads=2,
        ffn_dim=64,
        decoder_layers=1,
        tgt_vocab_size=60,
        src_vocab_size=60,
        ctc=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        shrink={"kind": "conv", "channels": 32},
    )
    return ModelConfig(**migrate_model_config({**base, **overrides}))


def test_model_with_a_wav2vec2_encoder_saves_and_loads_offline(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf_dir = tmp_path / "w2v"
    torch.manual_seed(0)
    saved = Wav2Vec2Model(Wav2Vec2Config(**{k: v for k, v in tiny_wav2vec2_fields().items() if k != "model_type"}))
    saved.save_pretrained(hf_dir)
    Wav2Vec2FeatureExtractor(do_normalize=False, return_attention_mask=True).save_pretrained(hf_dir)
    model = build_model(_st_config(encoder_name_or_path=str(hf_dir), freeze_feature_extractor=True)).eval()
    own = {
        k.removeprefix("speech_encoder.model."): v
        for k, v in model.state_dict().items()
        if k.startswith("speech_encoder.model.")
    }
    weights = saved.state_dict()
    assert set(weights) - set(own) == {"masked_spec_embed"}  # time masking is off (mask_time_prob 0)
    assert all(torch.equal(own[k], weights[k]) for k in own)
    complete = model.resolved["encoder.hf_config"]  # the build's complete HF config: the bundle's, not the config's
    assert complete["hidden_size"] == 32 and model.config.encoder.name_or_path == str(hf_dir)
    assert model.config.encoder.hf_config == {} and model.resolved == {"encoder.hf_config": complete}
    waveform = feature_extractor_settings(str(hf_dir))
    assert waveform == WaveformConfig(do_normalize=False)

    tok = Tokenizer.load(tiny_data / "spm.model")
    fbank, cmvn = FbankConfig(), CMVNConfig("utterance")
    old_config = asdict(model.config)
    old_config["encoder"]["hf_config"] = complete  # a checkpoint from before the complete config moved to the bundle
    for name, config, extra in (
        ("st", asdict(model.config), {"resolved": model.resolved}),
        ("old", old_config, {}),
    ):
        save_checkpoint(
            tmp_path / f"{name}.safetensors",
            {
                "model_config": config,
                "model": model.state_dict(),
                "tokenizers": Tokenizers(tok, tok).state_dict(),
                "task": "st",
                "decoder_tag": "<de>",
                "features": {"fbank": asdict(fbank), "cmvn": asdict(cmvn), "waveform": asdict(waveform)},
                **extra,
            },
        )
    shutil.rmtree(hf_dir)  # the checkpoint alone rebuilds the model
    wave, lengths = torch.randn(2, 9000), torch.tensor([9000, 7000])
    tokens = torch.randint(5, 60, (2, 4))
    for name in ("old", "st"):
        lm = load_model(tmp_path / f"{name}.safetensors")
        assert lm.frontend.config == waveform and lm.model.config == model.config
        assert lm.model.resolved == model.resolved
        with torch.no_grad():
            a, b = model.encode_speech(wave, lengths), lm.model.encode_speech(wave, lengths)
            assert torch.equal(a.x, b.x) and torch.equal(a.lengths, b.lengths)
            assert torch.equal(a.ctc_logits, b.ctc_logits) and torch.equal(
                model.decode(tokens, a), lm.model.decode(tokens, b)
            )
    original = LoadedModel(model, tok, "<de>", WaveformFrontend(waveform), "st", "(memory)", torch.device("cpu"), tok)
    audio = [wave[0].numpy(), wave[1, :7000].numpy()]
    assert [r.text for r in translate(lm, audio, beam=2, max_len_b=5)] == [
        r.text for r in translate(original, audio, beam=2, max_len_b=5)
    ]


def test_a_missing_pretrained_encoder_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'none'}: cannot load a Hugging Face audio model"):
        build_model(_st_config(encoder_name_or_path=str(tmp_path / "none")))


def test_hubert_and_data2vec_audio_go_through_the_same_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fields = {
        k: v
        for k, v in tiny_wav2vec2_fields().items()
        if k
        in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "conv_dim",
            "conv_kernel",
            "conv_stride",
            "num_conv_pos_embeddings",
            "num_conv_pos_embedding_groups",
        )
    }
    HubertModel(HubertConfig(**fields)).save_pretrained(tmp_path / "hubert")  # group norm CNN, no feature extractor
    with pytest.warns(UserWarning, match="no feature extractor config"):
        assert feature_extractor_settings(str(tmp_path / "hubert")) == WaveformConfig()
    hubert = build_model(_st_config(encoder_name_or_path=str(tmp_path / "hubert"))).eval()
    data2vec = build_model(_st_config(encoder_hf_config={**fields, "model_type": "data2vec-audio"})).eval()
    assert isinstance(hubert.speech_encoder.model, HubertModel)
    assert isinstance(data2vec.speech_encoder.model, Data2VecAudioModel)
    assert not hubert.speech_encoder.use_attention_mask and data2vec.speech_encoder.use_attention_mask
    reloaded = AutoModel.from_pretrained(tmp_path / "hubert")
    assert torch.equal(
        reloaded.encoder.layers[0].attention.q_proj.weight,
        hubert.speech_encoder.model.encoder.layers[0].attention.q_proj.weight,
    )
    for model in (hubert, data2vec):
        lengths = torch.tensor([9000, 5000])
        with torch.no_grad():
            enc = model.encode_speech(torch.randn(2, 9000), lengths)
        acoustic = model.speech_encoder.model._get_feat_extract_output_lengths(lengths)
        assert enc.ctc_lengths.tolist() == acoustic.tolist() == [27, 15] and enc.lengths.tolist() == [7, 4]


@pytest.mark.parametrize("shrink", ["conv", "ctc"])
def test_gradients_reach_the_wav2vec2_encoder_through_the_shrink(shrink):
    from speechmt.data.dataset import Batch
    from speechmt.tasks import ObjectiveSettings, task_losses

    model = build_model(_st_config(encoder_hf_config=tiny_wav2vec2_fields(), shrink={"kind": shrink})).train()
    batch = Batch(
        ids=["a", "b"],
        feats=torch.randn(2, 9000),
        feat_lengths=torch.tensor([9000, 6000]),
        tgt=torch.randint(5, 60, (2, 4)),
        tgt_lengths=torch.tensor([4, 4]),
    )
    loss, _ = task_losses(model, batch, "st", ["ce"], ObjectiveSettings())["ce"]  # the decoder's loss only
    loss.backward()
    hf = model.speech_encoder.model
    for p in (hf.feature_extractor.conv_layers[0].conv.weight, hf.encoder.layers[0].attention.q_proj.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(encoder="hubert"), "unknown encoder 'hubert'"),
        (
            dict(encoder="conv", lna_finetune=True, mask_time_prob=0.1),
            r"encoder\.finetune, encoder\.mask_time_prob: not an option of encoder 'conv' \(its options: layers, ",
        ),
        (
            dict(encoder="whisper", encoder_name_or_path="x", mask_time_prob=0.1),
            r"encoder\.mask_time_prob: not an option of encoder 'whisper'",
        ),
        (dict(freeze_encoder=True, lna_finetune=True), "exclude each other"),
        (dict(mask_time_prob=1.0), r"encoder\.mask_time_prob must be a finite number >= 0 and < 1, got 1\.0"),
        (dict(share_text_encoder=True, text_encoder_layers=12), r"text_encoder\.shared needs the conv encoder"),
    ],
)
def test_wav2vec2_config_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        _st_config(**overrides)


@pytest.mark.slow
def test_tiny_wav2vec2_st_model_overfits_and_translates_its_training_audio_exactly(tiny_data, tmp_path):
    """run_training on waveforms (wav2vec2 + conv shrink), then the checkpoint alone translates and scores."""
    from speechmt.audio import read_audio
    from speechmt.checkpoint import load_checkpoint
    from speechmt.data.manifest import read_manifest
    from speechmt.evaluation.evaluate import evaluate
    from speechmt.training.run import run_training
    from tests.helpers import tiny_config

    cfg = tiny_config(
        tiny_data,
        tmp_path,
        max_updates=250,
        save_interval_updates=250,
        validate_interval_updates=250,
        lr=1e-3,
        warmup_updates=20,
    )
    cfg.model = ModelConfig(
        encoder={"kind": "wav2vec2", "hf_config": tiny_wav2vec2_fields()},
        d_model=64,
        n_heads=2,
        ffn_dim=128,
        decoder={"layers": 2},
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        shrink={"kind": "conv", "channels": 64},
    )
    run_training(cfg)
    ckpt = load_checkpoint(tmp_path / "checkpoint_last.safetensors")
    assert ckpt["features"]["waveform"] == {"sample_rate": 16000, "do_normalize": True}
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    records = read_manifest(tiny_data / "train.jsonl")
    waves = [read_audio(r.audio, r.offset, r.duration) for r in records]
    assert [r.text for r in translate(lm, waves, beam=4)] == [r.tgt_text for r in records]
    report = evaluate(lm, tiny_data, "train", lm.decode_options(4))
    assert report.metrics["BLEU"].score == pytest.approx(100.0)


def test_the_recipe_config_loads_and_builds():
    from speechmt.config import load_config
    from tests.conftest import ASSETS

    cfg = load_config(
        ASSETS.parents[1] / "recipes/mustc/conf/st_w2v_conv_mini.yaml",
        ["model.tgt_vocab_size=100", "model.src_vocab_size=80", "model.ctc=true"],
    )
    assert cfg.model.encoder.kind == "wav2vec2" and cfg.model.shrink.kind == "conv" and cfg.train.ctc_weight == 0.3
    model = build_model(cfg.model)
    hf = model.speech_encoder.model
    assert isinstance(hf, Wav2Vec2Model) and hf.config.conv_dim == [128] * 7 and hf.config.hidden_size == 256
    assert hf.config.mask_time_prob == 0.05 and hf.config.layerdrop == 0.05
    lengths = torch.tensor([32000, 16000])
    with torch.no_grad():
        enc = model.eval().encode_speech(torch.randn(2, 32000), lengths)
    assert enc.ctc_lengths.tolist() == [99, 49] and enc.lengths.tolist() == [25, 13]  # 20 ms, then 80 ms
