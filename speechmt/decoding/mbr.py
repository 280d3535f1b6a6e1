"""Minimum Bayes risk selection over a beam's n-best (Kumar & Byrne 2004; Freitag et al. 2022).

The beam's K hypotheses are the candidates; they (or N epsilon samples of the model) stand in for the
model's distribution, each equally likely: the one chosen is the candidate whose expected utility against them
(as pseudo-references) is highest, argmax_i sum_j u(c_i, r_j), with u sentence-level chrF or BLEU (sacreBLEU's,
BLEU with effective n-gram order). Ties keep the beam's order, so one candidate, or K equal ones, give the
beam's best back.

`MBRRanker` is the same selection as a ranker of hypotheses (speechmt.decoding.rankers): it reads their
texts through `detokenize` (the model's tokenizer; without one, the token ids written as words).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Callable

import numpy as np

from speechmt.decoding.options import UTILITIES

if TYPE_CHECKING:
    from speechmt.decoding.base import Hypothesis
    from speechmt.decoding.options import DecodeOptions


@lru_cache(maxsize=None)
def _metric(utility: str):
    from sacrebleu.metrics import BLEU, CHRF

    if utility == "chrf":
        return CHRF()
    if utility == "bleu":
        return BLEU(effective_order=True)
    raise ValueError(f"MBR utility must be one of {', '.join(UTILITIES)}; got {utility!r}")


def utility_matrix(candidates: list[str], utility: str = "chrf", references: list[str] | None = None) -> np.ndarray:
    """(K, R) float64: entry (i, j) is the sentence score (0-100) of candidate i against reference j (default:
    the candidates themselves, R = K); an identical pair scores 100 (0 when empty) without scoring."""
    metric = _metric(utility)
    refs = candidates if references is None else references
    out = np.zeros((len(candidates), len(refs)))
    for i, hyp in enumerate(candidates):
        for j, ref in enumerate(refs):
            if hyp == ref:
                out[i, j] = 100.0 if hyp.strip() else 0.0
            else:
                out[i, j] = metric.sentence_score(hyp, [ref]).score
    return out


def mbr_order(candidates: list[str], utility: str = "chrf", references: list[str] | None = None) -> list[str]:
    """The K candidates (the beam's, best first) by expected utility against `references` (default: the
    candidates; e.g. samples of the model), highest first; ties in the candidates' order."""
    return [candidates[i] for i in mbr_ranking(candidates, utility, references)]


def mbr_ranking(candidates: list[str], utility: str = "chrf", references: list[str] | None = None) -> list[int]:
    """The candidates' indices in mbr_order's order."""
    if len(candidates) < 2:
        return list(range(len(candidates)))
    expected = utility_matrix(candidates, utility, references).mean(axis=1)
    return sorted(range(len(candidates)), key=lambda i: (-expected[i], i))


def token_text(tokens: list[int]) -> str:
    """Token ids as words ("5 7 9"): MBR's text where no tokenizer is at hand."""
    return " ".join(map(str, tokens))


class MBRRanker:
    """Hypotheses by expected utility of their texts against the references' (none: against each other),
    highest first; ties keep the candidates' order (give them best first by score)."""

    def __init__(self, utility: str = "chrf", detokenize: Callable[[list[int]], str] = token_text):
        if utility not in UTILITIES:
            raise ValueError(f"MBR utility must be one of {', '.join(UTILITIES)}; got {utility!r}")
        self.utility, self.detokenize = utility, detokenize

    def rank(self, candidates: list[Hypothesis], references: list[Hypothesis]) -> list[Hypothesis]:
        """The candidates in MBR order."""
        texts = [self.detokenize(h.tokens) for h in candidates]
        refs = [self.detokenize(h.tokens) for h in references] or None
        return [candidates[i] for i in mbr_ranking(texts, self.utility, refs)]


def mbr_ranker(options: DecodeOptions, detokenize: Callable[[list[int]], str] | None = None) -> MBRRanker:
    """Ranker "mbr", with the utility `options.mbr` (chrF without one)."""
    return MBRRanker(options.mbr or "chrf", detokenize or token_text)
