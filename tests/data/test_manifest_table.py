"""The compact per-rank index: a manifest as columns (RecordTable) equals its list of Records field by field, and
a feature store pickles as its prefix and reopens its memory map."""

import json
import pickle

import numpy as np
import pytest

from speechmt.data.features import FeatureStore, FeatureStoreWriter
from speechmt.data.manifest import (
    ManifestError,
    Record,
    RecordTable,
    StringColumn,
    read_manifest,
    read_split,
    record_column,
    write_manifest,
)

TEXTS = [
    ("Hello, world.", "Hallo, Welt."),
    ("Grüße aus Köln — naïve café", "Größe: 5 m²; „Anführung“"),
    ("", ""),
    ("日本語のテキスト 🎤", "Ελληνικά κείμενα"),
    ('tab\there "quoted" \\ back', "Zeile\nzwei"),
]


def records() -> list[Record]:
    return [
        Record(
            id=f"ted_{i}_ü{i}",
            audio=f"wav/ted_{i}.wav",
            offset=1.5 * i,
            duration=0.25 + i,
            n_frames=100 * i + 7,
            src_text=s,
            tgt_text=t,
            speaker=f"spk.{i % 2}",
            src_lang="en",
            tgt_lang="de",
        )
        for i, (s, t) in enumerate(TEXTS)
    ]


def test_a_table_equals_its_records_field_by_field(tmp_path):
    write_manifest(tmp_path / "dev.jsonl", records())
    table, plain = read_split(tmp_path, "dev"), read_manifest(tmp_path / "dev.jsonl")
    assert isinstance(table, RecordTable) and len(table) == len(plain) == 5
    for got, expected in zip(table, plain):
        for field in Record.__dataclass_fields__:
            assert getattr(got, field) == getattr(expected, field), field
            assert type(getattr(got, field)) is type(getattr(expected, field)), field
    assert table == plain == records() and plain == table
    assert table[-1] == plain[-1] and table[1:4] == plain[1:4] and table[::-2] == plain[::-2]
    assert table.take(np.array([3, 0, 3])) == [plain[3], plain[0], plain[3]]
    assert list(table.ids) == [r.id for r in plain]
    with pytest.raises(IndexError):
        table[5]


def test_columns_are_arrays(tmp_path):
    write_manifest(tmp_path / "dev.jsonl", records())
    table = read_split(tmp_path, "dev")
    frames = table.column("n_frames")
    assert frames.dtype == np.int64 and frames.tolist() == [7, 107, 207, 307, 407]
    assert table.column("offset").dtype == np.float64 and table.column("offset").tolist() == [0, 1.5, 3, 4.5, 6]
    assert np.array_equal(record_column(table, "duration"), record_column(records(), "duration"))
    texts = table.column("tgt_text")
    assert texts[1] == "Größe: 5 m²; „Anführung“" and texts[2] == ""
    utf8 = sum(
        len(getattr(r, f).encode())
        for r in records()
        for f in ("id", "audio", "src_text", "tgt_text", "speaker", "src_lang", "tgt_lang")
    )
    assert table.nbytes == utf8 + 7 * 8 * 6 + 3 * 8 * 5  # texts + 7 offset columns (N + 1) + 3 number columns
    with pytest.raises(KeyError, match="nope: not a manifest field"):
        table.column("nope")


def test_a_table_round_trips_through_pickle_and_from_records():
    table = RecordTable.from_records(records())
    assert pickle.loads(pickle.dumps(table)) == table == records()
    assert len(RecordTable.from_records([])) == 0


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"id": "a"}', "KeyError: 'offset'"),
        ("[1, 2]", "TypeError"),
        ("{oops", "JSONDecodeError"),
        (None, "ValueError"),
        (7, "AttributeError"),
    ],
)
def test_a_malformed_line_names_the_file_and_line(tmp_path, line, problem):
    path = tmp_path / "train.jsonl"
    write_manifest(path, records()[:1])
    if line is None or isinstance(line, int):
        bad = {**json.loads(path.read_text()), **({"n_frames": "many"} if line is None else {"speaker": line})}
        line = json.dumps(bad)
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(ManifestError, match=rf"^{path}:2: malformed manifest record \({problem}"):
        RecordTable.read(path)


def test_string_columns_convert_to_fixed_width_and_back():
    strings = ["a", "", "ünï", "日本", "abc"]
    column = StringColumn.from_strings(strings)
    assert list(column) == strings and column == strings and column[-1] == "abc"
    fixed = column.fixed()
    assert fixed.dtype == np.dtype("S6") and fixed.tolist() == [s.encode() for s in strings]
    assert StringColumn.from_fixed(fixed) == column and list(column[1:3]) == ["", "ünï"]
    with pytest.raises(ValueError, match="offsets must run from 0"):
        StringColumn(np.zeros(3, dtype=np.uint8), np.array([0, 2]))


def store(tmp_path, n: int = 40) -> tuple[FeatureStore, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((int(rng.integers(5, 60)), 80)).astype(np.float32) for _ in range(n)]
    with FeatureStoreWriter(tmp_path / "fbank80" / "train", 80, "float32") as w:
        for i, f in enumerate(feats):
            w.add(f"utt_{(i * 7) % n}_ä", f)  # ids not in sorted order
    return FeatureStore(tmp_path / "fbank80" / "train"), feats


def test_a_pickled_store_is_its_prefix_and_reads_the_same(tmp_path):
    s, feats = store(tmp_path)
    data = pickle.dumps(s)
    assert len(data) < 300 < sum(f.nbytes for f in feats) // 100
    copy = pickle.loads(data)
    assert copy.ids == s.ids and len(copy) == 40
    for i, f in enumerate(feats):
        assert np.array_equal(copy.get(i), f) and np.array_equal(copy[f"utt_{(i * 7) % 40}_ä"], f)


def test_a_store_finds_ids_by_binary_search(tmp_path):
    s, feats = store(tmp_path)
    assert [s.position(f"utt_{(i * 7) % 40}_ä") for i in range(40)] == list(range(40))
    assert "utt_3_ä" in s and "utt_3" not in s and "utt_3_ä_longer_than_any_id" not in s and "" not in s
    assert list(s.ids)[:3] == ["utt_0_ä", "utt_7_ä", "utt_14_ä"]
    with pytest.raises(KeyError, match="utt_99: not in this feature store"):
        s["utt_99"]
