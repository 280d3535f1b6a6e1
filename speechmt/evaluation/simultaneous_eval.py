"""`evaluate_simultaneous(model, data_dir, split, config)`: translate each utterance of a prepared split as a
stream (speechmt.decoding.simultaneous) and report quality (BLEU, chrF, chrF++; WER, CER for ASR) with latency
(AL, LAAL, computation-unaware and -aware, speechmt.evaluation.latency) in `extra["latency"]`;
`evaluate_simultaneous_settings`: several settings in one pass, the encoder's work shared; and
`quality_latency`: the quality-latency table of one model for several k."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from speechmt.data.manifest import read_split
from speechmt.data.manifest import record_audio
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.simultaneous import EncoderMemo, SimultaneousConfig, translate_stream
from speechmt.decoding.translate import LoadedModel
from speechmt.evaluation.evaluate import references, score
from speechmt.evaluation.latency import Delays, corpus_latency, word_delays
from speechmt.evaluation.report import EvalReport, git_commit, write_report
from speechmt.progress import progress


def evaluate_simultaneous(lm: LoadedModel, data_dir: str | os.PathLike, split: str, cfg: SimultaneousConfig,
                          out_dir: str | os.PathLike | None = None, name: str | None = None,
                          limit: int | None = None, options: DecodeOptions | None = None) -> EvalReport:
    """Streams the split's utterances (the first `limit`) through the policy of `cfg` (greedy search with
    `options`; None: the model's defaults); scores and latency. An unreadable utterance raises AudioError
    naming it."""
    return evaluate_simultaneous_settings(lm, data_dir, split, [cfg], [out_dir], name, limit, options)[0]


def evaluate_simultaneous_settings(lm: LoadedModel, data_dir: str | os.PathLike, split: str,
                                   cfgs: list[SimultaneousConfig], out_dirs: list[str | os.PathLike | None],
                                   name: str | None = None, limit: int | None = None,
                                   options: DecodeOptions | None = None) -> list[EvalReport]:
    """`evaluate_simultaneous` for several settings at once, one report each (written to its out_dirs entry):
    each utterance is read once and streamed through every setting with one EncoderMemo, so a window's input is
    encoded once for all of them; each setting's decode seconds, RTF and computation-aware latency are what it
    would have cost alone (the shared encoder seconds charged to every setting that used them)."""
    records = read_split(data_dir, split)[:limit]
    refs = references(lm.task, records)
    hyps: list[list[str]] = [[] for _ in cfgs]
    items: list[list[Delays]] = [[] for _ in cfgs]
    compute_ms = [0.0] * len(cfgs)
    memo = EncoderMemo()
    policies = ", ".join(f"{c.policy} k={c.k}" for c in cfgs)
    for record, ref in progress(list(zip(records, refs)), f"stream {split} ({policies})", "utt"):
        wave = record_audio(record, data_dir)
        for i, cfg in enumerate(cfgs):
            result = translate_stream(lm, wave, cfg, options, memo=memo)
            hyps[i].append(result.text)
            delays, elapsed = word_delays(result.events())
            items[i].append(Delays(tuple(delays), tuple(elapsed), result.source_ms, len(ref.split())))
            compute_ms[i] += result.compute_ms
        memo.clear()
    audio = sum(d.source_ms for d in items[0]) / 1000 if records else 0.0
    reports = []
    for cfg, out_dir, hyp, item, ms in zip(cfgs, out_dirs, hyps, items, compute_ms):
        seconds = ms / 1000
        extra = {"task": lm.task, "simultaneous": asdict(cfg), "latency": corpus_latency(item),
                 "decode": asdict(options or lm.decode_options(1)),
                 "decode_seconds": round(seconds, 3), "audio_seconds": round(audio, 3),
                 "rtf": round(seconds / audio, 5) if audio else None, "commit": git_commit(),
                 "device": str(lm.device), "checkpoint": lm.path}
        report = EvalReport(model=name or lm.path, data=str(data_dir), split=split, n=len(records),
                            metrics=score(lm.task, hyp, refs), extra=extra)
        if out_dir is not None:
            write_report(report, out_dir, hyp, refs, [r.id for r in records], [r.src_text for r in records])
        reports.append(report)
    return reports


def latency_line(latency: dict) -> str:
    """One line of the corpus latency: AL and LAAL in seconds, computation-unaware and -aware."""
    def sec(key: str) -> str:
        return "-" if latency.get(key) is None else f"{latency[key] / 1000:.3f} s"

    skipped = f"; {latency['skipped']} utterances without output left out" if latency.get("skipped") else ""
    return (f"AL = {sec('AL')}, LAAL = {sec('LAAL')} (computation-unaware); AL = {sec('AL_CA')}, "
            f"LAAL = {sec('LAAL_CA')} (computation-aware){skipped}")


LATENCIES = ("AL", "LAAL", "AL_CA", "LAAL_CA")


def latency_row(cfg: SimultaneousConfig, report: EvalReport) -> dict:
    """One row of a quality-latency table: the policy setting, its quality (BLEU and chrF++, or WER and CER),
    the four latencies in seconds (None: every utterance skipped) and the RTF."""
    lat = report.extra["latency"]
    return {"policy": cfg.policy, "k": cfg.k, "step_ms": cfg.step_ms, "n": report.n,
            **{name: s.score for name, s in report.metrics.items()},
            **{k: None if lat.get(k) is None else lat[k] / 1000 for k in LATENCIES}, "rtf": report.extra["rtf"]}


def _metrics(rows: list[dict]) -> tuple[str, str]:
    return ("WER", "CER") if rows and "WER" in rows[0] else ("BLEU", "chrF++")


def quality_latency_table(rows: list[dict], offline: EvalReport | None = None) -> str:
    """Markdown: one row per policy setting (`latency_row`) with BLEU (or WER), chrF++ and the four latencies in
    seconds, and with an offline decoding of the same utterances its scores as the last row and each row's
    quality as a percentage of it."""
    main, second = _metrics(rows)
    share = offline is not None and offline.metrics[main].score > 0
    lines = [f"| policy | k | step ms | {main} |{f' % of offline |' if share else ''} {second} | AL s | LAAL s | "
             "AL s (CA) | LAAL s (CA) | RTF |",
             "|---|---:|---:|---:|" + ("---:|" if share else "") + "---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        cells = ["-" if row[k] is None else f"{row[k]:.3f}" for k in LATENCIES]
        pct = f" {100 * row[main] / offline.metrics[main].score:.0f} |" if share else ""
        lines.append(f"| {row['policy']} | {row['k']} | {row['step_ms']:g} | {row[main]:.2f} |{pct} "
                     f"{row[second]:.2f} | " + " | ".join(cells) + f" | {row['rtf']} |")
    if offline is not None:
        lines.append(f"| offline (beam {offline.extra['decode']['beam_size']}) | - | - | "
                     f"{offline.metrics[main].score:.2f} |{' 100 |' if share else ''} "
                     f"{offline.metrics[second].score:.2f} | - | - | - | - | {offline.extra['rtf']} |")
    return "\n".join(lines) + "\n"


def plot_quality_latency(rows: list[dict], offline: EvalReport | None, title: str, path: Path) -> Path:
    """BLEU (or WER) against LAAL, one line per policy, computation-unaware and -aware, with the offline score
    and 80 % of it as levels (speechmt.evaluation.plots)."""
    from speechmt.evaluation.plots import plot_quality_vs_latency

    main, _ = _metrics(rows)
    curves: dict[str, list[tuple[float, float, str]]] = {}
    for key, kind in (("LAAL", ""), ("LAAL_CA", ", computation-aware")):
        for row in rows:
            if row[key] is not None:
                curves.setdefault(f"{row['policy']}{kind}", []).append((row[key], row[main], f"k={row['k']}"))
    levels = {}
    if offline is not None:
        score = offline.metrics[main].score
        levels = {f"offline (beam {offline.extra['decode']['beam_size']})": score, "80 % of offline": 0.8 * score}
    return plot_quality_vs_latency(curves, levels, main, "LAAL", title, path)


def write_quality_latency(out_dir: str | os.PathLike, rows: list[dict], title: str,
                          offline: EvalReport | None = None) -> list[Path]:
    """Writes quality_latency.md (the table), quality_latency.json (the rows and the offline scores) and, where
    matplotlib is installed, quality_latency.png (the plot) into out_dir; returns the paths written."""
    from speechmt.evaluation.plots import PlotError
    from speechmt.evaluation.report import write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "quality_latency.md", out / "quality_latency.json"]
    write_text_atomic(written[0], f"# {title}\n\n{quality_latency_table(rows, offline)}")
    scores = None if offline is None else {name: s.score for name, s in offline.metrics.items()}
    write_text_atomic(written[1], json.dumps({"title": title, "rows": rows, "offline": scores,
                                              "offline_rtf": offline and offline.extra["rtf"]}, indent=2) + "\n")
    try:
        written.append(plot_quality_latency(rows, offline, title, out / "quality_latency.png"))
    except PlotError:
        pass  # the table and JSON hold the same numbers
    return written


def read_quality_latency(folder: str | os.PathLike) -> list[dict]:
    """The rows an earlier `write_quality_latency` left in folder/quality_latency.json."""
    return json.loads((Path(folder) / "quality_latency.json").read_text())["rows"]
