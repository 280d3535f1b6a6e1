"""Where a training run is, and what resumes it exactly: the position (TrainState), every rank's RNG streams, the
check of a checkpoint's base, and how many batches a rank accumulates per update."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class TrainState:
    """Where a run is: updates done, the stage and the update it began at, the first stream's epoch and
    batches of that epoch consumed (the other streams' in `positions`), best dev loss of the stage, and
    skipped updates."""

    step: int = 0
    epoch: int = 0
    batches_in_epoch: int = 0
    best_loss: float = math.inf
    nonfinite_skipped: int = 0
    kept: list[str] = field(default_factory=list)
    stage: int = 0
    stage_start: int = 0
    positions: dict[str, list[int]] = field(default_factory=dict)
    epochs_done: int = 0  # epochs of the first stream finished, over all stages (epoch checkpoints count them)
    stage_epochs: int = 0  # epochs_done when the stage began
    kept_epochs: list[str] = field(default_factory=list)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rank_seed(seed: int, rank: int) -> int:
    """Rank `rank`'s seed of the training RNG streams (dropout, ...): `seed` itself on rank 0, so that a run at world
    size 1 draws as a single process does."""
    return seed if rank == 0 else (seed * 1_000_003 + 7_919 * rank) % 2**63


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores rng_state(); the generators take CPU byte tensors, wherever the checkpoint was loaded to."""
    torch.set_rng_state(state["torch"].cpu())
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def check_base(saved: dict | None, here: dict | None) -> None:
    """CheckpointError unless a checkpoint's base (its sha256) is this model's (both None: a full checkpoint)."""
    from speechmt.checkpoint import CheckpointError

    if (saved is None) != (here is None) or (saved and saved["sha256"] != here["sha256"]):
        raise CheckpointError(
            f"the checkpoint's base weights ({(saved or {}).get('sha256', 'none')[:12]}) are not "
            f"this model's ({(here or {}).get('sha256', 'none')[:12]})"
        )


def update_freq_per_rank(update_freq: int, for_world_size: int, world_size: int) -> int:
    """Batches each rank accumulates per update: `update_freq`, or with `for_world_size` > 0 (train.
    update_freq_world_size) update_freq * for_world_size / world_size, so that an update sums the same number of
    batches on any number of ranks; ConfigError when they do not divide."""
    from speechmt.checks import ConfigError

    if not for_world_size:
        return update_freq
    total = update_freq * for_world_size
    if total % world_size:
        raise ConfigError(
            f"train.update_freq {update_freq} for {for_world_size} rank(s) is {total} batches per "
            f"update, which {world_size} ranks cannot share evenly; run on a divisor of {total} ranks "
            "or set train.update_freq_world_size 0 to take update_freq per rank as given"
        )
    return total // world_size
