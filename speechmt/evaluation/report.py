"""Evaluation reports: the files of one decoding run (hypotheses, references, scores) and RESULTS.md rows.

An evaluation directory holds `hyps.txt`, `refs.txt`, `results.tsv`, `report.json` and `report.md`; each
file is written to a temporary name and moved into place, so a crash never leaves a half-written report.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from speechmt.atomic import write_text_atomic  # noqa: F401 (callers import it from here too)
from speechmt.evaluation.metrics import Score, normalize_for_wer

RESULTS_HEADER = "| date | model | split | BLEU | chrF | WER | signature | commit |"
RESULTS_RULE = "|---|---|---|---|---|---|---|---|"
_MISSING = "-"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class EvalReport:
    """The outcome of evaluating one model on one split.

    `metrics` maps a metric's name to its Score and by convention the key is `Score.name` ("BLEU", "chrF",
    "WER", "CER"). `extra` holds JSON-typed run facts: decode options, seconds, real-time factor, commit.
    `created` is the UTC time in ISO 8601.
    """

    model: str
    data: str
    split: str
    n: int
    metrics: dict[str, Score]
    extra: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=utc_now)


def _check_lines(ids: Sequence[str], hyps: Sequence[str], refs: Sequence[str], srcs: Sequence[str] | None) -> None:
    """Raises ValueError unless the columns are parallel, ids unique, and no text holds a line break or tab."""
    columns = {"hyps": hyps, "refs": refs, **({"srcs": srcs} if srcs is not None else {})}
    for name, column in columns.items():
        if len(column) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(column)} {name}: the lists must be parallel")
    if len(set(ids)) != len(ids):
        raise ValueError(f"ids are not unique: {len(ids) - len(set(ids))} duplicates")
    for name, column in {"ids": ids, **columns}.items():
        for utt_id, text in zip(ids, column):
            if any(c in text for c in "\n\r\t"):
                raise ValueError(f"{name} of {utt_id!r} holds a line break or tab: {text!r}")


def _results_tsv(ids: Sequence[str], hyps: Sequence[str], refs: Sequence[str], srcs: Sequence[str] | None) -> str:
    """Tab-separated id, ref, hyp[, src] with a header line; texts hold no tabs or line breaks (checked)."""
    header = ["id", "ref", "hyp"] + (["src"] if srcs is not None else [])
    rows = [[utt_id, refs[i], hyps[i]] + ([srcs[i]] if srcs is not None else []) for i, utt_id in enumerate(ids)]
    return "".join("\t".join(row) + "\n" for row in [header, *rows])


def table_cell(text: str) -> str:
    """Escapes a markdown table cell (signatures contain `|`)."""
    return text.replace("|", "\\|")


def _plain(value: Any) -> str:
    """A string as it is, any other JSON value as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _report_markdown(report: EvalReport) -> str:
    """The report as markdown: the run, a metrics table with signatures, the WER rule, the extra fields."""
    lines = [
        f"# Evaluation: {report.model} on {report.split}",
        "",
        f"- model: `{report.model}`",
        f"- data: `{report.data}`",
        f"- split: {report.split}",
        f"- utterances: {report.n}",
        *_skipped_lines(report.extra.get("skipped")),
        f"- created (UTC): {report.created}",
        "",
        "| metric | score | signature |",
        "|---|---:|---|",
    ]
    lines += [f"| {s.name} | {s.score:.2f} | `{table_cell(s.signature)}` |" for s in report.metrics.values()]
    if any(s.details.get("normalized") for s in report.metrics.values()):
        lines += ["", "## WER and CER normalisation", "", inspect.getdoc(normalize_for_wer) or ""]
    if report.extra:
        lines += ["", "## Run", "", "| field | value |", "|---|---|"]
        lines += [f"| {table_cell(k)} | {table_cell(_plain(v))} |" for k, v in report.extra.items() if k != "skipped"]
    return "\n".join(lines) + "\n"


