"""Text encoder for MT input: token embeddings + positions + Transformer encoder. Its Transformer may be
the speech encoder's own (XSTNet, Ye et al., Interspeech 2021: one encoder for speech and text)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from speechmt.models.encoders.base import EncoderOutput, Record, note
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder
from speechmt.sequence import lengths_to_padding_mask


class TextEncoder(nn.Module):
    """embedding * scale + positions -> dropout -> Transformer encoder (none: a plain embedder). By default
    scale sqrt(D) and sinusoidal positions; a pretrained embedder (Whisper's decoder's) brings its own."""

    def __init__(
        self,
        embedding: nn.Embedding,
        encoder: TransformerEncoder | None,
        dropout: float = 0.1,
        position_offset: int = 0,
        positions: nn.Module | None = None,
        scale: float | None = None,
    ):
        super().__init__()
        dim = embedding.embedding_dim
        self.embedding, self.encoder = embedding, encoder
        self.positions = positions if positions is not None else SinusoidalPositionalEncoding(dim, position_offset)
        self.scale = math.sqrt(dim) if scale is None else scale
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """tokens (B, S), lengths (B,) -> EncoderOutput(x (B, S, D), lengths (B,)); a `record` gets
        "embedded" (token embeddings, before scaling and positions), "layer.<i>" and "out"."""
        emb = self.embedding(tokens)
        note(record, "embedded", emb, lengths)
        x = self.dropout(self.positions(emb * self.scale))
        if self.encoder is None:  # a plain embedder: padded positions zero, as every encoder's output
            x = x.masked_fill(lengths_to_padding_mask(lengths, x.size(1))[..., None], 0.0)
            note(record, "out", x, lengths)
            return EncoderOutput(x, lengths)
        x, lengths = self.encoder(x, lengths, record)
        return EncoderOutput(x, lengths)
