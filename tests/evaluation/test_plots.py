"""Benchmark plots: below `benchmark_report` in the layering, one PNG pair per main metric, and a one-line error
(BenchmarkError from write_benchmark) when matplotlib is missing."""

import ast
import sys
from pathlib import Path

import pytest

from speechmt.evaluation import benchmark_report, plots
from speechmt.evaluation.benchmark import Benchmark, BenchmarkError, Bucket, SystemResult
from speechmt.evaluation.benchmark_report import write_benchmark
from speechmt.evaluation.metrics import Score
from speechmt.evaluation.plots import PlotError, plot_benchmark

PNG = b"\x89PNG\r\n\x1a\n"


def _imported_modules(module) -> set[str]:
    """Every module named by an import statement of the module's source, TYPE_CHECKING blocks and
    function bodies included."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def test_layering_is_one_way():
    assert not [m for m in _imported_modules(plots) if m.startswith("speechmt")]
    assert "speechmt.evaluation.plots" in _imported_modules(benchmark_report)


def _row(
    name: str, task: str, metric: str, score: float, buckets: list[float | None], decode_seconds: float | None = 2.0
) -> SystemResult:
    return SystemResult(
        name=name,
        kind="peer",
        source=f"{name}.json",
        task=task,
        params=None,
        n=4,
        metrics={metric: Score(metric, score, "sig")},
        buckets=[Bucket(f"b{i}", 1, s) for i, s in enumerate(buckets)],
        timed_utterances=4,
        decode_seconds=decode_seconds,
        audio_seconds=8.0,
    )


def _bench(systems: list[SystemResult]) -> Benchmark:
    return Benchmark(
        data="d",
        split="dev",
        n=4,
        ids_sha256="0" * 64,
        edges=(2.0,),
        bucket_labels=["<2 s", ">=2 s"],
        bucket_counts=[3, 1],
        systems=systems,
        machine={"cpu_count": 2, "cpu": "x86_64", "torch": "2", "commit": None},
    )


def test_one_png_pair_per_main_metric_present(tmp_path):
    bench = _bench(
        [
            _row("st a", "st", "BLEU", 20.0, [18.0, None]),
            _row("st b", "st", "BLEU", 25.0, [30.0, 10.0], decode_seconds=None),
            _row("asr", "asr", "WER", 12.5, [10.0, 20.0]),
        ]
    )
    paths = plot_benchmark(bench, tmp_path)
    assert [p.name for p in paths] == ["bleu_by_length.png", "bleu_vs_rtf.png", "wer_by_length.png", "wer_vs_rtf.png"]
    assert all(p.read_bytes()[:8] == PNG for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temporary left
    only_bleu = tmp_path / "bleu"
    only_bleu.mkdir()
    assert [p.name for p in plot_benchmark(_bench(bench.systems[:1]), only_bleu)] == [
        "bleu_by_length.png",
        "bleu_vs_rtf.png",
    ]


def test_missing_matplotlib_is_a_one_line_benchmark_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)  # import raises ImportError
    bench = _bench([_row("st a", "st", "BLEU", 20.0, [18.0, None])])
    with pytest.raises(PlotError, match=r"pip install 'speechmt\[plots\]'"):
        plot_benchmark(bench, tmp_path)
    with pytest.raises(BenchmarkError, match=r"^the benchmark plots need matplotlib: pip install 'speechmt\[plots\]'$"):
        write_benchmark(bench, tmp_path / "out", {"st a": ["h1", "h2", "h3", "h4"]})
    assert (tmp_path / "out" / "benchmark.md").is_file()  # the tables are written before the plots
