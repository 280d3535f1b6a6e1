"""Optimiser and learning-rate schedule: Adam(W) with fairseq's inverse square root schedule."""

from __future__ import annotations

import math

import torch


def build_optimizer(model: torch.nn.Module, lr: float, betas: tuple[float, float], weight_decay: float,
                    ) -> torch.optim.Optimizer:
    """AdamW (Adam when weight_decay is 0) over the trainable parameters; no decay on biases and norms."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if not decay and not no_decay:  # nothing trains (train.max_updates 0 over a frozen model): a placeholder
        groups[1]["params"] = [torch.zeros(0, requires_grad=True)]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8)


def inverse_sqrt_factor(step: int, warmup: int, init_factor: float = 0.0) -> float:
    """fairseq's inverse_sqrt as a factor of the peak lr: linear warm-up from `init_factor` over
    `warmup` updates, then sqrt(warmup / step). `step` counts updates from 0."""
    step = step + 1
    if warmup > 0 and step < warmup:
        return init_factor + (1.0 - init_factor) * step / warmup
    return math.sqrt(max(warmup, 1) / step)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: inverse_sqrt_factor(step, warmup))
