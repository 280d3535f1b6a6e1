"""Benchmark plots (matplotlib, drawn off-screen with the Agg canvas): quality by source length, and
quality against speed. One pair of PNGs per main metric present: BLEU for translation, WER for ASR. Also
quality against latency (simultaneous translation, plot_quality_vs_latency) and the representation
analysis' layer-by-layer heatmaps and line plots (plot_heatmap, plot_layer_lines).

Below `benchmark` in the layering: it imports nothing of speechmt, and reads a benchmark through the
protocols here (which `benchmark.Benchmark` and `benchmark.SystemResult` satisfy)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class PlotError(ValueError):
    """The plots cannot be drawn (matplotlib is missing)."""


class _Scored(Protocol):
    @property
    def score(self) -> float | None: ...


class PlotRow(Protocol):
    """What the plots read of one system (benchmark.SystemResult)."""

    @property
    def name(self) -> str: ...
    @property
    def buckets(self) -> Sequence[_Scored]: ...
    @property
    def metrics(self) -> Mapping[str, _Scored]: ...
    @property
    def main_metric(self) -> str: ...
    @property
    def rtf(self) -> float | None: ...


class PlotBench(Protocol):
    """What the plots read of a benchmark (benchmark.Benchmark)."""

    @property
    def split(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def bucket_labels(self) -> Sequence[str]: ...
    @property
    def bucket_counts(self) -> Sequence[int]: ...
    @property
    def systems(self) -> Sequence[PlotRow]: ...


def _figure(width: float = 7.0, height: float = 4.5) -> "Figure":
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("the benchmark plots need matplotlib: pip install 'speechmt[plots]'") from None
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: "Figure", path: Path) -> Path:
    """Saves a PNG under a temporary name, then renames it onto `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def _direction(metric: str) -> str:
    return "lower is better" if metric == "WER" else "higher is better"


def plot_by_length(bench: PlotBench, rows: Sequence[PlotRow], metric: str, path: Path) -> Path:
    """Grouped bars: one group per duration bucket (labelled with its n), one bar per system."""
    fig = _figure()
    ax = fig.add_subplot()
    width = 0.8 / len(rows)
    for k, row in enumerate(rows):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(row.buckets))]
        ys = [math.nan if b.score is None else b.score for b in row.buckets]
        ax.bar(xs, ys, width=width, label=row.name)
    ax.set_xticks(range(len(bench.bucket_labels)))
    ax.set_xticklabels([f"{label}\nn={n}" for label, n in zip(bench.bucket_labels, bench.bucket_counts)])
    ax.set_xlabel("source audio duration")
    ax.set_ylabel(f"{metric} ({_direction(metric)})")
    ax.set_title(f"{metric} by source length, {bench.split} ({bench.n} utterances)")
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_quality_vs_speed(bench: PlotBench, rows: Sequence[PlotRow], metric: str, path: Path) -> Path:
    """Scatter of the metric against the real-time factor (log scale), one labelled point per system."""
    fig = _figure()
    ax = fig.add_subplot()
    timed = [r for r in rows if r.rtf is not None]
    for row in timed:
        y = row.metrics[metric].score
        ax.scatter([row.rtf], [y])
        ax.annotate(row.name, (row.rtf, y), textcoords="offset points", xytext=(5, 5), fontsize="small")
    if timed:
        ax.set_xscale("log")
        ax.margins(0.2)
    else:
        ax.text(0.5, 0.5, "no system was timed", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("real-time factor: decoding s / audio s (log scale, lower is faster)")
    ax.set_ylabel(f"{metric} ({_direction(metric)})")
    ax.set_title(f"{metric} against speed, {bench.split} ({bench.n} utterances)")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_quality_vs_latency(
    curves: Mapping[str, Sequence[tuple[float, float, str]]],
    levels: Mapping[str, float],
    metric: str,
    latency: str,
    title: str,
    path: Path,
) -> Path:
    """Lines of the metric against a latency (s), one per curve {name: [(latency, score, point label)]}, each
    point labelled; a dashed horizontal line per level {name: score} (an offline system, a goal)."""
    fig = _figure()
    ax = fig.add_subplot()
    for name, points in curves.items():
        ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o", label=name)
        for x, y, label in points:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    for k, (name, y) in enumerate(levels.items()):
        ax.axhline(y, linestyle="--", linewidth=1, color=f"C{len(curves) + k}", label=name)
    ax.set_xlabel(f"{latency} (s, lower is sooner)")
    ax.set_ylabel(f"{metric} ({_direction(metric)})")
    ax.set_title(title, fontsize="small")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_heatmap(
    matrix: Sequence[Sequence[float | None]], rows: Sequence[str], cols: Sequence[str], title: str, path: Path
) -> Path:
    """A (rows x cols) matrix of values (None: blank) as a colour grid, each cell labelled when the grid is
    small (representation analysis: one speech layer per row, one text layer per column)."""
    values = [[math.nan if v is None else v for v in row] for row in matrix]
    fig = _figure(max(6.0, 3.0 + 0.6 * len(cols)), max(3.5, 1.5 + 0.35 * len(rows)))
    ax = fig.add_subplot()
    image = ax.imshow(values, aspect="auto", cmap="viridis")
    fig.colorbar(image, ax=ax)
    ax.set_xticks(range(len(cols)), labels=cols, rotation=45, ha="right", fontsize="small")
    ax.set_yticks(range(len(rows)), labels=rows, fontsize="small")
    if len(rows) * len(cols) <= 144:
        finite = [v for row in values for v in row if not math.isnan(v)]
        middle = (min(finite) + max(finite)) / 2 if finite else 0.0
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(
                        j, i, f"{v:.2f}", ha="center", va="center", fontsize="x-small", color="w" if v < middle else "k"
                    )
    ax.set_title(title)
    return _save(fig, path)


def plot_layer_lines(
    panels: Sequence[tuple[str, Sequence[str], Mapping[str, Sequence[float | None]]]], title: str, path: Path
) -> Path:
    """Side-by-side panels (title, layer names, {series: one value per layer (None: gap)}), a line per series."""
    fig = _figure(max(7.0, 3.5 * len(panels)), 4.5)
    for k, (name, layers, series) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for label, ys in series.items():
            ax.plot(range(len(layers)), [math.nan if y is None else y for y in ys], marker="o", label=label)
        ax.set_xticks(range(len(layers)), labels=layers, rotation=45, ha="right", fontsize="x-small")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(fontsize="small")
    fig.suptitle(title)
    return _save(fig, path)


def plot_benchmark(bench: PlotBench, out_dir: Path) -> list[Path]:
    """Writes <metric>_by_length.png and <metric>_vs_rtf.png for each main metric present; returns the paths."""
    written = []
    for metric in ("BLEU", "WER"):
        rows = [r for r in bench.systems if r.main_metric == metric]
        if rows:
            written.append(plot_by_length(bench, rows, metric, out_dir / f"{metric.lower()}_by_length.png"))
            written.append(plot_quality_vs_speed(bench, rows, metric, out_dir / f"{metric.lower()}_vs_rtf.png"))
    return written
