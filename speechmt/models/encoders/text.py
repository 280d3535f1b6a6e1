"""Text encoder for MT input: token embeddings + positions + Transformer encoder. Its Transformer may be
the speech encoder's own (XSTNet, Ye et al., Interspeech 2021: one encoder for speech and text)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder


class TextEncoder(nn.Module):
    """embedding * sqrt(D) + positions -> dropout -> Transformer encoder."""

    def __init__(self, embedding: nn.Embedding, encoder: TransformerEncoder, dropout: float = 0.1,
                 position_offset: int = 0):
        super().__init__()
        dim = embedding.embedding_dim
        self.embedding, self.encoder = embedding, encoder
        self.positions, self.scale = SinusoidalPositionalEncoding(dim, position_offset), math.sqrt(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, lengths: Tensor) -> EncoderOutput:
        """tokens (B, S), lengths (B,) -> EncoderOutput(x (B, S, D), lengths (B,))."""
        x = self.dropout(self.positions(self.embedding(tokens) * self.scale))
        x, lengths = self.encoder(x, lengths)
        return EncoderOutput(x, lengths)
