"""The speech encoder's projection (Whisper's `proj`, Linear(H -> D) into the decoder's width: what the CTC head
and the bridge read) initialised by orthogonal Procrustes from paired states (`train.init_procrustes: N`), as
cross-lingual alignment of monolingual embeddings maps one space onto the other (Conneau et al., ICLR 2018;
Schuster et al., NAACL 2019 for contextual ones; iterative normalisation first: Zhang et al., ACL 2019).

Pairs: for N training utterances, each transcript token's speech vector, the mean of the encoder's states (the
projection's input, Whisper's "out") over the token's frames (a CTC forced alignment through the CTC head, or
the frames shared out evenly: speechmt.tasks.align.token_spans), and the text path's vector of that token
(model.encode_text of the transcript: for an LM decoder, its own input embedding of the token). Both sets are
iteratively normalised (unit length, then mean centring, repeated: speechmt.evaluation.geometry) and W = U V'
from svd(X' Y) maps one onto the other. The Linear becomes the affine form of that map on the raw states:
y = mean_y + s (x - mean_x) W, s the ratio of the two sets' mean centred norms. `train.init_map: least_squares`
fits any linear map instead (ridge regression of the centred Y on the centred X, Mikolov et al. 2013's linear
mapping between embedding spaces): more parameters to fit, no isometry imposed.

A whisper_asr encoder (asr_embed states) has no frames to pool: each of its states is one token of Whisper's own
transcript, so its pairs are exact, the normalised state after each token (what the projection reads) and the LM's
input embedding of that token's text (the table asr_embed lm reads), from the states of the N utterances that
training reads, cached or searched live (`asr_pairs`): the projection then hands the LM its own input space from
the first update.

`speechmt research analyze` on the checkpoint written before the first update (train.max_updates 0), with and without
the option, measures the speech-text gap it closes (docs/semantic-layers.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from torch import nn

from speechmt.evaluation.geometry import iterative_normalize, procrustes
from speechmt.models.encoders.whisper_transcript import token_pairs
from speechmt.sequence import lengths_to_padding_mask
from speechmt.tasks.align import batch_states, compact, span_weights, token_spans, transcript_units


@dataclass(frozen=True)
class ProcrustesMap:
    """y ~ y_mean + scale (x - x_mean) w: w (d1, d2) with orthonormal rows or columns, means (d1,) and (d2,)."""

    w: np.ndarray
    x_mean: np.ndarray
    y_mean: np.ndarray
    scale: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.y_mean + self.scale * (np.asarray(x, dtype=np.float64) - self.x_mean) @ self.w


def fit_map(x, y, rounds: int = 5) -> ProcrustesMap:
    """Paired x (n, d1), y (n, d2) -> the orthogonal map of their centred, then iteratively normalised forms
    (`rounds` rounds of unit length + centring), with the sets' means and the ratio of their mean centred norms."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"Procrustes needs at least 2 paired vectors, got {len(x)} and {len(y)}")
    x_mean, y_mean = x.mean(0), y.mean(0)  # centred first: the normalisation then commutes with the map
    w = procrustes(iterative_normalize(x - x_mean, rounds), iterative_normalize(y - y_mean, rounds))
    norm_x, norm_y = np.linalg.norm(x - x_mean, axis=1).mean(), np.linalg.norm(y - y_mean, axis=1).mean()
    return ProcrustesMap(w, x_mean, y_mean, float(norm_y / norm_x) if norm_x > 0 else 1.0)


RIDGE = 1e-2  # least squares' ridge, relative to the mean eigenvalue of the centred X'X


def fit_least_squares(x, y, ridge: float = RIDGE) -> ProcrustesMap:
    """Paired x (n, d1), y (n, d2) -> the affine map minimising sum |y - y_mean - (x - x_mean) w|^2
    + lam |w|^2 (lam = ridge x trace(Xc'Xc) / d1), as a ProcrustesMap of scale 1 (w is any (d1, d2) matrix)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"a least-squares map needs at least 2 paired vectors, got {len(x)} and {len(y)}")
    x_mean, y_mean = x.mean(0), y.mean(0)
    xc, yc = x - x_mean, y - y_mean
    gram = xc.T @ xc
    lam = ridge * np.trace(gram) / gram.shape[0]
    w = np.linalg.solve(gram + lam * np.eye(gram.shape[0]), xc.T @ yc)
    return ProcrustesMap(w, x_mean, y_mean, 1.0)


@torch.no_grad()
def set_linear(linear: nn.Linear, m: ProcrustesMap) -> None:
    """`linear` (in d1, out d2) set to the map: weight = scale w', bias = y_mean - scale x_mean w."""
    if tuple(linear.weight.shape) != (m.w.shape[1], m.w.shape[0]):
        raise ValueError(f"a map {m.w.shape[0]} -> {m.w.shape[1]} does not fit Linear {tuple(linear.weight.shape)}")
    weight = torch.from_numpy(m.scale * m.w.T)
    bias = torch.from_numpy(m.y_mean - m.scale * m.x_mean @ m.w)
    linear.weight.copy_(weight.to(linear.weight))
    if linear.bias is not None:
        linear.bias.copy_(bias.to(linear.bias))


