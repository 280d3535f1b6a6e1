import json
import shutil
import subprocess

import pytest

from speechmt.evaluation.metrics import bleu, chrf, normalize_for_wer, wer
from speechmt.evaluation.report import (
    RESULTS_HEADER,
    EvalReport,
    append_results_row,
    git_commit,
    load_report,
    markdown_row,
    write_report,
)

IDS = ["ted_1_0", "ted_1_1", "ted_2_0"]
SRCS = ["This is a small test.", "We translate speech directly into text.", "Hello, world."]
HYPS = ["Das ist ein kleiner Test.", "Wir übersetzen Sprache direkt in Text!", "Hallo Welt"]
REFS = ["Das ist ein kleiner Test.", "Wir übersetzen gesprochene Sprache in Text.", "Hallo, Welt."]


def make_report(**overrides) -> EvalReport:
    metrics = {s.name: s for s in (bleu(HYPS, REFS), chrf(HYPS, REFS), wer(HYPS, REFS))}
    fields = dict(
        model="exp/st_s/avg10.safetensors",
        data="data/mustc/en-de",
        split="tst-COMMON",
        n=len(IDS),
        metrics=metrics,
        extra={"beam": 5, "lenpen": 1.0, "seconds": 12.5, "rtf": 0.031, "commit": "abc1234+dirty"},
        created="2025-01-02T03:04:05+00:00",
    )
    return EvalReport(**{**fields, **overrides})


def test_report_round_trips_through_json(tmp_path):
    report = make_report()
    path = write_report(report, tmp_path / "eval", HYPS, REFS, IDS, srcs=SRCS)
    assert path == tmp_path / "eval" / "report.json"
    assert load_report(path) == report
    assert load_report(tmp_path / "eval") == report
    assert json.loads(path.read_text())["metrics"]["BLEU"]["signature"] == report.metrics["BLEU"].signature


def test_created_defaults_to_utc_iso_time():
    report = EvalReport(model="m", data="d", split="dev", n=0, metrics={})
    assert report.created.endswith("+00:00") and report.created[4] == "-" and "T" in report.created


def test_text_files_follow_the_order_of_ids(tmp_path):
    write_report(make_report(), tmp_path, HYPS, REFS, IDS, srcs=SRCS)
    assert (tmp_path / "hyps.txt").read_text(encoding="utf-8").splitlines() == HYPS
    assert (tmp_path / "refs.txt").read_text(encoding="utf-8").splitlines() == REFS
    rows = [line.split("\t") for line in (tmp_path / "results.tsv").read_text(encoding="utf-8").splitlines()]
    assert rows[0] == ["id", "ref", "hyp", "src"]
    assert rows[1:] == [list(r) for r in zip(IDS, REFS, HYPS, SRCS)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hyps.txt",
        "refs.txt",
        "report.json",
        "report.md",
        "results.tsv",
    ]  # no temporary files left


def test_results_tsv_without_sources(tmp_path):
    write_report(make_report(), tmp_path, HYPS, REFS, IDS)
    lines = (tmp_path / "results.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\tref\thyp" and len(lines) == 4


def test_markdown_has_scores_signatures_rule_and_extra(tmp_path):
    report = make_report()
    write_report(report, tmp_path, HYPS, REFS, IDS)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    for score in report.metrics.values():
        assert f"| {score.name} | {score.score:.2f} |" in md
        assert score.signature.replace("|", "\\|") in md
    assert "tok:13a" in md and "case:mixed" in md
    assert "drop every token made only of Unicode punctuation" in md
    assert normalize_for_wer.__doc__.split("\n")[0] in md
    assert "| beam | 5 |" in md and "| commit | abc1234+dirty |" in md


def test_markdown_leaves_out_the_wer_rule_without_wer(tmp_path):
    write_report(make_report(metrics={"BLEU": bleu(HYPS, REFS)}), tmp_path, HYPS, REFS, IDS)
    assert "normalisation" not in (tmp_path / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "hyps, refs, ids, match",
    [
        (HYPS[:2], REFS, IDS, "3 ids but 2 hyps"),
        (HYPS, REFS, IDS[:2], "2 ids but 3 hyps"),
        (HYPS, REFS, ["a", "a", "b"], "not unique"),
        (["one\ntwo", "b", "c"], REFS, IDS, "line break or tab"),
        (HYPS, ["a\tb", "b", "c"], IDS, "refs of 'ted_1_0'"),
    ],
)
def test_write_report_rejects_bad_columns_before_writing(tmp_path, hyps, refs, ids, match):
    with pytest.raises(ValueError, match=match):
        write_report(make_report(), tmp_path / "eval", hyps, refs, ids)
    assert not (tmp_path / "eval").exists()


def test_markdown_row_has_two_decimals_and_bleu_signature():
    report = make_report()
    row = markdown_row(report)
    cells = [c.strip() for c in row.split(" | ")]
    assert row.startswith("| 2025-01-02 | `exp/st_s/avg10.safetensors` | tst-COMMON | ")
    assert f"{report.metrics['BLEU'].score:.2f}" in cells
    assert f"{report.metrics['chrF'].score:.2f}" in cells
    assert f"{report.metrics['WER'].score:.2f}" in cells
    assert report.metrics["BLEU"].signature.replace("|", "\\|") in row
    assert row.endswith("| abc1234+dirty |")


def test_markdown_row_marks_missing_metrics():
    report = make_report(metrics={"WER": wer(HYPS, REFS)}, extra={})
    row = markdown_row(report)
    assert "| - | - |" in row and "jiwer:" in row and row.endswith("| - |")


def test_append_results_row_writes_one_header_and_a_row_per_call(tmp_path):
    path = tmp_path / "RESULTS.md"
    append_results_row(path, make_report())
    append_results_row(path, make_report(split="dev"))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines.count(RESULTS_HEADER) == 1
    assert lines[0] == RESULTS_HEADER and lines[1].startswith("|---")
    assert len(lines) == 4 and "| tst-COMMON |" in lines[2] and "| dev |" in lines[3]


def test_append_results_row_keeps_other_text_and_extends_the_table(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# MuST-C En-De\n\nNotes before.\n", encoding="utf-8")
    append_results_row(path, make_report())
    path.write_text(path.read_text(encoding="utf-8") + "\nNotes after the table.\n", encoding="utf-8")
    append_results_row(path, make_report(split="dev"))
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines.index(RESULTS_HEADER)
    assert lines[:header] == ["# MuST-C En-De", "", "Notes before.", ""]
    assert "| tst-COMMON |" in lines[header + 2] and "| dev |" in lines[header + 3]
    assert lines[header + 4 :] == ["", "Notes after the table."]


def test_git_commit_outside_a_repository_is_none(tmp_path):
    assert git_commit(tmp_path) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_short_hash_and_dirty_suffix(tmp_path):
    def git(*args: str) -> str:
        cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
        return subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "--short", "HEAD")
    (tmp_path / "untracked.txt").write_text("ignored for dirtiness\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_commit(tmp_path) == head + "+dirty"
