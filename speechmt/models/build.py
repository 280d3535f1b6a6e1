"""The one place a model config becomes a model: a Translator (speechmt.models.translator.build_model), or a
pretraining model that is none, FAT-MLM's fused encoder (speechmt.models.fat_mlm), which a config names as
`semantic: {kind: fat_mlm}`; and a checkpoint of either read on a Translator's names (FAT-ST)."""

from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from speechmt.models.fat_mlm import fat_mlm, translator_state
from speechmt.models.translator import ModelConfig, build_model

PRETRAINING_MODELS: dict[str, Callable[[ModelConfig, bool], nn.Module]] = {"fat_mlm": fat_mlm}
"""The builders of the models a config names by its semantic kind that are no Translator."""


def build(cfg: ModelConfig, pretrained: bool = True) -> nn.Module:
    """The model `cfg` describes: its pretraining model (PRETRAINING_MODELS), else a Translator; `pretrained`
    as build_model's."""
    return PRETRAINING_MODELS.get(cfg.semantic.kind, build_model)(cfg, pretrained)


def translator_weights(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The weights `state` of a model of `config` on a Translator's names: a FAT-MLM model's through
    translator_state (FAT-ST), a Translator's as they are."""
    return translator_state(state) if config.semantic.kind in PRETRAINING_MODELS else state
