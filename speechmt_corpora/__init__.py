"""Synthetic mini corpora in the exact MuST-C and CoVoST 2 layouts, voiced by Debian speech synthesisers.

`build_mini_corpus("mustc" | "covost2", "tiny" | "small" | "full", out)` writes MuST-C-mini en-de or
CoVoST-mini de->en and es->en under `out`, plus a text-only part of the pairs that is never voiced, and
returns a summary (also written as out/synth_summary.json). Text and voices come from Debian packages read
at run time: trans-de-en (Ding dictionary, GPL: never commit its text), diatheke with sword-text-web and
sword-text-sparv, espeak-ng, libttspico-utils and mbrola voices (mbrola-us1..3, mbrola-de2, mbrola-de6).
The same seed gives byte-identical text files and the same audio.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from speechmt_corpora.common import SIZES, SynthError
from speechmt_corpora.covost2 import build_covost2
from speechmt_corpora.mustc import build_mustc
from speechmt_corpora.voices import find_voice, voice_label

__all__ = ["CORPORA", "SynthError", "build_mini_corpus"]

CORPORA = {"mustc": build_mustc, "covost2": build_covost2}


def build_mini_corpus(corpus: str, size: str, out: Path, seed: int = 0, jobs: int = 2,
                      hold_out_voice: str | None = None) -> dict:
    """Builds a mini corpus under `out` and returns its summary, also written as out/synth_summary.json.

    corpus: "mustc" (out/en-de/...) or "covost2" (out/de/..., out/es/...); size: "tiny" (seconds, for
    tests), "small" (~2000/200/200 sentences, minutes) or "full" (every usable pair). The summary holds the
    sentences per split, the voices used, audio hours, text-only pairs, every failed sentence with its
    reason, and the seconds taken. `jobs` worker processes voice in parallel. Raises SynthError (one line
    naming the Debian package to install) when a tool, voice or text package is missing, and when the
    corpus folder under `out` already holds files from another build. A finished build with the same
    corpus, size, seed and held-out voice is kept as it is, and its summary returned. `hold_out_voice` (mustc
    only; e.g. `kal` or `flite:kal`): that voice speaks no train, dev or tst-COMMON talk, only the extra test
    split tst-<name> (tst-COMMON's sentences again; speechmt_corpora.mustc).
    """
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {sorted(CORPORA)}, got {corpus!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if hold_out_voice and corpus != "mustc":
        raise ValueError(f"a held-out voice is for the mustc corpus only, not {corpus!r}")
    out = Path(out)
    previous = _previous_build(out, corpus, size, seed, hold_out_voice)
    if previous is not None:
        return previous
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = build_mustc(out, size, seed, jobs, hold_out_voice) if hold_out_voice else \
        CORPORA[corpus](out, size, seed, jobs)
    summary["seconds"] = round(time.perf_counter() - start, 2)
    (out / "synth_summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                            encoding="utf-8")
    return summary


def _previous_build(out: Path, corpus: str, size: str, seed: int, hold_out_voice: str | None) -> dict | None:
    """The summary of a finished build of the same corpus, size, seed and held-out voice in `out`, if any."""
    path = out / "synth_summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    if (summary.get("corpus"), summary.get("size"), summary.get("seed")) != (corpus, size, seed):
        return None
    if summary.get("hold_out_voice") != (voice_label(find_voice("en", hold_out_voice)) if hold_out_voice else None):
        return None
    print(f"{out}: {corpus} {size} (seed {seed}) is already built; remove it to rebuild", file=sys.stderr)
    return summary