@torch.no_grad()
def paired_states(
    model: nn.Module, batches: Iterable, first_text_id: int, blank_id: int, units: str = "ctc"
) -> tuple[np.ndarray, np.ndarray]:
    """Each transcript token's pooled speech state at the projection's input (speech.encoder.out) and its text
    path vector, over the batches (audio with transcripts) -> X (P, H), Y (P, D)."""
    xs, ys = [], []
    for batch in batches:
        if batch.src is None:
            raise ValueError(
                "Procrustes pairs need the transcripts: a speech stream whose objectives read them (ctc, align)"
            )
        record: dict = {}
        enc = model.encode_speech(batch.feats, batch.feat_lengths, batch.precomputed, record=record)
        states, lengths = record["speech.encoder.out"]
        keep, labels, counts = transcript_units(batch.src, batch.src_lengths, first_text_id)
        log_probs = None
        if units == "ctc" and model.ctc_head is not None:
            log_probs = enc.ctc_logits.float().log_softmax(-1).cpu()
            labels = model.ctc_head.labels(labels)
        spans = token_spans(log_probs, lengths.cpu(), labels.cpu(), counts.cpu(), blank_id, units)
        grid = torch.arange(states.size(1), device=states.device)[None, :]
        positions = torch.where(~lengths_to_padding_mask(lengths, states.size(1)), grid, -1)
        weights = span_weights(spans, positions, labels.size(1), states.size(1)).to(states.dtype)
        mask = weights.sum(-1) > 0
        text = model.encode_text(batch.src, batch.src_lengths)
        xs.append((weights @ states)[mask].float().cpu().numpy())
        ys.append(compact(text.x, keep, labels.size(1))[mask].float().cpu().numpy())
    return np.concatenate(xs), np.concatenate(ys)


@torch.no_grad()
def asr_pairs(encoder: nn.Module, batches: Iterable, table) -> tuple[np.ndarray, np.ndarray]:
    """A whisper_asr encoder's pairs over the batches (its cached states, or audio searched live): X (P, H) the
    normalised states of each transcript token, Y (P, D) the LM's embeddings of the tokens (`table`:
    PieceEmbeddings)."""
    xs, ys = [], []
    for batch in batches:
        x, y = token_pairs(encoder, *batch_states(encoder, batch), table)
        xs.append(x.float().cpu().numpy())
        ys.append(y.float().cpu().numpy())
    return np.concatenate(xs), np.concatenate(ys)


def whisper_asr_table(model: nn.Module, whisper: str, lm: str):
    """The LM decoder's embeddings of the whisper_asr encoder's pieces (PieceEmbeddings), for `asr_pairs`;
    `whisper` and `lm` name the two models (their tokenizers). The config has checked that the decoder is an LM
    (ExperimentConfig: train.init_procrustes on whisper_asr)."""
    from speechmt.models.hf_whisper import whisper_lm_table

    return whisper_lm_table(whisper, lm, model.speech_encoder.eos_id, model.decoder)


def init_projection(
    model: nn.Module,
    batches: Iterable,
    first_text_id: int,
    blank_id: int,
    rounds: int = 5,
    units: str = "ctc",
    table=None,
    kind: str = "orthogonal",
) -> dict[str, float]:
    """Sets model.speech_encoder.proj from the batches' pairs (`kind` orthogonal: fit_map with `rounds`;
    least_squares: fit_least_squares; with `table`, a whisper_asr encoder's `asr_pairs`); nothing else changes.
    Returns the pairs' number and mean cosine of the projected speech vector to its text vector before and after."""
    fits = {"orthogonal": lambda x, y: fit_map(x, y, rounds), "least_squares": fit_least_squares}
    if kind not in fits:  # before the pairs' search, which is the costly part
        raise ValueError(f"unknown map {kind!r}; expected one of {', '.join(fits)}")
    proj = getattr(model.speech_encoder, "proj", None)
    if not isinstance(proj, nn.Linear):
        raise ValueError(
            "train.init_procrustes needs a speech encoder with a projection into the decoder's width "
            "(Whisper's proj: its width differs from the model's)"
        )
    was_training = model.training
    model.eval()
    try:
        x, y = (
            asr_pairs(model.speech_encoder, batches, table)
            if table is not None
            else paired_states(model, batches, first_text_id, blank_id, units)
        )
        before = _mean_cosine(proj, x, y)
        set_linear(proj, fits[kind](x, y))
        return {"pairs": float(len(x)), "cosine_before": before, "cosine_after": _mean_cosine(proj, x, y)}
    finally:
        model.train(was_training)


@torch.no_grad()
def _mean_cosine(proj: nn.Linear, x: np.ndarray, y: np.ndarray) -> float:
    mapped = proj(torch.from_numpy(x).to(proj.weight)).double()
    return float(torch.nn.functional.cosine_similarity(mapped, torch.from_numpy(y).double(), dim=-1).mean())


def first_batches(dataset, n: int, pad_id: int, device: torch.device, size: int = 8) -> Iterable:
    """The dataset's first `n` examples in batches of `size`, on `device`."""
    from speechmt.data.dataset import collate

    n = min(n, len(dataset))
    for start in range(0, n, size):
        yield collate([dataset[i] for i in range(start, min(start + size, n))], pad_id).to(device)
