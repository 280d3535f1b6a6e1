"""Training on a Whisper backbone: cached frozen encoder, LoRA decoder, delta checkpoints that load from
their base, the Whisper prefix forced at decoding."""

from pathlib import Path

import pytest
import torch

from speechmt.checkpoint import CheckpointError, load_checkpoint
from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.decoding.translate import load_model
from speechmt.models.config import ModelConfig
from speechmt.training.run import run_training
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_train"), d_model=64)


def whisper_config(data: Path, base: Path, save_dir: Path, **train) -> ExperimentConfig:
    model = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen"},
        decoder={"kind": "whisper"},
        dropout=0.0,
    )
    data_cfg = DataConfig(dir=str(data), spec_augment="", max_tokens=4000, tgt_lang="de")
    defaults = dict(
        task="st",
        lr=3e-3,
        warmup_updates=5,
        max_updates=300,
        save_dir=str(save_dir),
        save_interval_updates=100,
        validate_interval_updates=100,
        log_interval=50,
        seed=1,
        label_smoothing=0.0,
        keep_last=2,
    )
    return ExperimentConfig(model=model, data=data_cfg, train=TrainConfig(**{**defaults, **train}))


@pytest.fixture(scope="module")
def trained(tiny_data, whisper_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("whisper_st")
    cfg = whisper_config(tiny_data, whisper_dir, save_dir)
    run_training(cfg)
    return cfg, save_dir


def _last(save_dir: Path) -> Path:
    return next(p for p in sorted(save_dir.glob("checkpoint_last*")) if not p.name.endswith(".unreadable"))


def test_cached_states_are_written_once_and_keyed(trained, tiny_data):
    from speechmt.data.encoder_cache import cache_key

    _, save_dir = trained
    lm = load_model(_last(save_dir))
    key, _ = cache_key(lm.model.speech_encoder, lm.frontend.config)  # the frozen encoder is the base's: same key
    folder = tiny_data / "encoder_cache" / key
    assert sorted(p.name for p in folder.glob("*.index.npz")) == ["dev.index.npz", "train.index.npz"]


def test_delta_checkpoint_holds_only_the_trained_decoder_and_loads_from_its_base(trained, whisper_dir):
    cfg, save_dir = trained
    ckpt = load_checkpoint(_last(save_dir))
    assert ckpt["base"]["sources"] == [str(whisper_dir)] and len(ckpt["base"]["sha256"]) == 64
    model_keys = set(load_model(_last(save_dir)).model.state_dict())
    assert set(ckpt["model"]) == {k for k in model_keys if k.startswith("decoder.")}  # the frozen encoder: base
    lm = load_model(_last(save_dir))
    assert lm.tokenizer.kind == "whisper" and lm.frontend.name == "whisper_mel"
    options = lm.decode_options(beam=1)
    tok = lm.tokenizer
    assert options.start_id is None and options.bos_id == tok.bos_id
    assert options.prefix == (tok.tag_id("<|de|>"), tok.task_id, tok.no_timestamps_id)
    assert set(options.suppress) == set(range(tok.eos_id + 1, len(tok)))


def test_the_tiny_whisper_st_model_learns_its_training_translations(trained, tiny_data):
    from speechmt.evaluation.evaluate import decode_split, references

    cfg, save_dir = trained
    lm = load_model(_last(save_dir))
    decoded = decode_split(lm, tiny_data, "train", lm.decode_options(beam=2))
    refs = references("st", decoded.records)
    exact = sum(h == r for h, r in zip(decoded.hyps, refs))
    assert exact >= 4, list(zip(decoded.hyps, refs))


def test_a_changed_base_is_refused_with_one_line(trained, tmp_path):
    cfg, save_dir = trained
    other = tiny_whisper_dir(tmp_path / "other", d_model=64, seed=5)
    ckpt = load_checkpoint(_last(save_dir))
    ckpt["base"]["sources"] = [str(other)]
    ckpt["model_config"]["encoder"]["name_or_path"] = str(other)
    from speechmt.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "moved.safetensors", {k: v for k, v in ckpt.items() if k != "format"})
    with pytest.raises(CheckpointError, match="has other weights here"):
        load_model(tmp_path / "moved.safetensors")


