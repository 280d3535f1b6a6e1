"""Pre-norm Transformer decoder with cached incremental decoding (fairseq's transformer decoder shape:
scaled embeddings + sinusoidal positions, pre-norm layers, final LayerNorm, bias-free output projection;
a bias is optional, for imported models whose vocabulary has rows the original never predicts).

The same module holds Whisper's decoder (`whisper_decoder_from_hf` in speechmt.models.hf_whisper): unscaled
embeddings, learned positions, GELU feed-forward, tied output projection."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import BuildParts, KindOptions, ModelConfigT, kind_field
from speechmt.models.finetune import FINETUNE_MODES
from speechmt.models.layers import (
    LayerCache,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TransformerDecoderLayer,
    causal_mask,
    embedding,
    key_padding_mask,
)
from speechmt.tokenizers.whisper import language_token


@dataclass
class DecoderConfig(KindOptions):
    """What the rest of the package may ask of a decoder, whatever its kind: each kind's options dataclass
    (speechmt.models.registry.DECODERS) derives from this one and sets what differs."""

    kind: str = ""
    # the options of some kinds, read as these values for a kind without them (a kind's own field replaces each)
    name_or_path: ClassVar[str] = ""  # the pretrained model it starts from
    hf_config: ClassVar[dict] = {}
    base_dtype: ClassVar[str] = "float32"
    examples: ClassVar[int] = 0  # retrieved translation pairs read before each source
    memory: ClassVar[str] = ""  # the translation memory the examples come from
    whisper_tokens: ClassVar[bool] = False
    """True when the decoder writes Whisper's tokenizer's ids (Whisper's decoder)."""
    lm_tokens: ClassVar[bool] = False
    """True when the decoder writes a language model's tokens (an LM decoder; its trimmed vocabulary)."""

    @property
    def one_vocabulary(self) -> bool:
        """True when the decoder writes every task (ASR, ST, MT) in one pretrained tokenizer's vocabulary
        (Whisper's, an LM's); a Transformer decoder writes the SentencePiece vocabulary of its side."""
        return self.whisper_tokens or self.lm_tokens

    def language_tag(self, lang: str, src_lang: str, whisper_task: str) -> str:
        """The tag that starts a target in `lang`: "<lang>", or Whisper's language token, which in Whisper's
        translate task names the source language (`src_lang`)."""
        if self.whisper_tokens:
            return language_token(src_lang if whisper_task == "translate" else lang)
        return f"<{lang}>"


@dataclass
class TransformerDecoderConfig(DecoderConfig):
    """decoder kind "transformer": `layers` pre-norm layers of the model's shared dimensions, trained."""

    kind: str = kind_field("transformer")
    layers: int = checked(6, lo=1)
    finetune: str = "full"  # full, frozen, lna (LayerNorms + attention) or lora (ModelConfig.lora adapters)
    tie_embeddings: bool = True  # decoder input embedding == output projection
    output_bias: bool = False  # a bias on the output projection (imported models)
    # recompute the layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "decoder.")
            + [
                self.finetune not in FINETUNE_MODES
                and f"unknown decoder.finetune {self.finetune!r}; expected one of {', '.join(FINETUNE_MODES)}",
            ],
        )


def build_transformer_decoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[TransformerDecoder, ModelConfigT]:
    """A Transformer decoder of the model's shared dimensions and target vocabulary."""
    d = cfg.decoder
    return transformer_decoder(
        cfg.tgt_vocab_size,
        d.layers,
        cfg.d_model,
        cfg.n_heads,
        cfg.ffn_dim,
        cfg.dropout,
        cfg.attention_dropout,
        cfg.activation_dropout,
        d.tie_embeddings,
        cfg.pad_id,
        cfg.position_offset,
        d.output_bias,
    ), cfg


