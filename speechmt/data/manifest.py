"""Manifest records: one JSON object per line, one line per utterance."""

from __future__ import annotations

import array
import json
import os
import re
from collections.abc import Sequence as SequenceABC
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Iterator, Sequence, overload

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


def read_split(data_dir: str | os.PathLike, split: str) -> "RecordTable":
    """All records of a prepared split's manifest (split_manifest), as a compact RecordTable."""
    return RecordTable.read(split_manifest(data_dir, split))


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


NUMBER_FIELDS = {"offset": "d", "duration": "d", "n_frames": "q"}  # field -> array typecode (float64, int64)
STRING_FIELDS = tuple(f for f in RECORD_FIELDS if f not in NUMBER_FIELDS)


class StringColumn(SequenceABC):
    """N strings held as one UTF-8 blob (uint8) and N + 1 int64 offsets: string i is blob[offsets[i]:offsets[i+1]].

    A few bytes per string instead of a Python object each (~50 bytes + its characters); `column[i]` decodes one.
    """

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob):
            raise ValueError(f"string column offsets must run from 0 to the blob's {len(blob)} bytes")
        self.blob, self.offsets = blob, offsets

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> "StringColumn":
        blob, lengths = bytearray(), array.array("q")
        for s in strings:
            b = s.encode("utf-8")
            blob += b
            lengths.append(len(b))
        return cls.from_parts(blob, lengths)

    @classmethod
    def from_parts(cls, blob: bytearray | bytes, lengths: Sequence[int]) -> "StringColumn":
        """A column from the concatenated UTF-8 bytes and each string's byte length."""
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        return cls(np.frombuffer(blob, dtype=np.uint8), offsets)

    @classmethod
    def from_fixed(cls, fixed: np.ndarray) -> "StringColumn":
        """A column from a fixed-width bytes array (numpy dtype S<w>) of UTF-8 strings."""
        if not len(fixed):
            return cls(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
        width = fixed.dtype.itemsize
        lengths = np.char.str_len(fixed).astype(np.int64)
        grid = fixed.view(np.uint8).reshape(len(fixed), width)  # (N, width), zero-padded
        blob = grid[np.arange(width)[None, :] < lengths[:, None]]
        return cls(np.ascontiguousarray(blob), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    def fixed(self) -> np.ndarray:
        """The strings as a fixed-width UTF-8 bytes array (N,) of dtype S<longest>, for sorting and searching."""
        lengths = np.diff(self.offsets)
        width = max(int(lengths.max(initial=0)), 1)
        grid = np.zeros((len(self), width), dtype=np.uint8)
        grid[np.arange(width)[None, :] < lengths[:, None]] = self.blob
        return grid.view(f"S{width}").reshape(len(self))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> "StringColumn": ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = _position(i, len(self), "string")
        return self.blob[self.offsets[i] : self.offsets[i + 1]].tobytes().decode("utf-8")

    def take(self, indices: np.ndarray) -> "StringColumn":
        """The strings at `indices` (K,), in that order."""
        indices = np.asarray(indices, dtype=np.int64)
        starts, lengths = self.offsets[indices], self.offsets[indices + 1] - self.offsets[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return StringColumn(self.blob[gather], offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringColumn):
            return np.array_equal(self.offsets, other.offsets) and np.array_equal(self.blob, other.blob)
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @property
    def nbytes(self) -> int:
        return self.blob.nbytes + self.offsets.nbytes


class RecordTable(SequenceABC):
    """The records of a manifest as columns: numbers in numpy arrays, each text field a StringColumn.

    A compact per-rank index (~ the UTF-8 size of the texts plus 8 bytes per field and record) where a list of
    Records costs a Python object per field; `table[i]` builds the i-th Record, `table[a:b]` is a table, and
    `column("n_frames")` is the (N,) array.
    """

    def __init__(self, columns: dict[str, np.ndarray | StringColumn]):
        missing = [f for f in RECORD_FIELDS if f not in columns]
        lengths = {len(c) for c in columns.values()}
        if missing or len(lengths) > 1:
            raise ValueError(
                f"a record table needs the columns {RECORD_FIELDS} of one length; missing {missing}, "
                f"lengths {sorted(lengths)}"
            )
        self._columns = {f: columns[f] for f in RECORD_FIELDS}
        self.buffer: object = None  # what holds the columns' memory when they lie in one buffer (use_arrays)

    @classmethod
    def read(cls, path: str | os.PathLike) -> "RecordTable":
        """The records of a manifest, in file order; a malformed line raises ManifestError naming file and line."""
        numbers = {f: array.array(code) for f, code in NUMBER_FIELDS.items()}
        blobs = {f: bytearray() for f in STRING_FIELDS}
        lengths = {f: array.array("q") for f in STRING_FIELDS}
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    _append_line(path, lineno, line, numbers, blobs, lengths)
        columns = {f: np.frombuffer(a, dtype=np.dtype(a.typecode)) for f, a in numbers.items()}
        columns.update({f: StringColumn.from_parts(blobs[f], lengths[f]) for f in STRING_FIELDS})
        return cls(columns)

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> "RecordTable":
        records = list(records)
        columns: dict[str, np.ndarray | StringColumn] = {
            f: np.array([getattr(r, f) for r in records], dtype=np.float64 if code == "d" else np.int64)
            for f, code in NUMBER_FIELDS.items()
        }
        columns.update({f: StringColumn.from_strings(getattr(r, f) for r in records) for f in STRING_FIELDS})
        return cls(columns)

    def arrays(self) -> dict[str, np.ndarray]:
        """The table as flat arrays: each number column by its name, each text column as NAME.blob (uint8) and
        NAME.offsets (int64); from_arrays makes the table again."""
        out: dict[str, np.ndarray] = {}
        for f, c in self._columns.items():
            out.update({f"{f}.blob": c.blob, f"{f}.offsets": c.offsets} if isinstance(c, StringColumn) else {f: c})
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "RecordTable":
        """The table of `arrays()` (used as they are, not copied)."""
        return cls(
            {
                **{f: arrays[f] for f in NUMBER_FIELDS},
                **{f: StringColumn(arrays[f"{f}.blob"], arrays[f"{f}.offsets"]) for f in STRING_FIELDS},
            }
        )

    def __reduce__(self):
        return RecordTable.from_arrays, (self.arrays(),)  # the arrays, not the buffer they may lie in

    def use_arrays(self, arrays: dict[str, np.ndarray], buffer: object) -> None:
        """Holds the columns in `arrays`, equal to arrays() (the same bytes elsewhere: views of `buffer`, a shared
        memory a DataLoader worker maps instead of receiving a copy), from now on."""
        mine = self.arrays()
        if mine.keys() != arrays.keys() or not all(
            mine[k].dtype == arrays[k].dtype and np.array_equal(mine[k], arrays[k]) for k in mine
        ):
            raise ValueError("use_arrays takes the table's own arrays, elsewhere")
        self._columns, self.buffer = RecordTable.from_arrays(arrays)._columns, buffer

    def column(self, name: str) -> np.ndarray | StringColumn:
        """One field for all records: (N,) float64/int64 array for numbers, a StringColumn for text."""
        if name not in self._columns:
            raise KeyError(f"{name}: not a manifest field; fields: {', '.join(RECORD_FIELDS)}")
        return self._columns[name]

    @property
    def ids(self) -> StringColumn:
        return self._columns["id"]

    def __len__(self) -> int:
        return len(self._columns["id"])

    @overload
    def __getitem__(self, i: int) -> Record: ...
    @overload
    def __getitem__(self, i: slice) -> "RecordTable": ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        i = _position(i, len(self), "record")
        values = {f: c[i] for f, c in self._columns.items()}
        values.update({f: float(values[f]) if code == "d" else int(values[f]) for f, code in NUMBER_FIELDS.items()})
        return Record(**values)

    def take(self, indices: np.ndarray) -> "RecordTable":
        """The records at `indices` (K,), in that order, as a table."""
        indices = np.asarray(indices, dtype=np.int64)
        return RecordTable(
            {f: c.take(indices) if isinstance(c, StringColumn) else c[indices] for f, c in self._columns.items()}
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordTable, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._columns.values())


def _position(i: int, n: int, what: str) -> int:
    """Index `i` (negative from the end) of a sequence of `n`, as 0..n-1; IndexError outside."""
    if not -n <= i < n:
        raise IndexError(f"{what} {i} of {n}")
    return int(i) % n


def _append_line(path, lineno: int, line: str, numbers: dict, blobs: dict, lengths: dict) -> None:
    """Appends one manifest line's fields to the column builders of RecordTable.read (a bad line ends the read,
    so the columns it leaves uneven are thrown away)."""
    try:
        d = json.loads(line)
        for f, column in numbers.items():
            column.append(d[f] if type(d[f]) is (float if column.typecode == "d" else int) else _number(d[f], column))
        for f, blob in blobs.items():
            b = d[f].encode("utf-8")
            blob += b
            lengths[f].append(len(b))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ManifestError(f"{path}:{lineno}: malformed manifest record ({type(e).__name__}: {e})") from None


def _number(value, column: array.array) -> float | int:
    """A manifest number of another JSON type (1 for 1.0, 150.0 for 150) as the column's type; else ValueError."""
    return float(value) if column.typecode == "d" else int(value)


def direction(src_lang: str, tgt_lang: str) -> str:
    """A translation direction's name: "en-de" (CoVoST 2's regional codes kept: "zh-CN-en")."""
    return f"{src_lang}-{tgt_lang}"


DIRECTION = re.compile(r"([a-z]{2,3}(?:-[A-Z]{2})?)-([a-z]{2,3}(?:-[A-Z]{2})?)")


def is_direction(name: str) -> bool:
    """Whether `name` names a direction as `direction` writes one."""
    return DIRECTION.fullmatch(str(name)) is not None


def split_direction(name: str) -> tuple[str, str]:
    """ "en-de" -> ("en", "de"), "zh-CN-en" -> ("zh-CN", "en"); ValueError for what names no direction."""
    m = DIRECTION.fullmatch(str(name))
    if m is None:
        raise ValueError(f"{name!r} is no direction (a source and a target language code: en-de, zh-CN-en)")
    return m.group(1), m.group(2)


def record_directions(records: Sequence[Record], default: tuple[str, str] = ("", "")) -> tuple[np.ndarray, list[str]]:
    """Each record's direction as (N,) int64 indices into the names, in order of first appearance ("en-de", ...);
    a record without languages (text from elsewhere) counts as `default` (src_lang, tgt_lang)."""
    if isinstance(records, RecordTable):
        pairs = zip(records.column("src_lang"), records.column("tgt_lang"))
    else:
        pairs = ((r.src_lang, r.tgt_lang) for r in records)
    names: dict[str, int] = {}
    index = [names.setdefault(direction(s or default[0], t or default[1]), len(names)) for s, t in pairs]
    return np.asarray(index, dtype=np.int64), list(names)


def record_column(records: Sequence[Record], name: str) -> np.ndarray:
    """A number field of records (a RecordTable's column, or gathered from a list of Records) as an (N,) array."""
    if isinstance(records, RecordTable):
        return records.column(name)
    return np.array([getattr(r, name) for r in records], dtype=np.float64 if NUMBER_FIELDS[name] == "d" else np.int64)
