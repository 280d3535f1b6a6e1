"""Which process of a distributed run this is, and "build once, read everywhere" for the files a run makes
(encoder and teacher caches): the lowest layer of speechmt's distributed support, free of the trainer, so that
data/ can use it. speechmt.training.distributed holds the process group, DDP/FSDP and the collectives."""

from __future__ import annotations

import sys
import time
from typing import Callable, TypeVar

import torch.distributed as tdist

T = TypeVar("T")


def rank() -> int:
    return tdist.get_rank() if tdist.is_initialized() else 0


def world_size() -> int:
    return tdist.get_world_size() if tdist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    """Waits until every rank gets here (no-op in one process)."""
    if tdist.is_initialized():
        tdist.barrier()


def wait_for(ready: Callable[[], bool], what: str, poll_s: float = 2.0, note_every_s: float = 600.0) -> None:
    """Polls `ready()` until it holds, saying every `note_every_s` seconds what this rank waits for. Used in place of
    a collective while another rank builds something that takes longer than a collective's timeout (a 70 GB cache);
    a rank that fails ends the run through torchrun, which stops the waiting ranks too."""
    start = last = time.monotonic()
    while not ready():
        time.sleep(poll_s)
        if time.monotonic() - last >= note_every_s:
            last = time.monotonic()
            print(f"rank {rank()}: waiting for {what} ({last - start:.0f} s)", file=sys.stderr, flush=True)


def build_once(ready: Callable[[], bool], build: Callable[[], T], read: Callable[[], T], what: str) -> T:
    """`build()` on rank 0 when not `ready()`, while the other ranks wait for it, then `read()` on those; in one
    process, build() or read(). Every rank returns what it built or read; all leave together."""
    if is_main():
        result = read() if ready() else build()
    else:
        wait_for(ready, what)
        result = read()
    barrier()
    return result
