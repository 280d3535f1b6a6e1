"""The stage-long DataLoader (speechmt.data.loader): its batches equal the in-process ones, bit for bit, under
fork, spawn and forkserver, across epochs with persistent workers (augmentation included) and after a resume."""

import pickle
from dataclasses import fields

import pytest
import torch
from torch.utils.data import Dataset

from speechmt.audio import SpecAugmentConfig
from speechmt.data.augment import AugmentConfig, Augmenter
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import AudioInput, Batch, Example, SpeechDataset, StoredFeatures, global_cmvn, load_split
from speechmt.data.loader import in_process_batches, make_loader, resolve_workers
from speechmt.frontend import FbankFrontend, WaveformFrontend
from speechmt.tokenizers.sentencepiece import Tokenizer

CPU = torch.device("cpu")
PAD = 1


def stored_dataset(data) -> SpeechDataset:
    """The replica's training split: global-CMVN fbank with SpecAugment (drawn by seed, epoch, index), both texts."""
    records, store = load_split(data, "train")
    tok = Tokenizer.load(data / "spm.model")
    return SpeechDataset(
        records,
        StoredFeatures(store, FbankFrontend(cmvn=global_cmvn(data))),
        tok,
        tok,
        src_tag="<en>",
        tgt_tag="<de>",
        spec_augment=SpecAugmentConfig.policy("lb"),
        seed=5,
    )


def noisy_audio_dataset(data) -> SpeechDataset:
    """The replica's training waves with on-the-fly noise and reverberation (drawn by seed, epoch, index)."""
    from speechmt.data.manifest import read_split

    augment = Augmenter(AugmentConfig(reverb=0.5, noise=0.8))
    return SpeechDataset(read_split(data, "train"), AudioInput(data, WaveformFrontend(), augment), seed=5)


def sampler(ds, max_tokens: int = 500) -> BucketBatchSampler:
    return BucketBatchSampler(ds.sizes, max_tokens=max_tokens, seed=2)


def assert_same_batches(got: list[Batch], expected: list[Batch]) -> None:
    assert len(got) == len(expected) > 1
    for a, b in zip(got, expected):
        assert a.ids == b.ids
        for f in fields(Batch):
            x, y = getattr(a, f.name), getattr(b, f.name)
            assert (x is None) == (y is None), f.name
            if isinstance(x, torch.Tensor):
                assert x.dtype == y.dtype and torch.equal(x, y), f.name


def epoch_batches(loader, ds, batches, epoch: int, position: int = 0) -> tuple[list[Batch], list[Batch]]:
    """The loader's batches of `epoch` from `position` on (the trainer's calls), and the in-process reference."""
    for s in (batches, loader.batch_sampler.batch_sampler):
        s.load_state_dict({"epoch": epoch, "position": position})
        s.set_epoch(epoch)
    ds.set_epoch(epoch)
    got = list(loader)
    return got, list(in_process_batches(ds, batches, PAD))


def check_epochs(ds, workers: int, context: str | None, epochs=(0, 2)) -> None:
    """Two epochs through one persistent loader equal the in-process batches of those epochs."""
    loader = make_loader(ds, sampler(ds), pad_id=PAD, num_workers=workers, device=CPU, context=context)
    reference = sampler(ds)
    for epoch in epochs:
        got, expected = epoch_batches(loader, ds, reference, epoch)
        assert_same_batches(got, expected)
    ds.set_epoch(epochs[0])  # the last epoch's batches augmented as in the first epoch: other features
    stale = list(in_process_batches(ds, reference.rank_batches(), PAD))
    assert sum(not torch.equal(x.feats, y.feats) for x, y in zip(got, stale)) == len(got)


def test_workers_under_fork_equal_the_in_process_batches(tiny_data):
    check_epochs(stored_dataset(tiny_data), 2, "fork")


def test_no_workers_equal_the_in_process_batches(tiny_data):
    check_epochs(stored_dataset(tiny_data), 0, None)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_workers_start_and_equal_the_in_process_batches(tiny_data, context):
    """Everything a worker gets is pickled under spawn and forkserver: the dataset, the store, the collate."""
    check_epochs(stored_dataset(tiny_data), 2, context)


class Frames(Dataset):
    """Examples of 400-599 frames of 80 features, all frame values the index: batches of several MB."""

    def __len__(self) -> int:
        return 2000

    def __getitem__(self, i: int) -> Example:
        return Example(i, str(i), torch.full((400 + i % 200, 80), float(i)))


