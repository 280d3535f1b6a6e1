"""Minimum Bayes risk selection over a beam's n-best (Kumar & Byrne 2004; Freitag et al. 2022).

The beam's K hypotheses are the candidates; they (or N epsilon samples of the model) stand in for the
model's distribution, each equally likely: the one chosen is the candidate whose expected utility against them
(as pseudo-references) is highest, argmax_i sum_j u(c_i, r_j), with u sentence-level chrF or BLEU (sacreBLEU's,
BLEU with effective n-gram order). Ties keep the beam's order, so one candidate, or K equal ones, give the
beam's best back.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

UTILITIES = ("chrf", "bleu")


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
    if len(candidates) < 2:
        return list(candidates)
    expected = utility_matrix(candidates, utility, references).mean(axis=1)
    order = sorted(range(len(candidates)), key=lambda i: (-expected[i], i))
    return [candidates[i] for i in order]
