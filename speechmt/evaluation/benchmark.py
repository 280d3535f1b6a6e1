"""`speechmt research benchmark`: several systems scored and timed on one prepared split, in one table and one plot.

A system is one of
- a speechmt checkpoint, decoded here (`decode_split`, the model loaded before the clock starts);
- a peer hypotheses file written by another toolkit's runner (JSON, below), scored here;
- a row of an earlier `benchmark.json` (`--compare`), taken as it is, so that runs can be compared.

Every system is scored against the references of the same utterances (the split's first `limit` manifest
records) with the same metric code (`evaluate.score`): BLEU and chrF for translation, WER and CER for ASR.
The split's main metric (BLEU, or WER for ASR) is also given per bucket of source audio duration.

`--analysis NAME=DIR` adds the summary numbers of a `speechmt research analyze` output (DIR/analysis.json) to the row
of system NAME: the top layers' linear CKA and speech->text sentence retrieval P@1 between them, cosine and
CSLS, after the analysis' Procrustes map where it has one (`read_analysis`).

Peer hypotheses file, a JSON object:
    system          display name                      params          parameter count, or null
    task            "st" or "asr"                     split           split name of the prepared data
    ids             manifest record ids               hypotheses      one text per id, same order
    decode_seconds  wall time of decoding all ids, the model loaded beforehand
    audio_seconds   total duration of the decoded audio
    threads, device CPU threads used, and "cpu" / "cuda"
    notes           free text: the settings
Every id of the benchmarked utterances must be in the file, and every id of the file in the split; a peer
may hold the whole split while `--limit` scores a prefix (its speed is then that of all its ids).

The report files (JSON, markdown, plots, hypotheses) are written by speechmt.evaluation.benchmark_report.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import platform
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from speechmt.data.manifest import Record, read_split
from speechmt.evaluation.benchmark_inputs import (  # noqa: F401 (ANALYSIS_COLUMNS, BenchmarkError: imported from here too)
    ANALYSIS_COLUMNS,
    BenchmarkError,
    analysis_option,
    read_analysis,
    read_json,
)
from speechmt.evaluation.evaluate import decode_split, one_line, references, score
from speechmt.evaluation.metrics import Score
from speechmt.evaluation.report import git_commit, utc_now

DEFAULT_EDGES = (2.0, 4.0, 6.0, 8.0)
PEER_KEYS = (
    "system",
    "params",
    "task",
    "split",
    "ids",
    "hypotheses",
    "decode_seconds",
    "audio_seconds",
    "threads",
    "device",
    "notes",
)


@dataclass(frozen=True)
class BenchmarkConfig:
    """What to benchmark and how. `names` label the `models` in order (default: folder/file stem), `tasks`
    say what each does (st, asr or mt; default or "": its own, e.g. a multi-task model's text MT as "mt");
    `edges` are the duration bucket boundaries in seconds; `threads` None keeps torch's setting."""

    data: str
    split: str
    models: tuple[str, ...] = ()
    cascades: tuple[tuple[str, str], ...] = ()  # (ASR checkpoint, MT checkpoint) pairs
    peers: tuple[str, ...] = ()
    compare: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    beam: int = 5
    mbr: str | None = None  # "chrf" or "bleu": each utterance's output chosen from the beam by MBR
    mbr_samples: int = 0  # with mbr: epsilon samples per utterance, the references
    max_tokens: int = 20000
    limit: int | None = None
    threads: int | None = None
    device: str = "cpu"
    dtype: str = "float32"  # the decoded models' weights (load_model's dtype)
    edges: tuple[float, ...] = DEFAULT_EDGES
    analyses: tuple[str, ...] = ()  # "NAME=DIR": the `speechmt research analyze` output of the system named NAME


@dataclass
class Bucket:
    """The main metric on the utterances whose source audio falls in one duration bucket (None if empty)."""

    label: str
    n: int
    score: float | None


@dataclass
class SystemResult:
    """One row of the benchmark: scores, length buckets, and speed on `timed_utterances` utterances.

    `kind` is "model" or "peer"; a row read back by `--compare` keeps its kind and names the JSON it came
    from in `result_file`. Speed fields are None where unknown. `analysis` holds the summary numbers of the
    system's `speechmt research analyze` output (`read_analysis`), or None.
    """

    name: str
    kind: str
    source: str
    task: str
    params: int | None
    n: int
    metrics: dict[str, Score]
    buckets: list[Bucket]
    timed_utterances: int
    decode_seconds: float | None
    audio_seconds: float | None
    beam: int | None = None
    threads: int | None = None
    device: str | None = None
    commit: str | None = None
    notes: str = ""
    result_file: str | None = None
    analysis: dict[str, Any] | None = None

    @property
    def main_metric(self) -> str:
        return main_metric(self.task)

    @property
    def rtf(self) -> float | None:
        """Real-time factor: decoding seconds per second of audio."""
        return self.decode_seconds / self.audio_seconds if self.decode_seconds and self.audio_seconds else None

    @property
    def utterances_per_second(self) -> float | None:
        return self.timed_utterances / self.decode_seconds if self.decode_seconds else None

    @property
    def audio_seconds_per_second(self) -> float | None:
        return self.audio_seconds / self.decode_seconds if self.decode_seconds and self.audio_seconds else None

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "rtf": self.rtf,
            "utterances_per_second": self.utterances_per_second,
            "audio_seconds_per_second": self.audio_seconds_per_second,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SystemResult":
        own = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in own}
        d["metrics"] = {k: Score(**s) for k, s in d["metrics"].items()}
        d["buckets"] = [Bucket(**b) for b in d["buckets"]]
        return cls(**d)


