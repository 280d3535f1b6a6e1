"""A 2-process CPU torchrun run (gloo) matches the single-process run on the same global batch."""

import os
import subprocess
import sys

import pytest
import torch

from speechmt.config import save_config
from speechmt.checkpoint import load_checkpoint
from speechmt.training.run import run_training
from tests.helpers import tiny_config


def _config(data, save_dir, update_freq, device="cpu"):
    # one utterance per batch (max_tokens 250 >= the longest, 240 frames): six batches an epoch, so two
    # ranks x update_freq 1 and one process x update_freq 2 see the same pairs of batches per update
    cfg = tiny_config(data, save_dir, max_updates=3, update_freq=update_freq, save_interval_updates=0,
                      validate_interval_updates=0)
    cfg.data.max_tokens = 250
    cfg.train.device = device  # two CPU ranks on any machine (tests/test_cuda.py runs NCCL on a GPU)
    return cfg


def torchrun(config, processes: int) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run` of `speechmt train --config config` over `processes` local ranks."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
           "--module", "speechmt", "train", "--config", str(config)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_two_process_torchrun_matches_single_process(tiny_data, tmp_path):
    run_training(_config(tiny_data, tmp_path / "single", update_freq=2))
    save_config(_config(tiny_data, tmp_path / "ddp", update_freq=1), tmp_path / "ddp.yaml")
    res = torchrun(tmp_path / "ddp.yaml", 2)
    assert res.returncode == 0, res.stderr[-3000:]
    single = load_checkpoint(tmp_path / "single/checkpoint_last.safetensors")
    ddp = load_checkpoint(tmp_path / "ddp/checkpoint_last.safetensors")
    assert ddp["train_state"]["state"]["step"] == single["train_state"]["state"]["step"] == 3
    for k, v in single["model"].items():
        assert torch.allclose(ddp["model"][k], v, atol=1e-5), k
