"""`speechmt benchmark`: peers scored like models, length buckets, output files, --compare, one-line errors."""

import dataclasses
import json
from pathlib import Path

import pytest
import sacrebleu

from speechmt.cli import main
from speechmt.data.manifest import read_manifest
from speechmt.decoding.translate import load_model
from speechmt.evaluation.benchmark import (
    BenchmarkConfig,
    bucket_index,
    bucket_labels,
    length_buckets,
    load_benchmark,
    run_benchmark,
)
from speechmt.evaluation.benchmark_report import gap_correlations, slug
from speechmt.training.run import run_training
from tests.helpers import tiny_config

SPLIT = "train"  # the replica's largest split: 6 utterances of 1.36 to 2.42 s


@pytest.fixture(scope="module")
def tiny_model(tiny_data, tmp_path_factory) -> Path:
    exp = tmp_path_factory.mktemp("bench_exp")
    run_training(tiny_config(tiny_data, exp, max_updates=2))
    return exp / "checkpoint_last.safetensors"


def _write_peer(path: Path, ids: list[str], hyps: list[str], task: str = "st", **over) -> Path:
    d = {
        "system": "peer",
        "params": 1234,
        "task": task,
        "split": SPLIT,
        "ids": ids,
        "hypotheses": hyps,
        "decode_seconds": 2.0,
        "audio_seconds": 8.0,
        "threads": 2,
        "device": "cpu",
        "notes": "beam 5",
        **over,
    }
    path.write_text(json.dumps(d), encoding="utf-8")
    return path


def _known_hyps(refs: list[str]) -> list[str]:
    """References with the last word dropped from every other sentence and one sentence reversed."""
    hyps = [" ".join(r.split()[:-1]) if i % 2 else r for i, r in enumerate(refs)]
    hyps[2] = " ".join(reversed(refs[2].split()))
    return hyps


def test_bucket_labels_and_assignment():
    edges = (2.0, 4.0, 6.0, 8.0)
    assert bucket_labels(edges) == ["<2 s", "2-4 s", "4-6 s", "6-8 s", ">=8 s"]
    assert bucket_labels((1.5,)) == ["<1.5 s", ">=1.5 s"]
    durations = [0.5, 1.999, 2.0, 3.9, 4.0, 5.5, 6.0, 7.99, 8.0, 30.0]
    assert [bucket_index(d, edges) for d in durations] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_length_buckets_score_each_bucket_alone():
    refs = ["the cat sat on the mat", "a dog ran in the park today", "it rains", "we went home late at night"]
    hyps = ["the cat sat on the mat", "a dog ran in a park", "it rains", "we went home at night"]
    buckets = length_buckets("st", hyps, refs, [1.0, 3.0, 1.5, 9.0], (2.0, 4.0, 6.0, 8.0))
    assert [(b.label, b.n) for b in buckets] == [("<2 s", 2), ("2-4 s", 1), ("4-6 s", 0), ("6-8 s", 0), (">=8 s", 1)]
    assert buckets[0].score == pytest.approx(100.0)
    assert buckets[1].score == pytest.approx(sacrebleu.corpus_bleu([hyps[1]], [[refs[1]]]).score, rel=1e-12)
    assert buckets[2].score is None and buckets[3].score is None
    wer_buckets = length_buckets("asr", hyps, refs, [1.0, 3.0, 1.5, 9.0], (2.0,))
    assert [b.score for b in wer_buckets] == pytest.approx([0.0, 100.0 * (2 + 1) / (7 + 6)])


