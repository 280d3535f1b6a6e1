"""Transformer building blocks: attention, feed-forward, pre-norm encoder/decoder layers, positions.

Layouts are batch first: x (B, T, D); attention heads (B, H, T, D / H). Boolean attention masks follow
`torch.nn.functional.scaled_dot_product_attention`: True where a query may attend to a key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.sequence import lengths_to_padding_mask


def _xavier(linear: nn.Linear, gain: float = 1.0) -> nn.Linear:
    """fairseq's initialisation of attention and feed-forward projections."""
    nn.init.xavier_uniform_(linear.weight, gain=gain)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
    return linear


def key_padding_mask(lengths: Tensor, max_len: int) -> Tensor:
    """(B,) key lengths -> (B, 1, 1, S) bool attention mask, True at real (attendable) keys."""
    return ~lengths_to_padding_mask(lengths, max_len)[:, None, None, :]


def causal_mask(n_queries: int, offset: int, device: torch.device) -> Tensor:
    """(Q, offset + Q) bool mask: query at absolute position offset + i sees keys 0 .. offset + i."""
    queries = torch.arange(offset, offset + n_queries, device=device)
    keys = torch.arange(offset + n_queries, device=device)
    return keys[None, :] <= queries[:, None]


def embedding(num_embeddings: int, dim: int, pad_id: int) -> nn.Embedding:
    """Token embedding initialised as fairseq: N(0, dim^-0.5), zero row at `pad_id`."""
    emb = nn.Embedding(num_embeddings, dim, padding_idx=pad_id)
    nn.init.normal_(emb.weight, mean=0.0, std=dim**-0.5)
    with torch.no_grad():
        emb.weight[pad_id].zero_()
    return emb


