"""The loader's handoff of batches (speechmt.data.loader): workers collate into shared buffers they reuse (slots),
the main process gets Batches of views of them and frees a slot when the last view is gone; a manifest table
reaches a spawned worker as one shared buffer, not a copy."""

import gc
import pickle
from dataclasses import fields
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from torch.utils.data import Dataset

from speechmt.data import loader as loader_module
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import Batch, Example, collate
from speechmt.data.loader import PREFETCH_FACTOR, SLOT_SPARE, SlotPool, in_process_batches, make_loader
from speechmt.data.manifest import Record, RecordTable

CPU = torch.device("cpu")
PAD = 1


def examples(n: int, start: int = 0, frames: int = 50) -> list[Example]:
    """n examples with features, both texts and a teacher, all values drawn from the index."""
    g = torch.Generator().manual_seed(start)
    return [
        Example(
            i,
            f"utt-{i}",
            torch.randn(frames + i % 7, 80, generator=g),
            torch.randint(3, 100, (5 + i % 3,), generator=g),
            torch.randint(3, 100, (4 + i % 5,), generator=g),
            teacher=torch.randn(3 + i % 2, 6, generator=g),
        )
        for i in range(start, start + n)
    ]


def assert_same(a: Batch, b: Batch) -> None:
    assert a.ids == b.ids and a.precomputed == b.precomputed
    for f in fields(Batch):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x is None) == (y is None), f.name
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and x.is_contiguous() and torch.equal(x, y), f.name


def handed_over(pool: SlotPool, exs: list[Example], token: str = "test") -> Batch:
    """What the main process receives of a worker's batch: the pool's SlotBatch pickled as a worker's queue does."""
    return pickle.loads(ForkingPickler.dumps(pool.collate(exs, PAD, token)))


def test_a_batch_handed_over_equals_the_in_process_batch():
    pool = SlotPool()
    exs = examples(9)
    batch = handed_over(pool, exs)
    assert_same(batch, collate(exs, PAD))
    assert [s.busy[0] for s in pool.slots] == [1]


def test_a_slot_is_reused_once_the_batch_is_gone_and_not_before():
    pool = SlotPool()
    first = handed_over(pool, examples(8))
    second = handed_over(pool, examples(8, 8))  # the first batch is alive: another slot
    assert len(pool.slots) == 2
    del first
    gc.collect()
    assert sorted(s.busy[0] for s in pool.slots) == [0, 1]
    third = handed_over(pool, examples(8, 16))
    assert len(pool.slots) == 2 and pool.slots[0].busy[0] == 1  # the first batch's slot, again
    assert_same(second, collate(examples(8, 8), PAD))
    assert_same(third, collate(examples(8, 16), PAD))
    views = third.feats[:2]
    del third
    gc.collect()
    assert pool.slots[0].busy[0] == 1  # a view of the batch is alive: its slot stays taken
    del views
    gc.collect()
    assert pool.slots[0].busy[0] == 0


