"""The `conv` acoustic encoder: convolutional subsampling of fbank + Transformer encoder, the shape of
fairseq's s2t_transformer (Wang et al., 2020, "fairseq S2T: Fast Speech-to-Text Modeling with fairseq")."""

from __future__ import annotations

import math

from torch import Tensor, nn

from speechmt.models.encoders.base import EncoderOutput, Record, note
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder
from speechmt.models.subsampling import Conv1dSubsampler, Conv2dSubsampler


class ConvEncoder(nn.Module):
    """subsampler -> x * sqrt(D) + positions -> dropout -> Transformer encoder (as fairseq)."""

    def __init__(self, subsampler: nn.Module, encoder: TransformerEncoder, dim: int, dropout: float = 0.1,
                 position_offset: int = 0):
        super().__init__()
        self.subsampler, self.encoder = subsampler, encoder
        self.positions, self.scale = SinusoidalPositionalEncoding(dim, position_offset), math.sqrt(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, feats: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """feats (B, T, F), lengths (B,) -> EncoderOutput(x (B, T', D), lengths (B,)); a `record` gets
        "subsampled", "layer.<i>" and "out"."""
        x, lengths = self.subsampler(feats, lengths)
        note(record, "subsampled", x, lengths)
        x = self.dropout(self.positions(x * self.scale))
        x, lengths = self.encoder(x, lengths, record)
        return EncoderOutput(x, lengths)

    def states_frozen(self) -> bool:
        """Never cached: its input, the stored fbank, is as cheap to read as its states would be."""
        return False


def subsampler(kind: str, input_dim: int, channels: int, dim: int, kernels: tuple[int, ...]) -> nn.Module:
    """Builds a subsampler: "conv1d" (fairseq; one layer per kernel) or "conv2d" (ESPnet; `kernels` unused)."""
    if kind == "conv1d":
        return Conv1dSubsampler(input_dim, channels, dim, kernels)
    if kind == "conv2d":
        return Conv2dSubsampler(input_dim, channels, dim)
    raise ValueError(f"unknown subsampler {kind!r}; expected 'conv1d' or 'conv2d'")
