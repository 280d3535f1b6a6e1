"""The training input pipeline: one DataLoader per data stream for a whole stage, with persistent workers.

`make_loader(dataset, batch_sampler, ...)` yields exactly the batches of

    for b in batch_sampler: collate([dataset[i] for i in b], pad_id)

in one process (same order, same tensors), with any number of workers and under the fork, spawn and
forkserver start methods. Workers are persistent, so they hold copies of the dataset made when they started
and `dataset.set_epoch(e)` in the main process does not reach them: the epoch travels with the indices instead
(`EpochBatches` yields [(epoch, i), ...], `EpochItems` sets the epoch of its copy before reading item i), and
augmentation seeded by (seed, epoch, index) draws the same in a worker as in the main process.

A worker hands a batch over as torch does, in shared memory, but in memory it reuses (`SlotPool`): each worker
collates into one of a few shared buffers ("slots") that it keeps, sends a slot's file descriptor once (its
first batch), and afterwards only the slot's number and where each tensor lies in it; the main process builds
the Batch's tensors as views of the slot and marks the slot free again when the last of them is gone. Torch's
default gives each tensor of each batch a new shared-memory file, whose pages the kernel allocates and zeroes
anew every time and whose descriptor travels over a socket: with MuST-C-sized batches (~13 MB) that cost a
worker more than collation itself.

Use per epoch (the sampler keeps exact-resume semantics: its position counts the batches handed out):

    loader = make_loader(dataset, sampler, pad_id=pad, num_workers=resolve_workers(cfg.num_workers), device=dev)
    sampler.load_state_dict({"epoch": e, "position": p}); sampler.set_epoch(e); dataset.set_epoch(e)
    for batch in loader: ...
"""

from __future__ import annotations

import atexit
import functools
import itertools
import math
import os
import sys
import weakref
from dataclasses import dataclass, fields
from multiprocessing.reduction import ForkingPickler
from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from speechmt.data.dataset import Batch, collate
from speechmt.data.manifest import RecordTable

MAX_AUTO_WORKERS = 8
PREFETCH_FACTOR = 2  # batches in flight per worker
CONTEXTS = ("", "fork", "spawn", "forkserver")
SLOT_HEADER = 64  # bytes before a slot's data; byte 0: 1 while the main process holds a batch in the slot
SLOT_ALIGN = 64  # each tensor of a batch starts at a multiple of this in its slot
SLOT_SPARE = 2  # free slots a worker keeps beyond the one it takes


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


class Slot:
    """One shared buffer of a worker's pool: `storage` (SLOT_HEADER + capacity bytes), its uint8 view `data`, and
    `busy`, a view of the header byte that the main process sets back to 0."""

    def __init__(self, number: int, capacity: int):
        self.number, self.capacity, self.sent = number, capacity, False
        self.storage = torch.UntypedStorage._new_shared(SLOT_HEADER + capacity)
        self.data = torch.empty(0, dtype=torch.uint8).set_(self.storage)
        self.busy = self.data[:1].numpy()
        self.busy[0] = 0