def test_peer_equal_to_references_scores_bleu_100_and_wer_0(tiny_data, tmp_path):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    ids = [r.id for r in records]
    st = _write_peer(tmp_path / "st.json", ids, [r.tgt_text for r in records], system="exact st")
    asr = _write_peer(tmp_path / "asr.json", ids, [r.src_text for r in records], task="asr", system="exact asr")
    bench, hyps = run_benchmark(BenchmarkConfig(str(tiny_data), SPLIT, peers=(str(st), str(asr))))
    st_row, asr_row = bench.systems
    assert st_row.metrics["BLEU"].score == pytest.approx(100.0) and st_row.metrics["chrF"].score == pytest.approx(100.0)
    assert asr_row.metrics["WER"].score == 0.0 and asr_row.metrics["CER"].score == 0.0
    assert set(asr_row.metrics) == {"WER", "CER"} and set(st_row.metrics) == {"BLEU", "chrF", "chrF++"}
    assert bench.n == 6 and bench.bucket_counts == [4, 2, 0, 0, 0]
    assert [b.n for b in st_row.buckets] == [4, 2, 0, 0, 0]
    assert st_row.rtf == 0.25 and st_row.utterances_per_second == 3.0 and st_row.audio_seconds_per_second == 4.0
    assert hyps["exact st"] == [r.tgt_text for r in records]


def test_peer_scores_equal_sacrebleu_in_split_order_with_limit(tiny_data, tmp_path):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    refs = [r.tgt_text for r in records]
    hyps = _known_hyps(refs)
    # the peer lists its ids in reverse order and covers the whole split; --limit 4 scores the first 4
    peer = _write_peer(tmp_path / "p.json", [r.id for r in records][::-1], hyps[::-1])
    bench, _ = run_benchmark(BenchmarkConfig(str(tiny_data), SPLIT, peers=(str(peer),), limit=4, edges=(1.6,)))
    row = bench.systems[0]
    assert row.n == 4 and row.timed_utterances == 6
    assert row.metrics["BLEU"].score == pytest.approx(sacrebleu.corpus_bleu(hyps[:4], [refs[:4]]).score, rel=1e-12)
    assert row.metrics["chrF"].score == pytest.approx(sacrebleu.corpus_chrf(hyps[:4], [refs[:4]]).score, rel=1e-12)
    short = [i for i, r in enumerate(records[:4]) if r.duration < 1.6]
    assert [b.n for b in row.buckets] == [len(short), 4 - len(short)] and 0 < len(short) < 4
    expected = sacrebleu.corpus_bleu([hyps[i] for i in short], [[refs[i] for i in short]]).score
    assert row.buckets[0].score == pytest.approx(expected, rel=1e-12)


def test_model_row_is_scored_and_timed(tiny_model, tiny_data):
    bench, hyps = run_benchmark(
        BenchmarkConfig(str(tiny_data), SPLIT, models=(str(tiny_model),), names=("tiny",), beam=2, limit=3, threads=1)
    )
    row = bench.systems[0]
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")[:3]
    lm = load_model(tiny_model)
    assert row.name == "tiny" and row.kind == "model" and row.task == "st" and row.beam == 2 and row.threads == 1
    assert row.params == sum(p.numel() for p in lm.model.parameters())
    assert row.audio_seconds == pytest.approx(sum(r.duration for r in records))
    assert row.decode_seconds > 0 and row.rtf == pytest.approx(row.decode_seconds / row.audio_seconds)
    refs = [r.tgt_text for r in records]
    assert row.metrics["BLEU"].score == pytest.approx(sacrebleu.corpus_bleu(hyps["tiny"], [refs]).score, rel=1e-12)