def test_whispers_own_30s_input_is_a_data_option_kept_with_the_features(tiny_data, whisper_dir, tmp_path):
    from speechmt.frontend import WhisperMelFrontend
    from speechmt.frontend.whisper_mel import WhisperMelConfig
    from speechmt.training.builders import frontend_for

    cfg = whisper_config(tiny_data, whisper_dir, tmp_path)
    assert frontend_for(cfg) == WhisperMelFrontend(WhisperMelConfig(80))
    cfg.data.whisper_pad_seconds = 30.0
    assert frontend_for(cfg) == WhisperMelFrontend(WhisperMelConfig(80, pad_seconds=30))


def test_export_merge_writes_a_full_model_that_needs_no_base_and_decodes_the_same(trained, tiny_data, tmp_path):
    from speechmt.evaluation.evaluate import decode_split
    from speechmt.pretrained import export_model

    _, save_dir = trained
    export_model(_last(save_dir), tmp_path / "merged.safetensors", half=False, merge=True)
    state = load_checkpoint(tmp_path / "merged.safetensors")
    assert "base" not in state and any(k.startswith("speech_encoder.") for k in state["model"])
    delta, full = load_model(_last(save_dir)), load_model(tmp_path / "merged.safetensors")
    options = delta.decode_options(beam=2)
    assert decode_split(full, tiny_data, "train", options).hyps == decode_split(delta, tiny_data, "train", options).hyps


def whisper_mt_config(data: Path, base: Path, save_dir: Path, **train) -> ExperimentConfig:
    """Text MT on the Whisper backbone: source text in Whisper's tokenizer, embedded by frozen copies of
    its decoder's tables, through a 1-layer XSTNet stack (identity start) into its decoder."""
    cfg = whisper_config(data, base, save_dir, **{"task": "mt", **train})
    cfg.model = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen"},
        decoder={"kind": "whisper"},
        text_encoder={"embed_only": True, "embeddings": "whisper", "freeze_embeddings": True},
        semantic={"kind": "xstnet", "options": {"layers": 1, "init": "identity", "audio_tag": False}},
        dropout=0.0,
    )
    return cfg


