"""Synthetic mini corpora in the exact MuST-C and CoVoST 2 layouts, voiced by Debian speech synthesisers.

`build_mini_corpus("mustc" | "covost2", "tiny" | "small" | "full", out)` writes MuST-C-mini en-de or
CoVoST-mini de->en and es->en under `out`, plus a text-only part of the pairs that is never voiced, and
returns a summary (also written as out/synth_summary.json). Text and voices come from Debian packages read
at run time: trans-de-en (Ding dictionary, GPL: never commit its text), diatheke with sword-text-web and
sword-text-sparv, espeak-ng, libttspico-utils and mbrola voices (mbrola-us1..3, mbrola-de2, mbrola-de6).
The same seed gives byte-identical text files and the same audio.

`langs` builds other directions in the same layouts (speechmt_corpora.languages): MuST-C-mini en-X for targets of
MuST-C (out/en-fr/..., one folder per pair, as the release) and CoVoST-mini X->en for more sources, their pairs from
the installed packages' gettext catalogs. The summary of such a build gives pairs and hours per direction and names
the directions with too little text.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from speechmt_corpora.common import SIZES, SynthError
from speechmt_corpora.covost2 import DIRECTIONS as COVOST_DEFAULT
from speechmt_corpora.covost2 import build_covost2, per_direction
from speechmt_corpora.languages import MUSTC_TARGETS, check_langs, too_little_text
from speechmt_corpora.mustc import build_mustc
from speechmt_corpora.voices import find_voice, voice_label

__all__ = ["CORPORA", "SynthError", "build_mini_corpus"]

CORPORA = {"mustc": build_mustc, "covost2": build_covost2}


DEFAULT_LANGS = {"mustc": ("de",), "covost2": COVOST_DEFAULT}


def build_mini_corpus(
    corpus: str,
    size: str,
    out: Path,
    seed: int = 0,
    jobs: int = 2,
    hold_out_voice: str | None = None,
    langs: tuple[str, ...] | None = None,
) -> dict:
    """Builds a mini corpus under `out` and returns its summary, also written as out/synth_summary.json.

    corpus: "mustc" (out/en-de/...) or "covost2" (out/de/..., out/es/...); size: "tiny" (seconds, for
    tests), "small" (~2000/200/200 sentences, minutes) or "full" (every usable pair). The summary holds the
    sentences per split, the voices used, audio hours, text-only pairs, every failed sentence with its
    reason, and the seconds taken. `jobs` worker processes voice in parallel. Raises SynthError (one line
    naming the Debian package to install) when a tool, voice or text package is missing, and when the
    corpus folder under `out` already holds files from another build. A finished build with the same
    corpus, size, seed and held-out voice is kept as it is, and its summary returned. `hold_out_voice` (mustc
    only; e.g. `kal` or `flite:kal`): that voice speaks no train, dev or tst-COMMON talk, only the extra test
    split tst-<name> (tst-COMMON's sentences again; speechmt_corpora.mustc). `langs`: mustc's targets (default
    de; any of de es fr it nl pt ro ru) or covost2's sources (default de es; any of de es fr it pt nl ru ca).
    """
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {sorted(CORPORA)}, got {corpus!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if hold_out_voice and corpus != "mustc":
        raise ValueError(f"a held-out voice is for the mustc corpus only, not {corpus!r}")
    langs = tuple(dict.fromkeys(langs)) if langs else DEFAULT_LANGS[corpus]
    if corpus == "mustc":
        check_langs(langs, MUSTC_TARGETS, "MuST-C-mini target languages")
    out = Path(out)
    previous = _previous_build(out, corpus, size, seed, hold_out_voice, langs)
    if previous is not None:
        return previous
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if corpus == "mustc" and len(langs) > 1:
        summary = _build_mustc_pairs(out, size, seed, jobs, hold_out_voice, langs)
    elif corpus == "mustc":
        summary = build_mustc(out, size, seed, jobs, hold_out_voice, langs[0])
    else:
        summary = build_covost2(out, size, seed, jobs, langs)
    summary["seconds"] = round(time.perf_counter() - start, 2)
    (out / "synth_summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def _build_mustc_pairs(
    out: Path, size: str, seed: int, jobs: int, hold_out_voice: str | None, langs: tuple[str, ...]
) -> dict:
    """MuST-C-mini for several targets, out/en-<lang> each; the summary holds each pair's and a table per pair. A
    pair that an earlier build in `out` (same size, seed and held-out voice) finished is kept as it is."""
    done = _finished_pairs(out, size, seed)
    pairs = {}
    for lang in langs:
        name = f"en-{lang}"
        kept = done.get(name)
        if (
            kept is not None
            and (out / name).is_dir()
            and kept.get("hold_out_voice")
            == (voice_label(find_voice("en", hold_out_voice)) if hold_out_voice else None)
        ):
            print(f"{out / name}: already built; kept", file=sys.stderr)
            pairs[name] = kept
        else:
            pairs[name] = build_mustc(out, size, seed, jobs, hold_out_voice, lang)
    return {
        "corpus": "mustc",
        "size": size,
        "seed": seed,
        "langs": list(langs),
        "hold_out_voice": next(iter(pairs.values()))["hold_out_voice"],
        "pairs": pairs,
        "per_direction": {name: per_direction(p) for name, p in pairs.items()},
        "too_little_text": too_little_text({name: p["pairs_usable"] for name, p in pairs.items()}),
        "audio_hours": round(sum(p["audio_hours"] for p in pairs.values()), 4),
        "text_only_pairs": sum(p["text_only_pairs"] for p in pairs.values()),
    }


def _finished_pairs(out: Path, size: str, seed: int) -> dict[str, dict]:
    """{pair: its summary} of the MuST-C-mini pairs an earlier build of this size and seed finished in `out`."""
    path = out / "synth_summary.json"
    if not path.exists():
        return {}
    summary = json.loads(path.read_text(encoding="utf-8"))
    if (summary.get("corpus"), summary.get("size"), summary.get("seed")) != ("mustc", size, seed):
        return {}
    return summary["pairs"] if "pairs" in summary else {summary.get("pair", "en-de"): summary}


def _built_langs(summary: dict) -> tuple[str, ...]:
    """The languages a build's summary covers: its `langs`, else what a one-pair or de/es build holds."""
    if "langs" in summary:
        return tuple(summary["langs"])
    if summary.get("corpus") == "mustc":
        return (summary.get("pair", "en-de").split("-", 1)[1],)
    return tuple(summary.get("directions", {}))


def _previous_build(
    out: Path, corpus: str, size: str, seed: int, hold_out_voice: str | None, langs: tuple[str, ...]
) -> dict | None:
    """The summary of a finished build of the same corpus, size, seed, held-out voice and languages in `out`."""
    path = out / "synth_summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    if (summary.get("corpus"), summary.get("size"), summary.get("seed")) != (corpus, size, seed):
        return None
    if _built_langs(summary) != langs:
        return None
    if summary.get("hold_out_voice") != (voice_label(find_voice("en", hold_out_voice)) if hold_out_voice else None):
        return None
    print(f"{out}: {corpus} {size} (seed {seed}) is already built; remove it to rebuild", file=sys.stderr)
    return summary