@dataclass
class Benchmark:
    """All rows on one set of utterances (`ids_sha256` identifies it), with the machine they ran on."""

    data: str
    split: str
    n: int
    ids_sha256: str
    edges: tuple[float, ...]
    bucket_labels: list[str]
    bucket_counts: list[int]
    systems: list[SystemResult]
    machine: dict[str, Any]
    created: str = field(default_factory=utc_now)

    def signatures(self) -> dict[str, list[str]]:
        """{metric name: its distinct signatures over all systems}."""
        out: dict[str, list[str]] = {}
        for s in self.systems:
            for m in s.metrics.values():
                if m.signature not in out.setdefault(m.name, []):
                    out[m.name].append(m.signature)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["systems"] = [s.to_dict() for s in self.systems]
        d["signatures"] = self.signatures()
        return d


def main_metric(task: str) -> str:
    return "WER" if task == "asr" else "BLEU"


def bucket_labels(edges: Sequence[float]) -> list[str]:
    """Labels of the len(edges) + 1 buckets: (2, 4) -> ["<2 s", "2-4 s", ">=4 s"]."""
    e = [f"{x:g}" for x in edges]
    return [f"<{e[0]} s"] + [f"{a}-{b} s" for a, b in zip(e, e[1:])] + [f">={e[-1]} s"]


def bucket_index(duration: float, edges: Sequence[float]) -> int:
    """The bucket of a duration: bucket k holds edges[k-1] <= duration < edges[k]."""
    return bisect.bisect_right(edges, duration)


def length_buckets(
    task: str, hyps: Sequence[str], refs: Sequence[str], durations: Sequence[float], edges: Sequence[float]
) -> list[Bucket]:
    """The task's main metric per duration bucket, over the utterances in each."""
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, d in enumerate(durations):
        members[bucket_index(d, edges)].append(i)
    metric = main_metric(task)
    out = []
    for label, idx in zip(bucket_labels(edges), members):
        value = score(task, [hyps[i] for i in idx], [refs[i] for i in idx])[metric].score if idx else None
        out.append(Bucket(label, len(idx), value))
    return out


def ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


