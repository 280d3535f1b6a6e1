"""BLEU and chrF per synthetic voice of a MuST-C-mini evaluation: seen voices against a held-out one.

Each split of a MuST-C-mini corpus (and each split `speechmt data synth-tts` adds) holds `talk_voices.tsv`, the
speaker of each talk; an utterance `ted_<N>_<i>` belongs to talk `ted_<N>`. `scores_by_voice` groups the
utterances of one or more evaluations (a `speechmt evaluate` folder's results.tsv, or one system of a
`speechmt research benchmark` folder) by voice (engine:name, every speed and pitch of it together) and scores each
group with the metric code of `speechmt evaluate`, then the seen voices pooled against the voice the corpus
holds out (synth_summary.json's hold_out_voice), with the ratio of their BLEU (issue 32's goal: >= 0.8).
With `--hold-out-voice kal` tst-kal repeats tst-COMMON's sentences, so scoring both compares voices on the
same text.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from speechmt.data.manifest import iter_manifest
from speechmt.evaluation.benchmark import ids_digest
from speechmt.evaluation.benchmark_report import slug
from speechmt.evaluation.metrics import bleu, chrf
from speechmt_corpora.common import SynthError
from speechmt_corpora.mustc import PAIR, TALK_VOICES, read_talk_voices


@dataclass(frozen=True)
class Scored:
    """One decoded utterance: its id, reference and hypothesis."""

    id: str
    ref: str
    hyp: str


def corpus_dir(root: Path) -> Path:
    """The corpus folder holding synth_summary.json and en-de/ (given either of the two)."""
    root = Path(root)
    return root.parent if root.name == PAIR else root


def talk_voices(root: Path) -> dict[str, str]:
    """Talk name (`ted_5`) -> speaker label (`flite:kal:r110:p114`) over every split of the corpus at `root`."""
    found = read_talk_voices(corpus_dir(root) / PAIR / "data")
    if not found:
        raise SynthError(
            f"{root}: no {PAIR}/data/<split>/{TALK_VOICES} (build the corpus with this version of "
            "`speechmt data synth`)"
        )
    return found


def held_out_voice(root: Path) -> str | None:
    """The corpus' held-out voice (engine:name), or None."""
    path = corpus_dir(root) / "synth_summary.json"
    return json.loads(path.read_text(encoding="utf-8")).get("hold_out_voice") if path.is_file() else None


def voice_of(speaker: str) -> str:
    """A speaker label's voice: `flite:kal:r110:p114` -> `flite:kal`."""
    return ":".join(speaker.split(":")[:2])


def read_evaluation(folder: Path) -> list[Scored]:
    """The utterances of a `speechmt evaluate` report folder (its results.tsv)."""
    path = Path(folder) / "results.tsv"
    if not path.is_file():
        raise SynthError(f"{folder}: no results.tsv (a `speechmt evaluate --out` folder)")
    with open(path, encoding="utf-8", newline="") as f:
        return [Scored(r["id"], r["ref"], r["hyp"]) for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def read_benchmark(folder: Path, system: str) -> list[Scored]:
    """The utterances that one system of a `speechmt research benchmark` folder decoded (hyp.<slug>.txt, in the order of
    the split's first n manifest records, checked against the benchmark's digest of their ids)."""
    folder = Path(folder)
    bench = json.loads((folder / "benchmark.json").read_text(encoding="utf-8"))
    hyp_path = folder / f"hyp.{slug(system)}.txt"
    if not hyp_path.is_file():
        names = ", ".join(s["name"] for s in bench["systems"])
        raise SynthError(f"{folder}: no hypotheses of system {system!r} (systems: {names})")
    records = list(iter_manifest(Path(bench["data"]) / f"{bench['split']}.jsonl"))[: bench["n"]]
    if ids_digest([r.id for r in records]) != bench["ids_sha256"]:
        raise SynthError(f"{folder}: the manifest of {bench['split']!r} in {bench['data']} changed since the benchmark")
    hyps = hyp_path.read_text(encoding="utf-8").split("\n")[: len(records)]
    return [Scored(r.id, r.tgt_text, h) for r, h in zip(records, hyps)]


def _scores(rows: list[Scored]) -> dict:
    hyps, refs = [r.hyp for r in rows], [r.ref for r in rows]
    return {"n": len(rows), "bleu": round(bleu(hyps, refs).score, 2), "chrf": round(chrf(hyps, refs).score, 2)}


def scores_by_voice(rows: list[Scored], speakers: dict[str, str], held_out: str | None) -> dict:
    """BLEU and chrF per voice, the seen voices pooled, the held-out voice, and held-out BLEU / seen BLEU."""
    groups: dict[str, list[Scored]] = defaultdict(list)
    for row in rows:
        talk = row.id.rsplit("_", 1)[0]
        if talk not in speakers:
            raise SynthError(f"utterance {row.id}: talk {talk} is in no {TALK_VOICES} of the corpus")
        groups[voice_of(speakers[talk])].append(row)
    seen = [r for v, g in groups.items() if v != held_out for r in g]
    result = {
        "held_out_voice": held_out,
        "voices": {v: {**_scores(g), "seen": v != held_out} for v, g in sorted(groups.items())},
        "seen": _scores(seen) if seen else None,
        "held_out": _scores(groups[held_out]) if held_out in groups else None,
    }
    ok = result["seen"] and result["held_out"] and result["seen"]["bleu"] > 0
    result["held_out_over_seen_bleu"] = round(result["held_out"]["bleu"] / result["seen"]["bleu"], 3) if ok else None
    return result


def markdown(result: dict, title: str = "") -> str:
    """A table of `scores_by_voice`'s result: one row per voice, then the pooled rows and the ratio."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| voice | seen in training | utterances | BLEU | chrF |", "|---|---|---:|---:|---:|"]
    for voice, s in result["voices"].items():
        lines.append(f"| {voice} | {'yes' if s['seen'] else 'no'} | {s['n']} | {s['bleu']:.2f} | {s['chrf']:.2f} |")
    for name, key in (("all seen voices", "seen"), (f"held out ({result['held_out_voice']})", "held_out")):
        if result[key]:
            s = result[key]
            lines.append(f"| **{name}** | | {s['n']} | {s['bleu']:.2f} | {s['chrf']:.2f} |")
    if result["held_out_over_seen_bleu"] is not None:
        lines += ["", f"Held-out BLEU / seen BLEU = {result['held_out_over_seen_bleu']:.3f} (goal: >= 0.8)"]
    return "\n".join(lines) + "\n"