def test_cli_writes_files_and_compare_round_trips(tiny_model, tiny_data, tmp_path, capsys):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    refs = [r.tgt_text for r in records]
    peer = _write_peer(tmp_path / "p.json", [r.id for r in records], _known_hyps(refs), system="Peer (beam 5)")
    out = tmp_path / "b1"
    assert (
        main(
            [
                "research",
                "benchmark",
                "--model",
                str(tiny_model),
                "--peer",
                str(peer),
                "--data",
                str(tiny_data),
                "--split",
                SPLIT,
                "--out",
                str(out),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| system | task | params |" in printed and "BLEU by source audio duration" in printed
    names = {
        "benchmark.json",
        "benchmark.md",
        "bleu_by_length.png",
        "bleu_vs_rtf.png",
        f"hyp.{slug(_model_name(tiny_model))}.txt",
        "hyp.peer-beam-5.txt",
    }
    assert {p.name for p in out.iterdir()} == names
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names if n.endswith(".png"))
    assert (out / "hyp.peer-beam-5.txt").read_text().splitlines() == _known_hyps(refs)
    first = json.loads((out / "benchmark.json").read_text())
    assert first["machine"]["cpu_count"] >= 1 and "tok:13a" in first["signatures"]["BLEU"][0]

    out2 = tmp_path / "b2"
    assert (
        main(
            [
                "research",
                "benchmark",
                "--compare",
                str(out / "benchmark.json"),
                "--data",
                str(tiny_data),
                "--split",
                SPLIT,
                "--out",
                str(out2),
            ]
        )
        == 0
    )
    second = json.loads((out2 / "benchmark.json").read_text())
    for a, b in zip(first["systems"], second["systems"], strict=True):
        assert b.pop("result_file") == str(out / "benchmark.json") and a.pop("result_file") is None
        assert a == b
    assert load_benchmark(out2).systems[1].metrics["BLEU"] == load_benchmark(out).systems[1].metrics["BLEU"]


def _model_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _cli_error(capsys, *args: str) -> str:
    assert main(["research", "benchmark", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err.strip()


def test_cli_errors_are_one_line(tiny_data, tmp_path, capsys):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    ids, hyps = [r.id for r in records], [r.tgt_text for r in records]
    common = ["--data", str(tiny_data), "--split", SPLIT, "--out", str(tmp_path / "out")]
    missing = _write_peer(tmp_path / "missing.json", ids[1:], hyps[1:])
    assert (
        _cli_error(capsys, "--peer", str(missing), *common)
        == f"speechmt: error: {missing}: 1 ids of the split are missing (first: {ids[0]!r})"
    )
    unknown = _write_peer(tmp_path / "unknown.json", ids + ["ted_99_0"], hyps + ["x"])
    assert (
        _cli_error(capsys, "--peer", str(unknown), *common)
        == f"speechmt: error: {unknown}: 1 ids are not in the split (first: 'ted_99_0')"
    )
    assert (
        _cli_error(capsys, "--model", str(tmp_path / "none.safetensors"), *common)
        == f"speechmt: error: {tmp_path / 'none.safetensors'}: checkpoint not found"
    )
    err = _cli_error(capsys, "--peer", str(missing), "--data", str(tiny_data), "--split", "test", "--out", "x")
    assert err.startswith(
        f"speechmt: error: {tiny_data / 'test.jsonl'}: no split 'test' in {tiny_data}; prepared: dev, train, tst-COMMON"
    )
    assert not (tmp_path / "out").exists()


def test_compare_needs_the_same_utterances(tiny_data, tmp_path, capsys):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    peer = _write_peer(tmp_path / "p.json", [r.id for r in records], [r.tgt_text for r in records])
    common = ["--data", str(tiny_data), "--split", SPLIT]
    assert main(["research", "benchmark", "--peer", str(peer), *common, "--out", str(tmp_path / "b1")]) == 0
    capsys.readouterr()
    result = tmp_path / "b1" / "benchmark.json"
    assert (
        _cli_error(capsys, "--compare", str(result), *common, "--limit", "3", "--out", str(tmp_path / "b2"))
        == f"speechmt: error: {result}: scored 6 utterances of 'train', not the 3 benchmarked here "
        "(use the same split and --limit)"
    )


def _write_analysis(
    folder: Path, cka: float | None, procrustes: bool = True, p1: float = 0.75, word: float | None = None
) -> Path:
    """A crafted `speechmt analyze` output: the top layers' numbers, distinct per retrieval block, and word
    retrieval when `word` is given (its CSLS speech->text P@1 `word`)."""

    def block(s2t: float) -> dict:
        return {
            "cosine": {"speech_to_text": s2t, "text_to_speech": 0.0},
            "csls": {"speech_to_text": s2t + 0.125, "text_to_speech": 0.0},
        }

    top = {
        "speech": "speech.out",
        "text": "text.out",
        "cka": cka,
        "rsa": 0.5,
        "pwcca": 0.9,
        "n": 8,
        "raw": block(0.25),
        "procrustes": {"retrieval": block(p1), "n_fit": 4, "n_test": 4} if procrustes else None,
    }
    words = {"raw": block(word - 0.125), "procrustes": {"retrieval": block(0.0)}} if word is not None else None
    folder.mkdir()
    (folder / "analysis.json").write_text(
        json.dumps(
            {"model": "m.safetensors", "split": "dev", "n": 8, "sentence": {"top": top}, "word_retrieval": words}
        ),
        encoding="utf-8",
    )
    return folder


def test_analysis_numbers_become_columns(tiny_data, tmp_path, capsys):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    ids, refs = [r.id for r in records], [r.tgt_text for r in records]
    peers = [_write_peer(tmp_path / f"{n}.json", ids, refs, system=n) for n in "ABC"]
    mapped = _write_analysis(tmp_path / "an_a", 0.6, word=0.5)
    plain = _write_analysis(tmp_path / "an_b", None, procrustes=False)
    out = tmp_path / "b1"
    assert (
        main(
            [
                "research",
                "benchmark",
                *(a for p in peers for a in ("--peer", str(p))),
                "--analysis",
                f"A={mapped}",
                "--analysis",
                f"B={plain / 'analysis.json'}",
                "--data",
                str(tiny_data),
                "--split",
                SPLIT,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    md = (out / "benchmark.md").read_text().splitlines()
    table = [line for line in md if line.startswith("|")]
    assert table[0].endswith("| device | commit | CKA top | P@1 cos | P@1 CSLS | word P@1 |")
    assert table[1].endswith("|---|---|---:|---:|---:|---:|") and len(table[1].split("|")) == len(table[0].split("|"))
    # A after the Procrustes map (its word P@1 without: 0.5, not the mapped 0.125); B has none: its P@1 as they
    # are, and no word units; C has no analysis
    assert [row.split(" | ")[-4:] for row in table[2:5]] == [
        ["0.600", "0.750", "0.875", "0.500 |"],
        ["-", "0.250", "0.375", "- |"],
        ["-", "-", "-", "- |"],
    ]
    assert any(line.startswith("- CKA top, P@1 cos, P@1 CSLS: from `speechmt research analyze`") for line in md)
    assert (
        f"- A (peer `{peers[0]}`): beam 5; analysis `{mapped / 'analysis.json'}` (dev, 8 utterances, speech.out "
        "/ text.out)" in md
    )
    assert any(line.endswith("speech.out / text.out, no Procrustes map)") for line in md)
    rows = json.loads((out / "benchmark.json").read_text())["systems"]
    assert rows[0]["analysis"] == {
        "file": str(mapped / "analysis.json"),
        "split": "dev",
        "n": 8,
        "speech": "speech.out",
        "text": "text.out",
        "cka": 0.6,
        "map": "procrustes",
        "cosine": 0.75,
        "csls": 0.875,
        "word": 0.5,
    }
    assert (rows[1]["analysis"]["map"], rows[1]["analysis"]["cka"]) == ("none", None) and rows[2]["analysis"] is None
    assert load_benchmark(out).systems[0].analysis == rows[0]["analysis"]  # --compare keeps the numbers
    plain_run = tmp_path / "b2"
    assert (
        main(
            [
                "research",
                "benchmark",
                "--peer",
                str(peers[2]),
                "--data",
                str(tiny_data),
                "--split",
                SPLIT,
                "--out",
                str(plain_run),
            ]
        )
        == 0
    )
    assert "| device | commit |\n|---" in (plain_run / "benchmark.md").read_text()  # no analysis: no columns


def test_the_report_correlates_the_gap_with_bleu(tiny_data, tmp_path, capsys):
    """Three systems whose BLEU falls as their CKA and word P@1 fall and their P@1 rises: rho +1 and -1; equal P@1 CSLS
    (block's +0.125 keeps the order) would be n/a, so the CSLS order follows P@1."""
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    ids, refs = [r.id for r in records], [r.tgt_text for r in records]
    hyps = {"A": refs, "B": refs[:3] + ["nichts"] * 3, "C": ["nichts"] * 6}
    peers = [_write_peer(tmp_path / f"{n}.json", ids, h, system=n) for n, h in hyps.items()]
    analyses = [
        _write_analysis(tmp_path / f"an_{n}", cka, p1=p1, word=w)
        for n, cka, p1, w in (("A", 0.9, 0.1, 0.6), ("B", 0.5, 0.2, 0.4), ("C", 0.1, 0.3, 0.2))
    ]
    out = tmp_path / "b"
    assert (
        main(
            [
                "research",
                "benchmark",
                *(a for p in peers for a in ("--peer", str(p))),
                *(a for n, d in zip("ABC", analyses) for a in ("--analysis", f"{n}={d}")),
                "--data",
                str(tiny_data),
                "--split",
                SPLIT,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    bench = load_benchmark(out)
    assert [round(r.metrics["BLEU"].score, 1) for r in bench.systems][0] == 100.0
    assert (
        bench.systems[0].metrics["BLEU"].score
        > bench.systems[1].metrics["BLEU"].score
        > bench.systems[2].metrics["BLEU"].score
    )
    assert gap_correlations(bench) == {
        "n": 3,
        "CKA top": pytest.approx(1.0),
        "P@1 cos": pytest.approx(-1.0),
        "P@1 CSLS": pytest.approx(-1.0),
        "word P@1": pytest.approx(1.0),
    }
    line = (
        "Spearman's rho of each analysis number with BLEU over the 3 analysed BLEU systems: CKA top +1.00, "
        "P@1 cos -1.00, P@1 CSLS -1.00, word P@1 +1.00"
    )
    assert any(x.startswith(line) for x in (out / "benchmark.md").read_text().splitlines())
    assert gap_correlations(dataclasses.replace(bench, systems=bench.systems[:2])) is None  # too few: no line


def test_bad_analysis_is_one_line(tiny_data, tmp_path, capsys):
    records = read_manifest(tiny_data / f"{SPLIT}.jsonl")
    peer = _write_peer(tmp_path / "p.json", [r.id for r in records], [r.tgt_text for r in records], system="P")
    common = ["--peer", str(peer), "--data", str(tiny_data), "--split", SPLIT, "--out", str(tmp_path / "out")]
    assert (
        _cli_error(capsys, *common, "--analysis", f"P={tmp_path / 'none'}")
        == f"speechmt: error: {tmp_path / 'none'}: analysis result not found"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        _cli_error(capsys, *common, "--analysis", f"P={empty}")
        == f"speechmt: error: {empty / 'analysis.json'}: analysis result not found"
    )
    (empty / "analysis.json").write_text('{"sentence": {"top": ', encoding="utf-8")
    err = _cli_error(capsys, *common, "--analysis", f"P={empty}")
    assert err.startswith(f"speechmt: error: {empty / 'analysis.json'}: not a JSON analysis result (")
    (empty / "analysis.json").write_text('{"n": 8}', encoding="utf-8")
    assert (
        _cli_error(capsys, *common, "--analysis", f"P={empty}")
        == f"speechmt: error: {empty / 'analysis.json'}: not a `speechmt research analyze` result (no 'sentence')"
    )
    (empty / "analysis.json").write_text(
        '{"n": 8, "split": "dev", "sentence": {"top": {"speech": "s", "text": "t", '
        '"cka": "high", "raw": null, "procrustes": null}}}',
        encoding="utf-8",
    )
    assert (
        _cli_error(capsys, *common, "--analysis", f"P={empty}")
        == f"speechmt: error: {empty / 'analysis.json'}: no sentence retrieval of the top layers"
    )
    good = _write_analysis(tmp_path / "good", "high")
    assert (
        _cli_error(capsys, *common, "--analysis", f"P={good}")
        == f"speechmt: error: {good / 'analysis.json'}: cka of the top layers must be numbers or null"
    )
    assert (
        _cli_error(capsys, *common, "--analysis", str(good))
        == f"speechmt: error: --analysis {str(good)!r}: expected NAME=DIR (a system's name and its analyze output)"
    )
    good = _write_analysis(tmp_path / "good2", 0.5)
    assert (
        _cli_error(capsys, *common, "--analysis", f"Q={good}")
        == f"speechmt: error: --analysis Q={good / 'analysis.json'}: no system named 'Q' (systems: P)"
    )
    assert not (tmp_path / "out").exists()
