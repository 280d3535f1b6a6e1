"""`speechmt research report`: benchmark results of several directions in one table (speechmt.evaluation.direction_table).

Each direction is benchmarked for real (`speechmt research benchmark` scoring peer hypotheses with sacreBLEU), then
the report must hold exactly sacreBLEU's numbers in the right cells, the means over directions, and one-line errors.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import sacrebleu

from speechmt.cli import main
from speechmt.data.manifest import Record, write_manifest
from speechmt.evaluation.benchmark import load_benchmark
from speechmt.evaluation.direction_table import build_table, direction_label

REFS = {
    "en-fr": ["le chat dort sur le lit", "il pleut depuis ce matin", "nous partons demain à midi"],
    "en-es": ["el gato duerme en la cama", "llueve desde esta mañana", "salimos mañana al mediodía"],
}


def _split(data: Path, split: str, pair: str) -> list[Record]:
    """A prepared split of three utterances in direction `pair` (no audio: peers are scored from text)."""
    src, tgt = pair.split("-")
    records = [
        Record(f"u{i}@{pair}", f"wav/u{i}.wav", 0.0, 1.0 + i, 100, f"source {i}", ref, "spk", src, tgt)
        for i, ref in enumerate(REFS[pair])
    ]
    write_manifest(data / f"{split}.jsonl", records)
    return records


def _peer(path: Path, system: str, split: str, records: list[Record], hyps: list[str]) -> str:
    peer = {
        "system": system,
        "params": None,
        "task": "st",
        "split": split,
        "ids": [r.id for r in records],
        "hypotheses": hyps,
        "decode_seconds": 1.0,
        "audio_seconds": 6.0,
        "threads": 1,
        "device": "cpu",
        "notes": "",
    }
    path.write_text(json.dumps(peer), encoding="utf-8")
    return str(path)


def _drop_last_word(refs: list[str]) -> list[str]:
    return [" ".join(r.split()[:-1]) for r in refs]


@pytest.fixture
def results(tmp_path) -> dict[str, Path]:
    """Two directions benchmarked: a multilingual system on both, a bilingual one on en-fr only."""
    data, out = tmp_path / "data", {}
    for pair in REFS:
        split = f"test_{pair}"
        records = _split(data, split, pair)
        peers = [_peer(tmp_path / f"multi.{pair}.json", "multi", split, records, _drop_last_word(REFS[pair]))]
        if pair == "en-fr":
            peers.append(_peer(tmp_path / "bi.json", "bi en-fr", split, records, REFS[pair]))
        args = ["research", "benchmark", "--data", str(data), "--split", split, "--out", str(tmp_path / pair)]
        assert main([*args, *(a for p in peers for a in ("--peer", p))]) == 0
        out[pair] = tmp_path / pair
    return out


def test_the_report_holds_each_directions_scores_and_the_means(results, tmp_path, capsys):
    report = tmp_path / "report.md"
    capsys.readouterr()
    assert main(["research", "report", str(results["en-fr"]), str(results["en-es"]), "--out", str(report)]) == 0
    lines = report.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "| system | en-fr BLEU | en-fr chrF | en-es BLEU | en-es chrF | mean BLEU | mean chrF |"
    expected = {}
    for pair, refs in REFS.items():
        hyps = _drop_last_word(refs)
        expected[pair] = (sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score)
    cells = [float(c) for c in lines[2].split("|")[2:-1]]
    assert lines[2].startswith("| multi |")
    assert cells[:4] == pytest.approx([*expected["en-fr"], *expected["en-es"]], abs=0.005)
    assert cells[4] == pytest.approx((expected["en-fr"][0] + expected["en-es"][0]) / 2, abs=0.01)
    assert cells[5] == pytest.approx((expected["en-fr"][1] + expected["en-es"][1]) / 2, abs=0.01)
    assert lines[3] == "| bi en-fr | 100.00 | 100.00 | - | - | - | - |"  # one direction: no mean
    directions = [line for line in lines if line.startswith("| en-")]
    assert [d.split(" | ")[1:3] for d in directions] == [["test_en-fr", "3"], ["test_en-es", "3"]]
    assert all("nrefs:1" in d for d in directions)  # the signatures
    assert capsys.readouterr().out.startswith(lines[0])


def test_a_direction_comes_from_the_records_then_the_split_name(results, tmp_path):
    bench = load_benchmark(results["en-fr"])
    assert direction_label(bench) == "en-fr"
    assert direction_label(replace(bench, data=str(tmp_path / "gone"), split="tst-COMMON_en-ro")) == "en-ro"
    assert direction_label(replace(bench, data=str(tmp_path / "gone"), split="tst-REAL")) == "tst-REAL"
    assert [d.label for d in build_table([str(results["en-es"])]).directions] == ["en-es"]


def test_bad_results_are_one_line(results, tmp_path, capsys):
    out = ["--out", str(tmp_path / "r.md")]
    assert main(["research", "report", str(results["en-fr"]), str(results["en-fr"] / "benchmark.json"), *out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "direction en-fr again" in err
    (tmp_path / "junk.json").write_text("{}", encoding="utf-8")
    assert main(["research", "report", str(tmp_path / "junk.json"), *out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a benchmark result" in err
    assert not (tmp_path / "r.md").exists()
