"""speechmt.models.migrate: flat model configs (checkpoints and configs from before the nesting) become the
nested ModelConfig without losing a field, nested ones pass through, and a checkpoint that stores a flat
config loads and computes exactly what the model it was saved from computes; a derived value an old config held
moves to the model bundle's `resolved`."""

from dataclasses import asdict, replace

import pytest
import torch

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.checkpoint import load_checkpoint, save_checkpoint
from speechmt.decoding.translate import load_model
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig, preset
from speechmt.models.decoder import TransformerDecoderConfig
from speechmt.models.encoders.wav2vec2 import Wav2Vec2EncoderConfig
from speechmt.models.encoders.whisper import WhisperEncoderConfig
from speechmt.models.migrate import (
    FINETUNE_FLAGS,
    FLAT_NAMES,
    checkpoint_config,
    migrate_model_config,
    resolved_fields,
)
from speechmt.tokenizers.pair import Tokenizers
from speechmt.tokenizers.sentencepiece import Tokenizer
from tests.helpers import flat_model_config

# every field of the flat ModelConfig as checkpoints stored it before the nesting (commit 6e9295d)
OLD_FIELDS = (
    "input_dim",
    "tgt_vocab_size",
    "src_vocab_size",
    "d_model",
    "n_heads",
    "ffn_dim",
    "encoder_layers",
    "decoder_layers",
    "text_encoder_layers",
    "share_text_encoder",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "subsampler",
    "conv_channels",
    "conv_kernels",
    "ctc",
    "tie_embeddings",
    "pad_id",
    "position_offset",
    "output_bias",
    "encoder",
    "encoder_name_or_path",
    "encoder_hf_config",
    "freeze_feature_extractor",
    "freeze_encoder",
    "lna_finetune",
    "encoder_lora",
    "encoder_layerdrop",
    "mask_time_prob",
    "mask_time_length",
    "gradient_checkpointing",
    "shrink",
    "shrink_channels",
    "shrink_kernel",
    "shrink_mode",
    "decoder",
    "decoder_name_or_path",
    "decoder_hf_config",
    "decoder_finetune",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "lora_targets",
    "semantic",
    "semantic_options",
)
# one valid flat config with (nearly) every field away from its default
OLD = dict(
    input_dim=40,
    tgt_vocab_size=77,
    src_vocab_size=33,
    d_model=96,
    n_heads=3,
    ffn_dim=100,
    encoder_layers=5,
    decoder_layers=4,
    text_encoder_layers=2,
    share_text_encoder=False,
    dropout=0.2,
    attention_dropout=0.3,
    activation_dropout=0.4,
    subsampler="conv2d",
    conv_channels=48,
    conv_kernels=[3, 3, 3],
    ctc=True,
    tie_embeddings=False,
    pad_id=1,
    position_offset=2,
    output_bias=True,
    encoder="wav2vec2",
    encoder_name_or_path="some/w2v",
    encoder_hf_config={"hidden_size": 8, "conv_dim": [4, 4]},
    freeze_feature_extractor=True,
    freeze_encoder=False,
    lna_finetune=True,
    encoder_lora=False,
    encoder_layerdrop=0.1,
    mask_time_prob=0.05,
    mask_time_length=7,
    gradient_checkpointing=True,
    shrink="conv",
    shrink_channels=64,
    shrink_kernel=3,
    shrink_mode="first",
    decoder="transformer",
    decoder_name_or_path="dec",
    decoder_hf_config={"d_model": 8},
    decoder_finetune="lna",
    lora_rank=8,
    lora_alpha=16.0,
    lora_dropout=0.1,
    lora_targets=["q_proj"],
    semantic="xstnet",
    semantic_options={"layers": 2},
)


