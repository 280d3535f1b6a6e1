"""The corpus-independent half of data preparation: features, filtering, manifests and the summary.

A corpus reader yields, per split, a `Record` for each utterance it found, or a `Skip` for an item it
could not use (malformed row, missing text). `prepare_splits` extracts features for the records with
`jobs` processes, skips (and counts) what cannot be used, and writes per split:

    out/<split>.jsonl              manifest, one Record per kept utterance
    out/fbank80/<split>.bin|.index.npz   feature store
    out/<split>.summary.json       counts by skip reason, hours, frames, the skipped items themselves

plus out/global_cmvn.npz (statistics over the training splits) and out/prepare_summary.json.

Several directions into one folder (`prepare_directions`): the training split `train` holds every direction's
utterances (one manifest, one feature store; each record's src_lang and tgt_lang say its direction), every other
split is kept per direction as `<split>_<src>-<tgt>` (dev_en-de, tst-COMMON_en-fr, test_de-en), and `dev` is
the union of the per-direction dev splits (copied, for a multilingual model's validation). Every id ends in
`@<src>-<tgt>`, so that ids stay unique in the folder (MuST-C's pairs reuse talk names with other segmentations,
CoVoST 2's en->X directions the same clips). The summary counts items, kept utterances, hours and skips per
direction and split.
"""

from __future__ import annotations

import contextlib
import itertools
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
from speechmt.data.features import FeatureStore, FeatureStoreWriter
from speechmt.data.manifest import Record, direction, iter_manifest, write_manifest
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
    # per direction ("en-de": items, kept, frames, hours, skipped), in a folder of several directions only
    directions: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The summary as JSON, without the empty per-direction counts of a one-direction folder."""
        d = asdict(self)
        if not self.directions:
            del d["directions"]
        return d


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


def _extracted(
    records: list[Record], cfg: PrepareConfig, pool: ProcessPoolExecutor | None
) -> Iterator[tuple[Record, tuple]]:
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


def prepare_split(
    split: str,
    items: Iterable[Record | Skip],
    out: Path,
    cfg: PrepareConfig,
    is_train: bool,
    stats: CMVNStats | None = None,
    pool: ProcessPoolExecutor | None = None,
    by_direction: bool = False,
) -> SplitSummary:
    """Extracts, filters and writes one split; returns its summary (also written to out/<split>.summary.json).

    `by_direction`: count per direction too (ids end in @<src>-<tgt>, as `prepare_directions` writes them)."""
    summary = SplitSummary(split)
    records: list[Record] = []
    skips: list[Skip] = []
    for item in items:
        (records if isinstance(item, Record) else skips).append(item)
    summary.items = len(records) + len(skips)
    n_read_skips = len(skips)
    kept: list[Record] = []
    kept_seconds: list[float] = []
    with FeatureStoreWriter(
        out / f"fbank{cfg.fbank.num_mel_bins}" / split, cfg.fbank.num_mel_bins, cfg.store_dtype
    ) as store:
        for rec, (feats, seconds, skip) in progress(
            _extracted(records, cfg, pool), f"prepare {split}: features", "utt", total=len(records)
        ):
            skip = replace(skip, id=rec.id) if skip else _length_skip(rec, feats.shape[0], cfg, is_train)
            if skip:
                skips.append(skip)
                continue
            store.add(rec.id, feats)
            if stats is not None:
                stats.update(feats.astype(cfg.store_dtype))
            kept.append(replace(rec, n_frames=feats.shape[0], duration=rec.duration or round(seconds, 6)))
            kept_seconds.append(seconds)
            summary.frames += feats.shape[0]
            summary.hours += seconds / 3600
    write_manifest(out / f"{split}.jsonl", kept)
    summary.kept = len(kept)
    summary.skipped = dict(Counter(s.reason for s in skips).most_common())
    summary.skipped_items = [asdict(s) for s in skips]
    if by_direction:
        summary.directions = _direction_counts(records, kept, kept_seconds, skips, n_read_skips)
    _write_json(out / f"{split}.summary.json", summary.to_dict())
    return summary


def _direction_counts(
    records: list[Record], kept: list[Record], kept_seconds: list[float], skips: list[Skip], n_read_skips: int
) -> dict[str, dict]:
    """Items, kept, frames, hours and skips by reason per direction (the first `n_read_skips` skips are items the
    reader could not make a record of); a skip's direction is its id's @ suffix."""
    counts: dict[str, dict] = {}

    def entry(d: str) -> dict:
        return counts.setdefault(d, {"items": 0, "kept": 0, "frames": 0, "hours": 0.0, "skipped": {}})

    for r in records:
        entry(direction(r.src_lang, r.tgt_lang))["items"] += 1
    for r, seconds in zip(kept, kept_seconds):
        e = entry(direction(r.src_lang, r.tgt_lang))
        e["kept"] += 1
        e["frames"] += r.n_frames
        e["hours"] += seconds / 3600
    for i, s in enumerate(skips):
        e = entry(skip_direction(s))
        e["items"] += i < n_read_skips
        e["skipped"][s.reason] = e["skipped"].get(s.reason, 0) + 1
    return dict(sorted(counts.items()))


def prepare_splits(
    splits: dict[str, Iterable[Record | Skip]],
    out: str | os.PathLike,
    cfg: PrepareConfig,
    meta: dict,
    by_direction: bool = False,
) -> dict:
    """Prepares every split (`train*` ones count as training), global CMVN over them, and the summary.

    A split whose manifest and summary exist already is kept as it is unless `cfg.overwrite`, so an
    interrupted preparation resumes at the first unfinished split. `by_direction`: see `prepare_split`.
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
            summaries[split] = prepare_split(
                split, items, out, cfg, is_train, split_stats, pool, by_direction
            ).to_dict()
            if split_stats is not None and split_stats.count:
                _save_cmvn(out / f"{split}.cmvn.npz", split_stats)
    for split in splits:
        if split.startswith("train") and (out / f"{split}.cmvn.npz").exists():
            stats.merge(_load_cmvn(out / f"{split}.cmvn.npz"))
    if stats.count:
        _save_cmvn(out / "global_cmvn.npz", stats)
    result = {
        **meta,
        "fbank": asdict(cfg.fbank),
        "min_frames": cfg.min_frames,
        "max_frames": cfg.max_frames,
        "store_dtype": cfg.store_dtype,
        "splits": summaries,
    }
    _write_json(out / "prepare_summary.json", result)
    return result