def _score_system(task: str, hyps: list[str], records: list[Record], edges: Sequence[float], **row) -> SystemResult:
    refs = references(task, records)
    return SystemResult(
        task=task,
        n=len(records),
        metrics=score(task, hyps, refs),
        buckets=length_buckets(task, hyps, refs, [r.duration for r in records], edges),
        **row,
    )


def _default_name(path: str) -> str:
    p = Path(path)
    return f"{p.parent.name}/{p.stem}" if p.parent.name else p.stem


def _device_label(lm) -> str:
    """The report's device cell: "cpu", "cuda:0", with the weights' type when not float32 ("cpu bfloat16")."""
    return str(lm.device) if lm.dtype == torch.float32 else f"{lm.device} {str(lm.dtype).removeprefix('torch.')}"


def benchmark_model(
    path: str, name: str, records: list[Record], cfg: BenchmarkConfig, commit: str | None, task: str | None = None
) -> tuple[SystemResult, list[str]]:
    """Decodes the benchmarked utterances with a checkpoint (as `task`: None for its own; "mt" reads the
    transcripts), timed with the model loaded; (row, hyps)."""
    from speechmt.decoding.translate import load_model

    lm = load_model(path, cfg.device, task, cfg.dtype)
    options = lm.decode_options(cfg.beam, mbr=cfg.mbr, samples=cfg.mbr_samples)
    _, hyps, seconds, _ = decode_split(lm, cfg.data, cfg.split, options, cfg.max_tokens, len(records))
    params = sum(p.numel() for p in lm.model.parameters())
    row = _score_system(
        lm.task,
        hyps,
        records,
        cfg.edges,
        name=name,
        kind="model",
        source=str(path),
        params=params,
        timed_utterances=len(records),
        decode_seconds=seconds,
        audio_seconds=sum(r.duration for r in records),
        beam=cfg.beam,
        threads=torch.get_num_threads(),
        device=_device_label(lm),
        commit=commit,
        notes=_mbr_note(cfg),
    )
    return row, hyps


def _mbr_note(cfg: BenchmarkConfig) -> str:
    if not cfg.mbr:
        return ""
    against = f"{cfg.mbr_samples} epsilon samples" if cfg.mbr_samples else "each other"
    return f"MBR ({cfg.mbr}): the beam's {cfg.beam} hypotheses scored against {against}"


def benchmark_cascade(
    asr_path: str, mt_path: str, records: list[Record], cfg: BenchmarkConfig, commit: str | None
) -> tuple[SystemResult, list[str]]:
    """The ASR -> MT cascade as one system: transcribe, then translate the transcripts, both timed."""
    import time

    from speechmt.decoding.cascade import load_cascade, translate_texts

    asr, mt = load_cascade(asr_path, mt_path, cfg.device, cfg.dtype)
    _, transcripts, asr_seconds, _ = decode_split(
        asr, cfg.data, cfg.split, asr.decode_options(cfg.beam), cfg.max_tokens, len(records)
    )
    start = time.perf_counter()
    options = mt.decode_options(cfg.beam, mbr=cfg.mbr, samples=cfg.mbr_samples)
    hyps = [one_line(h) for h in translate_texts(mt, transcripts, options)]
    seconds = asr_seconds + time.perf_counter() - start
    params = sum(p.numel() for m in (asr, mt) for p in m.model.parameters())
    row = _score_system(
        "st",
        hyps,
        records,
        cfg.edges,
        name=f"cascade {_default_name(asr_path)} -> {_default_name(mt_path)}",
        kind="model",
        source=f"{asr_path} -> {mt_path}",
        params=params,
        timed_utterances=len(records),
        decode_seconds=seconds,
        audio_seconds=sum(r.duration for r in records),
        beam=cfg.beam,
        threads=torch.get_num_threads(),
        device=_device_label(asr),
        commit=commit,
        notes="ASR transcripts translated by the MT model" + (f"; {_mbr_note(cfg)}" if cfg.mbr else ""),
    )
    return row, hyps


