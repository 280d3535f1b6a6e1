"""Chimera's shared semantic memory (Han, Wang, Ji and Xu, Findings of ACL 2021, "Learning Shared Semantic
Space for Speech-to-Text Translation"): M learned memory queries read the encoder states through a few
layers of cross-attention and feed-forward, with no attention between the queries, so every slot is a
function of its own query and the states alone. Either modality gives a fixed-size memory (B, M, D): the
acoustic encoder's (shrunk) states with sinusoidal positions, or the transcript's token embeddings (the
model's plain text embedder, `text_encoder.embed_only`), optionally through a shared Transformer encoder
first. The decoder attends to the M slots. The contrastive objective (speechmt.tasks.objectives
"contrastive") matches slot i of an utterance's speech memory to slot i of its transcript's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.encoders.base import EncoderOutput, Record, note
from speechmt.models.layers import (
    FeedForward,
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    TransformerEncoder,
    config_stack,
    key_padding_mask,
)
from speechmt.models.semantic.options import parse_options, text_positions


@dataclass(frozen=True)
class ChimeraOptions:
    """`memory`: M, the learned queries (slots); `layers`: memory layers; `shared_layers`: a Transformer
    encoder over the states before the memory, on both paths (0: none); `heads`: of the memory's attention
    (None: the model's n_heads); `temperature`: of the contrastive objective's cosine similarities."""

    memory: int = checked(64, lo=1)
    layers: int = checked(3, lo=1)
    shared_layers: int = checked(0, lo=0)
    heads: int | None = checked(None, lo=1, note="or null")
    temperature: float = checked(0.1, lo=0, lo_in=False)

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self), "semantic chimera")


class MemoryLayer(nn.Module):
    """Pre-norm cross-attention of the queries over the states, then a feed-forward; no self-attention, so
    each query row is computed independently of the others. queries (B, M, D), states (B, T, D) with
    lengths (B,) -> (B, M, D)."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        ffn_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
    ):
        super().__init__()
        self.attn_norm, self.attn = nn.LayerNorm(dim), MultiHeadAttention(dim, n_heads, attention_dropout)
        self.ffn_norm, self.ffn = nn.LayerNorm(dim), FeedForward(dim, ffn_dim, activation_dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: Tensor, states: Tensor, lengths: Tensor) -> Tensor:
        mask = key_padding_mask(lengths, states.size(1))  # (B, 1, 1, T): the same keys for every query
        q = queries + self.dropout(self.attn(self.attn_norm(queries), states, mask))
        return q + self.dropout(self.ffn(self.ffn_norm(q)))


class ChimeraMemory(nn.Module):
    """The optional `shared` stack, the M learned `queries` and the memory `layers`; speech() and text() share
    all of them. (x (B, T, D), lengths (B,)) in, (x (B, M, D), lengths all M) out."""

    def __init__(
        self,
        queries: int,
        layers: list[MemoryLayer],
        dim: int,
        shared: TransformerEncoder | None = None,
        dropout: float = 0.1,
        temperature: float = 0.1,
        position_offset: int = 0,
        text_positions: bool = False,
    ):
        super().__init__()
        self.text_positions = text_positions
        self.shared, self.layers = shared, nn.ModuleList(layers)
        self.queries = nn.Parameter(torch.randn(queries, dim) * dim**-0.5)
        self.states_norm, self.norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout, self.temperature = nn.Dropout(dropout), temperature
        self.positions = SinusoidalPositionalEncoding(dim, position_offset)

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Acoustic states (B, T, D) -> memory (B, M, D); sinusoidal positions are added first."""
        return self._memory(enc, self.dropout(self.positions(enc.x)), record)

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Token embeddings (B, S, D) -> memory (B, M, D); sinusoidal positions are added first when the embedder
        has none (text_positions: a language model's table)."""
        return self._memory(enc, self.dropout(self.positions(enc.x)) if self.text_positions else enc.x, record)

    def _memory(self, enc: EncoderOutput, x: Tensor, record: Record | None) -> EncoderOutput:
        lengths = enc.lengths
        if self.shared is not None:
            x, lengths = self.shared(x, lengths, record, prefix="shared.")
        states = self.states_norm(x)
        q = self.queries.to(x.dtype).expand(x.size(0), -1, -1)  # (M, D) -> (B, M, D)
        slots = torch.full_like(lengths, q.size(1))
        for i, layer in enumerate(self.layers):
            q = layer(q, states, lengths)
            note(record, f"layer.{i}", q, slots)
        q = self.norm(q)
        note(record, "out", q, slots)
        return replace(enc, x=q, lengths=slots)


def chimera(cfg, **options) -> ChimeraMemory:
    """The memory at the model's dimensions; options: ChimeraOptions fields."""
    o = parse_options("chimera", ChimeraOptions, options)
    heads = o.heads or cfg.n_heads
    if cfg.d_model % heads:
        raise ValueError(f"bad ModelConfig: semantic chimera heads {heads} do not divide d_model {cfg.d_model}")
    shared = config_stack(cfg, o.shared_layers) if o.shared_layers else None
    layers = [
        MemoryLayer(cfg.d_model, heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.activation_dropout)
        for _ in range(o.layers)
    ]
    return ChimeraMemory(
        o.memory, layers, cfg.d_model, shared, cfg.dropout, o.temperature, cfg.position_offset, text_positions(cfg)
    )
