"""What `speechmt research benchmark` reads besides checkpoints and splits, checked: JSON files (peer hypotheses,
earlier results, analyses) and the `--analysis NAME=DIR` option with the summary numbers of a `speechmt research
analyze` output; every error is a BenchmarkError, one line naming the file or option."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class BenchmarkError(ValueError):
    """Bad benchmark input (split, peer file, earlier result, names); the message names the file."""


def read_json(path: str, what: str) -> dict[str, Any]:
    """The JSON object in `path`, a `what` (named in the error: "peer hypotheses file", ...)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchmarkError(f"{path}: {what} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BenchmarkError(f"{path}: not a JSON {what} ({e})") from None
    if not isinstance(d, dict):
        raise BenchmarkError(f"{path}: a {what} is a JSON object, found {type(d).__name__}")
    return d


def analysis_option(value: str) -> tuple[str, str]:
    """An --analysis value "NAME=DIR" -> (NAME, DIR), split at the first "="."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise BenchmarkError(f"--analysis {value!r}: expected NAME=DIR (a system's name and its analyze output)")
    return name, path


# the numbers of an analysis that become report columns: (key in read_analysis' dict, column label)
ANALYSIS_COLUMNS = (("cka", "CKA top"), ("cosine", "P@1 cos"), ("csls", "P@1 CSLS"), ("word", "word P@1"))


def read_analysis(path: str | os.PathLike) -> dict[str, Any]:
    """The summary numbers of a `speechmt research analyze` output (its folder or analysis.json): the split and number
    of utterances analysed, the top speech and text layers, their linear CKA, and speech->text sentence
    retrieval P@1 between them with cosine and CSLS, after the Procrustes map where the analysis has one
    (`map` "procrustes", else "none"), and speech->text word retrieval P@1 (CSLS) of the model's own states, no
    map (`word`: None where the analysis has no word units). BenchmarkError naming the file when it is missing
    or not one."""
    path = Path(path)
    if path.is_dir():
        path = path / "analysis.json"
    d = read_json(str(path), "analysis result")
    try:
        top = d["sentence"]["top"]
        mapped = top["procrustes"] is not None
        block = top["procrustes"]["retrieval"] if mapped else top["raw"]
        if block is None:
            raise BenchmarkError(f"{path}: no sentence retrieval of the top layers")
        out = {
            "file": str(path),
            "split": d["split"],
            "n": d["n"],
            "speech": top["speech"],
            "text": top["text"],
            "cka": top["cka"],
            "map": "procrustes" if mapped else "none",
            "cosine": block["cosine"]["speech_to_text"],
            "csls": block["csls"]["speech_to_text"],
            "word": _word_p1(d.get("word_retrieval")),
        }
    except KeyError as e:
        raise BenchmarkError(f"{path}: not a `speechmt research analyze` result (no {e})") from None
    except TypeError as e:
        raise BenchmarkError(f"{path}: not a `speechmt research analyze` result ({e})") from None
    bad = [k for k, _ in ANALYSIS_COLUMNS if out[k] is not None and type(out[k]) not in (int, float)]
    if bad:
        raise BenchmarkError(f"{path}: {', '.join(bad)} of the top layers must be numbers or null")
    return out


def _word_p1(words: dict[str, Any] | None) -> float | None:
    """Speech->text word retrieval P@1 (CSLS, no map) of an analysis' `word_retrieval` block, None without one."""
    raw = (words or {}).get("raw")
    return raw["csls"]["speech_to_text"] if raw else None
