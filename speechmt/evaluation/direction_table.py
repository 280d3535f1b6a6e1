"""`speechmt research report`: one table for a benchmark's directions, from one `speechmt research benchmark` result
per direction.

A multilingual benchmark (MuST-C's eight English->X directions, CoVoST 2's X->English ones) is scored one split
per direction (`tst-COMMON_en-de`, `test_fr-en`, ...), each by `speechmt research benchmark`, which decodes the
systems that translate that direction and scores the peers that exist for it. This module puts those results side by
side: one row per system (matched by name across the results), each direction a group of columns (its metrics),
then the mean over the directions, given only for a system scored on every direction. Bilingual systems fill
their own direction's cells, multilingual ones every direction's, and peers the directions they cover. Below the
table: each direction's split, utterance count and metric signatures, and where each result came from.

A result's direction is the one language pair its split's records name (src_lang, tgt_lang), else the split name's
`_src-tgt` suffix (as `speechmt data prepare` names per-direction splits), else the split name itself.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from speechmt.data.manifest import ManifestError, read_split
from speechmt.evaluation.benchmark import Benchmark, BenchmarkError, SystemResult, load_benchmark
from speechmt.evaluation.report import table_cell, write_text_atomic

ST_METRICS = ("BLEU", "chrF")
ASR_METRICS = ("WER",)
SUFFIX = re.compile(r"_([a-z]{2,3}(?:-[A-Za-z]+)?)-([a-z]{2,3}(?:-[A-Za-z]+)?)$")


@dataclass
class Direction:
    """One benchmark result: its direction's label ("en-de"), its split, its size and the file it came from."""

    label: str
    bench: Benchmark
    source: str


@dataclass
class DirectionTable:
    """Systems x directions: `cells[system][direction label][metric]` is a score, or absent."""

    title: str
    metrics: tuple[str, ...]
    directions: list[Direction]
    systems: list[str] = field(default_factory=list)
    cells: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def mean(self, system: str, metric: str) -> float | None:
        """The mean of `metric` over every direction, or None when the system lacks one of them."""
        values = [self.cells[system].get(d.label, {}).get(metric) for d in self.directions]
        return None if any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]


def direction_label(bench: Benchmark) -> str:
    """ "src-tgt" of the result's split (see the module's docstring)."""
    try:
        records = read_split(bench.data, bench.split)
    except (ManifestError, OSError):
        records = []
    pairs = {(r.src_lang, r.tgt_lang) for r in records}
    if len(pairs) == 1:
        src, tgt = pairs.pop()
        if src and tgt:
            return f"{src}-{tgt}"
    m = SUFFIX.search(bench.split)
    return f"{m.group(1)}-{m.group(2)}" if m else bench.split


def build_table(paths: list[str], title: str = "", metrics: tuple[str, ...] | None = None) -> DirectionTable:
    """The table of the benchmark results at `paths` (benchmark.json files or their folders), in that order.

    BenchmarkError (one line naming the file) for a result that cannot be read, two results of one direction, or
    results of both translation and ASR without `metrics`."""
    if not paths:
        raise BenchmarkError("research report: name at least one benchmark result")
    directions: list[Direction] = []
    for path in paths:
        bench = load_benchmark(path)
        label = direction_label(bench)
        twin = next((d for d in directions if d.label == label), None)
        if twin is not None:
            raise BenchmarkError(f"{path}: direction {label} again (also {twin.source}); one result per direction")
        directions.append(Direction(label, bench, str(path)))
    table = DirectionTable(title, metrics or _metrics_of(directions), directions)
    for d in directions:
        for row in d.bench.systems:
            _add(table, d.label, row)
    return table


def _metrics_of(directions: list[Direction]) -> tuple[str, ...]:
    tasks = {"asr" if row.task == "asr" else "st" for d in directions for row in d.bench.systems}
    if len(tasks) > 1:
        raise BenchmarkError("research report: the results mix translation and ASR systems; pass --metrics")
    return ASR_METRICS if tasks == {"asr"} else ST_METRICS


def _add(table: DirectionTable, label: str, row: SystemResult) -> None:
    if row.name not in table.cells:
        table.systems.append(row.name)
        table.cells[row.name] = {}
    table.cells[row.name][label] = {m: row.metrics[m].score for m in table.metrics if m in row.metrics}


def table_markdown(table: DirectionTable) -> str:
    """The report: the table, then the directions (split, n, signatures) and the result files."""
    heads = [f"{d.label} {m}" for d in table.directions for m in table.metrics]
    heads += [f"mean {m}" for m in table.metrics] if len(table.directions) > 1 else []
    lines = [f"# {table.title}", ""] if table.title else []
    lines += ["| system | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    for name in table.systems:
        cells = [_cell(table.cells[name].get(d.label, {}).get(m)) for d in table.directions for m in table.metrics]
        if len(table.directions) > 1:
            cells += [_cell(table.mean(name, m)) for m in table.metrics]
        lines.append(f"| {table_cell(name)} | " + " | ".join(cells) + " |")
    lines += ["", "| direction | split | n | signatures | result |", "|---|---|---:|---|---|"]
    for d in table.directions:
        sigs = "; ".join(s for name in table.metrics for s in d.bench.signatures().get(name, []))
        lines.append(f"| {d.label} | {d.bench.split} | {d.bench.n} | {table_cell(sigs)} | {table_cell(d.source)} |")
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_report(table: DirectionTable, out: str | os.PathLike) -> Path:
    """Writes the report's markdown to `out` (atomically) and returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, table_markdown(table))
    return out
