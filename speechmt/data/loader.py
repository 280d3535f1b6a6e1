"""The training input pipeline: one DataLoader per data stream for a whole stage, with persistent workers.

`make_loader(dataset, batch_sampler, ...)` yields exactly the batches of

    for b in batch_sampler: collate([dataset[i] for i in b], pad_id)

in one process (same order, same tensors), with any number of workers and under the fork, spawn and
forkserver start methods. Workers are persistent, so they hold copies of the dataset made when they started
and `dataset.set_epoch(e)` in the main process does not reach them: the epoch travels with the indices instead
(`EpochBatches` yields [(epoch, i), ...], `EpochItems` sets the epoch of its copy before reading item i), and
augmentation seeded by (seed, epoch, index) draws the same in a worker as in the main process.

Use per epoch (the sampler keeps exact-resume semantics: its position counts the batches handed out):

    loader = make_loader(dataset, sampler, pad_id=pad, num_workers=resolve_workers(cfg.num_workers), device=dev)
    sampler.load_state_dict({"epoch": e, "position": p}); sampler.set_epoch(e); dataset.set_epoch(e)
    for batch in loader: ...
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from typing import Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from speechmt.data.dataset import Batch, collate

MAX_AUTO_WORKERS = 8
PREFETCH_FACTOR = 2  # batches in flight per worker
CONTEXTS = ("", "fork", "spawn", "forkserver")


def resolve_workers(n: int) -> int:
    """The number of loader workers for `data.num_workers` = n: n itself when n >= 0; for -1 (auto), the CPUs
    this process may use (sched_getaffinity) shared among the local ranks (LOCAL_WORLD_SIZE, set by torchrun),
    less one for the rank's own process, at most MAX_AUTO_WORKERS and at least 0."""
    if n >= 0:
        return n
    if n != -1:
        raise ValueError(f"num_workers must be -1 (auto) or an integer >= 0, got {n}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local_ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    return max(0, min(MAX_AUTO_WORKERS, cpus // local_ranks - 1))


class EpochBatches(Sampler[list[tuple[int, int]]]):
    """A batch sampler's batches with the epoch attached to each index: [(epoch, i), ...]. The epoch is read
    from the sampler (its `epoch` attribute, 0 without one) when iteration starts; length, state and position
    stay the wrapped sampler's."""

    def __init__(self, batch_sampler: Sampler[list[int]]):
        super().__init__()
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = int(getattr(self.batch_sampler, "epoch", 0))
        return ([(epoch, i) for i in batch] for batch in iter(self.batch_sampler))


class EpochItems(Dataset):
    """`dataset` read by (epoch, index) keys: the dataset's epoch (`set_epoch`, when it has one) is set before
    item `index` is read, so that a worker's copy augments as the main process's dataset would."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, i = key
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)
        return self.dataset[i]


def _exit_at_once() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def end_as_forked(worker_id: int) -> None:
    """Worker init: a worker ends as a forked one does, by os._exit once Python's exit handlers ran (those
    registered before this one are skipped: multiprocessing's, whose queues the DataLoader has cancelled). A
    spawned worker would otherwise finalize the interpreter while its queue's feeder thread is still pickling a
    prefetched batch inside torch's C++ code; Python before 3.14 ends that thread with pthread_exit, whose unwinding
    through C++ frames aborts the worker ("terminate called without an active exception")."""
    atexit.register(_exit_at_once)


def make_loader(
    dataset: Dataset,
    batch_sampler: Sampler[list[int]],
    *,
    pad_id: int,
    num_workers: int,
    device: torch.device,
    context: str | None = None,
    seed: int = 0,
) -> DataLoader:
    """A DataLoader of `dataset`'s padded Batches in `batch_sampler`'s order, to keep for a whole stage.

    `num_workers` (>= 0; resolve_workers turns -1 into a count) workers are persistent and each prefetches
    PREFETCH_FACTOR batches; memory is pinned when `device` is CUDA; `context` is the start method ("fork",
    "spawn", "forkserver"; None or "": the platform's default). The loader draws only on its own generator
    (seeded by `seed`), never on the global RNG, so a resumed run's global RNG state is the uninterrupted one's.
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0 (resolve_workers turns -1 into a count), got {num_workers}")
    if (context or "") not in CONTEXTS:
        raise ValueError(f"loader context must be one of {', '.join(map(repr, CONTEXTS))}, got {context!r}")
    workers = num_workers > 0
    return DataLoader(
        EpochItems(dataset),
        batch_sampler=EpochBatches(batch_sampler),
        collate_fn=functools.partial(collate, pad_id=pad_id),
        num_workers=num_workers,
        pin_memory=torch.device(device).type == "cuda",
        persistent_workers=workers,
        prefetch_factor=PREFETCH_FACTOR if workers else None,
        multiprocessing_context=(context or None) if workers else None,
        worker_init_fn=end_as_forked,
        generator=torch.Generator().manual_seed(seed),
    )


def in_process_batches(
    dataset: Dataset, batch_sampler: Sequence[list[int]] | Sampler[list[int]], pad_id: int
) -> Iterator[Batch]:
    """The reference make_loader must equal: each batch of the sampler collated in this process."""
    for b in batch_sampler:
        yield collate([dataset[i] for i in b], pad_id)