@pytest.fixture(scope="module")
def trained_mt(tiny_data, whisper_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("whisper_mt")
    cfg = whisper_mt_config(tiny_data, whisper_dir, save_dir, max_updates=200)
    run_training(cfg)
    return cfg, save_dir


def test_whisper_text_embeddings_are_the_base_decoders_tables_unscaled_and_frozen(trained_mt, whisper_dir):
    import torch
    from transformers import WhisperForConditionalGeneration

    from speechmt.sequence import lengths_to_padding_mask

    base = WhisperForConditionalGeneration.from_pretrained(whisper_dir).model.decoder
    lm = load_model(_last(trained_mt[1]))
    text = lm.model.text_encoder
    assert torch.equal(text.embedding.weight, base.embed_tokens.weight) and text.scale == 1.0
    assert torch.equal(text.positions.weight, base.embed_positions.weight)
    assert not any(p.requires_grad for p in text.parameters())
    assert not torch.equal(lm.model.decoder.embed.weight, base.embed_tokens.weight)  # the decoder trained
    tokens, lengths = torch.tensor([[5, 9, 7], [3, 4, 0]]), torch.tensor([3, 2])
    out = text.eval()(tokens, lengths)
    expected = base.embed_tokens(tokens) + base.embed_positions.weight[:3]
    expected = expected.masked_fill(lengths_to_padding_mask(lengths, 3)[..., None], 0)
    assert torch.allclose(out.x, expected) and out.lengths.tolist() == [3, 2]


def test_whisper_mt_tokenizes_the_source_with_whisper_and_keeps_its_tables_out_of_the_delta(trained_mt):
    ckpt = load_checkpoint(_last(trained_mt[1]))
    assert ckpt["tokenizers"]["src"]["kind"] == "whisper"
    assert not any(k.startswith("text_encoder.") for k in ckpt["model"])  # frozen copies: rebuilt from the base
    assert any(k.startswith("decoder.") for k in ckpt["model"]) and any(
        k.startswith("semantic.") for k in ckpt["model"]
    )


def test_the_tiny_whisper_mt_model_learns_its_training_translations(trained_mt, tiny_data):
    from speechmt.evaluation.evaluate import decode_split, references

    lm = load_model(_last(trained_mt[1]))
    assert lm.task == "mt"
    decoded = decode_split(lm, tiny_data, "train", lm.decode_options(beam=2))
    refs = references("mt", decoded.records)
    exact = sum(h == r for h, r in zip(decoded.hyps, refs))
    assert exact >= 4, list(zip(decoded.hyps, refs))


def test_whisper_text_embeddings_are_checked(tiny_data, whisper_dir, tmp_path):
    from speechmt.config import ConfigError
    from speechmt.training.builders import load_tokenizers, model_config_for

    with pytest.raises(ValueError, match="freeze_embeddings needs text_encoder.embeddings whisper"):
        ModelConfig(text_encoder={"embed_only": True, "freeze_embeddings": True})
    with pytest.raises(ValueError, match="unknown text_encoder.embeddings 'bert'"):
        ModelConfig(text_encoder={"embed_only": True, "embeddings": "bert"})
    with pytest.raises(ValueError, match="embeddings whisper needs decoder 'whisper'"):
        ModelConfig(text_encoder={"embed_only": True, "embeddings": "whisper"})
    cfg = whisper_mt_config(tiny_data, whisper_dir, tmp_path, task="st", ctc_weight=0.3)
    cfg.data.src_vocab = str(tiny_data / "spm.model")
    with pytest.raises(ConfigError, match="CTC head writes the transcript in a SentencePiece source vocabulary"):
        model_config_for(cfg, load_tokenizers(cfg.data, cfg.model))


def top_layer_encoder(base: Path) -> dict:
    return {"kind": "whisper", "name_or_path": str(base), "finetune": "lora", "frozen_layers": 1}


@pytest.fixture(scope="module")
def trained_top(tiny_data, whisper_dir, tmp_path_factory):
    """20 ST updates with layer 0 frozen and cached, LoRA (rank 4) in layer 1 and the decoder."""
    save_dir = tmp_path_factory.mktemp("whisper_top")
    cfg = whisper_config(
        tiny_data, whisper_dir, save_dir, max_updates=20, save_interval_updates=20, validate_interval_updates=20
    )
    cfg.model = ModelConfig(
        encoder=top_layer_encoder(whisper_dir),
        decoder={"kind": "whisper", "finetune": "lora"},
        dropout=0.0,
        lora={"rank": 4},
    )
    run_training(cfg)
    return cfg, save_dir


def test_bottom_layers_frozen_train_from_their_cache_and_save_only_the_layers_above(trained_top, tiny_data):
    """encoder.frozen_layers 1 with LoRA: the states after layer 0 are cached (keyed by that layer), the
    run trains layer 1's adapters from them, and the model it saves encodes live audio as it trained."""
    import json

    import torch

    from speechmt.data.encoder_cache import cache_key
    from speechmt.data.features import FeatureStore
    from speechmt.data.manifest import read_manifest, record_audio
    from speechmt.frontend.whisper_mel import whisper_log_mel

    _, tmp_path = trained_top
    ckpt = load_checkpoint(_last(tmp_path))
    encoder_keys = {k for k in ckpt["model"] if k.startswith("speech_encoder.")}
    assert encoder_keys and all(".layers.1." in k and ".lora_" in k for k in encoder_keys)
    assert all(".lora_" in k for k in ckpt["model"])
    lm = load_model(_last(tmp_path))
    key, _ = cache_key(lm.model.speech_encoder, lm.frontend.config)
    folder = tiny_data / "encoder_cache" / key
    assert json.loads((folder / "meta.json").read_text())["layers"] == 1
    assert sorted(p.name for p in folder.glob("*.index.npz")) == ["dev.index.npz", "train.index.npz"]
    store, rec = FeatureStore(folder / "train"), read_manifest(tiny_data / "train.jsonl")[0]
    mels = whisper_log_mel(record_audio(rec, tiny_data), lm.frontend.config)[None]
    with torch.no_grad():
        live = lm.model.encode_speech(mels, torch.tensor([mels.size(1)]))
        cached = torch.from_numpy(store[rec.id])[None].float()
        from_cache = lm.model.encode_speech(cached, torch.tensor([cached.size(1)]), precomputed=True)
    assert from_cache.x.shape == live.x.shape
    torch.testing.assert_close(from_cache.x, live.x, atol=2e-2, rtol=1e-2)  # float16 storage


def test_xstnet_started_from_an_st_models_adapters_is_that_model_at_update_0(trained_top, tiny_data, whisper_dir):
    """init_encoder_from with prefixes speech_encoder. and decoder. (research/mustc/conf/st_xstnet_whisper_base_top3_from_st.yaml):
    every adapter of the ST run is copied into XSTNet, whose identity-start stack then hands the decoder the same
    states, so its translation log-probabilities equal the ST model's."""
    import dataclasses

    import torch

    from speechmt.data.manifest import read_manifest, record_audio
    from speechmt.frontend.whisper_mel import whisper_log_mel
    from speechmt.models import build_model
    from speechmt.training.builders import load_tokenizers, model_config_for
    from speechmt.training.run import init_encoder_from

    _, save_dir = trained_top
    st = load_model(_last(save_dir))
    cfg = whisper_mt_config(tiny_data, whisper_dir, save_dir / "unused")  # a text task: the text path is built
    cfg.model = dataclasses.replace(
        cfg.model,
        encoder=top_layer_encoder(whisper_dir),
        lora={"rank": 4},
        decoder={"kind": "whisper", "finetune": "lora"},
    )
    xstnet = build_model(model_config_for(cfg, load_tokenizers(cfg.data, cfg.model)))
    copied = init_encoder_from(xstnet, str(_last(save_dir)), ("speech_encoder.", "decoder."))
    assert copied == len(load_checkpoint(_last(save_dir))["model"]) > 0  # every trained adapter, nothing else
    rec = read_manifest(tiny_data / "train.jsonl")[0]
    mels = whisper_log_mel(record_audio(rec, tiny_data), st.frontend.config)[None]
    vocab = len(st.tokenizer)
    lengths, prefix = torch.tensor([mels.size(1)]), torch.tensor([[vocab - 4, vocab - 3, 3, 7, 11]])
    outputs = []
    for model in (st.model.eval(), xstnet.eval()):
        with torch.no_grad():
            outputs.append(model.decode(prefix, model.encode_speech(mels, lengths)))
    assert outputs[0].shape == outputs[1].shape and outputs[0].size(-1) == vocab
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-5, rtol=1e-5)


def test_export_pads_whisper_input_to_a_shorter_window_and_keeps_the_weights(trained, tmp_path):
    from speechmt.cli.main import main

    _, save_dir = trained
    out = tmp_path / "pad15.safetensors"
    assert main(["export", str(_last(save_dir)), "--out", str(out), "--fp32", "--whisper-pad-seconds", "15"]) == 0
    source, padded = load_checkpoint(_last(save_dir)), load_checkpoint(out)
    assert padded["features"]["whisper_mel"]["pad_seconds"] == 15.0
    assert {k: v for k, v in padded["features"]["whisper_mel"].items() if k != "pad_seconds"} == {
        k: v for k, v in source["features"]["whisper_mel"].items() if k not in ("pad_seconds", "pad_to_30s")
    }
    assert all(torch.equal(padded["model"][k], v) for k, v in source["model"].items())
    assert load_model(out).frontend.config.pad_seconds == 15.0
