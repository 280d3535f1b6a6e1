"""Training on a Whisper backbone: cached frozen encoder, LoRA decoder, delta checkpoints that load from
their base, the Whisper prefix forced at decoding."""

from pathlib import Path

import pytest

from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.decoding.translate import load_model
from speechmt.models.translator import ModelConfig
from speechmt.checkpoint import CheckpointError, load_checkpoint
from speechmt.training.run import run_training
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_train"), d_model=64)


def whisper_config(data: Path, base: Path, save_dir: Path, **train) -> ExperimentConfig:
    model = ModelConfig(encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen"},
                        decoder={"kind": "whisper"}, dropout=0.0)
    data_cfg = DataConfig(dir=str(data), spec_augment="", max_tokens=4000, tgt_lang="de")
    defaults = dict(task="st", lr=3e-3, warmup_updates=5, max_updates=300, save_dir=str(save_dir),
                    save_interval_updates=100, validate_interval_updates=100, log_interval=50, seed=1,
                    label_smoothing=0.0, keep_last=2)
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
    key, _ = cache_key(lm.model.speech_encoder, lm.mel)  # the frozen encoder is the base's: same key
    folder = tiny_data / "encoder_cache" / key
    assert sorted(p.name for p in folder.glob("*.index.npz")) == ["dev.index.npz", "train.index.npz"]


def test_delta_checkpoint_holds_only_the_trained_decoder_and_loads_from_its_base(trained, whisper_dir):
    cfg, save_dir = trained
    ckpt = load_checkpoint(_last(save_dir))
    assert ckpt["base"]["sources"] == [str(whisper_dir)] and len(ckpt["base"]["sha256"]) == 64
    model_keys = set(load_model(_last(save_dir)).model.state_dict())
    assert set(ckpt["model"]) == {k for k in model_keys if k.startswith("decoder.")}  # the frozen encoder: base
    lm = load_model(_last(save_dir))
    assert lm.tokenizer.kind == "whisper" and lm.mel is not None
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
    from speechmt.data.whisper_mel import WhisperMelConfig
    from speechmt.training.builders import mel_settings_for

    cfg = whisper_config(tiny_data, whisper_dir, tmp_path)
    assert mel_settings_for(cfg) == WhisperMelConfig(80)
    cfg.data.whisper_pad_30s = True
    assert mel_settings_for(cfg) == WhisperMelConfig(80, pad_to_30s=True)


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
