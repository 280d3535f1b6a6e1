"""The Python API's research tools, what `speechmt research ...` does: `analyze()` measures how far apart speech
and text are inside a model, layer by layer; `benchmark()` scores and times several systems on one split;
`report()` puts the benchmark results of several directions in one table;
`pretrain_audio()` runs wav2vec 2.0 self-supervised pretraining on unlabelled audio.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from speechmt.evaluation.benchmark import Benchmark
    from speechmt.training.pretrain_audio import PretrainAudioConfig
    from speechmt.training.state import TrainState


def analyze(
    model: str | os.PathLike,
    data: str | os.PathLike,
    split: str,
    out: str | os.PathLike,
    *,
    text_model: str | None = None,
    limit: int | None = None,
    device: str = "cpu",
) -> tuple[dict[str, Any], list[Path]]:
    """Runs the split's utterances through the model's speech path and their transcripts through its text path (or
    `text_model`, a Hugging Face text encoder), measures every speech layer against every text layer (CKA, RSA,
    PWCCA), each layer's anisotropy and word-level similarity, and speech<->text retrieval; writes analysis.json,
    summary.md and plots into `out`. Returns the analysis (analysis.json's content) and the files written.
    `limit`: the first N (>= 4) utterances."""
    from speechmt.evaluation.analyze import AnalyzeConfig, run_analysis

    cfg = AnalyzeConfig(
        model=os.fspath(model),
        data=os.fspath(data),
        split=split,
        out=os.fspath(out),
        text_model=text_model,
        limit=limit,
        device=device,
    )
    return run_analysis(cfg)


@dataclass
class BenchmarkRun:
    """`benchmark`'s outcome: the speechmt.evaluation.benchmark.Benchmark (systems, scores, timing), each decoded
    system's hypotheses, its markdown report and the files written."""

    benchmark: Benchmark
    hypotheses: dict[str, list[str]]
    markdown: str
    written: list[Path]


def benchmark(
    data: str | os.PathLike,
    split: str,
    out: str | os.PathLike,
    *,
    models: Sequence[str] = (),
    cascades: Sequence[tuple[str, str]] = (),
    peers: Sequence[str] = (),
    compare: Sequence[str] = (),
    names: Sequence[str] = (),
    tasks: Sequence[str] = (),
    analyses: Sequence[str] = (),
    beam: int = 5,
    mbr: Literal["chrf", "bleu"] | None = None,
    mbr_samples: int = 0,
    max_tokens: int = 20000,
    limit: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
    dtype: Literal["float32", "bfloat16"] = "float32",
    buckets: Sequence[float] = (2.0, 4.0, 6.0, 8.0),
) -> BenchmarkRun:
    """Scores speechmt checkpoints (`models`, named `names`, doing `tasks`), (ASR, MT) `cascades`, peer hypotheses
    files (`peers`) and earlier benchmark.json results (`compare`) on the same utterances with the same metrics,
    times the checkpoints (RTF, throughput) and writes benchmark.json, benchmark.md, plots and hyp.<system>.txt
    into `out`. `analyses`: "NAME=DIR" items naming `analyze` outputs whose top-layer figures become columns;
    `buckets`: duration bucket edges in seconds (increasing)."""
    from speechmt.evaluation.benchmark import BenchmarkConfig, run_benchmark
    from speechmt.evaluation.benchmark_report import benchmark_markdown, write_benchmark

    cfg = BenchmarkConfig(
        data=os.fspath(data),
        split=split,
        models=tuple(models),
        cascades=tuple((a, m) for a, m in cascades),
        peers=tuple(peers),
        compare=tuple(compare),
        names=tuple(names),
        tasks=tuple(tasks),
        beam=beam,
        mbr=mbr,
        mbr_samples=mbr_samples,
        max_tokens=max_tokens,
        limit=limit,
        threads=threads,
        device=device,
        dtype=dtype,
        edges=tuple(buckets),
        analyses=tuple(analyses),
    )
    bench, hyps = run_benchmark(cfg)
    written = write_benchmark(bench, out, hyps)
    return BenchmarkRun(bench, hyps, benchmark_markdown(bench), written)


def report(
    benchmarks: Sequence[str | os.PathLike], out: str | os.PathLike, title: str = "", metrics: Sequence[str] = ()
) -> str:
    """One table for a benchmark's directions (`speechmt research report`): the `benchmark()` results at
    `benchmarks` (benchmark.json files or their folders), one per direction, side by side: a row per system (by
    name), each direction's `metrics` (default BLEU and chrF; WER for ASR results) as a group of columns, the
    mean over directions for a system scored on all of them, then each direction's split, size and metric
    signatures. Writes the markdown to `out` and returns it. BenchmarkError (one line) for a result that cannot
    be read or two results of one direction."""
    from speechmt.evaluation.direction_table import build_table, table_markdown, write_report

    table = build_table([os.fspath(b) for b in benchmarks], title, tuple(metrics) or None)
    write_report(table, out)
    return table_markdown(table)


def pretrain_audio(
    manifests: Sequence[str | os.PathLike] = (),
    out: str | os.PathLike | None = None,
    *,
    config: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    resume: bool = True,
) -> tuple[PretrainAudioConfig, TrainState]:
    """wav2vec 2.0 self-supervised pretraining on the manifests' audio into the Hugging Face model folder `out`,
    which loads as the wav2vec2 encoder (model.encoder.kind=wav2vec2 model.encoder.name_or_path=OUT).

    Args:
        config: a YAML of pretrain-audio options (speechmt/training/pretrain_audio.py's PretrainAudioConfig).
        overrides: `key=value` items over the config, e.g. "max_updates=2000", "hf_config.num_hidden_layers=6".
        resume: continue exactly from out's last checkpoint when it exists.

    Returns the options the run used and where it ended.
    """
    from speechmt.training.pretrain_audio import load_pretrain_config
    from speechmt.training.pretrain_audio import pretrain_audio as _pretrain

    cfg = load_pretrain_config(
        config,
        list(overrides),
        manifests=[os.fspath(m) for m in manifests] or None,
        out=None if out is None else os.fspath(out),
    )
    return cfg, _pretrain(cfg, resume=resume)
