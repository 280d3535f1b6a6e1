"""Distributed data parallel helpers for runs under `torchrun` (gloo on CPU, NCCL on GPU); all are
no-ops in a single process."""

from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel


def is_distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: torch.device) -> None:
    """Joins the process group torchrun describes in the environment (once)."""
    if is_distributed() and not tdist.is_initialized():
        tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")


def rank() -> int:
    return tdist.get_rank() if tdist.is_initialized() else 0


def world_size() -> int:
    return tdist.get_world_size() if tdist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def wrap(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP around `module` when distributed (unused parameters allowed: e.g. a text encoder in ST)."""
    if not tdist.is_initialized():
        return module
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def no_sync_unless(module: torch.nn.Module, last: bool):
    """Skips the gradient all-reduce on all but the last batch of an accumulated update."""
    if isinstance(module, DistributedDataParallel) and not last:
        return module.no_sync()
    return contextlib.nullcontext()


def all_reduce_sum(value: float) -> float:
    if not tdist.is_initialized():
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64)
    tdist.all_reduce(t)
    return float(t.item())


def barrier() -> None:
    """Waits until every rank gets here."""
    if tdist.is_initialized():
        tdist.barrier()
