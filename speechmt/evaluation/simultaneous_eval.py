"""`evaluate_simultaneous(model, data_dir, split, config)`: translate each utterance of a prepared split as a
stream (speechmt.decoding.simultaneous) and report quality (BLEU, chrF, chrF++; WER, CER for ASR) with latency
(AL, LAAL, computation-unaware and -aware, speechmt.evaluation.latency) in `extra["latency"]`; and
`quality_latency`: the quality-latency table of one model for several k."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

from speechmt.data.manifest import read_split
from speechmt.data.manifest import record_audio
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.simultaneous import SimultaneousConfig, translate_stream
from speechmt.decoding.translate import LoadedModel
from speechmt.evaluation.evaluate import references, score
from speechmt.evaluation.latency import Delays, corpus_latency, word_delays
from speechmt.evaluation.report import EvalReport, git_commit, write_report


def evaluate_simultaneous(lm: LoadedModel, data_dir: str | os.PathLike, split: str, cfg: SimultaneousConfig,
                          out_dir: str | os.PathLike | None = None, name: str | None = None,
                          limit: int | None = None, options: DecodeOptions | None = None) -> EvalReport:
    """Streams the split's utterances (the first `limit`) through the policy of `cfg` (greedy search with
    `options`; None: the model's defaults); scores and latency. An unreadable utterance raises AudioError
    naming it."""
    records = read_split(data_dir, split)[:limit]
    refs = references(lm.task, records)
    hyps, items = [], []
    start = time.perf_counter()
    for record, ref in zip(records, refs):
        result = translate_stream(lm, record_audio(record, data_dir), cfg, options)
        hyps.append(result.text)
        delays, elapsed = word_delays(result.events())
        items.append(Delays(tuple(delays), tuple(elapsed), result.source_ms, len(ref.split())))
    seconds = time.perf_counter() - start
    audio = sum(d.source_ms for d in items) / 1000
    extra = {"task": lm.task, "simultaneous": asdict(cfg), "latency": corpus_latency(items),
             "decode": asdict(options or lm.decode_options(1)),
             "decode_seconds": round(seconds, 3), "audio_seconds": round(audio, 3),
             "rtf": round(seconds / audio, 5) if audio else None, "commit": git_commit(), "device": str(lm.device),
             "checkpoint": lm.path}
    report = EvalReport(model=name or lm.path, data=str(data_dir), split=split, n=len(records),
                        metrics=score(lm.task, hyps, refs), extra=extra)
    if out_dir is not None:
        write_report(report, out_dir, hyps, refs, [r.id for r in records], [r.src_text for r in records])
    return report


def latency_line(latency: dict) -> str:
    """One line of the corpus latency: AL and LAAL in seconds, computation-unaware and -aware."""
    def sec(key: str) -> str:
        return "-" if latency.get(key) is None else f"{latency[key] / 1000:.3f} s"

    skipped = f"; {latency['skipped']} utterances without output left out" if latency.get("skipped") else ""
    return (f"AL = {sec('AL')}, LAAL = {sec('LAAL')} (computation-unaware); AL = {sec('AL_CA')}, "
            f"LAAL = {sec('LAAL_CA')} (computation-aware){skipped}")


def quality_latency_table(rows: list[tuple[SimultaneousConfig, EvalReport]], offline: EvalReport | None = None) -> str:
    """Markdown: one row per policy setting with BLEU (or WER), chrF++ and the four latencies in seconds, and
    the offline decoding's scores as the last row when given."""
    main = "WER" if rows and "WER" in rows[0][1].metrics else "BLEU"
    second = "CER" if main == "WER" else "chrF++"
    lines = [f"| policy | k | step ms | {main} | {second} | AL s | LAAL s | AL s (CA) | LAAL s (CA) | RTF |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cfg, report in rows:
        lat = report.extra["latency"]
        cells = [f"{lat[k] / 1000:.3f}" if lat.get(k) is not None else "-" for k in ("AL", "LAAL", "AL_CA", "LAAL_CA")]
        lines.append(f"| {cfg.policy} | {cfg.k} | {cfg.step_ms:g} | {report.metrics[main].score:.2f} | "
                     f"{report.metrics[second].score:.2f} | " + " | ".join(cells) + f" | {report.extra['rtf']} |")
    if offline is not None:
        lines.append(f"| offline (beam {offline.extra['decode']['beam_size']}) | - | - | "
                     f"{offline.metrics[main].score:.2f} | {offline.metrics[second].score:.2f} | - | - | - | - | "
                     f"{offline.extra['rtf']} |")
    return "\n".join(lines) + "\n"


def write_quality_latency(out_dir: str | os.PathLike, table: str, title: str) -> Path:
    """Writes the table as quality_latency.md into out_dir."""
    from speechmt.evaluation.report import write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "quality_latency.md"
    write_text_atomic(path, f"# {title}\n\n{table}")
    return path
