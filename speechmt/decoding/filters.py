"""Logit filters (whisper's SuppressTokens, SuppressBlank and sample_len): each edits the next-token log-probs
(R, V) in place, given the tokens generated so far (R, t) and each row's maximum length (R,). A banned token
gets -inf. The builders `(DecodeOptions) -> filter` are registered in speechmt.decoding.options.LOGIT_FILTERS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

if TYPE_CHECKING:
    from speechmt.decoding.options import DecodeOptions


class SuppressTokens:
    """Bans `ids` at every step."""

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)

    def apply(self, lprobs: Tensor, tokens: Tensor, max_lens: Tensor) -> Tensor:
        """lprobs (R, V) with the ids at -inf."""
        lprobs[:, self.ids] = float("-inf")
        return lprobs


class SuppressAtBegin:
    """Bans `ids` as the first generated token (whisper's SuppressBlank: a blank or EOS first)."""

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)

    def apply(self, lprobs: Tensor, tokens: Tensor, max_lens: Tensor) -> Tensor:
        """lprobs (R, V) with the ids at -inf at step 0 (tokens (R, 0))."""
        if tokens.size(1) == 0 and self.ids:
            lprobs[:, self.ids] = float("-inf")
        return lprobs


class MinLength:
    """Bans EOS before `min_len` tokens are generated."""

    def __init__(self, eos_id: int, min_len: int):
        self.eos_id, self.min_len = eos_id, min_len

    def apply(self, lprobs: Tensor, tokens: Tensor, max_lens: Tensor) -> Tensor:
        """lprobs (R, V) with EOS at -inf while t < min_len."""
        if tokens.size(1) < self.min_len:
            lprobs[:, self.eos_id] = float("-inf")
        return lprobs


class MaxLength:
    """Forces EOS on the rows that reached their maximum length: every other token is banned there, EOS keeps
    its log-prob (run last, after the filters that ban tokens)."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id

    def apply(self, lprobs: Tensor, tokens: Tensor, max_lens: Tensor) -> Tensor:
        """lprobs (R, V) with only EOS left on the rows where t >= max_lens (R,)."""
        at_max = tokens.size(1) >= max_lens  # (R,)
        if at_max.any():
            eos = lprobs[:, self.eos_id].clone()
            lprobs[at_max] = float("-inf")
            lprobs[:, self.eos_id] = torch.where(at_max, eos, lprobs[:, self.eos_id])
        return lprobs


def suppress_tokens(options: DecodeOptions) -> SuppressTokens:
    """Pad and bos are never generated, nor `options.suppress` (Whisper: its special tokens)."""
    return SuppressTokens([options.pad_id, options.bos_id, *options.suppress])


def suppress_at_begin(options: DecodeOptions) -> SuppressAtBegin:
    """`options.suppress_begin` never comes first."""
    return SuppressAtBegin(options.suppress_begin)


def min_length(options: DecodeOptions) -> MinLength:
    return MinLength(options.eos_id, options.min_len)


def max_length(options: DecodeOptions) -> MaxLength:
    return MaxLength(options.eos_id)
