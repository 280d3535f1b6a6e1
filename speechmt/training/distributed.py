"""Distributed training under `torchrun`: the process group (NCCL on GPUs, gloo on CPUs, scoped to the training
device's type), the strategy that wraps the model (DDP, or FSDP's fully_shard), and the few collectives the trainer
needs, always on the device the backend serves. Outside torchrun every function is a no-op of one process."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import os
import time
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
    "destroy",
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
    first (NCCL's object collectives and barriers use the current device). The group is left at exit (`destroy`,
    an atexit handler) while the interpreter is still whole."""
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
    atexit.register(destroy, os.getpid())


def destroy(pid: int | None = None) -> None:
    """Leaves the process group, then waits until its backend's threads are idle. Registered by init to run at
    exit, while the interpreter is still whole: a gloo worker thread frees a finished collective's tensors a
    moment after the rank has moved on (on a busy machine, much later), and when that happens during interpreter
    finalization the thread cannot take the GIL to free their Python objects; Python (< 3.14) then ends it with
    pthread_exit, whose unwinding through torch's noexcept destructors aborts the rank ("terminate called
    without an active exception"). Freeing the group joins those threads; when something still holds it (DDP
    and FSDP keep a reference inside torch), `settle` waits for them instead. Nothing to do outside a group, or
    in a process forked from the one that joined it (`pid`)."""
    if not tdist.is_initialized() or (pid is not None and pid != os.getpid()):
        return
    gc.collect()  # a model no longer used lets go of the group while it is still registered
    tdist.destroy_process_group()
    gc.collect()
    settle()


SETTLE_STEP_S = 0.01
SETTLE_MAX_S = 10.0


def settle(threads: tuple[str, ...] = ("pt_gloo_runloop",)) -> bool:
    """Releases the GIL until this process's `threads` (by name) sleep at two checks in a row, SETTLE_STEP_S
    apart, at most SETTLE_MAX_S: a thread that waits for the GIL is woken while this one sleeps, so a sleeping
    worker is one waiting for work. Linux (/proc/self/task); elsewhere one step's sleep. Whether they settled."""
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        time.sleep(SETTLE_STEP_S)
        return True
    calm, deadline = 0, time.monotonic() + SETTLE_MAX_S
    while calm < 2 and time.monotonic() < deadline:
        time.sleep(SETTLE_STEP_S)
        calm = calm + 1 if all(state == "S" for state in _thread_states(tasks, threads)) else 0
    return calm >= 2


def _thread_states(tasks: str, names: tuple[str, ...]) -> list[str]:
    """The scheduler states (R, S, D, ...) of this process's threads named one of `names`."""
    states = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name in names:
            states.append(rest.split()[0])
    return states


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
