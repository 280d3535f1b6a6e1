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


def concat_padded(
    a: torch.Tensor, a_lengths: torch.Tensor, b: torch.Tensor, b_lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise concatenation of two padded batches: a (B, S, ...) and b (B, T, ...) with lengths (B,) ->
    (B, max(a_len + b_len), ...) holding each row's a_i[:a_len_i] then b_i[:b_len_i], padded with zeros at the
    end, and the lengths a_lengths + b_lengths."""
    lengths = a_lengths + b_lengths
    width = int(lengths.max()) if lengths.numel() else 0
    out = a.new_zeros(a.size(0), width, *a.shape[2:])
    pos = torch.arange(width, device=a.device)[None]  # (1, W)
    from_a = pos < a_lengths[:, None]  # (B, W)
    from_b = ~from_a & (pos < lengths[:, None])
    rows = torch.arange(a.size(0), device=a.device)[:, None].expand(-1, width)
    out[from_a] = a[rows[from_a], pos.expand_as(rows)[from_a]]
    b_pos = (pos - a_lengths[:, None]).expand_as(rows)
    out[from_b] = b.to(a.dtype)[rows[from_b], b_pos[from_b]]
    return out, lengths
