"""Padded sequences: lengths to masks. The lowest layer (torch only), shared by data and models."""

from __future__ import annotations

import torch


def lengths_to_padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool mask, True at padding; T is `max_len` or the longest length.

    The one place masks come from. `max_len` must be at least the longest length (not checked, so that
    no device sync is needed when it is given).
    """
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] >= lengths[:, None]  # (1, T) >= (B, 1) -> (B, T)
