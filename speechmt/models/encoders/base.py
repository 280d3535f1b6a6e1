"""What every encoder returns, and the shape of an acoustic encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


@dataclass
class EncoderOutput:
    """Encoder states x (B, T', D) with lengths (B,) int64; padded frames of x are zero.

    ctc_logits (B, T', src_vocab_size): raw CTC logits (no log_softmax) when the model has a CTC head.
    """

    x: Tensor
    lengths: Tensor
    ctc_logits: Tensor | None = None

    def select(self, index: Tensor) -> "EncoderOutput":
        """The batch rows `index` (B',), in that order (repeats allowed, e.g. to expand for beam search)."""
        ctc = None if self.ctc_logits is None else self.ctc_logits.index_select(0, index)
        return EncoderOutput(self.x.index_select(0, index), self.lengths.index_select(0, index), ctc)


class AcousticEncoder(Protocol):
    """Features (B, T, F) with lengths (B,) -> EncoderOutput (without CTC logits: the model adds those)."""

    def __call__(self, feats: Tensor, lengths: Tensor) -> EncoderOutput: ...
