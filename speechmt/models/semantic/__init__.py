"""The semantic slot: a module between the encoders and the decoder, shared by the speech path (after the
acoustic encoder and any shrinking) and the text path (after the text encoder or embedder). Each variant
is one file here and one entry in SEMANTICS: a builder `(ModelConfig) -> module` with two methods,

    speech(enc: EncoderOutput, record: Record | None) -> EncoderOutput
    text(enc: EncoderOutput, record: Record | None) -> EncoderOutput

each (x (B, T, D), lengths (B,)) in and out, free to put auxiliary outputs in `enc.aux` for its objectives
(speechmt.tasks.objectives) and to note its layers in `record` (speechmt.models.translator.Translator.states).
`SemanticConfig` (ModelConfig.semantic) names the variant; its own settings come from `options` through
the variant's own dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from torch import nn

from speechmt.config_check import raise_problems
from speechmt.models.fat_mlm import FatMLMOptions, fat_mlm
from speechmt.models.encoders.base import EncoderOutput, Record
from speechmt.models.semantic.chimera import ChimeraMemory, ChimeraOptions, chimera
from speechmt.models.semantic.identity import Identity, identity
from speechmt.models.semantic.lut import LUTOptions, LUTSemanticEncoder, lut
from speechmt.models.semantic.options import parse_options
from speechmt.models.semantic.xstnet import XSTNetEncoder, XSTNetOptions, xstnet


class SemanticLayer(Protocol):
    """What every semantic variant is (an nn.Module with these two methods; no common base class)."""

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput: ...

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput: ...


SEMANTICS: dict[str, Callable[..., nn.Module]] = {"identity": identity, "lut": lut, "xstnet": xstnet,
                                                  "chimera": chimera, "fat_mlm": fat_mlm}
SEMANTIC_OPTIONS: dict[str, type] = {"chimera": ChimeraOptions, "lut": LUTOptions, "xstnet": XSTNetOptions,
                                     "fat_mlm": FatMLMOptions}
"""fat_mlm is the odd one: build_model returns the FAT-MLM pretraining model itself (speechmt.models.fat_mlm)."""
"""Each variant's options dataclass, checked when a config is read, so that a bad value is one line naming it
before anything is built (a variant without an entry is checked by its builder alone)."""


@dataclass
class SemanticConfig:
    """The semantic layer between the encoders and the decoder: `kind` "identity" (none) or a variant of
    SEMANTICS, with its own settings in `options` (the variant's options dataclass, SEMANTIC_OPTIONS)."""

    kind: str = "identity"
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        self.options = dict(self.options)
        raise_problems("bad ModelConfig", [
            self.kind not in SEMANTICS and f"unknown semantic {self.kind!r}; expected one of {', '.join(SEMANTICS)}",
            self.kind == "identity" and self.options and
            f"semantic 'identity' takes no options, got {', '.join(sorted(self.options))}",
        ])
        if self.kind in SEMANTIC_OPTIONS:
            parse_options(self.kind, SEMANTIC_OPTIONS[self.kind], self.options)


__all__ = ["ChimeraMemory", "Identity", "LUTSemanticEncoder", "SEMANTICS", "SemanticConfig", "SemanticLayer",
           "XSTNetEncoder"]