class SinusoidalPositionalEncoding(nn.Module):
    """Adds fairseq's sinusoidal positions (sin of all frequencies, then cos) to x, from any offset.

    Position p, channel i < D/2: sin(p * 10000^(-i / (D/2 - 1))); channel D/2 + i: the cos of the same.
    The first frame gets position `position_offset` (0 here; fairseq and Hugging Face's Speech2Text count
    from padding_idx + 1). Computed on the fly for any length, so it has no parameters or buffers.
    """

    def __init__(self, dim: int, position_offset: int = 0):
        super().__init__()
        self.dim, self.position_offset = dim, position_offset

    def table(self, length: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
        """(length, D) encodings of positions offset .. offset + length - 1 (float32)."""
        half = self.dim // 2
        step = math.log(10000.0) / max(half - 1, 1)
        freqs = torch.exp(torch.arange(half, device=device, dtype=torch.float32) * -step)
        positions = torch.arange(offset, offset + length, device=device, dtype=torch.float32)
        angles = positions[:, None] * freqs[None, :]  # (L, D/2)
        table = torch.cat([angles.sin(), angles.cos()], dim=1)
        return F.pad(table, (0, self.dim % 2))

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (B, T, D) -> x + positions p .. p + T - 1 with p = position_offset + offset, (B, T, D)."""
        return x + self.table(x.size(1), self.position_offset + offset, x.device).to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """Adds learned positions (Whisper's decoder): a (max_positions, D) table, read from any offset."""

    def __init__(self, max_positions: int, dim: int, position_offset: int = 0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, dim).normal_(0.0, dim**-0.5))
        self.position_offset = position_offset

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (B, T, D) -> x + weight[p .. p + T - 1], p = position_offset + offset; ValueError past the table."""
        start = self.position_offset + offset
        if start + x.size(1) > self.weight.size(0):
            raise ValueError(
                f"position {start + x.size(1) - 1} is beyond the {self.weight.size(0)} learned "
                "positions (lower the maximum output length, or shorten the source text)"
            )
        return x + self.weight[start : start + x.size(1)].to(x.dtype)


FEW_QUERIES = 16
"""Attention of at most this many queries per row, out of training (a decoding step: beams x new tokens), is
computed with explicit products (`_few_query_attention`), whose float32 softmax also keeps bfloat16 decoding at
float32's quality. On the CPU over contiguous keys and values (the decoder's caches) the fused kernel is slower
there, most in bfloat16 (one query over 750 keys: 7.5 ms against 1.5 ms; float32 2.2 against 1.6; level at 4-16
queries); over transposed views (a step without a cache: the first) the products are 2-3x slower, which the cached
steps repay (benchmarks/bench_step_attention.py)."""


def _few_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """scaled_dot_product_attention without dropout, as products: q (B, H, T, Dh), k and v (B, H, S, Dh), a bool
    mask broadcastable to (B, H, T, S) (True: attend) or None -> (B, H, T, Dh). The softmax runs in float32;
    a query that may attend to no key gets zeros, as from the fused kernel."""
    scores = (q @ k.transpose(-1, -2)).float() * q.size(-1) ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1).nan_to_num(0.0).to(v.dtype) @ v


class MultiHeadAttention(nn.Module):
    """Multi-head attention on `scaled_dot_product_attention`, split into key/value projection and
    attention so that a decoder can cache projected keys and values."""

    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"dim {dim} is not divisible by n_heads {n_heads}")
        self.n_heads, self.dropout = n_heads, dropout
        gain = 1 / math.sqrt(2)
        self.q_proj = _xavier(nn.Linear(dim, dim), gain)
        self.k_proj = _xavier(nn.Linear(dim, dim), gain)
        self.v_proj = _xavier(nn.Linear(dim, dim), gain)
        self.out_proj = _xavier(nn.Linear(dim, dim))

    def _heads(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, T, D) -> (B, H, T, D/H)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (B, S, D) -> keys and values, each (B, H, S, D/H)."""
        return self._heads(self.k_proj(memory)), self._heads(self.v_proj(memory))

    def attend(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int = 1) -> Tensor:
        """Queries from x (N * group, T, D) over k, v (N, H, S, D/H): each `group` consecutive rows of x
        share one row of keys/values (beam search: the beams of one utterance over its encoder output)
        and are attended as one row of group * T queries; mask broadcastable to (N, H, group * T, S)
        -> (N * group, T, D)."""
        p = self.dropout if self.training else 0.0
        q = self._heads(self.q_proj(x))  # (N * G, H, T, D/H)
        b, h, t, dh = q.shape
        if group > 1:  # (N * G, H, T, D/H) -> (N, H, G * T, D/H)
            q = q.view(b // group, group, h, t, dh).transpose(1, 2).reshape(b // group, h, group * t, dh)
        out = (
            _few_query_attention(q, k, v, mask)
            if not self.training and q.size(2) <= FEW_QUERIES
            else F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        )
        out = out.view(b // group, h, group, t, dh).permute(0, 2, 3, 1, 4)  # (N, G, T, H, D/H)
        return self.out_proj(out.reshape(b, t, h * dh))  # -> (N * G, T, D)

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor | None = None) -> Tensor:
        """x (B, T, D) attends over memory (B, S, D) -> (B, T, D)."""
        return self.attend(x, *self.project_kv(memory), mask)


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # gelu: the exact (erf) form, as Whisper and BERT


class FeedForward(nn.Module):
    """Linear -> ReLU (or GELU) -> dropout -> Linear, (B, T, D) -> (B, T, D)."""

    def __init__(self, dim: int, hidden: int, activation_dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}")
        self.fc1, self.fc2 = _xavier(nn.Linear(dim, hidden)), _xavier(nn.Linear(hidden, dim))
        self.dropout, self.activation = nn.Dropout(activation_dropout), ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


class TransformerEncoderLayer(nn.Module):
    """Pre-norm self-attention + feed-forward block; takes and returns (x (B, T, D), lengths (B,))."""

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

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        h = self.attn_norm(x)
        x = x + self.dropout(self.attn(h, h, key_padding_mask(lengths, x.size(1))))
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return x, lengths


class TransformerEncoder(nn.Module):
    """A stack of pre-norm encoder layers and the final LayerNorm (none with final_norm=False); padded frames
    of the output are zero.

    (x (B, T, D), lengths (B,)) -> (x (B, T, D), lengths).
    """

    def __init__(self, layers: list[TransformerEncoderLayer], dim: int, final_norm: bool = True):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()

    def forward(
        self, x: Tensor, lengths: Tensor, record: "dict | None" = None, prefix: str = ""
    ) -> tuple[Tensor, Tensor]:
        """With a `record` (speechmt.models.encoders.base.Record), each layer's output (the residual stream,
        before the final norm) is noted as `{prefix}layer.{i}` and the normed output as `{prefix}out`."""
        for i, layer in enumerate(self.layers):
            x, lengths = layer(x, lengths)
            if record is not None:
                record[f"{prefix}layer.{i}"] = (x, lengths)
        x = self.norm(x).masked_fill(lengths_to_padding_mask(lengths, x.size(1))[..., None], 0.0)
        if record is not None:
            record[f"{prefix}out"] = (x, lengths)
        return x, lengths


def transformer_encoder(
    n_layers: int,
    dim: int,
    n_heads: int,
    ffn_dim: int,
    dropout: float = 0.1,
    attention_dropout: float = 0.1,
    activation_dropout: float = 0.1,
    final_norm: bool = True,
) -> TransformerEncoder:
    """Builds a TransformerEncoder of `n_layers` identical-shape layers."""
    layers = [
        TransformerEncoderLayer(dim, n_heads, ffn_dim, dropout, attention_dropout, activation_dropout)
        for _ in range(n_layers)
    ]
    return TransformerEncoder(layers, dim, final_norm)


def zero_residual_branches(stack: TransformerEncoder) -> TransformerEncoder:
    """Zeroes each layer's last projections (attention out_proj, feed-forward fc2; weights and biases), so
    that every layer adds nothing to its residual stream: without a final norm the stack is then exactly the
    identity on its input (padded frames zeroed). Gradients still reach those projections (their input is
    not zero), and through them the rest of each layer once they move: the stack grows from the identity,
    as LoRA's zero B or zero-initialised residual branches (Goyal et al. 2017; Zhang et al., Fixup, 2019)."""
    with torch.no_grad():
        for layer in stack.layers:
            for linear in (layer.attn.out_proj, layer.ffn.fc2):
                linear.weight.zero_()
                linear.bias.zero_()
    return stack


STACK_INITS = ("random", "identity")
"""A semantic stack's `init` option: fairseq's random initialisation, or the identity (config_stack)."""


def config_stack(cfg, n_layers: int, identity: bool = False) -> TransformerEncoder:
    """`n_layers` encoder layers at a ModelConfig's shared sizes and dropouts; `identity`: no final norm and
    zeroed residual branches, so the stack starts as the identity (zero_residual_branches)."""
    stack = transformer_encoder(
        n_layers,
        cfg.d_model,
        cfg.n_heads,
        cfg.ffn_dim,
        cfg.dropout,
        cfg.attention_dropout,
        cfg.activation_dropout,
        final_norm=not identity,
    )
    return zero_residual_branches(stack) if identity else stack


def _rows(kv: tuple[Tensor, Tensor] | None, index: Tensor) -> tuple[Tensor, Tensor] | None:
    return None if kv is None else (kv[0].index_select(0, index), kv[1].index_select(0, index))


@dataclass
class LayerCache:
    """One decoder layer's cached keys and values: self-attention over the steps so far, (B, H, t, D/H);
    cross-attention over the encoder output, projected once, one row per memory row (N, H, S, D/H)."""

    self_kv: tuple[Tensor, Tensor] | None = None
    cross_kv: tuple[Tensor, Tensor] | None = None

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Keeps self-attention rows `index` (B',) and, if given, cross-attention rows `memory_index`
        (N',), each in that order."""
        self.self_kv = _rows(self.self_kv, index)
        if memory_index is not None:
            self.cross_kv = _rows(self.cross_kv, memory_index)


class TransformerDecoderLayer(nn.Module):
    """Pre-norm causal self-attention, cross-attention and feed-forward, with an optional KV cache."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        ffn_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        activation: str = "relu",
    ):
        super().__init__()
        self.self_norm, self.self_attn = nn.LayerNorm(dim), MultiHeadAttention(dim, n_heads, attention_dropout)
        self.cross_norm, self.cross_attn = nn.LayerNorm(dim), MultiHeadAttention(dim, n_heads, attention_dropout)
        self.ffn_norm, self.ffn = nn.LayerNorm(dim), FeedForward(dim, ffn_dim, activation_dropout, activation)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        self_mask: Tensor | None,
        cache: LayerCache | None = None,
        group: int = 1,
    ) -> Tensor:
        """x (N * group, U, D) new positions; memory (N, S, D), each row shared by `group` consecutive rows
        of x; memory_mask (N, 1, 1, S); self_mask (U, t + U) or None (no masking); with a cache, keys/values
        of the t earlier steps come from it -> (N * group, U, D)."""
        h = self.self_norm(x)
        k, v = self.self_attn.project_kv(h)
        if cache is not None:
            if cache.self_kv is not None:
                k, v = torch.cat([cache.self_kv[0], k], dim=2), torch.cat([cache.self_kv[1], v], dim=2)
            cache.self_kv = (k, v)
        x = x + self.dropout(self.self_attn.attend(h, k, v, self_mask))
        x = x + self.dropout(
            self.cross_attn.attend(self.cross_norm(x), *self._cross_kv(memory, cache), memory_mask, group)
        )
        return x + self.dropout(self.ffn(self.ffn_norm(x)))

    def _cross_kv(self, memory: Tensor, cache: LayerCache | None) -> tuple[Tensor, Tensor]:
        if cache is not None and cache.cross_kv is not None:
            return cache.cross_kv
        kv = self.cross_attn.project_kv(memory)
        if cache is not None:  # stored contiguous: every step reads them (a transposed view costs 2-4x there)
            kv = cache.cross_kv = (kv[0].contiguous(), kv[1].contiguous())
        return kv