def test_every_old_field_has_a_nested_place_and_comes_back():
    assert set(OLD) == set(OLD_FIELDS)
    shared = {f for f in OLD_FIELDS if f not in FLAT_NAMES and f not in FINETUNE_FLAGS}
    assert shared == {
        "tgt_vocab_size",
        "src_vocab_size",
        "d_model",
        "n_heads",
        "ffn_dim",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "ctc",
        "pad_id",
        "position_offset",
    }
    nested = migrate_model_config(OLD)
    assert nested["encoder"] == dict(
        kind="wav2vec2",
        layers=5,
        input_dim=40,
        subsampler="conv2d",
        conv_channels=48,
        conv_kernels=[3, 3, 3],
        name_or_path="some/w2v",
        hf_config={"hidden_size": 8, "conv_dim": [4, 4]},
        finetune="lna",
        layerdrop=0.1,
        freeze_feature_extractor=True,
        mask_time_prob=0.05,
        mask_time_length=7,
        gradient_checkpointing=True,
    )
    assert nested["shrink"] == dict(kind="conv", channels=64, kernel=3, mode="first")
    assert nested["text_encoder"] == dict(layers=2, shared=False)
    assert nested["semantic"] == dict(kind="xstnet", options={"layers": 2})
    assert nested["decoder"] == dict(
        kind="transformer",
        layers=4,
        name_or_path="dec",
        hf_config={"d_model": 8},
        finetune="lna",
        tie_embeddings=False,
        output_bias=True,
    )
    assert nested["lora"] == dict(rank=8, alpha=16.0, dropout=0.1, targets=["q_proj"])
    with pytest.raises(
        ValueError,
        match=r"^bad ModelConfig: encoder.conv_channels, encoder.conv_kernels, "
        r"encoder.input_dim, encoder.layers, encoder.subsampler: not an option of "
        r"encoder 'wav2vec2' \(its options: ",
    ):
        ModelConfig(**nested)  # written by hand, options of another kind are an error
    cfg = ModelConfig.from_dict(OLD)  # saved in a checkpoint: the fields of other kinds, never read, are dropped
    assert cfg.encoder == Wav2Vec2EncoderConfig(
        name_or_path="some/w2v",
        hf_config={"hidden_size": 8, "conv_dim": [4, 4]},
        finetune="lna",
        layerdrop=0.1,
        freeze_feature_extractor=True,
        mask_time_prob=0.05,
        mask_time_length=7,
        gradient_checkpointing=True,
    )
    assert cfg.decoder == TransformerDecoderConfig(layers=4, finetune="lna", tie_embeddings=False, output_bias=True)
    back = flat_model_config(cfg)  # the nested config in the old names again: what the model reads is unchanged
    assert set(back) == set(OLD_FIELDS)
    dropped = (
        "encoder_layers",
        "input_dim",
        "subsampler",
        "conv_channels",
        "conv_kernels",
        "decoder_name_or_path",
        "decoder_hf_config",
        "shrink_mode",
    )
    assert {k: v for k, v in back.items() if k not in dropped} == {
        k: v for k, v in {**OLD, "lora_targets": ("q_proj",)}.items() if k not in dropped
    }
    assert ModelConfig.from_dict(back) == cfg == ModelConfig.from_dict(asdict(cfg)) == ModelConfig(**asdict(cfg))


def test_a_nested_config_passes_through_and_round_trips():
    cfg = preset("tiny", src_vocab_size=12, ctc=True, shrink="conv", lora_rank=4)
    d = asdict(cfg)
    assert migrate_model_config(d) == d
    assert ModelConfig(**d) == ModelConfig.from_dict(d) == cfg
    assert set(d) == {
        "tgt_vocab_size",
        "src_vocab_size",
        "d_model",
        "n_heads",
        "ffn_dim",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "ctc",
        "pad_id",
        "position_offset",
        "encoder",
        "shrink",
        "text_encoder",
        "semantic",
        "decoder",
        "lora",
        "fusion",
    }


