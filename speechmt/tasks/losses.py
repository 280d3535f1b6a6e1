"""Losses: label-smoothed cross entropy (fairseq's), CTC and a teacher distance, summed over tokens (callers
normalise)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from speechmt.sequence import lengths_to_padding_mask


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """fairseq's label-smoothed cross entropy, summed over non-pad targets. Returns (loss, nll).

    logits (B, U, V), target (B, U). loss = (1 - eps - eps/(V-1)) * nll + eps/(V-1) * sum over V of -log p,
    which puts eps on the wrong classes spread evenly, as fairseq's label_smoothed_cross_entropy.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)
    target = target.unsqueeze(-1)
    nll = -lprobs.gather(-1, target).squeeze(-1)  # (B, U)
    smooth = -lprobs.sum(-1)  # (B, U)
    keep = target.squeeze(-1) != pad_id
    nll, smooth = nll[keep].sum(), smooth[keep].sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    return loss, nll


def strip_specials(
    tokens: torch.Tensor, lengths: torch.Tensor, first_text_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """CTC targets from token ids: drops ids below `first_text_id` (pad, bos, eos, blank, tags) and padding.

    tokens (B, S), lengths (B,) -> concatenated targets (N,) and their lengths (B,).
    """
    positions = torch.arange(tokens.size(1), device=tokens.device)[None, :]
    keep = (tokens >= first_text_id) & (positions < lengths[:, None])
    return tokens[keep], keep.sum(1)


def ctc_loss(
    ctc_logits: torch.Tensor,
    logit_lengths: torch.Tensor,
    targets: torch.Tensor,
    target_lengths: torch.Tensor,
    blank_id: int,
) -> torch.Tensor:
    """CTC loss summed over the batch; logits (B, T, V) raw, targets concatenated (N,) with lengths (B,).

    Infeasible alignments (a target longer than its input) give zero loss (zero_infinity) rather than inf.
    """
    lprobs = F.log_softmax(ctc_logits.float(), dim=-1).transpose(0, 1)  # (B, T, V) -> (T, B, V)
    return F.ctc_loss(
        lprobs, targets, logit_lengths, target_lengths, blank=blank_id, reduction="sum", zero_infinity=True
    )


def distance_loss(pred: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor, kind: str = "mse") -> torch.Tensor:
    """A student's states pulled to a teacher's, summed over the valid positions: pred and target (B, N, H),
    lengths (B,). "mse": the squared error averaged over the H channels; "cosine": 1 - cosine similarity.
    The target is detached: gradients reach the student only."""
    keep = ~lengths_to_padding_mask(lengths, pred.size(1))  # (B, N)
    pred, target = pred.float()[keep], target.detach().float()[keep]  # (M, H)
    if kind == "mse":
        return (pred - target).pow(2).mean(-1).sum()
    if kind == "cosine":
        return (1.0 - F.cosine_similarity(pred, target, dim=-1)).sum()
    raise ValueError(f"unknown distance {kind!r}; expected mse or cosine")


def contrastive_loss(speech: torch.Tensor, text: torch.Tensor, temperature: float) -> torch.Tensor:
    """Chimera's contrastive loss over memory slots, summed over examples and slots: for each example, the
    (M, M) cosine similarities of its speech slots (rows) to its text slots (columns), divided by the
    temperature, and the cross entropy of row i with slot i as its target. speech, text (B, M, D); the
    gradient reaches both. Computed in float32, also under autocast."""
    with torch.autocast(speech.device.type, enabled=False):
        s, t = F.normalize(speech.float(), dim=-1, eps=1e-8), F.normalize(text.float(), dim=-1, eps=1e-8)
        logits = torch.bmm(s, t.transpose(1, 2)) / temperature  # (B, M, M): [b, i, j] = cos(speech i, text j) / t
    target = torch.arange(logits.size(1), device=logits.device).expand(logits.size(0), -1)  # (B, M)
    return F.cross_entropy(logits.transpose(1, 2), target, reduction="sum")
