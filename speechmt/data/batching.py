"""Padding and size-bucketed batching with distributed sharding and exact resume."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


def collate_sequences(
    seqs: Sequence[torch.Tensor], pad_value: float = 0.0, out: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pads B tensors of shape (T_i, ...) to one (B, T_max, ...) tensor; also returns lengths (B,) int64.

    Works for features (T_i, F) and for token ids (T_i,) alike; pass the pad id as `pad_value` for ids. `out`:
    the two tensors to write into (of padded_shape(seqs) and (B,), with the sequences' dtype and int64), as a
    DataLoader worker's collate does with tensors in shared memory; by default new ones.
    """
    if not seqs:
        raise ValueError("collate_sequences needs at least one sequence")
    lengths = torch.tensor([s.shape[0] for s in seqs], dtype=torch.int64)
    if out is None:
        x = seqs[0].new_empty(padded_shape(seqs))
    else:
        x, lengths = out[0], out[1].copy_(lengths)
    x.fill_(pad_value)
    for i, s in enumerate(seqs):
        x[i, : s.shape[0]] = s
    return x, lengths


def padded_shape(seqs: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The shape collate_sequences pads `seqs` (T_i, ...) to: (B, T_max, ...)."""
    return (len(seqs), max(s.shape[0] for s in seqs), *seqs[0].shape[1:])


def padded_size(batch: Sequence[int], sizes: Sequence[int]) -> int:
    """What a batch costs once padded: len(batch) * its longest size."""
    return len(batch) * max((sizes[i] for i in batch), default=0)


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of items of similar size whose padded size stays within `max_tokens`.

    Each epoch the items are shuffled, sorted by size (over the whole epoch, or within chunks of
    `chunk_size` shuffled items, which mixes batch contents more between epochs at some cost in padding),
    cut greedily into batches of at most `max_tokens` padded size (len(batch) * max size, sizes counted
    as at least 1) and `max_sentences` items, and the batch order is shuffled. An item longer than
    `max_tokens` forms a batch of one, or raises ValueError at construction if `strict`. With
    `shuffle=False` batches come in ascending size and are the same every epoch.

    Batches and their order are a function of (seed, epoch) only. Sharding: every rank builds the same
    batch list and takes every `world_size`-th batch from `rank`. So that all ranks get the same number
    of batches, the list is padded by repeating batches from its start (as DistributedSampler does: a few
    items are then seen twice in the epoch) or, with `drop_last`, the last len % world_size batches are
    dropped (their items are not seen this epoch).

    Several directions (`groups`: each item's direction index, with a `temperature` T != 1): each epoch draws
    round(N * p_d) items of direction d, p_d = n_d ** (1/T) / sum_e n_e ** (1/T) (fairseq's and the multilingual
    baselines' temperature sampling; T = 1 keeps the data as it is, a large T makes directions equal): a
    direction drawn more than it holds repeats all its items and draws the rest without replacement, one drawn
    less gives a sample without replacement; the epoch keeps about N items, a function of (seed, epoch) as above.

    Resume: `state_dict()` is {"epoch", "position"}, position being how many of this rank's batches
    this sampler has handed out in the epoch; after `load_state_dict`, iteration continues at the next
    batch. A DataLoader with workers draws batches ahead of training, so a trainer wanting exact resume
    stores the number of batches it has trained on as the position.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        max_tokens: int,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        chunk_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        strict: bool = False,
        groups: Sequence[int] | None = None,
        temperature: float = 1.0,
    ):
        super().__init__()
        self.sizes = np.maximum(np.asarray(sizes, dtype=np.int64), 1)
        if temperature <= 0 or (groups is not None and len(groups) != len(self.sizes)):
            raise ValueError(f"temperature must be > 0 ({temperature}) and groups one per item")
        self.groups = None if groups is None else np.asarray(groups, dtype=np.int64)
        self.temperature = temperature
        if max_tokens < 1 or (max_sentences is not None and max_sentences < 1):
            raise ValueError(f"max_tokens ({max_tokens}) and max_sentences ({max_sentences}) must be positive")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        too_long = int((self.sizes > max_tokens).sum())
        if strict and too_long:
            raise ValueError(
                f"{too_long} items are longer than max_tokens={max_tokens} (longest {int(self.sizes.max())})"
            )
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.shuffle, self.seed, self.chunk_size = shuffle, seed, chunk_size
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch to iterate; a new epoch starts at its first batch."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def state_dict(self) -> dict[str, int]:
        """{"epoch": current epoch, "position": batches of it handed out so far}."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restores epoch and position; the next iteration starts at batch `position` of that epoch."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def __len__(self) -> int:
        return len(self.rank_batches())

    def __iter__(self) -> Iterator[list[int]]:
        """Yields this rank's remaining batches of the epoch; an epoch already finished starts again."""
        batches = self.rank_batches()
        if self.position >= len(batches):
            self.position = 0
        return self._follow(batches)

    def _follow(self, batches: list[list[int]]) -> Iterator[list[int]]:
        while self.position < len(batches):
            self.position += 1
            yield batches[self.position - 1]

    def rank_batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch, in order."""
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self._shard(self.epoch_batches()))
        return self._cache[1]

    def epoch_batches(self) -> list[list[int]]:
        """All ranks' batches for the current epoch, before sharding."""
        rng = np.random.default_rng((self.seed, self.epoch))
        if self.resamples:
            order = rng.permutation(self._resampled(np.random.default_rng((self.seed, self.epoch, 1))))
        else:
            order = rng.permutation(len(self.sizes)) if self.shuffle else np.arange(len(self.sizes))
        step = self.chunk_size or max(len(order), 1)
        chunks = [order[i : i + step] for i in range(0, len(order), step)]
        order = np.concatenate([c[np.argsort(self.sizes[c], kind="stable")] for c in chunks] or [order])
        batches = self._cut(order)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    @property
    def resamples(self) -> bool:
        """Whether epochs are drawn by direction (groups with a temperature other than 1, and shuffling)."""
        return self.groups is not None and self.temperature != 1.0 and self.shuffle

    def direction_shares(self) -> np.ndarray:
        """p_d (D,) of each direction index: n_d ** (1/T), normalised (0 for an index with no items)."""
        counts = np.bincount(self.groups, minlength=int(self.groups.max()) + 1).astype(np.float64)
        weights = np.where(counts > 0, counts ** (1.0 / self.temperature), 0.0)
        return weights / weights.sum()

    def _resampled(self, rng: np.random.Generator) -> np.ndarray:
        """One epoch's items under temperature sampling, grouped by direction (the caller shuffles)."""
        total, drawn = len(self.sizes), []
        for d, share in enumerate(self.direction_shares()):
            items = np.flatnonzero(self.groups == d)
            if not len(items):
                continue
            want = max(1, int(round(total * share)))
            whole, rest = divmod(want, len(items))
            drawn += [np.tile(items, whole), rng.choice(items, size=rest, replace=False)]
        return np.concatenate(drawn)

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        """Greedy batches along `order`, each within max_tokens and max_sentences."""
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        cap = self.max_sentences or len(order) + 1
        for i, size in zip(order.tolist(), self.sizes[order].tolist()):
            if batch and (len(batch) == cap or (len(batch) + 1) * max(longest, size) > self.max_tokens):
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, size)
        return batches + [batch] if batch else batches

    def _shard(self, batches: list[list[int]]) -> list[list[int]]:
        """Every world_size-th batch from rank, after padding or trimming to a multiple of world_size."""
        ws, n = self.world_size, len(batches)
        if self.drop_last:
            batches = batches[: n - n % ws]
        elif n % ws:
            extra = ws - n % ws
            batches = batches + [batches[i % n] for i in range(extra)]
        return batches[self.rank :: ws]