@pytest.mark.parametrize(
    "flags, mode",
    [
        ({}, "full"),
        (dict(freeze_encoder=True), "frozen"),
        (dict(lna_finetune=True), "lna"),
        (dict(encoder_lora=True, freeze_encoder=False, lna_finetune=False), "lora"),
        (dict(freeze_encoder=False, lna_finetune=False, encoder_lora=False), "full"),
    ],
)
def test_the_three_encoder_flags_become_one_mode(flags, mode):
    cfg = ModelConfig.from_dict(dict(encoder="whisper", encoder_name_or_path="w", **flags))
    assert cfg.encoder.finetune == mode and flat_model_config(cfg) | flags == flat_model_config(cfg)


def test_mixed_dicts_merge_and_conflicts_are_one_line():
    mixed = migrate_model_config({"preset": "tiny", "encoder": {"kind": "conv"}, "encoder_layers": 3, "d_model": 32})
    assert mixed == {"preset": "tiny", "encoder": {"kind": "conv", "layers": 3}, "d_model": 32}
    with pytest.raises(
        ValueError,
        match=r"^bad ModelConfig: encoder\.layers=4 sets encoder\.layers a second time "
        r"\(already 3\)$",
    ):
        migrate_model_config({"encoder_layers": 3, "encoder": {"layers": 4}})
    assert migrate_model_config({"encoder_layers": 3, "encoder": {"layers": 3}}) == {"encoder": {"layers": 3}}
    with pytest.raises(
        ValueError,
        match=r"^bad ModelConfig: freeze_encoder, lna_finetune and encoder_lora exclude "
        r"each other$",
    ):
        migrate_model_config({"freeze_encoder": True, "encoder_lora": True})
    with pytest.raises(ValueError, match=r"^bad ModelConfig: freeze_encoder must be true or false, got 'yes'$"):
        migrate_model_config({"freeze_encoder": "yes"})
    with pytest.raises(
        ValueError,
        match=r"^bad ModelConfig: encoder must be given as a mapping with its kind and "
        r"options or as the options of a encoder kind \(ConvEncoderConfig, .*\), "
        r"got 'whisper' \(a flat config: ModelConfig.from_dict\)$",
    ):
        ModelConfig(encoder="whisper")


def test_preset_takes_old_flat_and_nested_overrides():
    tiny = preset("tiny")
    three = replace(tiny, encoder=replace(tiny.encoder, layers=3))
    assert preset("tiny", encoder_layers=3) == preset("tiny", encoder={"layers": 3}) == three
    assert preset("tiny", encoder=replace(tiny.encoder, layers=3)) == three  # a whole sub-config
    assert preset(
        "tiny", freeze_encoder=True, encoder="whisper", encoder_name_or_path="w"
    ).encoder == WhisperEncoderConfig(name_or_path="w", finetune="frozen")  # another kind: tiny's conv options dropped
    assert preset("tiny", lora_rank=4, decoder_finetune="lora").lora.rank == 4


def _checkpoint(path, cfg_dict: dict, model, tok, features: dict | None = None, **entries) -> None:
    """A checkpoint of `model` whose config is `cfg_dict`, with fbank + CMVN features unless `features`, and `entries`."""
    save_checkpoint(
        path,
        {
            "model_config": cfg_dict,
            "model": model.state_dict(),
            "tokenizers": Tokenizers(tok, tok).state_dict(),
            "task": "st",
            "decoder_tag": "<de>",
            "features": features or {"fbank": asdict(FbankConfig()), "cmvn": asdict(CMVNConfig("utterance"))},
            **entries,
        },
    )