def _peer_hypotheses(path: str, d: dict[str, Any], split_ids: list[str], records: list[Record]) -> list[str]:
    """The peer's hypotheses in the order of `records`, after checking its ids against the split."""
    ids, hyps = d["ids"], d["hypotheses"]
    if not isinstance(ids, list) or not isinstance(hyps, list) or len(ids) != len(hyps):
        raise BenchmarkError(f"{path}: 'ids' and 'hypotheses' must be two lists of equal length")
    if len(set(ids)) != len(ids):
        raise BenchmarkError(f"{path}: {len(ids) - len(set(ids))} ids repeat")
    known = set(split_ids)
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise BenchmarkError(f"{path}: {len(unknown)} ids are not in the split (first: {unknown[0]!r})")
    by_id = dict(zip(ids, hyps))
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise BenchmarkError(f"{path}: {len(missing)} ids of the split are missing (first: {missing[0]!r})")
    out = [by_id[r.id] for r in records]
    bad = next((r.id for r, h in zip(records, out) if not isinstance(h, str) or "\n" in h or "\r" in h), None)
    if bad is not None:
        raise BenchmarkError(f"{path}: the hypothesis of {bad!r} is not a one-line string")
    return out


def benchmark_peer(
    path: str, split_ids: list[str], records: list[Record], cfg: BenchmarkConfig
) -> tuple[SystemResult, list[str]]:
    """Scores a peer hypotheses file on the benchmarked utterances; (row, hyps)."""
    d = read_json(path, "peer hypotheses file")
    absent = [k for k in PEER_KEYS if k not in d]
    if absent:
        raise BenchmarkError(f"{path}: peer hypotheses file lacks {', '.join(absent)}")
    if d["task"] not in ("st", "asr"):
        raise BenchmarkError(f"{path}: task must be 'st' or 'asr', found {d['task']!r}")
    not_numbers = [
        k
        for k in ("params", "threads", "decode_seconds", "audio_seconds")
        if d[k] is not None and type(d[k]) not in (int, float)
    ]
    if not_numbers:
        raise BenchmarkError(f"{path}: {', '.join(not_numbers)} must be numbers or null")
    if d["split"] != cfg.split:
        warnings.warn(
            f"{path}: decoded split {d['split']!r}, benchmarked as {cfg.split!r} (the ids match)", stacklevel=2
        )
    hyps = _peer_hypotheses(path, d, split_ids, records)
    row = _score_system(
        d["task"],
        hyps,
        records,
        cfg.edges,
        name=str(d["system"]),
        kind="peer",
        source=str(path),
        params=d["params"],
        timed_utterances=len(d["ids"]),
        decode_seconds=d["decode_seconds"],
        audio_seconds=d["audio_seconds"],
        threads=d["threads"],
        device=d["device"],
        notes=str(d["notes"] or ""),
    )
    return row, hyps


def load_benchmark(path: str | os.PathLike) -> Benchmark:
    """Reads a benchmark.json (or the folder holding one) back into a Benchmark."""
    path = Path(path)
    if path.is_dir():
        path = path / "benchmark.json"
    d = read_json(str(path), "benchmark result")
    try:
        d.pop("signatures", None)
        d["systems"] = [SystemResult.from_dict(s) for s in d["systems"]]
        d["edges"] = tuple(d["edges"])
        return Benchmark(**d)
    except (KeyError, TypeError) as e:
        raise BenchmarkError(f"{path}: not a benchmark result ({e})") from None


def compared_rows(path: str, ids: list[str], edges: Sequence[float]) -> list[SystemResult]:
    """The rows of an earlier benchmark.json, checked to be on the same utterances and buckets."""
    earlier = load_benchmark(path)
    if earlier.ids_sha256 != ids_digest(ids):
        raise BenchmarkError(
            f"{path}: scored {earlier.n} utterances of {earlier.split!r}, not the {len(ids)} "
            "benchmarked here (use the same split and --limit)"
        )
    if tuple(earlier.edges) != tuple(edges):
        raise BenchmarkError(f"{path}: length buckets {list(earlier.edges)} differ from {list(edges)}")
    return [dataclasses.replace(s, result_file=s.result_file or str(path)) for s in earlier.systems]