def format_summary(summary: dict) -> str:
    """A plain-text table of a preparation summary: items, kept, hours and skips by reason per split (and per
    direction and split in a folder of several directions)."""
    width = max([14] + [len(s) + 2 for s in summary["splits"]])
    lines = [f"{'split':<{width}}{'items':>8}{'kept':>8}{'hours':>9}  skipped"]
    for split, s in summary["splits"].items():
        lines.append(_summary_line(split, s, width))
    for d, by_split in summary.get("directions", {}).items():
        lines += [f"direction {d}:"] + [_summary_line(f"  {split}", s, width) for split, s in by_split.items()]
    return "\n".join(lines)


def _summary_line(name: str, s: dict, width: int) -> str:
    skipped = ", ".join(f"{k}: {v}" for k, v in s["skipped"].items()) or "none"
    return f"{name:<{width}}{s['items']:>8}{s['kept']:>8}{s['hours']:>9.3f}  {skipped}"


DIRECTION_MARK = "@"
MERGED_SPLITS = ("train",)  # prepared once over every direction
UNION_SPLITS = ("dev",)  # prepared per direction, then copied together


def direction_split(split: str, name: str) -> str:
    """A corpus split's name in a folder of several directions: train stays train, dev of en-de is dev_en-de."""
    return split if split in MERGED_SPLITS else f"{split}_{name}"


def skip_direction(skip: Skip) -> str:
    """The direction of a skipped item in a folder of several directions (its id's @ suffix), else "?"."""
    return skip.id.rpartition(DIRECTION_MARK)[2] if DIRECTION_MARK in skip.id else "?"


def _tagged(items: Iterable[Record | Skip], name: str) -> Iterator[Record | Skip]:
    """The items with `@<direction>` appended to their ids."""
    for item in items:
        yield replace(item, id=f"{item.id}{DIRECTION_MARK}{name}")


