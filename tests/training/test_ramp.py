"""A stream's ramped objective weight (TaskData.ramp): the weight applied at each update of the stage, the
logged loss, and exact resume in the middle of the ramp."""

import json

import pytest
import torch

from speechmt.checkpoint import load_checkpoint
from speechmt.tasks import Stage, TaskData
from speechmt.training.run import run_training
from speechmt.training.trainer import UpdateRunner
from tests.helpers import tiny_config


def _ramped(data, save_dir, max_updates):
    """ST with CE for 2 updates, then CE + CTC 0.5 with the CTC weight ramped over 3 updates."""
    cfg = tiny_config(
        data,
        save_dir,
        max_updates=max_updates,
        save_interval_updates=100,
        validate_interval_updates=100,
        valid_decode=False,
        log_interval=1,
    )
    cfg.train.stages = [
        Stage("ce", [TaskData("st")], updates=2),
        Stage("ramp", [TaskData("st", {"ce": 1.0, "ctc": 0.5}, ramp={"ctc": 3})]),
    ]
    return cfg


@pytest.fixture
def applied(monkeypatch):
    """The weights every training batch is run with."""
    seen, forward = [], UpdateRunner.forward

    def recording(self, batch, task, weights, factors, parts=()):
        seen.append(dict(weights))
        return forward(self, batch, task, weights, factors, parts)

    monkeypatch.setattr(UpdateRunner, "forward", recording)
    return seen


def test_ramped_weight_at_each_update_and_exact_resume(tiny_data, tmp_path, applied):
    run_training(_ramped(tiny_data, tmp_path / "straight", 6))
    expected = [{"ce": 1.0}, {"ce": 1.0}] + [{"ce": 1.0, "ctc": 0.5 * w} for w in (1 / 3, 2 / 3, 1.0, 1.0)]
    assert applied == expected
    log = [json.loads(x) for x in (tmp_path / "straight/train_log.jsonl").read_text().splitlines()]
    train = [r for r in log if r["type"] == "train"]
    for r, w in zip(train[2:], expected[2:]):
        assert r["loss"] == pytest.approx(r["ce"] + w["ctc"] * r["ctc"], rel=1e-6)

    applied.clear()
    run_training(_ramped(tiny_data, tmp_path / "resumed", 3))  # stops after the ramp's first update
    run_training(_ramped(tiny_data, tmp_path / "resumed", 6))
    assert applied == expected  # updates 0-2, then 3-5 after the resume
    a = load_checkpoint(tmp_path / "straight/checkpoint_last.safetensors")["model"]
    b = load_checkpoint(tmp_path / "resumed/checkpoint_last.safetensors")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
