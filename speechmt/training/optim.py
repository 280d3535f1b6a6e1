"""Optimiser and learning-rate schedule: Adam(W) with fairseq's inverse square root schedule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fnmatch import fnmatchcase

import torch

from speechmt.checks import ConfigError


def build_optimizer(
    model: torch.nn.Module,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    lr_scale: Mapping[str, float] | None = None,
) -> torch.optim.Optimizer:
    """AdamW (Adam when weight_decay is 0) over the trainable parameters; no decay on biases and norms.

    `lr_scale` (train.lr_scale): glob patterns over parameter names -> a factor of `lr` for the parameters they
    match (the first matching pattern counts), e.g. {"*fusion*": 50} lets a handful of mixing scalars move as
    fast as the adapters' matrices; the schedule scales every group alike. A pattern that matches no trainable
    parameter is a ConfigError. Without it there are two groups, decayed and not, as before."""
    scales = dict(lr_scale or {})
    groups: dict[tuple[float, bool], list[torch.nn.Parameter]] = {(1.0, True): [], (1.0, False): []}
    used = set()
    for name, p in model.named_parameters():
        if p.requires_grad:
            pattern = next((k for k in scales if fnmatchcase(name, k)), None)
            used.add(pattern)
            groups.setdefault((float(scales.get(pattern, 1.0)), p.ndim >= 2), []).append(p)
    unused = [k for k in scales if k not in used]
    if unused:
        raise ConfigError(
            f"train.lr_scale: pattern {unused[0]!r} scales no trainable parameter (none matches, or "
            "an earlier pattern took them); patterns are globs over names such as "
            "speech_encoder.proj.weight"
        )
    param_groups = [
        {"params": params, "weight_decay": weight_decay if decay else 0.0, "lr": lr * scale}
        for (scale, decay), params in groups.items()
        if params or scale == 1.0
    ]
    if not any(g["params"] for g in param_groups):  # nothing trains (max_updates 0 over a frozen model)
        param_groups[1]["params"] = [torch.zeros(0, requires_grad=True)]
    return torch.optim.AdamW(param_groups, lr=lr, betas=betas, eps=1e-8)


def inverse_sqrt_factor(step: int, warmup: int, init_factor: float = 0.0) -> float:
    """fairseq's inverse_sqrt as a factor of the peak lr: linear warm-up from `init_factor` over
    `warmup` updates, then sqrt(warmup / step). `step` counts updates from 0."""
    step = step + 1
    if warmup > 0 and step < warmup:
        return init_factor + (1.0 - init_factor) * step / warmup
    return math.sqrt(max(warmup, 1) / step)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: inverse_sqrt_factor(step, warmup))