def test_a_checkpoint_with_a_flat_config_loads_and_computes_the_same(tiny_data, tmp_path):
    """A checkpoint as the trainer wrote it before the nesting (model_config flat), and as it writes it now."""
    tok = Tokenizer.load(tiny_data / "spm.model")
    cfg = preset(
        "tiny",
        tgt_vocab_size=len(tok),
        src_vocab_size=len(tok),
        ctc=True,
        text_encoder_layers=2,
        shrink="conv",
        shrink_channels=32,
        tie_embeddings=False,
    )
    model = build_model(cfg).eval()
    _checkpoint(tmp_path / "old.safetensors", flat_model_config(cfg), model, tok)
    _checkpoint(tmp_path / "new.safetensors", asdict(cfg), model, tok)
    stored = load_checkpoint(tmp_path / "old.safetensors")["model_config"]
    assert stored["encoder"] == "conv" and stored["shrink_channels"] == 32 and "text_encoder" not in stored
    assert isinstance(load_checkpoint(tmp_path / "new.safetensors")["model_config"]["encoder"], dict)
    feats, lengths = torch.randn(2, 50, 80), torch.tensor([50, 31])
    tokens, text_lengths = torch.randint(5, len(tok), (2, 6)), torch.tensor([6, 4])
    with torch.no_grad():
        ref = model.encode_speech(feats, lengths)
        ref_logits, ref_text = model.decode(tokens, ref), model.encode_text(tokens, text_lengths).x
        for name in ("old", "new"):
            lm = load_model(tmp_path / f"{name}.safetensors")
            assert lm.model.config == cfg
            enc = lm.model.encode_speech(feats, lengths)
            assert torch.equal(enc.x, ref.x) and torch.equal(enc.ctc_logits, ref.ctc_logits)
            assert torch.equal(lm.model.decode(tokens, enc), ref_logits)
            assert torch.equal(lm.model.encode_text(tokens, text_lengths).x, ref_text)


def test_the_search_prompt_an_old_config_held_moves_to_the_bundle_and_the_model_searches_from_it(tiny_data, tmp_path):
    """encoder.asr_prompt, derived when a whisper_asr model is first built, was a config field; it is the bundle's
    `resolved` now: an old checkpoint's moves there, a new one stores it there, and both rebuild the same search."""
    from speechmt.bundle import ModelBundle
    from speechmt.decoding.transcribe import SEARCH
    from speechmt.frontend.whisper_mel import WhisperMelConfig
    from tests.models.test_whisper_asr import _mels
    from tests.whisper_helpers import tiny_whisper_dir

    tok = Tokenizer.load(tiny_data / "spm.model")
    whisper = {"kind": "whisper_asr", "name_or_path": str(tiny_whisper_dir(tmp_path / "w", d_model=32))}
    model = build_model(preset("tiny", tgt_vocab_size=len(tok), encoder=whisper), transcription=SEARCH).eval()
    start = model.speech_encoder.prompt[0]  # the tiny Whisper has no generation config: the prompt is its start
    hf = model.resolved["encoder.hf_config"]  # the complete HF config its build derived
    assert model.resolved == {"encoder.asr_prompt": [start], "encoder.hf_config": hf}
    assert "asr_prompt" not in asdict(model.config.encoder) and model.config.encoder.hf_config == {}
    old = asdict(model.config)
    old["encoder"]["asr_prompt"] = (start, 7)  # as checkpoints stored it (a tuple); another prompt, to tell it apart
    old["encoder"]["hf_config"] = hf  # as checkpoints stored it: the complete config
    want = {"encoder.asr_prompt": [start, 7], "encoder.hf_config": hf}
    assert resolved_fields(old) == want
    assert "asr_prompt" not in migrate_model_config(old)["encoder"]
    assert ModelConfig.from_dict(checkpoint_config({"model_config": old})) == model.config
    assert resolved_fields({"encoder": {"kind": "whisper_asr", "asr_prompt": ()}}) == {}  # not filled in yet
    features = {"whisper_mel": asdict(WhisperMelConfig(pad_seconds=30))}
    for name, config, extra in (
        ("old", old, {}),
        ("new", asdict(model.config), {"resolved": want}),
    ):
        _checkpoint(tmp_path / f"{name}.safetensors", config, model, tok, features, **extra)
        bundle = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / f"{name}.safetensors"))
        assert bundle.resolved == want and bundle.config == model.config
        assert bundle.state_dict()["resolved"] == want
    mels, lengths = _mels()
    old_lm, new_lm = load_model(tmp_path / "old.safetensors"), load_model(tmp_path / "new.safetensors")
    assert old_lm.model.speech_encoder.prompt == new_lm.model.speech_encoder.prompt == (start, 7)
    assert old_lm.model.resolved == new_lm.model.resolved == want
    with torch.no_grad():
        (a, a_lengths), (b, b_lengths) = (lm.model.speech_encoder.states(mels, lengths) for lm in (old_lm, new_lm))
    assert torch.equal(a, b) and torch.equal(a_lengths, b_lengths)


