"""Representation geometry: how alike two layers' spaces are (linear CKA, RSA, PWCCA), how a layer's states
spread (anisotropy, SelfSim, IntraSim), cross-modal retrieval (cosine, CSLS) and an orthogonal Procrustes
map between two spaces. Math on arrays only; speechmt.evaluation.analyze runs it on a model's states.

Rows of two matrices X (n, d1) and Y (n, d2) are paired samples (the same utterances or words seen by two
layers); the widths may differ unless a function says otherwise. Computed in float64.

References: Kornblith et al., ICML 2019 (CKA); Kriegeskorte et al. 2008 (RSA); Morcos et al., NeurIPS 2018
(PWCCA); Ethayarajh, EMNLP 2019 (AvgSim, SelfSim, IntraSim); Conneau et al., ICLR 2018 (CSLS, Procrustes);
Zhang et al., ACL 2019 (iterative normalisation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

WordUnits = Sequence[Sequence[tuple[str, np.ndarray]]]
"""Word units of one layer: per sentence, its (word label, vector (D,)) pairs in order."""


def mean_pool(x: Tensor, lengths: Tensor) -> Tensor:
    """x (B, T, D), lengths (B,) -> (B, D): the mean of each row's first lengths[b] states (padding ignored)."""
    keep = torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]  # (B, T)
    sums = (x * keep[..., None].to(x.dtype)).sum(1)
    return sums / lengths.clamp(min=1)[:, None].to(x.dtype)


def _matrix(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _centre(x: np.ndarray) -> np.ndarray:
    return x - x.mean(0, keepdims=True)


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def linear_cka(x, y) -> float:
    """Linear CKA of x (n, d1) and y (n, d2) with centred columns: ||Y'X||_F^2 / (||X'X||_F ||Y'Y||_F).
    1 for y = c x Q + b (Q orthogonal, c != 0); nan when either has no variance."""
    x, y = _centre(_matrix(x)), _centre(_matrix(y))
    denominator = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(np.linalg.norm(y.T @ x) ** 2 / denominator) if denominator > 0 else float("nan")


def cosine_matrix(x) -> np.ndarray:
    """x (n, d) -> (n, n) cosine similarities of its rows."""
    u = _unit(_matrix(x))
    return u @ u.T


def rsa(x, y) -> float:
    """RSA of x (n, d1) and y (n, d2): the Pearson correlation of the upper triangles (diagonal excluded) of
    their cosine-similarity matrices (n >= 3); nan when either triangle is constant."""
    rows, cols = np.triu_indices(len(x), k=1)
    a, b = cosine_matrix(x)[rows, cols], cosine_matrix(y)[rows, cols]
    a, b = a - a.mean(), b - b.mean()
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denominator) if denominator > 1e-12 else float("nan")


def svd_prune(x, keep: float = 0.99) -> np.ndarray:
    """x (n, d) -> (n, k): the centred rows in the top k principal directions, the fewest that hold `keep`
    of the variance (SVCCA's pruning); k = 0 for data without variance."""
    x = _centre(_matrix(x))
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    energy = s**2
    if energy.sum() <= 0:
        return x[:, :0]
    k = int(np.searchsorted(np.cumsum(energy) / energy.sum(), keep - 1e-12) + 1)
    return u[:, :k] * s[:k]


