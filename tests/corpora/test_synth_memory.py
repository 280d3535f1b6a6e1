"""`speechmt synth-memory`: the translation memory of the Ding pairs minus MuST-C-mini's dev and test sentences, on
a small Ding file written for the test."""

import hashlib
import json
from pathlib import Path

import pytest

from speechmt.cli import main
from speechmt.data.manifest import read_manifest
from speechmt.data.retrieval import memory_from_manifests
from speechmt_corpora import mt_sources
from speechmt_corpora.common import SynthError, split_pool
from speechmt_corpora.memory import build_memory
from speechmt_corpora.mt_sources import SourcePaths
from speechmt_corpora.mustc import DING_STREAM
from speechmt_corpora.text import ding_pairs

NAMES = (
    "Anna",
    "Bernd",
    "Clara",
    "Dieter",
    "Emil",
    "Frieda",
    "Gustav",
    "Hanna",
    "Ida",
    "Jonas",
    "Karl",
    "Lena",
    "Max",
    "Nina",
    "Otto",
    "Paul",
    "Rosa",
    "Sven",
    "Tina",
    "Ulf",
)


@pytest.fixture
def ding(tmp_path) -> Path:
    """40 sentence pairs (split_pool of size full, seed 0: 5 text-only, 2 test, 2 dev, 31 train) and one phrase."""
    lines = ["# test dictionary", "ein schönes Haus {n} | schöne Häuser {pl} :: a beautiful house | beautiful houses"]
    for name in NAMES:
        lines.append(f"{name} liest heute ein Buch im Garten. :: {name} reads a book in the garden today.")
        lines.append(f"Der Hund von {name} schläft unter dem Tisch. :: The dog of {name} sleeps under the table.")
    path = tmp_path / "de-en"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ding_pairs.cache_clear()
    mt_sources.ding_pairs.cache_clear()
    yield path
    ding_pairs.cache_clear()


def test_every_pair_but_the_dev_and_test_sentences(ding, tmp_path):
    text_only, splits = split_pool(ding_pairs(ding), "full", 0, DING_STREAM)
    assert [len(splits[s]) for s in ("test", "dev", "train")] == [2, 2, 31] and len(text_only) == 5
    summary = build_memory(tmp_path / "mem", seed=0, paths=SourcePaths(ding=ding))
    records = read_manifest(tmp_path / "mem" / "memory.jsonl")
    pairs = [(r.src_text, r.tgt_text) for r in records]
    held = [(p.src, p.tgt) for s in ("dev", "test") for p in splits[s]]
    kept = [(p.src, p.tgt) for p in (*text_only, *splits["train"])]
    assert not set(held) & set(pairs)
    assert set(kept) <= set(pairs)
    assert len(pairs) == 36 + 2 == summary["pairs"]  # 36 sentences, and the phrase's 2 alternatives
    assert [r.id for r in records[:2]] == ["ding_0", "ding_1"] and all(r.audio == "" for r in records)
    assert summary["held_out"]["sentences"] == 8  # both sides of 4 pairs
    # Ding gives each sentence twice (as a phrase and as a sentence): 4 held-out pairs, 36 second readings
    assert summary["source"]["dropped"] == {"a corpus sentence": 8, "duplicate": 36}
    assert summary["sha256"] == hashlib.sha256((tmp_path / "mem" / "memory.jsonl").read_bytes()).hexdigest()
    assert "GPL-2+" in (tmp_path / "mem" / "NOTICE").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "mem" / "summary.json").read_text(encoding="utf-8"))["pairs"] == 38
    assert not list(tmp_path.glob(".mem*"))  # the staging folder was renamed into place
    # another seed holds out other sentences
    other = build_memory(tmp_path / "mem1", seed=1, paths=SourcePaths(ding=ding))
    assert {(r.src_text, r.tgt_text) for r in read_manifest(tmp_path / "mem1" / "memory.jsonl")} != set(pairs)
    assert other["pairs"] == 38


def test_a_finished_memory_is_never_overwritten_and_ding_must_be_there(ding, tmp_path):
    build_memory(tmp_path / "mem", paths=SourcePaths(ding=ding))
    with pytest.raises(SynthError, match="already exists and is not empty"):
        build_memory(tmp_path / "mem", paths=SourcePaths(ding=ding))
    with pytest.raises(SynthError, match="install the Debian package trans-de-en"):
        build_memory(tmp_path / "other", paths=SourcePaths(ding=tmp_path / "none"))
    assert not (tmp_path / "other").exists()


def test_cli_writes_under_speechmt_home_and_decoding_finds_it_by_name(ding, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPEECHMT_HOME", str(tmp_path / "home"))
    assert main(["synth-memory", "--ding", str(ding)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["out"] == str(tmp_path / "home" / "ding-en-de") and out["pairs"] == 38
    memory = memory_from_manifests(["ding-en-de"])  # a name under $SPEECHMT_HOME
    train = split_pool(ding_pairs(ding), "full", 0, DING_STREAM)[1]["train"][0]
    assert len(memory) == 38 and (train.src, train.tgt) in memory.pairs
    assert main(["synth-memory", "--ding", str(ding)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("already exists and is not empty: remove it or build into another folder")
    )
