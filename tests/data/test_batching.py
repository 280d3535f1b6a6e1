import numpy as np
import pytest
import torch

from speechmt.data.batching import BucketBatchSampler, collate_sequences, padded_size
from speechmt.sequence import lengths_to_padding_mask


def skewed_sizes(n: int = 2000, seed: int = 0) -> list[int]:
    """Lognormal lengths like utterance frame counts: many short, a long tail (50 to ~3000)."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(mean=6.0, sigma=0.6, size=n), 50, 3000).astype(int).tolist()


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def waste(batches: list[list[int]], sizes: list[int]) -> float:
    """Fraction of a padded batch that is padding, over the epoch."""
    padded = sum(padded_size(b, sizes) for b in batches)
    return 1.0 - sum(sizes[i] for i in flat(batches)) / padded


def test_collate_features_shapes_lengths_and_padding():
    seqs = [torch.ones(3, 2), 2 * torch.ones(5, 2), 3 * torch.ones(1, 2)]
    x, lengths = collate_sequences(seqs, pad_value=-1.0)
    assert x.shape == (3, 5, 2) and x.dtype == torch.float32
    assert lengths.tolist() == [3, 5, 1] and lengths.dtype == torch.int64
    assert torch.equal(x[0, :3], torch.ones(3, 2)) and torch.all(x[0, 3:] == -1)
    assert torch.equal(x[1], 2 * torch.ones(5, 2))
    assert torch.all(x[2, 1:] == -1) and torch.all(x[2, 0] == 3)


def test_collate_token_ids():
    x, lengths = collate_sequences([torch.tensor([5, 9, 3]), torch.tensor([7, 3])], pad_value=0)
    assert x.dtype == torch.int64
    assert x.tolist() == [[5, 9, 3], [7, 3, 0]] and lengths.tolist() == [3, 2]
    with pytest.raises(ValueError):
        collate_sequences([])


def test_padding_mask_known_values():
    mask = lengths_to_padding_mask(torch.tensor([3, 1, 0, 2]))
    assert mask.dtype == torch.bool
    assert mask.int().tolist() == [[0, 0, 0], [0, 1, 1], [1, 1, 1], [0, 0, 1]]
    assert lengths_to_padding_mask(torch.tensor([2, 1]), max_len=4).int().tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert lengths_to_padding_mask(torch.tensor([], dtype=torch.int64)).shape == (0, 0)


def test_mask_matches_collate():
    x, lengths = collate_sequences([torch.arange(1, 4), torch.arange(1, 2), torch.arange(1, 6)], pad_value=0)
    assert torch.equal(lengths_to_padding_mask(lengths), x == 0)


def test_every_index_once_and_within_max_tokens():
    sizes = skewed_sizes()
    for chunk_size in (None, 300):
        s = BucketBatchSampler(sizes, max_tokens=8000, chunk_size=chunk_size, seed=1)
        for epoch in range(3):
            s.set_epoch(epoch)
            batches = list(s)
            assert sorted(flat(batches)) == list(range(len(sizes)))
            assert max(padded_size(b, sizes) for b in batches) <= 8000
            assert len(batches) == len(s)


def test_max_sentences_and_overlong_item():
    sizes = [10] * 25 + [500]
    s = BucketBatchSampler(sizes, max_tokens=100, max_sentences=4)
    batches = list(s)
    assert max(len(b) for b in batches) == 4
    assert [25] in batches and sorted(flat(batches)) == list(range(26))
    with pytest.raises(ValueError, match="1 items are longer than max_tokens=100"):
        BucketBatchSampler(sizes, max_tokens=100, strict=True)


def test_padding_waste_lower_than_random_batching():
    sizes = skewed_sizes()
    bucketed = list(BucketBatchSampler(sizes, max_tokens=8000, seed=0))
    windowed = list(BucketBatchSampler(sizes, max_tokens=8000, seed=0, chunk_size=400))
    random = list(BucketBatchSampler(sizes, max_tokens=8000, seed=0, chunk_size=1))  # no sorting at all
    w_bucket, w_window, w_random = (waste(b, sizes) for b in (bucketed, windowed, random))
    assert w_bucket < 0.02 and w_window < 0.1 and w_random > 0.4
    assert len(bucketed) < len(windowed) < len(random)


def test_same_seed_and_epoch_same_batches_other_epoch_differs():
    sizes = skewed_sizes(500)
    a, b = BucketBatchSampler(sizes, 4000, seed=3), BucketBatchSampler(sizes, 4000, seed=3)
    a.set_epoch(2), b.set_epoch(2)
    assert list(a) == list(b)
    b.set_epoch(3)
    assert list(a) != list(b)
    assert list(BucketBatchSampler(sizes, 4000, seed=4)) != list(BucketBatchSampler(sizes, 4000, seed=3))


def test_no_shuffle_is_ascending_and_epoch_independent():
    sizes = skewed_sizes(300)
    s = BucketBatchSampler(sizes, 4000, shuffle=False)
    first = list(s)
    s.set_epoch(5)
    assert list(s) == first
    longest = [max(sizes[i] for i in b) for b in first]
    assert longest == sorted(longest)


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sharding(world_size, drop_last):
    sizes = skewed_sizes(1000)
    kw = dict(max_tokens=5000, seed=7, drop_last=drop_last, world_size=world_size)
    full = BucketBatchSampler(sizes, max_tokens=5000, seed=7).epoch_batches()
    assert len(full) == 101  # 1 left over for 2 ranks, 2 for 3
    ranks = [list(BucketBatchSampler(sizes, rank=r, **kw)) for r in range(world_size)]
    per_rank = len(full) // world_size if drop_last else -(-len(full) // world_size)
    assert [len(r) for r in ranks] == [per_rank] * world_size
    assert len(BucketBatchSampler(sizes, rank=1, **kw)) == per_rank
    seen = [flat(r) for r in ranks]
    union = set().union(*map(set, seen))
    if drop_last:
        assert sum(map(len, seen)) == len(union)  # disjoint
        assert union == set(flat(full[: per_rank * world_size]))
    else:
        assert union == set(range(len(sizes)))
        repeated = full[: per_rank * world_size - len(full)]
        assert sum(map(len, seen)) == len(sizes) + len(flat(repeated))


def test_sharding_with_fewer_batches_than_ranks():
    ranks = [list(BucketBatchSampler([5, 5, 5], max_tokens=10, rank=r, world_size=3)) for r in range(3)]
    assert [len(r) for r in ranks] == [1, 1, 1]
    assert sorted(flat(ranks[0] + ranks[1])) == [0, 1, 2]


@pytest.mark.parametrize("k", [0, 1, 7])
def test_resume_continues_at_next_batch(k):
    sizes = skewed_sizes(800)
    s = BucketBatchSampler(sizes, 5000, seed=5, rank=1, world_size=2)
    s.set_epoch(4)
    expected = list(s)
    s.set_epoch(4)
    it = iter(s)
    done = [next(it) for _ in range(k)]
    state = s.state_dict()
    assert state == {"epoch": 4, "position": k}
    restarted = BucketBatchSampler(sizes, 5000, seed=5, rank=1, world_size=2)
    restarted.load_state_dict(state)
    restarted.set_epoch(4)
    assert done + list(restarted) == expected
    restarted.set_epoch(5)
    assert restarted.state_dict() == {"epoch": 5, "position": 0}


def test_finished_epoch_iterates_again():
    s = BucketBatchSampler(skewed_sizes(200), 4000, shuffle=False)
    assert list(s) == list(s) and s.state_dict()["position"] == len(s)


def test_works_as_dataloader_batch_sampler():
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    data = [torch.full((n,), i + 1) for i, n in enumerate(sizes)]
    loader = torch.utils.data.DataLoader(
        data, batch_sampler=BucketBatchSampler(sizes, 12, seed=0), collate_fn=collate_sequences
    )
    total = 0
    for x, lengths in loader:
        assert x.shape[0] * x.shape[1] <= 12
        assert torch.equal(lengths_to_padding_mask(lengths), x == 0)
        total += len(lengths)
    assert total == len(sizes)
