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

from speechmt.data.manifest import read_split, record_audio, split_manifest
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.simultaneous import (
    EncoderMemo,
    SimultaneousConfig,
    SimultaneousError,
    SimultaneousResult,
    translate_stream,
)
from speechmt.decoding.translate import LoadedModel
from speechmt.evaluation.evaluate import check_one_line, one_line, references, score
from speechmt.evaluation.latency import Delays, corpus_latency, word_delays
from speechmt.evaluation.report import EvalReport, git_commit, write_report
from speechmt.progress import progress


def evaluate_simultaneous(
    lm: LoadedModel,
    data_dir: str | os.PathLike,
    split: str,
    cfg: SimultaneousConfig,
    out_dir: str | os.PathLike | None = None,
    name: str | None = None,
    limit: int | None = None,
    options: DecodeOptions | None = None,
) -> EvalReport:
    """Streams the split's utterances (the first `limit`) through the policy of `cfg` (greedy search with
    `options`; None: the model's defaults); scores and latency. An unreadable utterance raises AudioError
    naming it."""
    return evaluate_simultaneous_settings(lm, data_dir, split, [cfg], [out_dir], name, limit, options)[0]


def evaluate_simultaneous_settings(
    lm: LoadedModel,
    data_dir: str | os.PathLike,
    split: str,
    cfgs: list[SimultaneousConfig],
    out_dirs: list[str | os.PathLike | None],
    name: str | None = None,
    limit: int | None = None,
    options: DecodeOptions | None = None,
    journal: str | os.PathLike | None = None,
) -> list[EvalReport]:
    """`evaluate_simultaneous` for several settings at once, one report each (written to its out_dirs entry):
    each utterance is read once and streamed through every setting with one EncoderMemo, so a window's input is
    encoded once for all of them; each setting's decode seconds, RTF and computation-aware latency are what it
    would have cost alone (the shared encoder seconds charged to every setting that used them). `journal`: a
    JSON-lines file that keeps each finished utterance's streams (text, word delays, compute), so that a run
    killed midway resumes after its last finished utterance (`StreamJournal`)."""
    records = read_split(data_dir, split)[:limit]
    check_one_line(records, split_manifest(data_dir, split))
    refs = references(lm.task, records)
    options = options or lm.decode_options(1)
    book = StreamJournal(
        journal,
        {
            "model": lm.path,
            "data": str(data_dir),
            "split": split,
            "settings": [asdict(c) for c in cfgs],
            "decode": asdict(options),
        },
    )
    done = book.read()
    memo = EncoderMemo()
    policies = ", ".join(f"{c.policy} k={c.k}" for c in cfgs)
    streams: list[list[dict]] = []
    for record in progress(records, f"stream {split} ({policies})", "utt"):
        if record.id not in done:
            wave = record_audio(record, data_dir)
            done[record.id] = [_stream(translate_stream(lm, wave, cfg, options, memo=memo)) for cfg in cfgs]
            memo.clear()
            book.append(record.id, done[record.id])
        streams.append(done[record.id])
    audio = sum(s[0]["source_ms"] for s in streams) / 1000 if records else 0.0
    reports = []
    for i, (cfg, out_dir) in enumerate(zip(cfgs, out_dirs)):
        hyp = [one_line(s[i]["text"]) for s in streams]
        items = [
            Delays(tuple(s[i]["delays"]), tuple(s[i]["elapsed"]), s[i]["source_ms"], len(ref.split()))
            for s, ref in zip(streams, refs)
        ]
        seconds = sum(s[i]["compute_ms"] for s in streams) / 1000
        extra = {
            "task": lm.task,
            "simultaneous": asdict(cfg),
            "latency": corpus_latency(items),
            "decode": asdict(options),
            "decode_seconds": round(seconds, 3),
            "audio_seconds": round(audio, 3),
            "rtf": round(seconds / audio, 5) if audio else None,
            "commit": git_commit(),
            "device": str(lm.device),
            "checkpoint": lm.path,
        }
        report = EvalReport(
            model=name or lm.path,
            data=str(data_dir),
            split=split,
            n=len(records),
            metrics=score(lm.task, hyp, refs),
            extra=extra,
        )
        if out_dir is not None:
            write_report(report, out_dir, hyp, refs, [r.id for r in records], [r.src_text for r in records])
        reports.append(report)
    return reports


def _stream(result: SimultaneousResult) -> dict:
    """What a report needs of one utterance's stream: its text, word delays and compute, as JSON."""
    delays, elapsed = word_delays(result.events())
    return {
        "text": result.text,
        "delays": delays,
        "elapsed": elapsed,
        "source_ms": result.source_ms,
        "compute_ms": result.compute_ms,
    }


