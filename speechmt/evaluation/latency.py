"""Latency of simultaneous translation: Average Lagging (AL) and Length-Adaptive Average Lagging (LAAL), as
SimulEval computes them (simuleval/evaluator/scorers/latency_scorer.py), computation-unaware and -aware.

For one utterance of |X| ms of source, whose i-th output word (i = 1..|Y*|) was written after d_i ms of source
had been read:

    AL   = 1/tau * sum_{i=1..tau} d_i - (i - 1) * |X| / |Y|
    LAAL = 1/tau * sum_{i=1..tau} d_i - (i - 1) * |X| / max(|Y|, |Y*|)

where tau is the first i with d_i >= |X| (or |Y*| when none), |Y| the reference's length in words (the
hypothesis's when there is no reference), and when d_1 > |X| both are d_1. Computation-unaware delays d_i are
the source read; computation-aware ones add the wall-clock seconds spent computing until word i was written
(SimulEval's "elapsed"). A corpus score is the mean over utterances with at least one output word (the others
are counted as skipped, as SimulEval skips them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _lagging(delays: Sequence[float], source_length: float, target_length: float) -> float:
    if source_length <= 0:
        raise ValueError(f"source_length must be positive; got {source_length}")
    if not delays:
        raise ValueError("no delays: an empty output has no lagging")
    if delays[0] > source_length:
        return float(delays[0])
    rate = source_length / target_length  # |X| / |Y|: the ideal source ms per output word
    total, tau = 0.0, 0
    for i, d in enumerate(delays):
        total += d - i * rate
        tau = i + 1
        if d >= source_length:
            break
    return total / tau


def average_lagging(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    """AL of one utterance in the units of `delays` (ms); |Y| is the reference's word count (or, when None,
    the number of delays)."""
    return _lagging(delays, source_length, reference_length or len(delays))


def length_adaptive_average_lagging(
    delays: Sequence[float], source_length: float, reference_length: int | None = None
) -> float:
    """LAAL of one utterance: AL with |Y| = max(reference words, output words), so that over-long output is
    not rewarded."""
    return _lagging(delays, source_length, max(reference_length or 0, len(delays)))


@dataclass(frozen=True)
class Delays:
    """One utterance's latency facts: per output word the source ms read (`delays`) and that plus the compute
    ms spent so far (`elapsed`), the source length in ms, and the reference's word count (None: unknown)."""

    delays: tuple[float, ...]
    elapsed: tuple[float, ...]
    source_ms: float
    reference_words: int | None = None


def corpus_latency(items: Sequence[Delays]) -> dict[str, float | int | None]:
    """Mean AL, LAAL, AL_CA and LAAL_CA (computation-aware) in ms over the utterances with output, and how many
    were skipped for having none; the means are None when every utterance was skipped."""
    scored = [d for d in items if d.delays]
    out: dict[str, float | int | None] = {"n": len(scored), "skipped": len(items) - len(scored)}
    for name, fn, field in (
        ("AL", average_lagging, "delays"),
        ("LAAL", length_adaptive_average_lagging, "delays"),
        ("AL_CA", average_lagging, "elapsed"),
        ("LAAL_CA", length_adaptive_average_lagging, "elapsed"),
    ):
        values = [fn(getattr(d, field), d.source_ms, d.reference_words) for d in scored]
        out[name] = sum(values) / len(values) if values else None
    return out


def word_delays(events: Sequence[tuple[str, float, float]], final: bool = True) -> tuple[list[float], list[float]]:
    """(delays, elapsed) per output word from the commits of one utterance: (the whole text committed so far,
    source ms read, elapsed ms) in order. A word counts as written once text follows it (a space after it),
    or at the last commit when `final`."""
    delays: list[float] = []
    elapsed: list[float] = []
    for n, (text, delay, spent) in enumerate(events):
        words = text.split()
        complete = len(words) if (final and n == len(events) - 1) or text[-1:].isspace() else len(words) - 1
        while len(delays) < complete:
            delays.append(delay)
            elapsed.append(spent)
    return delays, elapsed