@dataclass
class DecoderCache:
    """Per-layer self- and cross-attention keys/values, `offset`: the steps decoded so far, and `group`:
    the decoder rows per memory row (beam search: the beams of one utterance share its encoder output,
    and its cross-attention keys/values, which are projected once from it on the first call)."""

    layers: list[LayerCache] = field(default_factory=list)
    offset: int = 0
    group: int = 1

    @classmethod
    def empty(cls, n_layers: int) -> "DecoderCache":
        return cls([LayerCache() for _ in range(n_layers)])

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keeps batch rows `index` (B',) LongTensor, in that order, with one memory row per decoder row.

        `cross=False` leaves the cross-attention keys/values as they are: right (and cheaper) when `index`
        only moves rows among beams of one utterance, whose encoder output is the same.
        """
        if cross and self.group != 1:
            raise ValueError(f"reorder(cross=True) needs one decoder row per memory row; group is {self.group}")
        self.regroup(index, index if cross else None, self.group)

    def regroup(self, index: Tensor, memory_index: Tensor | None, group: int) -> None:
        """Keeps decoder rows `index` (R',) and memory rows `memory_index` (N',; None: all, as they are),
        each in that order; from now on `group` decoder rows per memory row (R' = N' * group): the
        memory passed to the decoder must then be those N' rows."""
        for layer in self.layers:
            layer.reorder(index, memory_index)
        self.group = group


class TransformerDecoder(nn.Module):
    """tokens (B, U) and encoder memory (B, S, D) -> logits (B, U, V)."""

    def __init__(
        self,
        embed: nn.Embedding,
        layers: list[TransformerDecoderLayer],
        output: nn.Linear,
        dropout: float = 0.1,
        position_offset: int = 0,
        positions: SinusoidalPositionalEncoding | LearnedPositionalEmbedding | None = None,
        scale_embedding: bool = True,
    ):
        super().__init__()
        dim = embed.embedding_dim
        self.embed, self.layers, self.output = embed, nn.ModuleList(layers), output
        self.positions = positions if positions is not None else SinusoidalPositionalEncoding(dim, position_offset)
        self.scale = math.sqrt(dim) if scale_embedding else 1.0
        self.norm, self.dropout = nn.LayerNorm(dim), nn.Dropout(dropout)

    def new_cache(self) -> DecoderCache:
        return DecoderCache.empty(len(self.layers))

    def forward(
        self, tokens: Tensor, memory: Tensor, memory_lengths: Tensor, cache: DecoderCache | None = None
    ) -> Tensor:
        """tokens (B, U): all positions, or with a cache only the new ones; memory (B / group, S, D),
        memory_lengths (B / group,), with the cache's `group` (1 without a cache) -> logits (B, U, V).
        A cache is updated in place (keys/values appended, offset advanced)."""
        return self.output(self.hidden(tokens, memory, memory_lengths, cache))

    def hidden(
        self, tokens: Tensor, memory: Tensor, memory_lengths: Tensor, cache: DecoderCache | None = None
    ) -> Tensor:
        """`forward` before the output layer: the final LayerNorm's states (B, U, D)."""
        offset, group = (cache.offset, cache.group) if cache is not None else (0, 1)
        if tokens.size(0) != memory.size(0) * group:
            raise ValueError(f"{tokens.size(0)} decoder rows for {memory.size(0)} memory rows of {group} each")
        n = tokens.size(1)
        x = self.dropout(self.positions(self.embed(tokens) * self.scale, offset))
        self_mask = causal_mask(n, offset, tokens.device) if n > 1 else None
        memory_mask = key_padding_mask(memory_lengths, memory.size(1))
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, memory_mask, self_mask, cache.layers[i] if cache is not None else None, group)
        if cache is not None:
            cache.offset += n
        return self.norm(x)


def transformer_decoder(
    vocab_size: int,
    n_layers: int,
    dim: int,
    n_heads: int,
    ffn_dim: int,
    dropout: float = 0.1,
    attention_dropout: float = 0.1,
    activation_dropout: float = 0.1,
    tie_embeddings: bool = True,
    pad_id: int = 0,
    position_offset: int = 0,
    output_bias: bool = False,
    activation: str = "relu",
    max_positions: int = 0,
    scale_embedding: bool = True,
) -> TransformerDecoder:
    """Builds a TransformerDecoder; with `tie_embeddings` the output projection is the embedding matrix;
    `output_bias` gives the projection a bias (zero at first); `max_positions` > 0: learned positions
    (that many) instead of sinusoidal ones."""
    embed = embedding(vocab_size, dim, pad_id)
    output = nn.Linear(dim, vocab_size, bias=output_bias)
    if output_bias:
        nn.init.zeros_(output.bias)
    if tie_embeddings:
        output.weight = embed.weight
    else:
        nn.init.normal_(output.weight, mean=0.0, std=dim**-0.5)
    layers = [
        TransformerDecoderLayer(dim, n_heads, ffn_dim, dropout, attention_dropout, activation_dropout, activation)
        for _ in range(n_layers)
    ]
    positions = LearnedPositionalEmbedding(max_positions, dim, position_offset) if max_positions > 0 else None
    return TransformerDecoder(embed, layers, output, dropout, position_offset, positions, scale_embedding)
