"""The Python API's model building: `train()` runs an experiment config, `average()` averages checkpoints and
`export()` writes an inference-only copy; `speechmt train`, `average` and `export` call them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from speechmt.api import OptionError

if TYPE_CHECKING:
    from speechmt.config import ExperimentConfig
    from speechmt.training.state import TrainState


def train(
    config: str | os.PathLike | ExperimentConfig | None = None, overrides: Sequence[str] = (), *, resume: bool = True
) -> TrainState:
    """Trains as an experiment config says (docs/training.md) and returns where the run ended (`step`, `epoch`,
    `best_loss`).

    Args:
        config: an experiment YAML (model, data, train sections), an ExperimentConfig, or None for the defaults.
        overrides: `section.key=value` items over a YAML config (or the defaults), e.g. "train.lr=1e-3", each
            type- and range-checked as `speechmt train` checks them.
        resume: continue exactly from save_dir/checkpoint_last.safetensors when it exists; False: start afresh.

    Raises speechmt.config.ConfigError (one line naming the file and the field) for a bad config or override.
    """
    from speechmt.config import ExperimentConfig, load_config
    from speechmt.training.run import run_training

    if isinstance(config, ExperimentConfig):
        if overrides:
            raise OptionError("overrides: apply them to a config file or the defaults, not to an ExperimentConfig")
        return run_training(config, resume=resume)
    return run_training(load_config(config, list(overrides)), resume=resume)


def average(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    last: int = 10,
    by: Literal["auto", "epoch", "update"] = "auto",
) -> list[Path]:
    """Averages checkpoint files, or the `last` numbered checkpoints of each folder in `inputs`, into `out`: a
    folder's epoch checkpoints (checkpoint_epoch<E>, as fairseq averages; `by` "epoch"), its update checkpoints
    (checkpoint_<step>; "update"), or with "auto" the epoch ones when it has any. Returns the files averaged."""
    from speechmt.training.run import average as _average

    if by not in ("auto", "epoch", "update"):
        raise OptionError(f"by: invalid value {str(by)!r}: expected auto, epoch or update")
    return _average([os.fspath(p) for p in inputs], last, os.fspath(out), by)


def export(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    *,
    fp32: bool = False,
    merge: bool = False,
    whisper_pad_seconds: float | None = None,
    memory: str | None = None,
) -> dict[str, int]:
    """Writes an inference-only copy of `checkpoint` to `out` (no optimiser or training state) and returns its
    {"params", "bytes"}.

    Args:
        fp32: keep float32 weights (default: float16, cast back to float32 when loaded).
        merge: a checkpoint of trained parameters on a pretrained base (LoRA, LNA): write the whole model, adapters
            folded in, so that it needs no base.
        whisper_pad_seconds: a model on Whisper's log-mel input pads each clip to this many seconds (0 to 30).
        memory: a model that reads retrieved examples: the translation memory it searches when decoding is given
            none (a folder's name under $SPEECHMT_HOME, a folder or a manifest; stored as decoder.memory).
    """
    from speechmt.pretrained import export_model

    return export_model(
        checkpoint, out, half=not fp32, merge=merge, whisper_pad_seconds=whisper_pad_seconds, memory=memory
    )
