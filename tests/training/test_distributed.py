"""Distributed training on 2 CPU processes (torchrun, gloo scoped to the CPU: a collective on a tensor of another
device type fails there as a CPU tensor fails under NCCL): DDP equals one process at the same global batch, a
killed and resumed run equals an uninterrupted one bit for bit on every rank, FSDP equals DDP, and a run with a
cached frozen encoder, two stages, validation and loader workers builds its cache once, with the bytes of a
one-process build."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from speechmt.checkpoint import load_checkpoint
from speechmt.checks import ConfigError
from speechmt.config import save_config
from speechmt.tasks import Stage, TaskData
from speechmt.training.run import run_training
from speechmt.training.state import update_freq_per_rank
from tests.helpers import kill_tree, tiny_config

UPDATES = 20
NOISE_ONLY = ("attn.k_proj.bias",)
"""Attention key biases get no gradient but float rounding (a softmax does not change when every score moves by
the same amount), which Adam scales up to +-lr steps: summed in another order, the noise differs in sign. They
are left out of the equalities of runs that sum gradients in different orders."""


def _config(data: Path, save_dir: Path, dropout: float = 0.0, **train):
    # one utterance per batch (max_tokens 250 >= the longest, 240 frames): six batches an epoch, so that two ranks
    # x 1 batch and one process x 2 batches sum the same batches per update (update_freq 2 given for 1 rank)
    cfg = tiny_config(
        data,
        save_dir,
        **{
            **dict(
                max_updates=UPDATES,
                update_freq=2,
                update_freq_world_size=1,
                save_interval_updates=10,
                validate_interval_updates=0,
                valid_decode=False,
                log_interval=5,
            ),
            **train,
        },
    )
    cfg.model.dropout = dropout
    cfg.data.max_tokens = 250
    cfg.data.num_workers = 0
    cfg.train.device = "cpu"
    return cfg


def _env() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
    }


def _command(config: Path, processes: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(processes),
        "--module",
        "speechmt",
        "train",
        "--config",
        str(config),
    ]


def torchrun(cfg, path: Path, processes: int = 2) -> subprocess.CompletedProcess:
    """`speechmt train` of `cfg` (saved to `path`) under torchrun with `processes` local ranks; asserts success."""
    save_config(cfg, path)
    res = subprocess.run(_command(path, processes), env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def killed_after(cfg, path: Path, marker: Path) -> None:
    """Starts `cfg` under torchrun and kills every process of it (SIGKILL) once `marker` exists."""
    save_config(cfg, path)
    proc = subprocess.Popen(
        _command(path, 2), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 600
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_tree(proc.pid)  # the launcher and its workers (in sessions of their own) at once
    proc.wait()
    time.sleep(0.5)  # nothing left running writes on
    assert not (marker.parent / f"checkpoint_{cfg.train.max_updates}.safetensors").exists()


def _weights(save_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(save_dir / "checkpoint_last.safetensors")["model"]


def _assert_close(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if not k.endswith(NOISE_ONLY):
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


def test_update_freq_keeps_the_global_batch_on_any_world_size():
    assert [update_freq_per_rank(8, 1, w) for w in (1, 2, 4, 8)] == [8, 4, 2, 1]
    assert update_freq_per_rank(3, 0, 4) == 3  # as given per rank
    with pytest.raises(ConfigError, match="8 batches per update, which 3 ranks cannot share evenly"):
        update_freq_per_rank(8, 1, 3)


@pytest.fixture(scope="module")
def ddp_runs(tiny_data, tmp_path_factory):
    """A 2-rank DDP run with dropout (per-rank RNG streams) for UPDATES updates, uninterrupted, and the same run
    killed after its update-10 checkpoint and resumed."""
    root = tmp_path_factory.mktemp("ddp")
    torchrun(_config(tiny_data, root / "whole", dropout=0.1), root / "whole.yaml")
    killed_after(
        _config(tiny_data, root / "resumed", dropout=0.1),
        root / "resumed.yaml",
        root / "resumed" / "checkpoint_10.safetensors",
    )
    torchrun(_config(tiny_data, root / "resumed", dropout=0.1), root / "resumed.yaml")
    return root


@pytest.mark.slow
def test_two_ranks_equal_one_process_at_the_same_global_batch(tiny_data, tmp_path):
    run_training(_config(tiny_data, tmp_path / "single"))
    res = torchrun(_config(tiny_data, tmp_path / "ddp"), tmp_path / "ddp.yaml")
    single, ddp = load_checkpoint(tmp_path / "single/checkpoint_last.safetensors"), _weights(tmp_path / "ddp")
    assert single["train_state"]["state"]["step"] == UPDATES
    _assert_close(ddp, single["model"], atol=1e-5)
    assert (
        "world_size=2" in res.stdout and "batches_per_update=2" in res.stdout and "update_freq_per_rank=1" in res.stdout
    )


@pytest.mark.slow
def test_a_killed_and_resumed_run_equals_the_uninterrupted_one_bit_for_bit(ddp_runs):
    whole = load_checkpoint(ddp_runs / "whole/checkpoint_last.safetensors")
    resumed = load_checkpoint(ddp_runs / "resumed/checkpoint_last.safetensors")
    assert whole["train_state"]["state"]["step"] == resumed["train_state"]["state"]["step"] == UPDATES
    for k, v in whole["model"].items():
        assert torch.equal(v, resumed["model"][k]), k
    ranks = [r["torch"] for r in whole["train_state"]["rng_ranks"]]
    assert len(ranks) == 2 and not torch.equal(ranks[0], ranks[1])  # each rank its own stream
    for a, b in zip(ranks, [r["torch"] for r in resumed["train_state"]["rng_ranks"]]):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_fsdp_equals_ddp_and_resumes_from_its_gathered_checkpoint(ddp_runs, tiny_data, tmp_path):
    fsdp = _config(tiny_data, tmp_path / "fsdp", dropout=0.1, strategy="fsdp", max_updates=10)
    torchrun(fsdp, tmp_path / "fsdp.yaml")
    stopped = load_checkpoint(tmp_path / "fsdp/checkpoint_last.safetensors")
    assert stopped["train_state"]["state"]["step"] == 10
    fsdp.train.max_updates = UPDATES
    torchrun(fsdp, tmp_path / "fsdp.yaml")
    ckpt = load_checkpoint(tmp_path / "fsdp/checkpoint_last.safetensors")
    ddp = load_checkpoint(ddp_runs / "whole/checkpoint_last.safetensors")
    _assert_close(ckpt["model"], ddp["model"], atol=1e-5)
    adam, ddp_adam = ckpt["train_state"]["optimizer"]["state"], ddp["train_state"]["optimizer"]["state"]
    assert adam.keys() == ddp_adam.keys()
    for i in adam:  # the whole (gathered) Adam moments, as DDP keeps them
        torch.testing.assert_close(adam[i]["exp_avg"], ddp_adam[i]["exp_avg"], atol=1e-6, rtol=0)


def _cached_whisper_config(data: Path, base: Path, save_dir: Path):
    """A frozen tiny Whisper encoder (its states cached) under a Whisper decoder: an ASR stage, then ST, with
    validation and one loader worker."""
    from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
    from speechmt.models.config import ModelConfig

    model = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen"},
        decoder={"kind": "whisper"},
        dropout=0.0,
    )
    data_cfg = DataConfig(dir=str(data), spec_augment="", max_tokens=500, tgt_lang="de", num_workers=1)
    stages = [Stage("asr", [TaskData("asr")], updates=2), Stage("st", [TaskData("st")])]
    train = TrainConfig(
        stages=stages,
        lr=3e-3,
        warmup_updates=2,
        max_updates=5,
        save_dir=str(save_dir),
        save_interval_updates=0,
        validate_interval_updates=2,
        valid_decode=True,
        seed=1,
        device="cpu",
        save_interval_epochs=1,
    )
    return ExperimentConfig(model=model, data=data_cfg, train=train)


@pytest.mark.slow
def test_a_staged_run_with_a_cache_validation_and_workers_builds_its_cache_once(tiny_data, tmp_path):
    import shutil

    from tests.whisper_helpers import tiny_whisper_dir

    base = tiny_whisper_dir(tmp_path / "whisper", d_model=32)
    single_data, ddp_data = tmp_path / "single_data", tmp_path / "ddp_data"
    for folder in (single_data, ddp_data):
        shutil.copytree(tiny_data, folder, ignore=shutil.ignore_patterns("encoder_cache", "teacher_cache"))
    run_training(_cached_whisper_config(single_data, base, tmp_path / "single"))
    res = torchrun(_cached_whisper_config(ddp_data, base, tmp_path / "ddp"), tmp_path / "ddp.yaml")
    assert res.stdout.count("type=valid") == 2 and "type=stage" in res.stdout
    caches = sorted((ddp_data / "encoder_cache").glob("*/*.bin"))
    assert [p.name for p in caches] == ["dev.bin", "train.bin"]
    assert not list((ddp_data / "encoder_cache").glob("*/*.tmp*"))
    for path in caches:
        twin = single_data / path.relative_to(ddp_data)
        assert path.read_bytes() == twin.read_bytes(), path.name
    assert res.stderr.count("encoder cache train") <= 1  # one rank built it
    assert (tmp_path / "ddp" / "checkpoint_epoch1.safetensors").is_file()  # save_interval_epochs, on rank 0
