"""The model shipped inside the package, and `export_model` that makes such a file from a checkpoint.

`speechmt translate audio.wav` with no `--model` uses DEFAULT_MODEL: the baseline trained on MuST-C-mini
full (English -> German, synthetic speech); MODEL_CARD.md beside it says how it was trained and on what.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import replace
from pathlib import Path

import torch

from speechmt.bundle import KEYS as BUNDLE_KEYS
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.models.migrate import checkpoint_resolved

DEFAULT_MODEL = Path(__file__).with_name("mustc_mini_en_de.safetensors")
# the other models shipped in the package, by the name `--model` and load_model take (MODEL_CARD.md)
BUNDLED = {"multilingual": Path(__file__).with_name("mustc_mini_multilingual.safetensors")}
INFERENCE_KEYS = ("model", *BUNDLE_KEYS)  # the weights and the model bundle: what load_model reads


def default_model_path() -> Path:
    """The bundled default model's path; CheckpointError (one line) when this installation lacks it."""
    return _bundled(DEFAULT_MODEL, "default")


def bundled_model_path(name: str) -> Path:
    """The path of the bundled model `name` ("default" or one of BUNDLED); CheckpointError (one line) when this
    installation lacks it."""
    return default_model_path() if name == "default" else _bundled(BUNDLED[name], name)


def _bundled(path: Path, name: str) -> Path:
    if not path.is_file():
        raise CheckpointError(
            f"{path}: the bundled {name} model is missing from this installation; pass --model CHECKPOINT"
        )
    return path


def model_path(path: str | os.PathLike | None) -> str | os.PathLike:
    """What a `--model` option names: None, the bundled default; a bundled model's name ("multilingual") where no
    file of that name is here, that model; else the path as given."""
    if path is None:
        return default_model_path()
    if isinstance(path, str) and (path in BUNDLED or path == "default") and not Path(path).exists():
        return bundled_model_path(path)
    return path


def export_model(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    half: bool = True,
    provenance: dict | None = None,
    merge: bool = False,
    whisper_pad_seconds: float | None = None,
    memory: str | None = None,
) -> dict:
    """Writes an inference-only copy of `checkpoint` to `out`: what `load_model` needs (no optimiser or
    training state), floating-point weights in float16 when `half`. Returns {"params", "bytes"}.

    float16 weights are cast back to float32 when loaded; `provenance` (commands, data) is stored as-is (by
    default the checkpoint's own, with the padding below added when it is changed).
    `merge`: a checkpoint of trained parameters on a pretrained base becomes a full one that needs no base
    (the base's weights included, LoRA adapters folded into them). `whisper_pad_seconds`: a model on Whisper's
    log-mel input pads each clip to that many seconds (its features' pad_seconds) instead of what it trained with.
    `memory`: a model that reads retrieved examples names that translation memory (decoder.memory: what decoding
    searches when given none; speechmt.data.retrieval.memory_manifest); CheckpointError (one line) for a model
    that reads none.
    """
    state = load_checkpoint(checkpoint)
    missing = [k for k in ("model_config", "model", "tokenizers", "features") if k not in state]
    if missing:
        raise CheckpointError(f"{checkpoint}: cannot export, the checkpoint lacks {', '.join(missing)}")
    resolved = checkpoint_resolved(state)  # an old config's too
    if merge and state.get("base") is not None:
        state = _merged(checkpoint, state)
    slim = {k: state[k] for k in INFERENCE_KEYS if k in state} | ({"resolved": resolved} if resolved else {})
    if memory is not None:
        slim["model_config"] = _with_memory(checkpoint, state["model_config"], memory)
    if whisper_pad_seconds is not None:
        slim["features"] = _padded_features(checkpoint, state["features"], whisper_pad_seconds)
    cast = torch.float16 if half else None
    done: dict[int, torch.Tensor] = {}  # a tied tensor (one object under two names) stays one
    slim["model"] = {
        k: done.setdefault(id(v), v.to(cast) if cast is not None and v.is_floating_point() else v)
        for k, v in state["model"].items()
    }
    provenance = provenance or state.get("provenance")  # a re-export keeps what the model was made from
    if whisper_pad_seconds is not None and provenance:
        provenance = {**provenance, "whisper_pad_seconds": float(whisper_pad_seconds)}
    if provenance:
        slim["provenance"] = provenance
    save_checkpoint(out, slim)
    params = sum(v.numel() for v in slim["model"].values() if v.is_floating_point())
    return {"params": params, "bytes": Path(out).stat().st_size}


def _with_memory(checkpoint: str | os.PathLike, model_config: dict, memory: str) -> dict:
    """A model config (as stored) whose decoder names the translation memory `memory`, checked as a ModelConfig;
    CheckpointError (one line) for a model that reads no examples."""
    from speechmt.models.config import ModelConfig

    try:
        config = ModelConfig.from_dict(model_config)
        decoder = {k: v for k, v in dataclasses.asdict(config.decoder).items() if k != "kind"}
        config = replace(config, decoder={"kind": config.decoder.kind, **decoder, "memory": str(memory)})
    except ValueError as e:  # decoder.memory needs decoder.examples; a decoder without examples has no memory
        raise CheckpointError(f"{checkpoint}: cannot name a translation memory ({e})") from None
    return dataclasses.asdict(config)


def _padded_features(checkpoint: str | os.PathLike, features: dict, seconds: float) -> dict:
    """`features` of a model on Whisper's log-mel input, padding to `seconds`; CheckpointError for another input."""
    from dataclasses import replace

    from speechmt.frontend import frontend_from_state

    frontend = frontend_from_state(features)
    if frontend.name != "whisper_mel":
        raise CheckpointError(
            f"{checkpoint}: --whisper-pad-seconds is for models on Whisper's log-mel input; "
            f"this one reads {frontend.name}"
        )
    return replace(frontend, config=replace(frontend.config, pad_seconds=float(seconds))).state_dict()


def _merged(checkpoint: str | os.PathLike, state: dict) -> dict:
    """`state` with the whole model (base and trained parameters, LoRA folded in) and no base reference."""
    from dataclasses import asdict

    from speechmt.decoding.translate import load_model
    from speechmt.models.delta import merged

    model, cfg = merged(load_model(checkpoint).model)
    return {**{k: v for k, v in state.items() if k != "base"}, "model": model.state_dict(), "model_config": asdict(cfg)}