def test_a_slot_too_small_is_replaced_and_spare_slots_are_dropped():
    pool = SlotPool()
    held = [handed_over(pool, examples(4, 4 * i)) for i in range(SLOT_SPARE + 2)]
    numbers = [s.number for s in pool.slots]
    del held
    gc.collect()
    big = handed_over(pool, examples(4, frames=2**20 // 320))  # > 1 MiB of features: no slot fits
    assert [s.number for s in pool.slots] == [len(numbers)] and pool.dropped == []
    assert pool.slots[0].capacity >= big.feats.nbytes
    assert_same(big, collate(examples(4, frames=2**20 // 320), PAD))
    del big
    gc.collect()
    small = [handed_over(pool, examples(2, 2 * i)) for i in range(SLOT_SPARE + 3)]
    del small
    gc.collect()
    handed_over(pool, examples(2))
    assert len(pool.slots) == 1 + SLOT_SPARE


def test_a_failed_collate_frees_its_slot():
    pool = SlotPool()
    bad = examples(3)
    bad[1].feats = torch.zeros(9, 81)  # one feature too many: the copy into the batch fails
    with pytest.raises(RuntimeError):
        pool.collate(bad, PAD, "test")
    assert [s.busy[0] for s in pool.slots] == [0]


class Frames(Dataset):
    """Examples of 400-599 frames of 80 features, all frame values the index, and a few target ids."""

    def __len__(self) -> int:
        return 600

    def __getitem__(self, i: int) -> Example:
        return Example(i, str(i), torch.full((400 + i % 200, 80), float(i)), tgt_ids=torch.arange(3 + i % 5))


def slots_of(loader) -> list:
    return [k for k in loader_module._SLOTS if k[0] == loader.collate_fn.keywords["token"]]


def test_workers_reuse_a_few_slots_and_batches_held_stay_intact():
    """Batches kept while the workers go on (a trainer's group of batches) are never overwritten; batches let go
    make their slots free again, so each worker uses a few slots whatever the number of batches."""
    ds = Frames()
    sampler = BucketBatchSampler([400 + i % 200 for i in range(len(ds))], 20000, seed=3)
    loader = make_loader(ds, sampler, pad_id=PAD, num_workers=2, device=CPU, context="fork")
    kept = [batch for i, batch in enumerate(loader) if i % 4 == 0]
    sampler.set_epoch(1)
    n = sum(len(batch) for batch in loader)
    assert n == len(ds) and len(sampler) > 12
    assert len(slots_of(loader)) <= len(kept) + 2 * (PREFETCH_FACTOR + SLOT_SPARE + 1)
    sampler.set_epoch(0)
    expected = list(in_process_batches(ds, sampler.rank_batches(), PAD))[::4]
    for a, b in zip(kept, expected, strict=True):
        assert_same(a, b)


def test_a_loader_gone_lets_go_of_its_slots():
    ds = Frames()
    loader = make_loader(
        ds,
        BucketBatchSampler([400 + i % 200 for i in range(len(ds))], 20000),
        pad_id=PAD,
        num_workers=1,
        device=CPU,
        context="fork",
    )
    batch = next(iter(loader))
    token = loader.collate_fn.keywords["token"]
    assert slots_of(loader)
    del loader
    gc.collect()
    assert not [k for k in loader_module._SLOTS if k[0] == token]
    assert torch.equal(batch.feats, collate([ds[int(i)] for i in batch.ids], PAD).feats)  # still readable


def table(n: int) -> RecordTable:
    return RecordTable.from_records(
        Record(
            f"ted_{i}", f"wav/{i}.wav", 0.5 * i, 1.25, 100 + i, "héllo " * (i % 9), "wörld", f"spk{i % 4}", "en", "de"
        )
        for i in range(n)
    )


def test_a_table_reaches_a_worker_as_one_shared_buffer():
    records = table(5000)
    expected = list(records)
    plain = len(pickle.dumps(records))
    sent = ForkingPickler.dumps(records)
    assert len(sent) < 2000 < plain  # the buffer's descriptor and the layout, not the columns
    assert isinstance(records.buffer, torch.UntypedStorage) and list(records) == expected
    received = pickle.loads(sent)
    assert list(received) == expected and isinstance(received.buffer, torch.UntypedStorage)
    assert len(ForkingPickler.dumps(records)) == len(sent)  # moved once
    assert len(pickle.dumps(records)) == plain and pickle.loads(pickle.dumps(records)) == expected


def test_use_arrays_takes_the_same_arrays_only():
    records = table(10)
    arrays = {k: v.copy() for k, v in records.arrays().items()}
    records.use_arrays(arrays, "elsewhere")
    assert records.buffer == "elsewhere" and records.column("offset") is arrays["offset"]
    arrays = {k: v.copy() for k, v in records.arrays().items()}
    arrays["n_frames"][0] += 1
    with pytest.raises(ValueError, match="use_arrays takes the table's own arrays"):
        records.use_arrays(arrays, None)
