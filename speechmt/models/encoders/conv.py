"""The `conv` acoustic encoder: convolutional subsampling of fbank + Transformer encoder, the shape of
fairseq's s2t_transformer (Wang et al., 2020, "fairseq S2T: Fast Speech-to-Text Modeling with fairseq")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import BuildParts, ModelConfigT, kind_field
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput, Record, note
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder, config_stack
from speechmt.models.subsampling import Conv1dSubsampler, Conv2dSubsampler

SUBSAMPLERS = ("conv1d", "conv2d")


@dataclass
class ConvEncoderConfig(EncoderConfig):
    """encoder kind "conv": fbank -> convolutional subsampler -> `layers` Transformer layers of the model's
    shared dimensions."""

    kind: str = kind_field("conv")
    layers: int = checked(12, lo=0)  # Transformer layers
    input_dim: int = checked(80, lo=1)  # fbank bins
    subsampler: str = "conv1d"  # "conv1d" (fairseq S2T) or "conv2d" (ESPnet; 3x3 kernels, conv_kernels unused)
    conv_channels: int = checked(1024, lo=1)
    conv_kernels: tuple[int, ...] = (5, 5)
    reads_stored_features: ClassVar[bool] = True

    def __post_init__(self):
        self.conv_kernels = tuple(self.conv_kernels)
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "encoder.")
            + [
                self.subsampler not in SUBSAMPLERS
                and f"unknown encoder.subsampler {self.subsampler!r}; expected conv1d or conv2d",
                not self.conv_kernels and "encoder.conv_kernels is empty",
            ],
        )


def build_conv_encoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[ConvEncoder, ModelConfigT]:
    """The conv encoder of `cfg` (its Transformer is what text_encoder.shared runs)."""
    e = cfg.encoder
    stack = config_stack(cfg, e.layers)  # before the subsampler: the seeded order of every tiny model's weights
    sub = subsampler(e.subsampler, e.input_dim, e.conv_channels, cfg.d_model, e.conv_kernels)
    return ConvEncoder(sub, stack, cfg.d_model, cfg.dropout, cfg.position_offset), cfg


class ConvEncoder(nn.Module):
    """subsampler -> x * sqrt(D) + positions -> dropout -> Transformer encoder (as fairseq)."""

    def __init__(
        self,
        subsampler: nn.Module,
        encoder: TransformerEncoder,
        dim: int,
        dropout: float = 0.1,
        position_offset: int = 0,
    ):
        super().__init__()
        self.subsampler, self.encoder = subsampler, encoder
        self.positions, self.scale = SinusoidalPositionalEncoding(dim, position_offset), math.sqrt(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, feats: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """feats (B, T, F), lengths (B,) -> EncoderOutput(x (B, T', D), lengths (B,)); a `record` gets
        "subsampled", "layer.<i>" and "out"."""
        x, lengths = self.subsampler(feats, lengths)
        note(record, "subsampled", x, lengths)
        x = self.dropout(self.positions(x * self.scale))
        x, lengths = self.encoder(x, lengths, record)
        return EncoderOutput(x, lengths)

    def states_frozen(self) -> bool:
        """Never cached: its input, the stored fbank, is as cheap to read as its states would be."""
        return False


def subsampler(kind: str, input_dim: int, channels: int, dim: int, kernels: tuple[int, ...]) -> nn.Module:
    """Builds a subsampler: "conv1d" (fairseq; one layer per kernel) or "conv2d" (ESPnet; `kernels` unused)."""
    if kind == "conv1d":
        return Conv1dSubsampler(input_dim, channels, dim, kernels)
    if kind == "conv2d":
        return Conv2dSubsampler(input_dim, channels, dim)
    raise ValueError(f"unknown subsampler {kind!r}; expected 'conv1d' or 'conv2d'")
