"""Convolutional subsampling of filterbank features: (x (B, T, F), lengths) -> (x (B, T', D), lengths').

Two variants, each 4x in time:
- `Conv1dSubsampler`, fairseq S2T (Wang et al., 2020, "fairseq S2T"): Conv1d kernel k, stride 2, padding
  k // 2 over the feature channels, each followed by a GLU that halves the channels.
- `Conv2dSubsampler`, ESPnet's Conv2dSubsampling (Karita et al., 2019): two 3x3 stride-2 Conv2d + ReLU over
  (time, frequency), then a Linear to D. Unlike ESPnet's (which has no padding and so turns utterances of
  fewer than 7 frames into nothing), the convolutions are padded by 1, so every utterance keeps a frame.

Padded frames are set to zero before every convolution, so an utterance gives the same output alone and
inside a padded batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.sequence import lengths_to_padding_mask


def conv_output_lengths(lengths: Tensor, kernel: int, stride: int = 2, padding: int | None = None) -> Tensor:
    """Output lengths of a convolution with `padding` (default kernel // 2) on both sides.

    floor((L + 2 * padding - kernel) / stride) + 1; for odd kernels with stride 2: (L - 1) // 2 + 1.
    """
    padding = kernel // 2 if padding is None else padding
    return torch.div(lengths + 2 * padding - kernel, stride, rounding_mode="floor") + 1


def _zero_padding(x: Tensor, lengths: Tensor, time_dim: int) -> Tensor:
    """Zeroes the frames at or past `lengths` along `time_dim` (1 or 2) of a (B, ...) tensor."""
    mask = lengths_to_padding_mask(lengths, x.size(time_dim))  # (B, T)
    shape = [mask.size(0)] + [1] * (x.dim() - 1)
    shape[time_dim] = mask.size(1)
    return x.masked_fill(mask.view(shape), 0.0)


class Conv1dSubsampler(nn.Module):
    """Stride-2 Conv1d + GLU layers (one per kernel); the last one outputs `out_dim` channels."""

    def __init__(self, input_dim: int, channels: int, out_dim: int, kernels: tuple[int, ...] = (5, 5)):
        super().__init__()
        n = len(kernels)
        ins = [input_dim] + [channels // 2] * (n - 1)
        outs = [channels] * (n - 1) + [out_dim * 2]
        self.convs = nn.ModuleList(nn.Conv1d(i, o, k, stride=2, padding=k // 2) for i, o, k in zip(ins, outs, kernels))

    def output_lengths(self, lengths: Tensor) -> Tensor:
        for conv in self.convs:
            lengths = conv_output_lengths(lengths, conv.kernel_size[0])
        return lengths

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, F), lengths (B,) -> x (B, T', D), lengths (B,)."""
        x = _zero_padding(x, lengths, 1).transpose(1, 2)  # (B, T, F) -> (B, F, T)
        for conv in self.convs:
            lengths = conv_output_lengths(lengths, conv.kernel_size[0])
            x = _zero_padding(F.glu(conv(x), dim=1), lengths, 2)
        return x.transpose(1, 2), lengths  # (B, D, T') -> (B, T', D)


class Conv2dSubsampler(nn.Module):
    """Two 3x3 stride-2 Conv2d + ReLU with `channels` maps, flattened (channels x F') and projected to D."""

    def __init__(self, input_dim: int, channels: int, out_dim: int):
        super().__init__()
        self.convs = nn.ModuleList(
            [nn.Conv2d(1, channels, 3, stride=2, padding=1), nn.Conv2d(channels, channels, 3, stride=2, padding=1)]
        )
        freq = torch.tensor(input_dim)
        for _ in self.convs:
            freq = conv_output_lengths(freq, 3)
        self.out = nn.Linear(channels * int(freq), out_dim)

    def output_lengths(self, lengths: Tensor) -> Tensor:
        for _ in self.convs:
            lengths = conv_output_lengths(lengths, 3)
        return lengths

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, F), lengths (B,) -> x (B, T', D), lengths (B,)."""
        x = _zero_padding(x, lengths, 1)[:, None]  # (B, T, F) -> (B, 1, T, F)
        for conv in self.convs:
            lengths = conv_output_lengths(lengths, 3)
            x = _zero_padding(F.relu(conv(x)), lengths, 2)
        x = x.transpose(1, 2).flatten(2)  # (B, C, T', F') -> (B, T', C * F')
        return self.out(x), lengths
