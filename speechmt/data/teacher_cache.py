"""Cached teacher states: a frozen text encoder's token states of every transcript of a split (LUT's BERT
supervision, speechmt.models.teacher), computed once into a float16 feature store, as speechmt.data.
encoder_cache does for a frozen acoustic encoder.

Layout: `<data_dir>/teacher_cache/<key>/<split>.bin|.index.npz` and `meta.json`; the key hashes the
teacher's weights, config and tokenizer and the field it reads, so a changed teacher is never read stale.
`WithTeacher` adds the states to each example of a dataset (Example.teacher, (N, 2H): the teacher's input
embeddings and last-layer states of the N word pieces).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import torch

from speechmt.data.encoder_cache import cached_store
from speechmt.data.features import FeatureStore, FeatureStoreWriter
from speechmt.data.manifest import Record
from speechmt.progress import batch_starts

FIELD = "src_text"  # the teacher reads the transcript


def teacher_key(teacher) -> tuple[str, dict]:
    """(key, description) of the states `teacher` computes from the records' transcripts."""
    description = {"teacher": teacher.name, **teacher.identity(), "field": FIELD}
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], description


def cached_teacher_split(
    data_dir: str | os.PathLike, split: str, teacher, records: list[Record], batch_size: int = 64
) -> FeatureStore:
    """The teacher states of a split's transcripts: read when present for every record, else computed."""
    key, description = teacher_key(teacher)

    def build(prefix: Path) -> FeatureStore:
        with FeatureStoreWriter(prefix, 2 * teacher.hidden_size, "float16") as writer:
            for start in batch_starts(len(records), batch_size, f"teacher cache {split}", "utt"):
                chunk = records[start : start + batch_size]
                for rec, states in zip(chunk, teacher.states([getattr(r, FIELD) for r in chunk])):
                    writer.add(rec.id, states.float().cpu().numpy())
        return FeatureStore(prefix)

    return cached_store(Path(data_dir) / "teacher_cache" / key, split, description, records, build)


class WithTeacher(torch.utils.data.Dataset):
    """`dataset`'s examples with their teacher states (by utterance id from `store`); everything else of
    the dataset (sizes, set_epoch, ...) passes through."""

    def __init__(self, dataset, store: FeatureStore):
        self.dataset, self.store = dataset, store

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name):
        if name in ("dataset", "store"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, i: int):
        ex = self.dataset[i]
        return replace(ex, teacher=torch.from_numpy(self.store[ex.id]))