def cca(x, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CCA of x (n, d1) and y (n, d2), full column rank after centring -> canonical correlations (m,) in
    decreasing order, m = min(d1, d2), and the canonical variates of x (n, m) and of y (n, m), unit-norm."""
    qx, _ = np.linalg.qr(_centre(_matrix(x)))
    qy, _ = np.linalg.qr(_centre(_matrix(y)))
    a, rho, bt = np.linalg.svd(qx.T @ qy, full_matrices=False)
    return np.clip(rho, 0.0, 1.0), qx @ a, qy @ bt.T


def pwcca(x, y, keep: float = 0.99) -> float:
    """Projection-weighted CCA (Morcos et al. 2018) of x (n, d1), y (n, d2): SVD pruning of each to `keep` of
    its variance, CCA, then the mean of the canonical correlations weighted by how much of the side with
    fewer pruned directions each canonical variate h_i accounts for: alpha_i = sum_j |<h_i, z_j>| over that
    side's centred neurons z_j. nan when either has no variance. It needs n well above the pruned widths:
    once kx + ky > n - 1 the two subspaces share directions, correlations of 1 from the sample size alone."""
    px, py = svd_prune(x, keep), svd_prune(y, keep)
    if not px.shape[1] or not py.shape[1]:
        return float("nan")
    rho, hx, hy = cca(px, py)
    h, z = (hx, x) if px.shape[1] <= py.shape[1] else (hy, y)
    alpha = np.abs(h.T @ _centre(_matrix(z))).sum(1)  # (m,)
    return float(alpha @ rho / alpha.sum())


def anisotropy(x, units, pairs: int = 2000, seed: int = 0) -> tuple[float, float]:
    """x (N, D) states, units (N,) the unit (utterance) of each -> (AvgSim, mean Euclidean distance) over
    up to `pairs` random pairs of states of different units; (nan, nan) when all are of one unit."""
    x, units = _matrix(x), np.asarray(units)
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(x), size=(2, 4 * pairs)) if len(x) else (np.zeros(0, int),) * 2
    apart = units[i] != units[j]
    i, j = i[apart][:pairs], j[apart][:pairs]
    if not len(i):
        return float("nan"), float("nan")
    cosines = (_unit(x[i]) * _unit(x[j])).sum(1)
    return float(cosines.mean()), float(np.linalg.norm(x[i] - x[j], axis=1).mean())


def _mean_pairwise_cosine(v: np.ndarray) -> float:
    """v (m, D), m >= 2 -> the mean cosine over its m (m - 1) ordered pairs of different rows."""
    u = _unit(v)
    m = len(u)
    total = np.linalg.norm(u.sum(0)) ** 2 - (np.linalg.norm(u, axis=1) ** 2).sum()
    return float(total / (m * (m - 1)))


def self_similarity(sentences: WordUnits, baseline: float = 0.0) -> float:
    """SelfSim: for each word label that occurs at least twice, the mean cosine between the vectors of its
    occurrences; averaged over those words, minus `baseline` (the layer's AvgSim). nan when no word repeats."""
    by_word: dict[str, list[np.ndarray]] = defaultdict(list)
    for words in sentences:
        for label, vector in words:
            by_word[label].append(vector)
    sims = [_mean_pairwise_cosine(_matrix(v)) for v in by_word.values() if len(v) >= 2]
    return float(np.mean(sims)) - baseline if sims else float("nan")


def intra_similarity(sentences: WordUnits, baseline: float = 0.0) -> float:
    """IntraSim: for each sentence of at least two words, the mean cosine between its word vectors and
    their mean vector; averaged over sentences, minus `baseline`. nan when no sentence has two words."""
    sims = []
    for words in sentences:
        if len(words) >= 2:
            v = _matrix([vector for _, vector in words])
            sims.append(float((_unit(v) @ _unit(v.mean(0))).mean()))
    return float(np.mean(sims)) - baseline if sims else float("nan")


def word_geometry(sentences: WordUnits, pairs: int = 2000, seed: int = 0) -> dict[str, float]:
    """One layer's word units -> AvgSim and mean distance over words of different sentences, and SelfSim
    and IntraSim both raw and corrected by AvgSim (Ethayarajh 2019)."""
    vectors = [vector for words in sentences for _, vector in words]
    units = [n for n, words in enumerate(sentences) for _ in words]
    avg, dist = anisotropy(np.stack(vectors) if vectors else np.zeros((0, 1)), units, pairs, seed)
    self_raw, intra_raw = self_similarity(sentences), intra_similarity(sentences)
    return {
        "avg_sim": avg,
        "avg_dist": dist,
        "self_sim_raw": self_raw,
        "intra_sim_raw": intra_raw,
        "self_sim": self_raw - avg,
        "intra_sim": intra_raw - avg,
    }


def cosine_scores(x, y) -> np.ndarray:
    """x (n, D), y (m, D) -> (n, m) cosines."""
    return _unit(_matrix(x)) @ _unit(_matrix(y)).T


def csls_scores(x, y, k: int = 10) -> np.ndarray:
    """x (n, D) queries, y (m, D) targets -> (n, m) CSLS = 2 cos(x_i, y_j) - r_y(x_i) - r_x(y_j), where
    r_y(x_i) is the mean cosine of x_i to its k nearest targets and r_x(y_j) that of y_j to its k nearest
    queries (k capped at the set's size)."""
    cos = cosine_scores(x, y)
    kx, ky = min(k, cos.shape[1]), min(k, cos.shape[0])
    r_query = -np.sort(-cos, axis=1)[:, :kx].mean(1)  # (n,)
    r_target = -np.sort(-cos, axis=0)[:ky, :].mean(0)  # (m,)
    return 2 * cos - r_query[:, None] - r_target[None, :]


def precision_at_1(scores: np.ndarray) -> float:
    """scores (n, n) of query i against target j, query i's pair being target i -> the share of queries
    whose best-scored target is their pair."""
    return float((scores.argmax(1) == np.arange(len(scores))).mean()) if len(scores) else float("nan")


def retrieval(x, y, k: int = 10) -> dict[str, dict[str, float]]:
    """Paired x (n, D), y (n, D) -> P@1 both ways with cosine and with CSLS (k neighbours):
    {"cosine": {"x_to_y", "y_to_x"}, "csls": {...}}."""
    cos = cosine_scores(x, y)
    return {
        "cosine": {"x_to_y": precision_at_1(cos), "y_to_x": precision_at_1(cos.T)},
        "csls": {"x_to_y": precision_at_1(csls_scores(x, y, k)), "y_to_x": precision_at_1(csls_scores(y, x, k))},
    }


def iterative_normalize(x, rounds: int = 5) -> np.ndarray:
    """x (n, D) -> (n, D): `rounds` times unit length then mean centring (Zhang et al. 2019), and unit
    length at the end."""
    x = _matrix(x)
    for _ in range(rounds):
        x = _centre(_unit(x))
    return _unit(x)


def procrustes(x, y) -> np.ndarray:
    """Paired x (n, d1), y (n, d2) -> W (d1, d2) minimising ||x W - y||_F with orthonormal rows (d1 <= d2)
    or columns: W = U V' for U S V' = svd(x'y); a rotation when d1 == d2."""
    u, _, vt = np.linalg.svd(_matrix(x).T @ _matrix(y), full_matrices=False)
    return u @ vt


def procrustes_test(x_fit, y_fit, x_test, y_test, rounds: int = 5, k: int = 10) -> dict:
    """Fits W on the pairs (x_fit, y_fit) and tests it on (x_test, y_test), every set iteratively normalised
    first: retrieval P@1 of x_test W against y_test (see `retrieval`), the test pairs' mean cosine after the
    map and before it (None when the widths differ), and W (d1, d2)."""
    xf, yf, xt, yt = (iterative_normalize(a, rounds) for a in (x_fit, y_fit, x_test, y_test))
    w = procrustes(xf, yf)
    mapped = xt @ w
    before = float((xt * yt).sum(1).mean()) if xt.shape[1] == yt.shape[1] else None
    return {
        "retrieval": retrieval(mapped, yt, k),
        "test_cosine": float((_unit(mapped) * yt).sum(1).mean()),
        "test_cosine_before": before,
        "n_fit": len(xf),
        "n_test": len(xt),
        "w": w,
    }


def _ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks of a (N,), ties given their mean rank."""
    ranks = np.empty(len(a))
    ranks[np.argsort(a, kind="stable")] = np.arange(1, len(a) + 1)
    _, group = np.unique(a, return_inverse=True)
    return (np.bincount(group, weights=ranks) / np.bincount(group))[group]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (the Pearson correlation of their ranks, ties
    at their mean rank); nan when there are fewer than 3 pairs or either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two sequences of one length, got {x.shape} and {y.shape}")
    rx, ry = _ranks(x), _ranks(y)
    if len(x) < 3 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
