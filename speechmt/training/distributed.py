"""Distributed training under `torchrun`: the process group (NCCL on GPUs, gloo on CPUs, scoped to the training
device's type), the strategy that wraps the model (DDP, or FSDP's fully_shard), and the few collectives the trainer
needs, always on the device the backend serves. Outside torchrun every function is a no-op of one process."""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any

import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel

from speechmt.ranks import barrier, is_main, rank, world_size

__all__ = [
    "launched",
    "init",
    "rank",
    "world_size",
    "is_main",
    "barrier",
    "local_world_size",
    "wrap",
    "no_sync_unless",
    "all_reduce_sum",
    "all_reduce_sums",
    "all_gather_object",
    "collective_device",
    "is_sharded",
]

_DEVICE: torch.device | None = None  # the device collectives run on (the training device), set by init()


def launched() -> bool:
    """Whether torchrun (or another launcher setting RANK, WORLD_SIZE and MASTER_ADDR) started this process: then
    the run joins a process group, at world size 1 too, so that one GPU exercises the same path as eight."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def local_world_size() -> int:
    """Ranks on this machine (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def backend_for(device: torch.device) -> str:
    """The process group's backend, scoped to the training device's type ("cuda:nccl" or "cpu:gloo"): a
    collective on a tensor elsewhere fails at once instead of working on one backend and not another."""
    return f"{device.type}:{'nccl' if device.type == 'cuda' else 'gloo'}"


def init(device: torch.device, timeout_minutes: float = 30.0) -> None:
    """Joins the process group torchrun describes in the environment (once); on CUDA, binds this rank to its GPU
    first (NCCL's object collectives and barriers use the current device)."""
    global _DEVICE
    _DEVICE = device
    if not launched() or tdist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    tdist.init_process_group(
        backend=backend_for(device),
        timeout=datetime.timedelta(minutes=timeout_minutes),
        device_id=device if device.type == "cuda" else None,
    )


def collective_device() -> torch.device:
    """Where collective tensors live: the training device (NCCL takes CUDA tensors only, gloo CPU ones here)."""
    return _DEVICE if _DEVICE is not None else torch.device("cpu")


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether `module` is FSDP-sharded (its parameters DTensors: gather before reading them whole)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def wrap(module: torch.nn.Module, device: torch.device, strategy: str = "ddp") -> torch.nn.Module:
    """`module` as the strategy trains it when in a process group: DDP (unused parameters allowed: e.g. a text
    encoder in ST) or FSDP (speechmt.training.fsdp); itself outside one."""
    if not tdist.is_initialized():
        return module
    if strategy == "fsdp":
        from speechmt.training.fsdp import shard

        return shard(module, device)
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def no_sync_unless(module: torch.nn.Module, last: bool):
    """Skips the gradient reduction on all but the last batch of an accumulated update (DDP's no_sync, FSDP's
    set_requires_gradient_sync)."""
    if isinstance(module, DistributedDataParallel) and not last:
        return module.no_sync()
    if is_sharded(module):
        return _fsdp_sync(module, last)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_sync(module, sync: bool):
    module.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def all_reduce_sums(values: list[float]) -> list[float]:
    """Element-wise sums of `values` over the ranks, in one collective on the backend's device (float64)."""
    if not tdist.is_initialized() or not values:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=collective_device())
    tdist.all_reduce(t)
    return t.cpu().tolist()


def all_reduce_sum(value: float) -> float:
    """The sum of `value` over the ranks."""
    return all_reduce_sums([value])[0]


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (one process: [obj]). For small Python values (RNG states, decoded
    hypotheses); they travel pickled between this run's own processes, never from a file."""
    if not tdist.is_initialized():
        return [obj]
    out: list[Any] = [None] * world_size()
    tdist.all_gather_object(out, obj)
    return out
