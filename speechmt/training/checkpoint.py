"""Checkpoints: one file with everything needed to rebuild, translate with, or resume a model.

Contents: {"format", "model_config", "model", "tokenizers", "features", "train_config", "train_state"}.
Writes are atomic (temporary file, fsync, rename), so a crash leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import torch

FORMAT = "speechmt-checkpoint-1"


class CheckpointError(ValueError):
    """A file that is not a usable speechmt checkpoint; the message names it and says why."""


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Writes `state` (plus the format tag) to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save({"format": FORMAT, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Reads a checkpoint; raises CheckpointError (one line) for a missing, truncated or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a speechmt checkpoint (no '{FORMAT}' format tag)")
    return state


def average_checkpoints(paths: list[str | os.PathLike]) -> dict[str, Any]:
    """The first checkpoint with its model weights replaced by the mean over all `paths` (float math,
    cast back to each tensor's dtype); integer buffers are taken from the last checkpoint."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    states = [load_checkpoint(p)["model"] for p in paths]
    keys = list(states[0])
    for p, s in zip(paths, states):
        if list(s) != keys:
            raise CheckpointError(f"{p}: its parameters differ from {paths[0]}'s; cannot average")
    averaged = {}
    for k in keys:
        if states[0][k].is_floating_point():
            averaged[k] = (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
        else:
            averaged[k] = states[-1][k]
    result = load_checkpoint(paths[0])
    result["model"] = averaged
    result.pop("train_state", None)
    result["averaged_from"] = [str(p) for p in paths]
    return result
