"""Manifest records: one JSON object per line, one line per utterance."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np


@dataclass
class Record:
    """One utterance: where its audio is and what it says.

    `audio` is a path (absolute, or relative to the manifest's folder); `offset` and `duration` are in
    seconds (duration 0.0 with offset 0.0 means "the whole file"); `n_frames` counts 10 ms fbank frames.
    """

    id: str
    audio: str
    offset: float
    duration: float
    n_frames: int
    src_text: str
    tgt_text: str
    speaker: str
    src_lang: str
    tgt_lang: str


RECORD_FIELDS = tuple(f.name for f in fields(Record))
TEXT_FIELDS = ("src_text", "tgt_text")


class ManifestError(ValueError):
    """A manifest line that cannot be read; the message names the file and line."""


def write_manifest(path: str | os.PathLike, records: Iterable[Record]) -> int:
    """Writes records atomically (temporary file, then rename); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def iter_manifest(path: str | os.PathLike) -> Iterator[Record]:
    """Yields the records of a manifest; a malformed line raises ManifestError naming file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                yield Record(**{k: d[k] for k in RECORD_FIELDS})
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ManifestError(f"{path}:{lineno}: malformed manifest record ({e})") from None


def split_manifest(data_dir: str | os.PathLike, split: str) -> Path:
    """The manifest of a prepared split, data_dir/<split>.jsonl; ManifestError naming the prepared splits when
    it is missing (one line for the CLI, instead of the bare file error)."""
    folder = Path(data_dir)
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        found = ", ".join(sorted(p.stem for p in folder.glob("*.jsonl"))) or "none"
        where = data_dir if folder.is_dir() else f"{data_dir} (no such folder)"
        raise ManifestError(f"{path}: no split {split!r} in {where}; prepared: {found}")
    return path


def read_split(data_dir: str | os.PathLike, split: str) -> list[Record]:
    """All records of a prepared split's manifest (split_manifest)."""
    return read_manifest(split_manifest(data_dir, split))


def read_manifest(path: str | os.PathLike) -> list[Record]:
    """All records of a manifest, in file order."""
    return list(iter_manifest(path))


def manifest_texts(paths: Sequence[str | os.PathLike], fields: Sequence[str]) -> Iterator[str]:
    """The `fields` texts (src_text and/or tgt_text) of every record of every manifest, in file order."""
    unknown = [f for f in fields if f not in TEXT_FIELDS]
    if unknown or not fields:
        raise ValueError(f"text fields must be among {TEXT_FIELDS}; got {tuple(fields)}")
    for path in paths:
        for record in iter_manifest(path):
            for field in fields:
                yield getattr(record, field)


def record_audio(record: Record, base_dir: str | os.PathLike) -> np.ndarray:
    """The 16 kHz slice of audio a manifest record names (paths relative to `base_dir`, the manifest's folder)."""
    from speechmt.audio import read_audio  # here: the manifest itself is read where no audio library is (.venv-peers)

    path = Path(record.audio)
    if not path.is_absolute():
        path = Path(base_dir) / path
    return read_audio(path, record.offset, record.duration or None)
