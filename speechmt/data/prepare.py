"""The corpus-independent half of data preparation: features, filtering, manifests and the summary.

A corpus reader yields, per split, a `Record` for each utterance it found, or a `Skip` for an item it
could not use (malformed row, missing text). `prepare_splits` extracts features for the records with
`jobs` processes, skips (and counts) what cannot be used, and writes per split:

    out/<split>.jsonl              manifest, one Record per kept utterance
    out/fbank80/<split>.bin|.index.npz   feature store
    out/<split>.summary.json       counts by skip reason, hours, frames, the skipped items themselves

plus out/global_cmvn.npz (statistics over the training splits) and out/prepare_summary.json.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from speechmt.audio import SAMPLE_RATE, AudioError, CMVNStats, FbankConfig, fbank, read_audio
from speechmt.data.features import FeatureStoreWriter
from speechmt.data.manifest import Record, write_manifest
from speechmt.progress import progress


class PrepareError(RuntimeError):
    """A corpus that cannot be prepared at all (missing files, misaligned texts); one clear line."""


@dataclass(frozen=True)
class Skip:
    """An item left out of a split: its id, a short reason category and one line of detail."""

    id: str
    reason: str
    detail: str


@dataclass(frozen=True)
class PrepareConfig:
    """Feature and filtering settings. Training splits keep [min_frames, max_frames], others >= 1 frame."""

    fbank: FbankConfig = FbankConfig()
    min_frames: int = 5
    max_frames: int = 3000
    store_dtype: str = "float16"
    jobs: int = 2
    overwrite: bool = False


@dataclass
class SplitSummary:
    split: str
    items: int = 0
    kept: int = 0
    frames: int = 0
    hours: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_items: list[dict] = field(default_factory=list)


def _extract(args: tuple[str, float, float | None, FbankConfig]) -> tuple[np.ndarray | None, float, Skip | None]:
    """Worker: (audio, offset, duration, cfg) -> (features (T, F) or None, seconds, skip or None)."""
    path, offset, duration, cfg = args
    try:
        wave = read_audio(path, offset, duration)
    except AudioError as e:
        return None, 0.0, Skip("", e.reason, str(e))
    if not np.any(wave):
        return None, 0.0, Skip("", "silent audio", f"{path}@{offset:.2f}s: all samples are zero")
    return fbank(wave, cfg), len(wave) / SAMPLE_RATE, None


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def _pool(jobs: int) -> ProcessPoolExecutor | contextlib.nullcontext:
    """Worker processes for feature extraction (spawned: forking after torch has run can hang)."""
    if jobs <= 1:
        return contextlib.nullcontext()
    return ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_init_worker)


def _extracted(records: list[Record], cfg: PrepareConfig,
               pool: ProcessPoolExecutor | None) -> Iterator[tuple[Record, tuple]]:
    """Yields (record, worker result) in record order, in `pool` when there is one."""
    tasks = [(r.audio, r.offset, r.duration or None, cfg.fbank) for r in records]
    results = pool.map(_extract, tasks, chunksize=8) if pool is not None else map(_extract, tasks)
    return zip(records, results)


def _length_skip(rec: Record, n: int, cfg: PrepareConfig, is_train: bool) -> Skip | None:
    lo, hi = (cfg.min_frames, cfg.max_frames) if is_train else (1, None)
    if n < lo:
        return Skip(rec.id, "too short", f"{rec.id}: {n} frames < {lo}")
    if hi is not None and n > hi:
        return Skip(rec.id, "too long", f"{rec.id}: {n} frames > {hi}")
    return None


def prepare_split(split: str, items: Iterable[Record | Skip], out: Path, cfg: PrepareConfig, is_train: bool,
                  stats: CMVNStats | None = None, pool: ProcessPoolExecutor | None = None) -> SplitSummary:
    """Extracts, filters and writes one split; returns its summary (also written to out/<split>.summary.json)."""
    summary = SplitSummary(split)
    records: list[Record] = []
    skips: list[Skip] = []
    for item in items:
        (records if isinstance(item, Record) else skips).append(item)
    summary.items = len(records) + len(skips)
    kept: list[Record] = []
    with FeatureStoreWriter(out / f"fbank{cfg.fbank.num_mel_bins}" / split, cfg.fbank.num_mel_bins,
                            cfg.store_dtype) as store:
        for rec, (feats, seconds, skip) in progress(_extracted(records, cfg, pool), f"prepare {split}: features",
                                                    "utt", total=len(records)):
            skip = replace(skip, id=rec.id) if skip else _length_skip(rec, feats.shape[0], cfg, is_train)
            if skip:
                skips.append(skip)
                continue
            store.add(rec.id, feats)
            if stats is not None:
                stats.update(feats.astype(cfg.store_dtype))
            kept.append(replace(rec, n_frames=feats.shape[0], duration=rec.duration or round(seconds, 6)))
            summary.frames += feats.shape[0]
            summary.hours += seconds / 3600
    write_manifest(out / f"{split}.jsonl", kept)
    summary.kept = len(kept)
    summary.skipped = dict(Counter(s.reason for s in skips).most_common())
    summary.skipped_items = [asdict(s) for s in skips]
    _write_json(out / f"{split}.summary.json", asdict(summary))
    return summary


def prepare_splits(splits: dict[str, Iterable[Record | Skip]], out: str | os.PathLike, cfg: PrepareConfig,
                   meta: dict) -> dict:
    """Prepares every split (`train*` ones count as training), global CMVN over them, and the summary.

    A split whose manifest and summary exist already is kept as it is unless `cfg.overwrite`, so an
    interrupted preparation resumes at the first unfinished split.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summaries, stats = {}, CMVNStats()
    with _pool(cfg.jobs) as pool:
        for split, items in splits.items():
            is_train = split.startswith("train")
            done = out / f"{split}.summary.json"
            if done.exists() and (out / f"{split}.jsonl").exists() and not cfg.overwrite:
                summaries[split] = json.loads(done.read_text())
                print(f"{split}: already prepared in {out} (use --overwrite to redo)")
                continue
            split_stats = CMVNStats() if is_train else None
            summaries[split] = asdict(prepare_split(split, items, out, cfg, is_train, split_stats, pool))
            if split_stats is not None and split_stats.count:
                _save_cmvn(out / f"{split}.cmvn.npz", split_stats)
    for split in splits:
        if split.startswith("train") and (out / f"{split}.cmvn.npz").exists():
            stats.merge(_load_cmvn(out / f"{split}.cmvn.npz"))
    if stats.count:
        _save_cmvn(out / "global_cmvn.npz", stats)
    result = {**meta, "fbank": asdict(cfg.fbank), "min_frames": cfg.min_frames, "max_frames": cfg.max_frames,
              "store_dtype": cfg.store_dtype, "splits": summaries}
    _write_json(out / "prepare_summary.json", result)
    return result


def format_summary(summary: dict) -> str:
    """A plain-text table of a preparation summary: items, kept, hours and skips by reason per split."""
    lines = [f"{'split':<14}{'items':>8}{'kept':>8}{'hours':>9}  skipped"]
    for split, s in summary["splits"].items():
        skipped = ", ".join(f"{k}: {v}" for k, v in s["skipped"].items()) or "none"
        lines.append(f"{split:<14}{s['items']:>8}{s['kept']:>8}{s['hours']:>9.3f}  {skipped}")
    return "\n".join(lines)


def _save_cmvn(path: Path, stats: CMVNStats) -> None:
    mean, std = stats.mean_std()
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, count=stats.count, sum=stats.sum, sumsq=stats.sumsq, mean=mean, std=std)
    os.replace(tmp, path)


def _load_cmvn(path: Path) -> CMVNStats:
    with np.load(path) as d:
        return CMVNStats(int(d["count"]), d["sum"], d["sumsq"])


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
