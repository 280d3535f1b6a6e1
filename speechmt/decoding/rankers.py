"""Rankers of an utterance's finished hypotheses, best first (whisper's MaximumLikelihoodRanker): here the
length penalty; minimum Bayes risk is speechmt.decoding.mbr.MBRRanker. The builders
`(DecodeOptions, detokenize | None) -> ranker` are registered in speechmt.decoding.options.RANKERS.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from speechmt.decoding.base import Hypothesis

if TYPE_CHECKING:
    from speechmt.decoding.options import DecodeOptions


class LengthPenaltyRanker:
    """By sum log-prob / (len(tokens) + 1) ** len_penalty (the length counts the EOS; fairseq's normalisation),
    highest first; ties keep the candidates' order."""

    def __init__(self, len_penalty: float = 1.0):
        self.len_penalty = len_penalty

    def rank(self, candidates: list[Hypothesis], references: list[Hypothesis]) -> list[Hypothesis]:
        """The candidates with their normalized_score, best first (`references` unused)."""
        scored = [replace(h, normalized_score=h.score / (len(h.tokens) + 1) ** self.len_penalty) for h in candidates]
        return sorted(scored, key=lambda h: h.normalized_score, reverse=True)


def length_penalty(options: DecodeOptions, detokenize: Callable[[list[int]], str] | None = None) -> LengthPenaltyRanker:
    """Ranker "length_penalty", with `options.len_penalty`."""
    return LengthPenaltyRanker(options.len_penalty)