class SlotPool:
    """A worker's shared buffers, reused batch after batch. `take(n)` marks a free slot of at least n bytes busy
    (the smallest that fits), or makes a new one with a quarter to spare (rounded up to 1 MiB) when none fits;
    free slots that are too small, and those beyond SLOT_SPARE, are dropped, their numbers listed in `dropped`
    for the main process to forget with the next batch."""

    def __init__(self):
        self.pid, self.slots, self.dropped = os.getpid(), [], []
        self._numbers = itertools.count()

    def take(self, nbytes: int) -> Slot:
        free = [s for s in self.slots if not s.busy[0]]
        fits = [s for s in free if s.capacity >= nbytes]
        slot = min(fits, key=lambda s: s.capacity) if fits else None
        if slot is None:
            slot = Slot(next(self._numbers), -(-(nbytes + nbytes // 4) // 2**20) * 2**20)
            self.slots.append(slot)
        spare = [s for s in free if s is not slot and s.capacity >= nbytes]
        for s in [s for s in free if s.capacity < nbytes] + spare[SLOT_SPARE:]:
            self.slots.remove(s)
            self.dropped.append(s.number)
        slot.busy[0] = 1
        return slot

    def collate(self, examples: list, pad_id: int, token: str) -> "SlotBatch":
        """`examples` collated into a slot, ready to be pickled for the main process."""
        taken: list[Slot] = []

        def allocate(specs: list[tuple[tuple[int, ...], torch.dtype]]) -> list[torch.Tensor]:
            sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in specs]
            starts = [0]
            for n in sizes:
                starts.append(starts[-1] + -(-n // SLOT_ALIGN) * SLOT_ALIGN)
            taken.append(self.take(starts[-1]))
            data = taken[0].data
            return [
                data[SLOT_HEADER + a : SLOT_HEADER + a + n].view(dtype).view(shape)
                for a, n, (shape, dtype) in zip(starts, sizes, specs)
            ]

        try:
            batch = collate(examples, pad_id, allocate)
        except BaseException:
            for s in taken:
                s.busy[0] = 0
            raise
        slot, dropped = taken[0], self.dropped
        first, slot.sent, self.dropped = not slot.sent, True, []
        return SlotBatch(batch, (token, self.pid, slot.number), slot.storage if first else None, slot.data, dropped)


_POOLS: dict[str, SlotPool] = {}  # in a worker: its pool per loader (make_loader's token)
_SLOTS: dict[tuple[str, int, int], np.ndarray] = {}  # in the main process: each slot received, as uint8


@dataclass
class SlotBatch:
    """A worker's Batch whose tensors lie in a slot; pickled, it is the slot's key (and the slot itself the first
    time), each tensor's place in it, the ids and the flags: unpickled, a Batch of views of the slot."""

    batch: Batch
    key: tuple[str, int, int]  # (loader token, worker pid, slot number)
    storage: torch.UntypedStorage | None
    data: torch.Tensor
    dropped: list[int]

    def __reduce__(self):
        base = self.data.data_ptr() + SLOT_HEADER
        tensors, end = [], 0
        for f in fields(Batch):
            x = getattr(self.batch, f.name)
            if isinstance(x, torch.Tensor):
                start = x.data_ptr() - base
                tensors.append((f.name, start, x.dtype, tuple(x.shape)))
                end = max(end, start + x.nbytes)
        others = {
            f.name: getattr(self.batch, f.name)
            for f in fields(Batch)
            if not isinstance(getattr(self.batch, f.name), torch.Tensor)
        }
        return rebuild_batch, (self.key, self.storage, end, tensors, others, self.dropped)


def rebuild_batch(
    key: tuple[str, int, int],
    storage: torch.UntypedStorage | None,
    nbytes: int,
    tensors: list[tuple[str, int, torch.dtype, tuple[int, ...]]],
    others: dict,
    dropped: list[int],
) -> Batch:
    """In the main process: the Batch a worker's SlotBatch holds, its tensors views of the slot; the slot is
    marked free when the last of them is freed."""
    for number in dropped:
        _SLOTS.pop((*key[:2], number), None)
    if storage is not None:
        _SLOTS[key] = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
    slot = _SLOTS[key]
    region = slot[SLOT_HEADER : SLOT_HEADER + nbytes]
    weakref.finalize(region, _free, slot).atexit = False
    data = torch.from_numpy(region)
    del region
    views = {
        name: data[start : start + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
        for name, start, dtype, shape in tensors
    }
    return Batch(**others, **views)


def _free(slot: np.ndarray) -> None:
    slot[0] = 0


def _forget(token: str) -> None:
    """The main process lets go of a loader's slots (its batches still alive keep theirs)."""
    for key in list(_SLOTS):  # a copy: another loader's pin-memory thread may be adding to it
        if key[0] == token:
            _SLOTS.pop(key, None)


def collate_batch(examples: list, pad_id: int, token: str = "") -> Batch | SlotBatch:
    """The loader's collate: a Batch in the main process; in a worker, a SlotBatch in the worker's SlotPool of
    the loader `token`, which the main process receives as the same Batch."""
    if get_worker_info() is None:
        return collate(examples, pad_id)
    pool = _POOLS.get(token)
    if pool is None or pool.pid != os.getpid():
        pool = _POOLS[token] = SlotPool()
    return pool.collate(examples, pad_id, token)


def share_table(table: RecordTable):
    """ForkingPickler's reduction of a RecordTable (how a worker started by spawn or forkserver receives the
    dataset's manifest): the first time, the table's arrays move into one shared-memory buffer, which the table
    keeps using (so this process holds them once), and every worker then maps that buffer instead of receiving
    and holding its own copy."""
    if not isinstance(table.buffer, torch.UntypedStorage):
        arrays = table.arrays()
        starts, end = {}, 0
        for name, a in arrays.items():
            starts[name], end = end, end + -(-a.nbytes // SLOT_ALIGN) * SLOT_ALIGN
        storage = torch.UntypedStorage._new_shared(max(end, 1))
        views = _table_views(storage, [(name, starts[name], a.dtype.str, len(a)) for name, a in arrays.items()])
        for name, a in arrays.items():
            views[name][...] = a
        table.use_arrays(views, storage)
    base = table.buffer.data_ptr()
    layout = [(name, a.ctypes.data - base, a.dtype.str, len(a)) for name, a in table.arrays().items()]
    return rebuild_table, (table.buffer, layout)


def rebuild_table(storage: torch.UntypedStorage, layout: list[tuple[str, int, str, int]]) -> RecordTable:
    """A worker's RecordTable over the shared buffer share_table made."""
    table = RecordTable.from_arrays(_table_views(storage, layout))
    table.buffer = storage
    return table


def _table_views(storage: torch.UntypedStorage, layout: list[tuple[str, int, str, int]]) -> dict[str, np.ndarray]:
    """Arrays (name, byte offset, dtype, length) of a uint8 buffer, as views."""
    data = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
    return {name: data[start : start + n * np.dtype(dtype).itemsize].view(dtype) for name, start, dtype, n in layout}


ForkingPickler.register(RecordTable, share_table)


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
    token = f"{os.getpid()}.{next(_LOADERS)}"
    loader = DataLoader(
        EpochItems(dataset),
        batch_sampler=EpochBatches(batch_sampler),
        collate_fn=functools.partial(collate_batch, pad_id=pad_id, token=token),
        num_workers=num_workers,
        pin_memory=torch.device(device).type == "cuda",
        persistent_workers=workers,
        prefetch_factor=PREFETCH_FACTOR if workers else None,
        multiprocessing_context=(context or None) if workers else None,
        worker_init_fn=end_as_forked,
        generator=torch.Generator().manual_seed(seed),
    )
    weakref.finalize(loader, _forget, token)
    return loader


_LOADERS = itertools.count()


def in_process_batches(
    dataset: Dataset, batch_sampler: Sequence[list[int]] | Sampler[list[int]], pad_id: int
) -> Iterator[Batch]:
    """The reference make_loader must equal: each batch of the sampler collated in this process."""
    for b in batch_sampler:
        yield collate([dataset[i] for i in b], pad_id)