def test_the_lm_decoders_vocabulary_and_prompt_an_old_config_held_move_to_the_bundle(tmp_path):
    """decoder.vocab and decoder.prompt (LM ids), derived from the LM's tokenizer when a run starts, were config
    fields; they are the bundle's `resolved` now: an old checkpoint's move there, an old YAML model section drops
    them, a new checkpoint stores them there, export and average carry them, and the model rebuilt from any of
    these computes the same."""
    from speechmt.bundle import ModelBundle
    from speechmt.config import ExperimentConfig
    from speechmt.models.lm_decoder import lm_config_dict
    from speechmt.pretrained import export_model
    from speechmt.tokenizers.lm import LMTokenizer
    from speechmt.training.run import average
    from tests.lm_helpers import lm_resolved, tiny_lm_dir

    lm_dir = tiny_lm_dir(tmp_path / "lm")
    tok = LMTokenizer.trimmed(str(lm_dir), ["Das Wetter ist schön.", "Bitte öffne das Fenster."], ["<de>"])
    torch.manual_seed(0)
    decoder = {"kind": "lm", "name_or_path": str(lm_dir)}
    model = build_model(preset("tiny", n_heads=2, dropout=0.0, decoder=decoder), resolved=lm_resolved(tok)).eval()
    resolved = model.resolved  # the run's, with the LM's complete HF config the build derived
    assert resolved == {**lm_resolved(tok), "decoder.hf_config": lm_config_dict(model.decoder.lm)}
    assert not {"vocab", "prompt"} & set(asdict(model.config.decoder)) and model.config.decoder.hf_config == {}
    assert model.decoder.prompt.tolist() == resolved["decoder.prompt"] and len(tok) == model.config.tgt_vocab_size
    old = asdict(model.config)
    old["decoder"] |= {
        "vocab": tuple(resolved["decoder.vocab"]),
        "prompt": tuple(resolved["decoder.prompt"]),
        "hf_config": resolved["decoder.hf_config"],
    }
    assert (
        resolved_fields(old) == resolved
        and ModelConfig.from_dict(checkpoint_config({"model_config": old})) == model.config
    )
    section = {"decoder": {**decoder, "vocab": [5, 6], "prompt": [2]}}  # an old YAML's model section
    assert ExperimentConfig.from_dict({"model": section}).model.decoder == preset("tiny", decoder=decoder).decoder
    for name, config, extra in (("old", old, {}), ("new", asdict(model.config), {"resolved": resolved})):
        _checkpoint(tmp_path / f"{name}.safetensors", config, model, tok, **extra)
        bundle = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / f"{name}.safetensors"))
        assert bundle.resolved == resolved and bundle.config == model.config
        assert bundle.state_dict()["resolved"] == resolved
    # what writes checkpoints carries it: export writes it out of an old config, average keeps it
    export_model(tmp_path / "old.safetensors", tmp_path / "exported.safetensors", half=False)
    assert load_checkpoint(tmp_path / "exported.safetensors")["resolved"] == resolved
    average([str(tmp_path / "new.safetensors")] * 2, 1, str(tmp_path / "averaged.safetensors"))
    assert load_checkpoint(tmp_path / "averaged.safetensors")["resolved"] == resolved
    feats, lengths = torch.randn(2, 40, 80), torch.tensor([40, 31])
    tokens = torch.tensor([[2, 5, 6], [2, 7, 5]])
    with torch.no_grad():
        ref = model.decode(tokens, model.encode_speech(feats, lengths))
        for name in ("old", "new", "exported", "averaged"):
            lm = load_model(tmp_path / f"{name}.safetensors")
            assert lm.model.resolved == resolved and lm.model.decoder.prompt.tolist() == resolved["decoder.prompt"]
            assert torch.equal(lm.model.decode(tokens, lm.model.encode_speech(feats, lengths)), ref)


