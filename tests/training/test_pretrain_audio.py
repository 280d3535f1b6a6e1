import json

import numpy as np
import pytest
import torch
import yaml
from transformers import Wav2Vec2Model

from speechmt.checkpoint import load_checkpoint
from speechmt.cli import main
from speechmt.frontend.waveform import WaveformConfig
from speechmt.models import ModelConfig, build_model
from speechmt.models.encoders.wav2vec2 import feature_extractor_settings
from speechmt.models.wav2vec2_pretraining import PretrainingSettings, masks_and_negatives
from speechmt.training.pretrain_audio import STATE_FILE, load_pretrain_config
from tests.helpers import tiny_wav2vec2_fields


def _pretrain(tiny_data, out, updates: int, *extra: str) -> int:
    conf = out.parent / f"{out.name}.yaml"
    conf.write_text(
        yaml.safe_dump(
            {
                "hf_config": tiny_wav2vec2_fields(),
                "max_tokens": 500,
                "warmup_updates": 2,
                "log_interval": 1,
                "save_interval_updates": 2,
                "lr": 1e-3,
                "seed": 3,
            }
        )
    )
    return main(
        [
            "research",
            "pretrain-audio",
            str(tiny_data / "train.jsonl"),
            str(tiny_data / "dev.jsonl"),
            "--out",
            str(out),
            "--config",
            str(conf),
            f"max_updates={updates}",
            *extra,
        ]
    )


def test_pretrain_audio_runs_and_its_output_loads_as_the_wav2vec2_encoder(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "w2v"
    assert _pretrain(tiny_data, out, 4) == 0
    assert f"{out}: wav2vec2 encoder after 4 updates" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "preprocessor_config.json", STATE_FILE} <= {
        p.name for p in out.iterdir()
    }
    assert not (out / ".staging").exists()
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["type"] == "setup" and log[0]["world_size"] == 1
    log = [x for x in log if x["type"] == "train"]
    assert [x["step"] for x in log] == [1, 2, 3, 4]  # run by the trainer: its log lines, objective wav2vec2
    assert all(
        np.isfinite(x["loss"]) and x["wav2vec2_masked_frames"] >= 10 and x["wav2vec2_contrastive"] > 0 for x in log
    )
    assert all(x["loss"] == x["wav2vec2"] for x in log)
    assert log[-1]["wav2vec2_contrastive"] < log[0]["wav2vec2_contrastive"]
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Wav2Vec2ForPreTraining"]

    state = load_checkpoint(out / STATE_FILE)
    assert state["train_state"]["state"]["step"] == 4
    trained = {
        k.removeprefix("model.wav2vec2."): v for k, v in state["model"].items() if k.startswith("model.wav2vec2.")
    }
    hf = Wav2Vec2Model.from_pretrained(out)
    assert all(torch.equal(v, trained[k]) for k, v in hf.state_dict().items())
    assert feature_extractor_settings(str(out)) == WaveformConfig(do_normalize=True)
    model = build_model(
        ModelConfig(
            encoder={"kind": "wav2vec2", "name_or_path": str(out)},
            d_model=32,
            n_heads=2,
            ffn_dim=64,
            decoder={"layers": 1},
            tgt_vocab_size=20,
        )
    )
    encoder = model.speech_encoder.model.state_dict()
    assert encoder.keys() == {k for k in trained if k != "masked_spec_embed"}  # masking off in fine-tuning
    assert all(torch.equal(v, trained[k]) for k, v in encoder.items())


def test_interrupted_and_resumed_pretraining_equals_uninterrupted(tiny_data, tmp_path):
    assert _pretrain(tiny_data, tmp_path / "resumed", 2) == 0
    assert _pretrain(tiny_data, tmp_path / "resumed", 4) == 0
    assert _pretrain(tiny_data, tmp_path / "straight", 4) == 0
    a, b = (load_checkpoint(tmp_path / d / STATE_FILE) for d in ("resumed", "straight"))
    assert a["train_state"]["state"] == b["train_state"]["state"]
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_masks_cover_unpadded_frames_and_negatives_come_from_masked_frames_of_the_same_utterance():
    np.random.seed(0)
    frames = torch.tensor([60, 25, 40])
    mask, negatives = masks_and_negatives(frames, 60, PretrainingSettings(mask_prob=0.5, mask_length=4), 7)
    assert mask.shape == (3, 60) and negatives.shape == (3, 60, 7)
    for b, n in enumerate(frames.tolist()):
        assert mask[b, :n].sum() >= 8 and not mask[b, n:].any()
        masked = set((b * 60 + np.flatnonzero(mask[b])).tolist())
        for t in np.flatnonzero(mask[b]):
            assert set(negatives[b, t].tolist()) <= masked - {b * 60 + t}


def test_pretrain_config_overrides_and_errors(tmp_path, capsys):
    cfg = load_pretrain_config(None, ["hf_config.num_hidden_layers=6", "lr=1e-4"], manifests=["a.jsonl"], out="o")
    assert cfg.hf_config["num_hidden_layers"] == 6 and cfg.hf_config["hidden_size"] == 256 and cfg.lr == 1e-4
    assert cfg.manifests == ("a.jsonl",)
    assert main(["research", "pretrain-audio", "a.jsonl", "--out", str(tmp_path), "max_update=3"]) == 2
    assert capsys.readouterr().err.strip() == "speechmt: error: unknown pretrain-audio option(s): max_update"
    assert main(["research", "pretrain-audio", "--out", str(tmp_path)]) == 2
    assert "pretrain-audio: no manifests to pretrain on" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="missing.yaml: config file not found"):
        load_pretrain_config(tmp_path / "missing.yaml")


def test_recipe_pretraining_config_matches_the_st_encoder_it_initialises():
    from speechmt.config import load_config
    from tests.conftest import ASSETS

    conf = ASSETS.parents[1] / "recipes/mustc/conf"
    pre = load_pretrain_config(conf / "w2v_pretrain_mini.yaml", manifests=["train.jsonl"], out="o")
    st = load_config(conf / "st_w2v_conv_mini.yaml").model.encoder.hf_config
    assert st.items() <= pre.hf_config.items()  # the ST config overrides nothing of the pretrained encoder
    assert (pre.mask_prob, pre.mask_length, pre.max_updates) == (0.65, 10, 2000)


def test_the_state_file_of_an_older_speechmt_is_named_not_resumed(tiny_data, tmp_path, capsys):
    out = tmp_path / "w2v"
    out.mkdir()
    (out / "pretrain_state.safetensors").write_bytes(b"")
    assert _pretrain(tiny_data, out, 1) == 2
    assert capsys.readouterr().err == (
        f"speechmt: error: {out / 'pretrain_state.safetensors'}: the state of an older "
        "speechmt's pretraining, which this one does not resume; pass --no-resume to "
        "start afresh\n"
    )
    assert _pretrain(tiny_data, out, 1, "--no-resume") == 0