@pytest.mark.slow
def test_spawned_workers_stopped_midway_end_cleanly():
    """Left with big batches in flight, spawned workers exit with 0 (not aborted while finalizing Python)."""
    ds = Frames()
    loader = make_loader(
        ds,
        BucketBatchSampler([len(ds[i].feats) for i in range(len(ds))], 40000),
        pad_id=PAD,
        num_workers=2,
        device=CPU,
        context="spawn",
    )
    batches = iter(loader)
    for _ in range(6):
        next(batches)
    workers = loader._iterator._workers  # torch's worker processes
    loader._iterator._shutdown_workers()
    assert [w.exitcode for w in workers] == [0, 0]


def test_waveform_augmentation_in_workers_follows_the_epoch(tiny_data):
    check_epochs(noisy_audio_dataset(tiny_data), 2, "fork", epochs=(0, 2))


def test_a_resumed_epoch_continues_at_its_position(tiny_data):
    ds = stored_dataset(tiny_data)
    loader = make_loader(ds, sampler(ds, 300), pad_id=PAD, num_workers=2, device=CPU, context="fork")
    reference = sampler(ds, 300)
    list(loader)  # epoch 0 read whole: the workers persist
    got, expected = epoch_batches(loader, ds, reference, epoch=1, position=2)
    assert len(got) == len(reference) - 2 == 3
    assert_same_batches(got, expected)
    assert loader.batch_sampler.batch_sampler.state_dict() == {"epoch": 1, "position": len(reference)}


def test_an_epoch_left_midway_does_not_leak_into_the_next(tiny_data):
    ds = stored_dataset(tiny_data)
    loader = make_loader(ds, sampler(ds), pad_id=PAD, num_workers=2, device=CPU, context="fork")
    next(iter(loader))  # the workers have prefetched more of epoch 0
    got, expected = epoch_batches(loader, ds, sampler(ds), epoch=1)
    assert_same_batches(got, expected)


def test_the_loader_leaves_the_global_rng_alone(tiny_data):
    ds = stored_dataset(tiny_data)
    state = torch.get_rng_state()
    for workers in (0, 2):
        list(make_loader(ds, sampler(ds), pad_id=PAD, num_workers=workers, device=CPU, context="fork"))
    assert torch.equal(torch.get_rng_state(), state)


def test_loader_settings(tiny_data):
    ds = stored_dataset(tiny_data)
    loader = make_loader(ds, sampler(ds), pad_id=PAD, num_workers=2, device=torch.device("cuda"), context="spawn")
    assert (loader.num_workers, loader.persistent_workers, loader.pin_memory, loader.prefetch_factor) == (
        2,
        True,
        True,
        2,
    )
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert pickle.loads(pickle.dumps(loader.collate_fn)).keywords["pad_id"] == PAD
    plain = make_loader(ds, sampler(ds), pad_id=PAD, num_workers=0, device=CPU, context="spawn")
    assert (plain.persistent_workers, plain.pin_memory, plain.multiprocessing_context) == (False, False, None)
    default = make_loader(ds, sampler(ds), pad_id=PAD, num_workers=1, device=CPU)
    assert default.multiprocessing_context is None
    assert len(loader) == len(sampler(ds))
    with pytest.raises(ValueError, match="loader context must be one of '', 'fork', 'spawn', 'forkserver', got 'x'"):
        make_loader(ds, sampler(ds), pad_id=PAD, num_workers=1, device=CPU, context="x")
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        make_loader(ds, sampler(ds), pad_id=PAD, num_workers=-1, device=CPU)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_batches_are_pinned_for_cuda(tiny_data):
    ds = stored_dataset(tiny_data)
    batch = next(iter(make_loader(ds, sampler(ds), pad_id=PAD, num_workers=0, device=torch.device("cuda"))))
    assert batch.feats.is_pinned() and batch.tgt.is_pinned()


def test_resolve_workers(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert [resolve_workers(n) for n in (0, 3, -1)] == [0, 3, 8]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resolve_workers(-1) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert resolve_workers(-1) == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert resolve_workers(-1) == 0
    with pytest.raises(ValueError, match="num_workers must be -1 \\(auto\\) or an integer >= 0, got -2"):
        resolve_workers(-2)