def prepare_directions(
    readers: dict[str, dict[str, Iterable[Record | Skip]]], out: str | os.PathLike, cfg: PrepareConfig, meta: dict
) -> dict:
    """Prepares several directions into one folder: `readers` maps a direction (en-de) to its corpus splits'
    items. `train` holds every direction, other splits are kept apart as <split>_<direction>, `dev` is their
    union (module docstring). The summary adds, per direction, the counts of each split it has a part in.
    """
    out = Path(out)
    names = list(readers)
    layout: dict[str, dict[str, str]] = {
        d: {s: direction_split(s, d) for s in by_split} for d, by_split in readers.items()
    }
    check_directions(out, names, cfg)
    parts: dict[str, list[Iterable[Record | Skip]]] = {}
    for d, by_split in readers.items():
        for s, items in by_split.items():
            parts.setdefault(layout[d][s], []).append(_tagged(items, d))
    splits = {name: itertools.chain.from_iterable(p) for name, p in parts.items()}
    summary = prepare_splits(
        splits, out, cfg, {**meta, "directions": names, "splits_of_direction": layout}, by_direction=True
    )
    for union in UNION_SPLITS:
        members = [layout[d][union] for d in names if union in layout[d]]
        if len(members) > 1:
            summary["splits"][union] = union_split(out, union, members, cfg)
    summary["directions"] = {
        d: {layout[d][s]: _direction_entry(summary["splits"][layout[d][s]], d) for s in readers[d]} for d in names
    }
    _write_json(out / "prepare_summary.json", summary)
    return summary


def _direction_entry(split_summary: dict, name: str) -> dict:
    empty = {"items": 0, "kept": 0, "frames": 0, "hours": 0.0, "skipped": {}}
    return split_summary.get("directions", {}).get(name, empty)


def check_directions(out: str | os.PathLike, names: list[str], cfg: PrepareConfig) -> None:
    """PrepareError when `out`'s training split was prepared for other directions than `names` (one name: a
    one-direction folder) and cfg.overwrite is not set: a rerun resumes a folder, it never mixes two."""
    out = Path(out)
    for split in MERGED_SPLITS:
        done = out / f"{split}.summary.json"
        if cfg.overwrite or not done.exists() or not (out / f"{split}.jsonl").exists():
            continue
        had = sorted(json.loads(done.read_text()).get("directions", {}))
        wanted = sorted(names) if len(names) > 1 else []
        if had != wanted:
            raise PrepareError(
                f"{done}: {split} holds {', '.join(had) or 'one direction'}, not "
                f"{', '.join(wanted) or ' '.join(names)}; prepare into another folder or use "
                "--overwrite"
            )


def union_split(out: Path, name: str, members: list[str], cfg: PrepareConfig) -> dict:
    """The split `name` as the union of the prepared splits `members` (manifests and features copied in order);
    returns its summary (also out/<name>.summary.json), counts per direction included."""
    done = out / f"{name}.summary.json"
    if done.exists() and (out / f"{name}.jsonl").exists() and not cfg.overwrite:
        previous = json.loads(done.read_text())
        if previous.get("union_of") == members:
            return previous
    summary = SplitSummary(name)
    dim = cfg.fbank.num_mel_bins
    records: list[Record] = []
    with FeatureStoreWriter(out / f"fbank{dim}" / name, dim, cfg.store_dtype) as store:
        for member in members:
            part = json.loads((out / f"{member}.summary.json").read_text())
            source = FeatureStore(out / f"fbank{dim}" / member)
            for i, rec in enumerate(iter_manifest(out / f"{member}.jsonl")):
                store.add(rec.id, source.get(i))
                records.append(rec)
            summary.items += part["kept"]
            summary.frames += part["frames"]
            summary.hours += part["hours"]
            summary.directions.update(
                {d: {**e, "items": e["kept"], "skipped": {}} for d, e in part.get("directions", {}).items()}
            )
    write_manifest(out / f"{name}.jsonl", records)
    summary.kept = len(records)
    result = {**summary.to_dict(), "union_of": members}
    _write_json(done, result)
    return result


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