def test_the_lm_tokens_of_a_ctc_head_an_old_config_held_move_to_the_bundle(tmp_path):
    """ctc_vocab (the LM ids of a CTC head's text labels), derived from the training transcripts when a run starts,
    was a shared config field; it is the bundle's `resolved` now: an old checkpoint's moves there and its model,
    rebuilt, has the same head and bridge."""
    from speechmt.bundle import ModelBundle
    from speechmt.tokenizers.lm import LMTokenizer
    from tests.lm_helpers import ctc_bridge_model, lm_resolved, tiny_lm_dir

    lm_dir = tiny_lm_dir(tmp_path / "lm")
    model, src = ctc_bridge_model(lm_dir)
    tgt = LMTokenizer.trimmed(str(lm_dir), ["Das Wetter ist schön."], ["<de>"])
    resolved = model.resolved
    vocab = resolved["ctc_vocab"]
    hf = resolved["decoder.hf_config"]
    assert vocab and model.ctc_head.vocab.tolist() == vocab
    assert resolved == {**lm_resolved(tgt), "ctc_vocab": vocab, "decoder.hf_config": hf}
    assert "ctc_vocab" not in asdict(model.config)
    old = asdict(model.config)
    old["ctc_vocab"] = tuple(vocab)
    old["decoder"] |= {
        "vocab": tuple(resolved["decoder.vocab"]),
        "prompt": tuple(resolved["decoder.prompt"]),
        "hf_config": hf,
    }
    assert (
        resolved_fields(old) == resolved
        and ModelConfig.from_dict(checkpoint_config({"model_config": old})) == model.config
    )
    assert "ctc_vocab" not in migrate_model_config({"ctc_vocab": [5, 6], "ctc": True})  # an old YAML's
    _checkpoint(tmp_path / "old.safetensors", old, model, tgt)
    bundle = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / "old.safetensors"))
    assert bundle.resolved == resolved and bundle.config == model.config
    again = load_model(tmp_path / "old.safetensors").model
    assert again.resolved == resolved and torch.equal(again.ctc_head.vocab, model.ctc_head.vocab)
    feats, lengths = torch.randn(2, 40, 80), torch.tensor([40, 31])
    with torch.no_grad():
        a, b = (m.encode_speech(feats, lengths) for m in (model, again))
    assert torch.equal(a.x, b.x) and torch.equal(a.lengths, b.lengths)