def attach_analyses(rows: list[SystemResult], analyses: list[tuple[str, dict[str, Any]]]) -> None:
    """Puts each analysis on the row of its system name; BenchmarkError for an unknown or repeated name."""
    by_name = {r.name: r for r in rows}
    named = [name for name, _ in analyses]
    for name, numbers in analyses:
        if name not in by_name:
            raise BenchmarkError(
                f"--analysis {name}={numbers['file']}: no system named {name!r} (systems: {', '.join(by_name)})"
            )
        if named.count(name) > 1:
            raise BenchmarkError(f"--analysis: {named.count(name)} analyses for system {name!r}")
        by_name[name].analysis = numbers


def machine_info(commit: str | None) -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit,
    }


def _unique_names(rows: list[SystemResult]) -> None:
    """Appends " (2)", " (3)", ... to names already taken, in row order."""
    seen: set[str] = set()
    for row in rows:
        name, k = row.name, 2
        while name in seen:
            name, k = f"{row.name} ({k})", k + 1
        row.name = name
        seen.add(name)


def run_benchmark(cfg: BenchmarkConfig) -> tuple[Benchmark, dict[str, list[str]]]:
    """Scores (and times) every system of `cfg`; returns the benchmark and the hypotheses per system name."""
    if not (cfg.models or cfg.cascades or cfg.peers or cfg.compare):
        raise BenchmarkError("nothing to benchmark: give --model, --cascade, --peer or --compare")
    if len(cfg.names) > len(cfg.models):
        raise BenchmarkError(f"{len(cfg.names)} names for {len(cfg.models)} models")
    if len(cfg.tasks) > len(cfg.models):
        raise BenchmarkError(f"{len(cfg.tasks)} tasks for {len(cfg.models)} models")
    if cfg.limit is not None and cfg.limit < 1:
        raise BenchmarkError(f"--limit must be at least 1, found {cfg.limit}")
    if list(cfg.edges) != sorted(set(cfg.edges)) or not cfg.edges:
        raise BenchmarkError(f"length bucket edges must increase strictly, found {list(cfg.edges)}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    analyses = [(name, read_analysis(path)) for name, path in map(analysis_option, cfg.analyses)]
    all_records = read_split(cfg.data, cfg.split)  # a missing split: ManifestError naming the prepared ones
    records = all_records[: cfg.limit]
    split_ids, ids = [r.id for r in all_records], [r.id for r in records]
    commit = git_commit()
    peers = [benchmark_peer(p, split_ids, records, cfg) for p in cfg.peers]
    earlier = [row for p in cfg.compare for row in compared_rows(p, ids, cfg.edges)]
    names = list(cfg.names) + [_default_name(m) for m in cfg.models[len(cfg.names) :]]
    tasks = list(cfg.tasks) + [""] * (len(cfg.models) - len(cfg.tasks))
    models = [benchmark_model(m, n, records, cfg, commit, t or None) for m, n, t in zip(cfg.models, names, tasks)]
    models += [benchmark_cascade(asr, mt, records, cfg, commit) for asr, mt in cfg.cascades]
    rows = [r for r, _ in models + peers] + earlier
    _unique_names(rows)
    attach_analyses(rows, analyses)
    hyps = {row.name: h for row, (_, h) in zip(rows, models + peers)}
    counts = [0] * (len(cfg.edges) + 1)
    for r in records:
        counts[bucket_index(r.duration, cfg.edges)] += 1
    bench = Benchmark(
        str(cfg.data),
        cfg.split,
        len(records),
        ids_digest(ids),
        tuple(cfg.edges),
        bucket_labels(cfg.edges),
        counts,
        rows,
        machine_info(commit),
    )
    return bench, hyps
