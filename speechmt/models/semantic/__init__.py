"""The semantic slot: a module between the encoders and the decoder, shared by the speech path (after the
acoustic encoder and any shrinking) and the text path (after the text encoder or embedder). Each variant
is one file here and one entry in SEMANTICS: a builder `(ModelConfig) -> module` with two methods,

    speech(enc: EncoderOutput, record: Record | None) -> EncoderOutput
    text(enc: EncoderOutput, record: Record | None) -> EncoderOutput

each (x (B, T, D), lengths (B,)) in and out, free to note its layers in `record`
(speechmt.models.translator.Translator.states); the objectives that train a variant read what they need of it
by its type (speechmt.tasks.objectives).
`SemanticConfig` (ModelConfig.semantic) names the variant; its own settings come from `options` through
the variant's own dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from speechmt.checks import raise_problems
from speechmt.models.encoders.base import EncoderOutput, Record
from speechmt.models.fat_mlm import FatMLMOptions
from speechmt.models.semantic.chimera import ChimeraMemory, ChimeraOptions, chimera
from speechmt.models.semantic.identity import Identity, identity
from speechmt.models.semantic.lut import LUTOptions, LUTSemanticEncoder, lut, lut_teacher, with_lut_teacher
from speechmt.models.semantic.options import parse_options
from speechmt.models.semantic.xstnet import XSTNetEncoder, XSTNetOptions, xstnet


class SemanticLayer(Protocol):
    """What every semantic variant is (an nn.Module with these two methods; no common base class)."""

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput: ...

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput: ...


SEMANTICS: dict[str, Callable[..., SemanticLayer]] = {
    "identity": identity,
    "lut": lut,
    "xstnet": xstnet,
    "chimera": chimera,
}
"""Each semantic layer's builder `(ModelConfig, **options) -> layer`, by kind."""
SEMANTIC_OPTIONS: dict[str, type] = {
    "chimera": ChimeraOptions,
    "lut": LUTOptions,
    "xstnet": XSTNetOptions,
    "fat_mlm": FatMLMOptions,
}
"""Each kind's options dataclass, checked when a config is read, so that a bad value is one line naming it
before anything is built (a kind without an entry is checked by its builder alone)."""
PRETRAINING_KINDS = ("fat_mlm",)
"""Kinds a config names in this slot that are no semantic layer: `fat_mlm` is how every config and checkpoint
of FAT-MLM names that pretraining model, which has its own builder (speechmt.models.build)."""


@dataclass
class SemanticConfig:
    """The semantic layer between the encoders and the decoder: `kind` "identity" (none) or a variant of
    SEMANTICS, with its own settings in `options` (the variant's options dataclass, SEMANTIC_OPTIONS)."""

    kind: str = "identity"
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        self.options = dict(self.options)
        kinds = (*SEMANTICS, *PRETRAINING_KINDS)
        raise_problems(
            "bad ModelConfig",
            [
                self.kind not in kinds and f"unknown semantic {self.kind!r}; expected one of {', '.join(kinds)}",
                self.kind == "identity"
                and self.options
                and f"semantic 'identity' takes no options, got {', '.join(sorted(self.options))}",
            ],
        )
        if self.kind in SEMANTIC_OPTIONS:
            parse_options(self.kind, SEMANTIC_OPTIONS[self.kind], self.options)

    def teacher(self) -> str | None:
        """The text teacher whose states supervise this layer (LUT's `teacher` option), None for a layer
        without one."""
        return lut_teacher(self.options) if self.kind == "lut" else None

    def with_teacher(self, name: str, width: int) -> "SemanticConfig":
        """This config with the teacher's name and width in its options (LUT's teacher_dim)."""
        return replace(self, options=with_lut_teacher(self.options, name, width))


__all__ = [
    "ChimeraMemory",
    "Identity",
    "LUTSemanticEncoder",
    "SEMANTICS",
    "SemanticConfig",
    "SemanticLayer",
    "XSTNetEncoder",
]