def _skipped_lines(skipped: dict | None) -> list[str]:
    """The report.md line of the utterances left out of scoring (evaluate --skip-bad-audio), first ids named."""
    if not skipped:
        return []
    ids = skipped.get("ids", [])
    named = ", ".join(f"`{i}`" for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return [
        f"- skipped ({skipped.get('reason', 'unreadable audio')}): {skipped['count']}" + (f": {named}" if named else "")
    ]


def write_report(
    report: EvalReport,
    out_dir: str | os.PathLike,
    hyps: Sequence[str],
    refs: Sequence[str],
    ids: Sequence[str],
    srcs: Sequence[str] | None = None,
) -> Path:
    """Writes the evaluation files into `out_dir` (created if needed) and returns the path of report.json.

    `hyps.txt` and `refs.txt` hold one sentence per line in the order of `ids` (pass the manifest order to
    keep them line-aligned with the split's reference file); `results.tsv` has columns id, ref, hyp and, when
    given, src. Raises ValueError before writing anything if the lists are not parallel, an id repeats, or a
    text holds a line break or tab (it would shift the line alignment).
    """
    _check_lines(ids, hyps, refs, srcs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "hyps.txt", "".join(f"{h}\n" for h in hyps))
    write_text_atomic(out / "refs.txt", "".join(f"{r}\n" for r in refs))
    write_text_atomic(out / "results.tsv", _results_tsv(ids, hyps, refs, srcs))
    write_text_atomic(out / "report.md", _report_markdown(report))
    json_text = json.dumps(dataclasses.asdict(report), indent=2, ensure_ascii=False) + "\n"
    write_text_atomic(out / "report.json", json_text)
    return out / "report.json"


def load_report(path: str | os.PathLike) -> EvalReport:
    """Reads a report.json (or the directory holding one) back into an EvalReport."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    d = json.loads(path.read_text(encoding="utf-8"))
    d["metrics"] = {name: Score(**s) for name, s in d["metrics"].items()}
    return EvalReport(**d)


def _score_cell(report: EvalReport, name: str) -> str:
    score = report.metrics.get(name)
    return _MISSING if score is None else f"{score.score:.2f}"


def markdown_row(report: EvalReport) -> str:
    """One row of a recipe's RESULTS.md table (columns of RESULTS_HEADER); scores with two decimals.

    The signature column carries BLEU's signature, or WER's when there is no BLEU; the commit comes from
    `report.extra["commit"]`. Missing values are "-".
    """
    main = report.metrics.get("BLEU") or report.metrics.get("WER")
    cells = [
        report.created[:10],
        f"`{table_cell(report.model)}`",
        table_cell(report.split),
        _score_cell(report, "BLEU"),
        _score_cell(report, "chrF"),
        _score_cell(report, "WER"),
        f"`{table_cell(main.signature)}`" if main else _MISSING,
        table_cell(str(report.extra.get("commit") or _MISSING)),
    ]
    return "| " + " | ".join(cells) + " |"


def append_results_row(results_md_path: str | os.PathLike, report: EvalReport) -> None:
    """Adds `markdown_row(report)` at the end of the RESULTS_HEADER table in a markdown file.

    The file and the table are created when missing (the table goes at the end of the file, after a blank
    line); other text in the file is left as it is. The file is rewritten atomically.
    """
    path = Path(results_md_path)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if RESULTS_HEADER not in lines:
        lines += ([""] if lines and lines[-1].strip() else []) + [RESULTS_HEADER, RESULTS_RULE]
    end = lines.index(RESULTS_HEADER) + 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines.insert(end, markdown_row(report))
    write_text_atomic(path, "\n".join(lines) + "\n")


def git_commit(repo_dir: str | os.PathLike | None = None) -> str | None:
    """Short hash of HEAD of the git work tree holding `repo_dir` (default: this package's source).

    Adds "+dirty" when tracked files have uncommitted changes (untracked files are ignored, as with
    `git describe --dirty`). Returns None outside a git work tree or when git is not installed.
    """
    cwd = Path(repo_dir) if repo_dir is not None else Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True)
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    dirty = status.returncode == 0 and status.stdout.strip() != ""
    return head.stdout.strip() + ("+dirty" if dirty else "")
