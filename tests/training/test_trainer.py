import json

import pytest
import torch

from speechmt.cli import main
from speechmt.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.training.run import average, init_encoder_from, run_training
from speechmt.models.translator import build_model
from tests.helpers import tiny_config


def _params(path):
    return load_checkpoint(path)["model"]


def _cfg(data, save_dir, max_updates, max_tokens=700, **train):
    """max_tokens 700: a few batches per epoch, so runs cross epoch boundaries."""
    cfg = tiny_config(data, save_dir, max_updates=max_updates, **train)
    cfg.data.max_tokens = max_tokens
    return cfg


def test_interrupted_and_resumed_run_equals_uninterrupted(tiny_data, tmp_path):
    run_training(_cfg(tiny_data, tmp_path / "resumed", 5))
    resumed = run_training(_cfg(tiny_data, tmp_path / "resumed", 9))
    straight = run_training(_cfg(tiny_data, tmp_path / "straight", 9))
    assert resumed.step == straight.step == 9 and resumed.epoch == straight.epoch >= 2
    a, b = _params(tmp_path / "resumed/checkpoint_last.pt"), _params(tmp_path / "straight/checkpoint_last.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_lowers_the_loss_and_logs(tiny_data, tmp_path):
    state = run_training(tiny_config(tiny_data, tmp_path, max_updates=40, log_interval=10,
                                     validate_interval_updates=20))
    lines = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["type"] == "train"]
    assert [x["step"] for x in train] == [10, 20, 30, 40]
    assert train[-1]["loss"] < 0.6 * train[0]["loss"]
    valid = [x for x in lines if x["type"] == "valid"]
    assert [x["step"] for x in valid] == [20, 40]
    assert 0.0 <= valid[-1]["valid_bleu"] <= 100.0 and 0.0 <= valid[-1]["valid_chrf"] <= 100.0
    assert state.best_loss < float("inf") and (tmp_path / "checkpoint_best.pt").exists()
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*.pt")) == [
        "checkpoint_12.pt", "checkpoint_16.pt", "checkpoint_20.pt", "checkpoint_24.pt", "checkpoint_28.pt",
        "checkpoint_32.pt", "checkpoint_36.pt", "checkpoint_4.pt", "checkpoint_40.pt", "checkpoint_8.pt",
        "checkpoint_best.pt", "checkpoint_last.pt"]
    ckpt = load_checkpoint(tmp_path / "checkpoint_last.pt")
    assert ckpt["features"]["cmvn"]["kind"] == "global" and ckpt["tokenizers"]["tgt"] is not None


def test_keep_last_and_average(tiny_data, tmp_path):
    run_training(tiny_config(tiny_data, tmp_path, max_updates=12, keep_last=2))
    assert sorted(p.name for p in tmp_path.glob("checkpoint_[0-9]*.pt")) == ["checkpoint_12.pt", "checkpoint_8.pt"]
    used = average([str(tmp_path)], 2, str(tmp_path / "avg.pt"))
    assert [p.name for p in used] == ["checkpoint_8.pt", "checkpoint_12.pt"]
    a, b, avg = (_params(tmp_path / n) for n in ("checkpoint_8.pt", "checkpoint_12.pt", "avg.pt"))
    for k in a:
        if a[k].is_floating_point():
            assert torch.allclose(avg[k], (a[k] + b[k]) / 2, atol=1e-6)
    assert "train_state" not in load_checkpoint(tmp_path / "avg.pt")


def test_truncated_checkpoint_is_a_clear_error(tiny_data, tmp_path):
    run_training(tiny_config(tiny_data, tmp_path, max_updates=4))
    blob = (tmp_path / "checkpoint_last.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(CheckpointError, match="cut.pt: not a readable checkpoint"):
        load_checkpoint(tmp_path / "cut.pt")
    torch.save({"weights": 1}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a speechmt checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")


def test_atomic_save_leaves_the_old_checkpoint_on_failure(tmp_path, monkeypatch):
    save_checkpoint(tmp_path / "c.pt", {"model": {"w": torch.ones(2)}})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "c.pt", {"model": {"w": torch.zeros(2)}})
    assert torch.equal(load_checkpoint(tmp_path / "c.pt")["model"]["w"], torch.ones(2))


def test_nonfinite_loss_skips_the_update(tiny_data, tmp_path, monkeypatch):
    from speechmt.tasks import tasks as task_module

    calls = {"n": 0}
    real = task_module.st_task

    def sometimes_nan(model, batch, cfg):
        calls["n"] += 1
        loss, stats = real(model, batch, cfg)
        return (loss * float("nan"), stats) if calls["n"] == 2 else (loss, stats)

    monkeypatch.setitem(task_module.TASKS, "st", sometimes_nan)
    state = run_training(tiny_config(tiny_data, tmp_path, max_updates=3))
    assert state.nonfinite_skipped == 1 and state.step == 3 and calls["n"] == 4


def test_init_encoder_from_copies_the_speech_encoder(tiny_data, tmp_path):
    run_training(tiny_config(tiny_data, tmp_path / "asr", max_updates=2, task="asr"))
    st_cfg = tiny_config(tiny_data, tmp_path / "st", max_updates=1)
    from speechmt.training.builders import load_tokenizers, model_config_for

    model = build_model(model_config_for(st_cfg, load_tokenizers(st_cfg.data)))
    n = init_encoder_from(model, str(tmp_path / "asr/checkpoint_last.pt"))
    source = _params(tmp_path / "asr/checkpoint_last.pt")
    own = model.state_dict()
    enc = [k for k in source if k.startswith("speech_encoder.")]
    assert n >= len(enc) > 0 and all(torch.equal(own[k], source[k]) for k in enc)


def test_cli_train_and_bad_config(tiny_data, tmp_path, capsys):
    from speechmt.config import save_config

    save_config(tiny_config(tiny_data, tmp_path / "exp", max_updates=2), tmp_path / "conf.yaml")
    assert main(["train", "--config", str(tmp_path / "conf.yaml"), "train.max_updates=3"]) == 0
    assert "finished at update 3" in capsys.readouterr().out
    assert main(["train", "--config", str(tmp_path / "conf.yaml"), "train.no_such=1"]) == 2
    assert "unknown train option(s): no_such" in capsys.readouterr().err
