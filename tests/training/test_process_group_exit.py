"""A rank leaves its process group at exit, while the interpreter is whole, and gloo's worker threads are done.

A gloo worker thread frees a finished collective's tensors after the rank has moved on; if that happens while
the interpreter finalizes, Python (< 3.14) ends the thread with pthread_exit, whose unwinding through torch's
noexcept destructors aborts the rank ("terminate called without an active exception"), at random and mostly on
a busy machine. The race is rare, so these tests check what rules it out: once speechmt.training.distributed's
exit handler ran, the group is left and its worker threads are gone (the group freed) or asleep, waiting for
work (the group still held by DDP or FSDP inside torch). Linux: threads are read from /proc/self/task."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import atexit, os, sys
import torch
import torch.distributed as tdist


def report():  # registered before init's handler, so it runs after it
    from speechmt.training.distributed import _thread_states

    states = _thread_states("/proc/self/task", ("pt_gloo_runloop",))
    print(f"rank {os.environ['RANK']} at exit: in group {tdist.is_initialized()}, workers {states}", flush=True)


atexit.register(report)
from speechmt.training import distributed as dist


def train(strategy):  # as run_training: the wrapped model is gone when it returns
    device = torch.device("cpu")
    dist.init(device)
    if strategy != "none":
        model = dist.wrap(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)), device, strategy)
        model(torch.randn(2, 4)).sum().backward()
    dist.all_gather_object(torch.get_rng_state())  # the collective whose freeing aborted ranks at exit
    dist.all_reduce_sum(1.0)


train(sys.argv[1])
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads through /proc (Linux)")
@pytest.mark.parametrize("strategy", ["none", "ddp", "fsdp"])
def test_a_rank_leaves_its_group_with_gloo_workers_done_at_exit(strategy, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(probe)]
    res = subprocess.run([*command, strategy], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [line for line in res.stdout.splitlines() if " at exit: " in line]
    assert len(lines) == 2, res.stdout
    for line in lines:
        assert "in group False" in line, line
        if strategy == "none":
            assert line.endswith("workers []"), line  # the group freed: its threads joined
        else:
            assert "'R'" not in line and "'D'" not in line, line  # asleep, waiting for work


def test_settle_returns_at_once_without_gloo_workers():
    from speechmt.training.distributed import settle

    assert settle()