def test_the_complete_hf_configs_an_old_config_held_move_to_the_bundle_and_rebuild_without_the_pretrained_model(
    tiny_data, tmp_path
):
    """A pretrained part's hf_config holds what the user wrote (overrides over the pretrained config); the complete
    HF config a build derives is the bundle's `resolved` ("encoder.hf_config", "decoder.hf_config"). A checkpoint
    written before held the complete configs in its model config: they move to `resolved`, the config keeps what a
    user writes, and the model, rebuilt from either checkpoint without the Whisper folder, computes the same."""
    import shutil

    from speechmt.bundle import ModelBundle
    from speechmt.data.encoder_cache import cache_key
    from speechmt.frontend.whisper_mel import WhisperMelConfig
    from speechmt.models.hf_whisper import hf_config_dict, load_hf_whisper
    from speechmt.pretrained import export_model
    from tests.models.test_whisper_asr import _mels
    from tests.whisper_helpers import tiny_whisper_dir

    tok = Tokenizer.load(tiny_data / "spm.model")
    folder = str(tiny_whisper_dir(tmp_path / "w", d_model=32))
    whisper = {"kind": "whisper", "name_or_path": folder, "finetune": "frozen"}
    cfg = ModelConfig(encoder=whisper, decoder={"kind": "whisper"}, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    complete = hf_config_dict(load_hf_whisper(folder, {}))  # the whole of Whisper's config
    assert model.resolved == {"encoder.hf_config": complete, "decoder.hf_config": complete}  # one Whisper, shared
    assert model.config.encoder.hf_config == model.config.decoder.hf_config == {}  # as the user wrote them
    overrides = build_model(replace(cfg, encoder={**whisper, "hf_config": {"dropout": 0.25}}))
    assert overrides.config.encoder.hf_config == {"dropout": 0.25}  # stays what the user wrote
    assert overrides.resolved["encoder.hf_config"]["dropout"] == 0.25 and complete["dropout"] != 0.25

    old = asdict(model.config)
    old["encoder"]["hf_config"] = old["decoder"]["hf_config"] = complete  # as checkpoints stored them
    assert resolved_fields(old) == model.resolved
    assert ModelConfig.from_dict(checkpoint_config({"model_config": old})) == model.config
    assert checkpoint_config({"model_config": old, "resolved": model.resolved}) == asdict(model.config)
    features = {"whisper_mel": asdict(WhisperMelConfig(pad_seconds=30))}
    _checkpoint(tmp_path / "old.safetensors", old, model, tok, features)
    _checkpoint(tmp_path / "new.safetensors", asdict(model.config), model, tok, features, resolved=model.resolved)
    export_model(tmp_path / "old.safetensors", tmp_path / "exported.safetensors", half=False)
    shutil.rmtree(folder)  # the checkpoint alone rebuilds the model
    mels, lengths = _mels()
    tokens = torch.tensor([[50, 7, 9], [50, 11, 3], [50, 4, 4]])
    keys = set()  # an encoder cache's key reads the built encoder (its HF module's config), as before the move
    with torch.no_grad():
        ref = model.encode_speech(mels, lengths)
        ref_logits = model.decode(tokens, ref)
        for name in ("old", "new", "exported"):
            ckpt = load_checkpoint(tmp_path / f"{name}.safetensors")
            bundle = ModelBundle.from_checkpoint(ckpt)
            assert bundle.config == model.config and bundle.resolved == model.resolved
            again = build_model(bundle.config, pretrained=False, resolved=bundle.resolved).eval()
            again.load_state_dict(ckpt["model"])
            assert again.resolved == model.resolved
            enc = again.encode_speech(mels, lengths)
            assert torch.equal(enc.x, ref.x) and torch.equal(again.decode(tokens, enc), ref_logits)
            keys.add(cache_key(again.speech_encoder, bundle.frontend.settings)[0])
    assert len(keys) == 1  # the same cache serves a model rebuilt from either checkpoint


def test_a_random_inits_architecture_stays_in_an_old_config_and_is_copied_to_the_bundle(tiny_data, tmp_path):
    """A random init (no name_or_path) of an old checkpoint keeps its hf_config in the config: it is the architecture
    the config asks for (its complete form, as old checkpoints stored it); the bundle's `resolved` holds it too."""
    from speechmt.bundle import ModelBundle
    from speechmt.frontend.waveform import WaveformConfig
    from tests.helpers import tiny_wav2vec2_fields

    tok = Tokenizer.load(tiny_data / "spm.model")
    cfg = preset("tiny", tgt_vocab_size=len(tok), encoder={"kind": "wav2vec2", "hf_config": tiny_wav2vec2_fields()})
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    complete = model.resolved["encoder.hf_config"]
    assert model.config.encoder.hf_config == tiny_wav2vec2_fields() != complete  # what the user wrote
    old = asdict(model.config)
    old["encoder"]["hf_config"] = complete
    features = {"waveform": asdict(WaveformConfig())}
    _checkpoint(tmp_path / "old.safetensors", old, model, tok, features)
    bundle = ModelBundle.from_checkpoint(load_checkpoint(tmp_path / "old.safetensors"))
    assert bundle.config.encoder.hf_config == complete and bundle.resolved == {"encoder.hf_config": complete}
    again = load_model(tmp_path / "old.safetensors").model
    wave, lengths = torch.randn(2, 9000), torch.tensor([9000, 7000])
    with torch.no_grad():
        assert torch.equal(again.encode_speech(wave, lengths).x, model.encode_speech(wave, lengths).x)
