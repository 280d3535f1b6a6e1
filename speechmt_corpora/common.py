"""Shared pieces of the mini corpus builders: sizes, the seeded split of a pair pool, writers, workers."""

from __future__ import annotations

import csv
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from speechmt.progress import progress

T = TypeVar("T")
R = TypeVar("R")

TEXT_ONLY_FRACTION = 0.12
DEV_TEST_FRACTION = 0.05
DEV_TEST_CAP = 1500
NOISE_STD = 1e-4  # about -80 dBFS: the "silence" between segments and around clips


class SynthError(RuntimeError):
    """A mini corpus cannot be built; the one-line message names the missing tool or Debian package."""


@dataclass(frozen=True)
class SplitSizes:
    """Sentences to voice per split; None in SIZES means all the pool holds (dev and test 5 %, capped)."""

    train: int
    dev: int
    test: int


SIZES: dict[str, SplitSizes | None] = {
    "tiny": SplitSizes(train=12, dev=4, test=4),
    "small": SplitSizes(train=2000, dev=200, test=200),
    "full": None,
}


def split_sizes(size: str, n_voiced: int) -> SplitSizes:
    """The split sizes of `size` for a pool with `n_voiced` pairs left after the text-only part."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    wanted = SIZES[size]
    if wanted is None:
        held = min(DEV_TEST_CAP, round(DEV_TEST_FRACTION * n_voiced))
        return SplitSizes(train=n_voiced - 2 * held, dev=held, test=held)
    test = min(wanted.test, n_voiced)
    dev = min(wanted.dev, n_voiced - test)
    return SplitSizes(train=min(wanted.train, n_voiced - test - dev), dev=dev, test=test)


def split_pool(pairs: Sequence[T], size: str, seed: int, stream: int) -> tuple[list[T], dict[str, list[T]]]:
    """Seeded partition of a pool into (text-only part, {"train", "dev", "test"}), all disjoint.

    The pool is permuted by (seed, stream); the text-only part (12 %) comes first, then the test region,
    the dev region and the training region, so the text-only part does not depend on `size`, and the same
    seed and stream give the same splits. The test and dev regions are as long as `full`'s test and dev
    sets (or this size's, where longer), and every size takes its splits from the start of each region:
    the sizes nest split by split (tiny's training sentences are among small's, small's among full's,
    and likewise dev and test), so no size's training sentences are in another size's dev or test sets.
    """
    order = np.random.default_rng([seed, stream]).permutation(len(pairs))
    shuffled = [pairs[i] for i in order]
    n_text = round(TEXT_ONLY_FRACTION * len(shuffled))
    text_only, voiced = shuffled[:n_text], shuffled[n_text:]
    sizes, full = split_sizes(size, len(voiced)), split_sizes("full", len(voiced))
    test_region, dev_region = max(sizes.test, full.test), max(sizes.dev, full.dev)
    train_start = test_region + dev_region
    splits = {
        "test": voiced[: sizes.test],
        "dev": voiced[test_region : test_region + sizes.dev],
        "train": voiced[train_start : train_start + sizes.train],
    }
    return text_only, splits


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Writes one text per line (UTF-8, `\\n` line ends)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def write_tsv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Writes a tab-separated file as the Common Voice and CoVoST releases (no quoting, `\\` escapes)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(
            f, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, escapechar="\\", lineterminator="\n"
        )
        writer.writerow(header)
        writer.writerows(rows)


def read_tsv(path: Path) -> list[dict[str, str]]:
    """Reads a TSV written by `write_tsv` back as one dict per row."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\"))


def run_parallel(fn: Callable[[T], R], items: Sequence[T], jobs: int, desc: str = "synth", unit: str = "it") -> list[R]:
    """`[fn(x) for x in items]` over `jobs` worker processes, results in input order, with progress
    (speechmt.progress) under `desc`, counting `unit`s."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(x) for x in progress(items, desc, unit)]
    with ProcessPoolExecutor(max_workers=min(jobs, len(items))) as pool:
        return list(progress(pool.map(fn, items), desc, unit, total=len(items)))


def low_noise(rng: np.random.Generator, seconds: float, sample_rate: int) -> np.ndarray:
    """Near-silent Gaussian noise (NOISE_STD) of the given length, float32."""
    return (rng.standard_normal(int(round(seconds * sample_rate))) * NOISE_STD).astype(np.float32)


def ensure_free(final: Path) -> None:
    """Raises SynthError when the corpus folder `final` already holds files (builds never overwrite)."""
    if final.exists() and any(final.iterdir()):
        raise SynthError(f"{final} already exists and is not empty: remove it or build into another folder")


def staging_dir(final: Path) -> Path:
    """A fresh folder beside `final` to build into, moved into place by `publish` once complete."""
    ensure_free(final)
    staging = final.with_name(f".{final.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def publish(staging: Path, final: Path) -> None:
    """Moves a finished build from its staging folder to its final place."""
    if final.exists():
        final.rmdir()
    os.replace(staging, final)


def finish_summary(summary: dict, n_text_only: int) -> dict:
    """Adds the totals (sentences per split, hours, failure reasons) to a builder's summary."""
    splits = summary["splits"]
    summary["sentences"] = {name: s["sentences"] for name, s in splits.items()}
    summary["audio_hours"] = round(sum(s["audio_seconds"] for s in splits.values()) / 3600, 4)
    summary["speech_hours"] = round(sum(s["speech_seconds"] for s in splits.values()) / 3600, 4)
    summary["text_only_pairs"] = n_text_only
    summary["voices"] = dict(sorted(summary["voices"].items()))
    summary["failure_reasons"] = dict(Counter(f["reason"] for f in summary["failures"]))
    return summary
