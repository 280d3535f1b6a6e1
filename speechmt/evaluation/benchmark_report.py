"""`speechmt research benchmark`'s report files: benchmark.json, benchmark.md (the main table, the tables per source
duration bucket, the metric signatures, the systems and the machine), the plots and one hypotheses file per
decoded system (speechmt.evaluation.benchmark computes what they show)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from speechmt.evaluation.benchmark import ANALYSIS_COLUMNS, Benchmark, BenchmarkError, SystemResult
from speechmt.evaluation.geometry import spearman
from speechmt.evaluation.plots import PlotError, plot_benchmark
from speechmt.evaluation.report import table_cell, write_text_atomic

MISSING = "-"  # a cell with no value


def slug(name: str) -> str:
    """A file-name-safe form of a system name: "ST avg (beam 5)" -> "st-avg-beam-5"."""
    return re.sub(r"[^a-z0-9._]+", "-", name.lower()).strip("-._") or "system"


def _num(value: float | None, fmt: str) -> str:
    return MISSING if value is None else format(value, fmt)


def _params(n: int | None) -> str:
    """A parameter count in millions ("31.52M"), or as it is below ten thousand."""
    return MISSING if n is None else f"{n / 1e6:.2f}M" if n >= 10_000 else str(n)


def _metric(row: SystemResult, name: str) -> str:
    m = row.metrics.get(name)
    return MISSING if m is None else f"{m.score:.2f}"


def _analysis_cells(row: SystemResult) -> list[str]:
    a = row.analysis or {}
    return [_num(a.get(k), ".3f") for k, _ in ANALYSIS_COLUMNS]


def _main_table(bench: Benchmark) -> list[str]:
    """One row per system; with the columns of `speechmt research analyze` when a system has its numbers."""
    extra = any(r.analysis for r in bench.systems)
    heads = "".join(f" {label} |" for _, label in ANALYSIS_COLUMNS) if extra else ""
    rule = "---:|" * len(ANALYSIS_COLUMNS) if extra else ""
    lines = [
        "| system | task | params | n | BLEU | chrF | chrF++ | WER | CER | RTF | utt/s | audio s/s | beam "
        "| threads | device | commit |" + heads,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|" + rule,
    ]
    for r in bench.systems:
        scores = [_metric(r, m) for m in ("BLEU", "chrF", "chrF++", "WER", "CER")]
        cells = [
            table_cell(r.name),
            r.task,
            _params(r.params),
            str(r.n),
            *scores,
            _num(r.rtf, ".4f"),
            _num(r.utterances_per_second, ".2f"),
            _num(r.audio_seconds_per_second, ".1f"),
            _num(r.beam, "d"),
            _num(r.threads, "d"),
            table_cell(r.device or MISSING),
            table_cell(r.commit or MISSING),
        ] + (_analysis_cells(r) if extra else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def gap_correlations(bench: Benchmark) -> dict[str, float] | None:
    """Spearman's rho between each analysis number (CKA top, P@1 cos, P@1 CSLS, word P@1) and BLEU over the BLEU
    systems that have them (issue 14's claim: a smaller speech-text gap, a better translation); None for
    fewer than 3 such systems."""
    rows = [r for r in bench.systems if r.analysis and "BLEU" in r.metrics]
    if len(rows) < 3:
        return None
    bleu = [r.metrics["BLEU"].score for r in rows]
    out = {"n": len(rows)}
    for key, label in ANALYSIS_COLUMNS:
        pairs = [(r.analysis[key], b) for r, b in zip(rows, bleu) if r.analysis.get(key) is not None]
        out[label] = spearman(*zip(*pairs)) if len(pairs) >= 3 else float("nan")
    return out


def _gap_line(bench: Benchmark) -> list[str]:
    c = gap_correlations(bench)
    if c is None:
        return []
    rhos = ", ".join(f"{k} {_num(v, '+.2f') if v == v else 'n/a'}" for k, v in c.items() if k != "n")
    return [
        "",
        f"Spearman's rho of each analysis number with BLEU over the {c['n']} analysed BLEU systems: {rhos} "
        "(positive: the closer speech and text, the better the translation; few systems make it noisy).",
    ]


def _bucket_table(bench: Benchmark, metric: str) -> list[str]:
    rows = [r for r in bench.systems if r.main_metric == metric]
    if not rows:
        return []
    heads = [f"{label} (n={n})" for label, n in zip(bench.bucket_labels, bench.bucket_counts)]
    lines = [
        "",
        f"## {metric} by source audio duration",
        "",
        "| system | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(heads),
    ]
    lines += ["| " + " | ".join([table_cell(r.name)] + [_num(b.score, ".2f") for b in r.buckets]) + " |" for r in rows]
    return lines


def benchmark_markdown(bench: Benchmark) -> str:
    """The benchmark as markdown: the main table, the bucket tables, signatures, systems and machine."""
    m = bench.machine
    lines = [
        f"# Benchmark on {bench.split} ({bench.n} utterances)",
        "",
        f"- data: `{bench.data}`, split {bench.split}, first {bench.n} utterances of the manifest",
        f"- machine: {m['cpu_count']} CPUs ({m['cpu']}), torch {m['torch']}, commit {m['commit'] or MISSING}",
        f"- created (UTC): {bench.created}",
        "- RTF = decoding seconds / audio seconds (lower is faster); speed of peers and of compared rows "
        "was measured by their own runs",
    ]
    if any(r.analysis for r in bench.systems):
        lines.append(
            "- CKA top, P@1 cos, P@1 CSLS: from `speechmt research analyze` (--analysis): linear CKA of the "
            "top speech and text layers, and speech->text sentence retrieval P@1 between them (cosine, CSLS) "
            "after the Procrustes map (tested on the second half of the analysed utterances; as they are "
            "where the analysis has no map); word P@1: speech->text retrieval of the transcript's words "
            "(CSLS) between the model's own states, no map"
        )
    lines.append("")
    lines += _main_table(bench) + _gap_line(bench) + _bucket_table(bench, "BLEU") + _bucket_table(bench, "WER")
    lines += ["", "## Signatures", ""]
    lines += [f"- {name}: `{sig}`" for name, sigs in bench.signatures().items() for sig in sigs]
    lines += ["", "## Systems", ""]
    for r in bench.systems:
        origin = f", from {r.result_file}" if r.result_file else ""
        notes = f": {r.notes}" if r.notes else ""
        a = r.analysis
        analysed = (
            f"; analysis `{a['file']}` ({a['split']}, {a['n']} utterances, {a['speech']} / {a['text']}"
            f"{'' if a['map'] == 'procrustes' else ', no Procrustes map'})"
            if a
            else ""
        )
        lines.append(f"- {r.name} ({r.kind} `{r.source}`{origin}){notes}{analysed}")
    return "\n".join(lines) + "\n"


def write_benchmark(bench: Benchmark, out_dir: str | os.PathLike, hyps: dict[str, list[str]]) -> list[Path]:
    """Writes benchmark.json, benchmark.md, the plots and hyp.<slug>.txt per decoded system; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "benchmark.json", out / "benchmark.md"]
    write_text_atomic(written[0], json.dumps(bench.to_dict(), indent=2, ensure_ascii=False) + "\n")
    write_text_atomic(written[1], benchmark_markdown(bench))
    for name, lines in hyps.items():
        stem, k = slug(name), 2
        while out / f"hyp.{stem}.txt" in written:
            stem, k = f"{slug(name)}-{k}", k + 1
        written.append(out / f"hyp.{stem}.txt")
        write_text_atomic(written[-1], "".join(f"{h}\n" for h in lines))
    try:
        return written + plot_benchmark(bench, out)
    except PlotError as e:
        raise BenchmarkError(str(e)) from None
