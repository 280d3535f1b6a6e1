"""Checkpoints of the trained parameters only, for models built on a pretrained base (Whisper).

Such a checkpoint's "model" holds the tensors that train (LoRA adapters, LNA's LayerNorms and attention,
projections, heads, or whole fine-tuned modules) and its "base" says where the rest comes from:
{"sources": [the config's name_or_path values, e.g. "whisper-base"], "sha256": checksum of every other
tensor}. Loading rebuilds the model from the base (a hub id, a local folder, or a name set-up converted
under $SPEECHMT_HOME), checks the checksum, and loads the trained tensors on top. `merge_checkpoint` makes
a full checkpoint that needs no base (LoRA folded into the weights).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from torch import Tensor, nn

from speechmt.checkpoint import CheckpointError, state_checksum
from speechmt.models.config import ModelConfig
from speechmt.models.translator import Translator


def base_sources(cfg: ModelConfig) -> list[str]:
    """The pretrained folders or hub ids a model's frozen weights come from (Whisper parts, an LM decoder)."""
    enc = cfg.encoder
    sources = [enc.name_or_path] if enc.kind in ("whisper", "whisper_asr") and enc.name_or_path else []
    if cfg.decoder.kind == "whisper" and cfg.whisper_decoder_source and cfg.whisper_decoder_source not in sources:
        sources.append(cfg.whisper_decoder_source)
    if cfg.decoder.kind == "lm" and cfg.decoder.name_or_path:
        sources.append(cfg.decoder.name_or_path)
    return sources


def trained_keys(model: nn.Module, names: Collection[str] | None = None) -> set[str]:
    """State-dict keys of the parameters that train (requires_grad, or the parameters `names`), tied aliases
    included."""
    trained = {id(p) for n, p in model.named_parameters() if (p.requires_grad if names is None else n in names)}
    return {k for k, p in model.named_parameters(remove_duplicate=False) if id(p) in trained}


def frozen_checksum(model: nn.Module) -> str:
    """sha256 of every state tensor that does not train."""
    keys = trained_keys(model)
    return state_checksum({k: v for k, v in model.state_dict().items() if k not in keys})


def base_reference(model: Translator) -> dict | None:
    """{"sources", "sha256"} for a model on a pretrained base with frozen parts; None otherwise."""
    sources = base_sources(model.config)
    if not sources or all(p.requires_grad for p in model.parameters()):
        return None
    return {"sources": sources, "sha256": frozen_checksum(model)}


def model_state(model: nn.Module, base: dict | None, names: Collection[str] | None = None) -> dict[str, Tensor]:
    """What a checkpoint stores of the model: the trained tensors when it has a base (those that train, or the
    parameters `names`: a run's trainable ones, whatever a stage freezes for a while), else everything."""
    state = model.state_dict()
    if base is None:
        return state
    keys = trained_keys(model, names)
    return {k: v for k, v in state.items() if k in keys}


def load_model_state(
    model: nn.Module, state: dict[str, Tensor], base: dict | None, path: str | os.PathLike = "checkpoint"
) -> None:
    """Loads a checkpoint's "model" into `model`: everything (strict) without a base; with one, the trained
    tensors on top of the base's, after checking the base's checksum (CheckpointError, one line)."""
    if base is None:
        model.load_state_dict(state)
        return
    found = frozen_checksum(model)
    if found != base["sha256"]:
        raise CheckpointError(
            f"{path}: its base {', '.join(base['sources'])} has other weights here (sha256 "
            f"{found[:12]}..., the checkpoint was trained on {base['sha256'][:12]}...)"
        )
    missing, unexpected = model.load_state_dict(state, strict=False)
    untrained = sorted(set(missing) - (set(model.state_dict()) - trained_keys(model)))
    if unexpected or untrained:
        raise CheckpointError(
            f"{path}: trained tensors do not fit the model: unexpected {unexpected[:3]}, missing {untrained[:3]}"
        )


def merged(model: Translator) -> tuple[Translator, ModelConfig]:
    """`model` with every LoRA adapter folded into its weights (in place), and the config of that structure
    (no adapters), for a full checkpoint that needs no base."""
    from dataclasses import replace

    from speechmt.models.finetune import merge_lora

    merge_lora(model)
    cfg = model.config
    unadapted = {
        part: replace(getattr(cfg, part), finetune="full")
        for part in ("encoder", "decoder")
        if getattr(cfg, part).finetune == "lora"
    }
    cfg = replace(cfg, **unadapted)
    model.config = cfg
    return model, cfg
