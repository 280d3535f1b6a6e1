"""FAT-MLM's masks (Zheng et al., ICML 2021): spans of speech frames and BERT-style text tokens, drawn from a
generator the model reseeds per update; and the input frames a masked speech state covers."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from speechmt.sequence import lengths_to_padding_mask


@dataclass
class TokenMask:
    """BERT masking of one text side: `inputs` (B, S) the ids fed (10% of predicted ones random), `masked`
    (B, S) positions fed the mask vector, `predicted` (B, S) positions whose original id is a target."""

    inputs: Tensor
    masked: Tensor
    predicted: Tensor


@dataclass
class FatMasks:
    """speech (B, T') masked subsampled frames; src, tgt: TokenMask; None for an absent or unmasked part."""

    speech: Tensor | None = None
    src: TokenMask | None = None
    tgt: TokenMask | None = None


def span_mask(lengths: Tensor, share: float, span: int, generator: torch.Generator) -> Tensor:
    """(B,) lengths -> (B, max length) bool: per row round(share * length) frames masked, in non-overlapping
    spans of `span` (the last one shorter), placed uniformly among the real frames (CPU)."""
    width = int(lengths.max()) if len(lengths) else 0
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, n_frames in enumerate(lengths.tolist()):
        n = round(share * n_frames)
        if n == 0:
            continue
        sizes = [span] * (n // span) + ([n % span] if n % span else [])
        k, free = len(sizes), n_frames - n
        slots = torch.randperm(free + k, generator=generator)[:k].sort().values.tolist()
        done = 0
        for j, (slot, size) in enumerate(zip(slots, sizes)):
            start = slot - j + done  # free frames before span j, plus the spans before it
            mask[b, start : start + size] = True
            done += size
    return mask


def token_mask(
    tokens: Tensor, lengths: Tensor, share: float, first_text_id: int, vocab_size: int, generator: torch.Generator
) -> TokenMask:
    """BERT masking of tokens (B, S): each real token with an id in [first_text_id, vocab_size) (the text ids)
    is predicted with probability `share`; of those, 80% fed the mask vector, 10% a random text id, 10%
    itself."""
    tokens = tokens.cpu()
    real = ~lengths_to_padding_mask(lengths.cpu(), tokens.size(1)) & (tokens >= first_text_id) & (tokens < vocab_size)
    predicted = real & (torch.rand(tokens.shape, generator=generator) < share)
    kind = torch.rand(tokens.shape, generator=generator)
    masked, randomised = predicted & (kind < 0.8), predicted & (kind >= 0.8) & (kind < 0.9)
    random_ids = torch.randint(first_text_id, vocab_size, tokens.shape, generator=generator)
    return TokenMask(torch.where(randomised, random_ids, tokens), masked, predicted)


def reconstruction_frames(speech_mask: Tensor, feat_lengths: Tensor, width: int, factor: int) -> Tensor:
    """The fbank frames the masked subsampled frames cover: speech_mask (B, T') -> (B, width) bool, frame t
    True when subsampled frame t // factor is masked and t < its utterance's length."""
    frames = speech_mask.repeat_interleave(factor, dim=1)[:, :width]
    frames = F.pad(frames, (0, width - frames.size(1)))
    return frames & ~lengths_to_padding_mask(feat_lengths.to(frames.device), width)


def fit_mask(mask: Tensor, width: int) -> Tensor:
    """A (B, T) mask cut or padded (False) to (B, width)."""
    return F.pad(mask[:, :width], (0, max(width - mask.size(1), 0)))