class StreamJournal:
    """A JSON-lines record of a simultaneous evaluation: a first line naming the run (model, data, split,
    settings, search), then one line per finished utterance (its id and one stream per setting), each flushed to
    disk as it is written. `read` gives the streams of a journal of the same run (a last line cut short by a
    kill is dropped) and raises SimultaneousError for one of another run; no path: nothing kept."""

    def __init__(self, path: str | os.PathLike | None, run: dict):
        self.path, self.run = (Path(path) if path is not None else None), json.loads(json.dumps(run))

    def read(self) -> dict[str, list[dict]]:
        if self.path is None:
            return {}
        if not self.path.is_file() or not self.path.stat().st_size:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"run": self.run}) + "\n", encoding="utf-8")
            return {}
        lines = self.path.read_text(encoding="utf-8").split("\n")
        if json.loads(lines[0]).get("run") != self.run:
            raise SimultaneousError(
                f"{self.path}: the journal of another run (model, data, split, settings or "
                "search differ); remove it or write to another --out"
            )
        done, kept = {}, [lines[0]]
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                break  # the line a kill cut short, and nothing after it
            done[entry["id"]] = entry["streams"]
            kept.append(line)
        self.path.write_text("\n".join(kept) + "\n", encoding="utf-8")
        return done

    def append(self, utt_id: str, streams: list[dict]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"id": utt_id, "streams": streams}) + "\n")
            f.flush()
            os.fsync(f.fileno())


def latency_line(latency: dict) -> str:
    """One line of the corpus latency: AL and LAAL in seconds, computation-unaware and -aware."""

    def sec(key: str) -> str:
        return "-" if latency.get(key) is None else f"{latency[key] / 1000:.3f} s"

    skipped = f"; {latency['skipped']} utterances without output left out" if latency.get("skipped") else ""
    return (
        f"AL = {sec('AL')}, LAAL = {sec('LAAL')} (computation-unaware); AL = {sec('AL_CA')}, "
        f"LAAL = {sec('LAAL_CA')} (computation-aware){skipped}"
    )


LATENCIES = ("AL", "LAAL", "AL_CA", "LAAL_CA")


def policy_label(cfg: SimultaneousConfig) -> str:
    """The policy's name, with its tail beam when that is not greedy: "wait-k", "wait-k, tail beam 5"."""
    return cfg.policy if cfg.tail_beam == 1 else f"{cfg.policy}, tail beam {cfg.tail_beam}"


def latency_row(cfg: SimultaneousConfig, report: EvalReport) -> dict:
    """One row of a quality-latency table: the policy setting, its quality (BLEU and chrF++, or WER and CER),
    the four latencies in seconds (None: every utterance skipped) and the RTF."""
    lat = report.extra["latency"]
    return {
        "policy": policy_label(cfg),
        "k": cfg.k,
        "step_ms": cfg.step_ms,
        "n": report.n,
        **{name: s.score for name, s in report.metrics.items()},
        **{k: None if lat.get(k) is None else lat[k] / 1000 for k in LATENCIES},
        "rtf": report.extra["rtf"],
    }


def _metrics(rows: list[dict]) -> tuple[str, str]:
    return ("WER", "CER") if rows and "WER" in rows[0] else ("BLEU", "chrF++")


def quality_latency_table(rows: list[dict], offline: EvalReport | None = None) -> str:
    """Markdown: one row per policy setting (`latency_row`) with BLEU (or WER), chrF++ and the four latencies in
    seconds, and with an offline decoding of the same utterances its scores as the last row and each row's
    quality as a percentage of it."""
    main, second = _metrics(rows)
    share = offline is not None and offline.metrics[main].score > 0
    lines = [
        f"| policy | k | step ms | {main} |{' % of offline |' if share else ''} {second} | AL s | LAAL s | "
        "AL s (CA) | LAAL s (CA) | RTF |",
        "|---|---:|---:|---:|" + ("---:|" if share else "") + "---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cells = ["-" if row[k] is None else f"{row[k]:.3f}" for k in LATENCIES]
        pct = f" {100 * row[main] / offline.metrics[main].score:.0f} |" if share else ""
        lines.append(
            f"| {row['policy']} | {row['k']} | {row['step_ms']:g} | {row[main]:.2f} |{pct} "
            f"{row[second]:.2f} | " + " | ".join(cells) + f" | {row['rtf']} |"
        )
    if offline is not None:
        lines.append(
            f"| offline (beam {offline.extra['decode']['beam_size']}) | - | - | "
            f"{offline.metrics[main].score:.2f} |{' 100 |' if share else ''} "
            f"{offline.metrics[second].score:.2f} | - | - | - | - | {offline.extra['rtf']} |"
        )
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


def write_quality_latency(
    out_dir: str | os.PathLike, rows: list[dict], title: str, offline: EvalReport | None = None
) -> list[Path]:
    """Writes quality_latency.md (the table), quality_latency.json (the rows and the offline scores) and, where
    matplotlib is installed, quality_latency.png (the plot) into out_dir; returns the paths written."""
    from speechmt.evaluation.plots import PlotError
    from speechmt.evaluation.report import write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "quality_latency.md", out / "quality_latency.json"]
    write_text_atomic(written[0], f"# {title}\n\n{quality_latency_table(rows, offline)}")
    scores = None if offline is None else {name: s.score for name, s in offline.metrics.items()}
    write_text_atomic(
        written[1],
        json.dumps(
            {"title": title, "rows": rows, "offline": scores, "offline_rtf": offline and offline.extra["rtf"]}, indent=2
        )
        + "\n",
    )
    try:
        written.append(plot_quality_latency(rows, offline, title, out / "quality_latency.png"))
    except PlotError:
        pass  # the table and JSON hold the same numbers
    return written


def read_quality_latency(folder: str | os.PathLike) -> list[dict]:
    """The rows an earlier `write_quality_latency` left in folder/quality_latency.json."""
    return json.loads((Path(folder) / "quality_latency.json").read_text())["rows"]
