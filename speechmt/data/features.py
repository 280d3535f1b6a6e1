"""On-disk feature store: one flat memory-mapped array of frames per split, with an index by utterance id.

Layout for a prefix P: `P.bin` (all frames, row-major (total_frames, dim), `dtype`) and `P.index.npz`
(ids, frame offsets, frame counts, dim, dtype). Both are written to temporary names and renamed when the
store is complete, so a store that exists is whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from speechmt.data.manifest import StringColumn


class FeatureStoreWriter:
    """Appends utterances' features, (T, dim) each, to a new store; `close()` publishes it."""

    def __init__(self, prefix: str | os.PathLike, dim: int, dtype: str = "float16"):
        self.prefix = Path(prefix)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.dim, self.dtype = dim, np.dtype(dtype)
        self._bin_tmp = Path(f"{self.prefix}.bin.tmp")
        self._file = open(self._bin_tmp, "wb")
        self._ids: list[str] = []
        self._lengths: list[int] = []

    def add(self, utt_id: str, feats: np.ndarray) -> None:
        if feats.ndim != 2 or feats.shape[1] != self.dim:
            raise ValueError(f"{utt_id}: features of shape {feats.shape}, expected (T, {self.dim})")
        self._file.write(np.ascontiguousarray(feats, dtype=self.dtype).tobytes())
        self._ids.append(utt_id)
        self._lengths.append(feats.shape[0])

    def close(self) -> None:
        self._file.close()
        lengths = np.asarray(self._lengths, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
        os.replace(self._bin_tmp, f"{self.prefix}.bin")
        index_tmp = Path(f"{self.prefix}.index.tmp.npz")
        np.savez(
            index_tmp,
            ids=np.asarray(self._ids, dtype=str),
            offsets=offsets,
            lengths=lengths,
            dim=self.dim,
            dtype=str(self.dtype),
        )
        os.replace(index_tmp, f"{self.prefix}.index.npz")

    def __enter__(self) -> "FeatureStoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._file.close()
            self._bin_tmp.unlink(missing_ok=True)


class FeatureStore:
    """Read-only, memory-mapped access to a store: `store[id]` or `store.get(i)` -> (T, dim) float32.

    Compact per process: ids as fixed-width UTF-8 bytes (N,), offsets and lengths as int64 arrays (N,), an id's
    position found by binary search. Pickling keeps only the prefix: a copy (a DataLoader worker under spawn)
    reopens the index and the file instead of carrying the frames.

    Frames are read with one positional read (`os.pread`) per utterance from a descriptor each process opens for
    itself, not through a memory map: a map costs every reading process a page fault per 4 KiB page it touches
    (~25 per MuST-C utterance), and DataLoader workers reading one map fault against each other; a read copies
    from the page cache in one system call (benchmarks/bench_scale.py measures both)."""

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = Path(prefix)
        index_path = Path(f"{prefix}.index.npz")
        if not index_path.exists():
            raise FileNotFoundError(f"{index_path}: feature store index not found (run `speechmt data prepare`)")
        with np.load(index_path) as idx:
            self._keys = np.char.encode(idx["ids"], "utf-8") if len(idx["ids"]) else np.zeros(0, dtype="S1")
            self.offsets, self.lengths = idx["offsets"], idx["lengths"]
            self.dim, dtype = int(idx["dim"]), np.dtype(str(idx["dtype"]))
        total = int(self.lengths.sum())
        bin_path = Path(f"{prefix}.bin")
        expected = total * self.dim * dtype.itemsize
        if not bin_path.exists() or bin_path.stat().st_size != expected:
            size = bin_path.stat().st_size if bin_path.exists() else "missing"
            raise ValueError(f"{bin_path}: feature store is incomplete ({size} bytes, expected {expected})")
        self.dtype, self._bin = dtype, bin_path
        self._fd: tuple[int, int] | None = None  # (pid, descriptor): a forked child opens its own
        self._order: np.ndarray | None = None  # argsort of the ids, made at the first look-up by id

    def __getstate__(self) -> dict:
        return {"prefix": str(self.prefix)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["prefix"])

    @property
    def ids(self) -> StringColumn:
        """The utterance ids in store order (a sequence of str)."""
        return StringColumn.from_fixed(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def position(self, utt_id: str) -> int | None:
        """The index of `utt_id` in the store, or None."""
        if self._order is None:
            self._order = np.argsort(self._keys, kind="stable")
        key = np.array(utt_id.encode("utf-8"))
        if key.dtype.itemsize > self._keys.dtype.itemsize:
            return None
        j = int(np.searchsorted(self._keys, key, sorter=self._order))
        return int(self._order[j]) if j < len(self._keys) and self._keys[self._order[j]] == key else None

    def __contains__(self, utt_id: str) -> bool:
        return self.position(utt_id) is not None

    def get(self, i: int) -> np.ndarray:
        """Features of the i-th utterance, (T, dim) float32."""
        frames, row = int(self.lengths[i]), self.dim * self.dtype.itemsize
        data = np.frombuffer(_read_at(self._descriptor(), frames * row, int(self.offsets[i]) * row), self.dtype)
        # torch converts float16 about 9x faster than numpy's astype (vectorised); the result is numpy's
        return torch.from_numpy(data).float().numpy().reshape(frames, self.dim)

    def _descriptor(self) -> int:
        """This process' read-only descriptor of the frames file (opened at the first read after a fork)."""
        if self._fd is None or self._fd[0] != os.getpid():
            self._fd = (os.getpid(), os.open(self._bin, os.O_RDONLY | getattr(os, "O_BINARY", 0)))
        return self._fd[1]

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None and self._fd[0] == os.getpid():
            os.close(self._fd[1])

    def __getitem__(self, utt_id: str) -> np.ndarray:
        i = self.position(utt_id)
        if i is None:
            raise KeyError(f"{utt_id}: not in this feature store")
        return self.get(i)


def _read_at(fd: int, size: int, offset: int) -> bytearray:
    """`size` bytes of `fd` from `offset`, in a writable buffer (os.preadv; a seek and a read where the platform
    has no preadv)."""
    data = bytearray(size)
    if hasattr(os, "preadv"):
        got = os.preadv(fd, [data], offset) if size else 0
    else:  # pragma: no cover - Windows
        os.lseek(fd, offset, os.SEEK_SET)
        got = os.readv(fd, [data]) if size else 0
    if got != size:
        raise OSError(f"feature store: {size} bytes expected at offset {offset}, the file gave {got}")
    return data
