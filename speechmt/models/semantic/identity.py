"""The `identity` semantic layer: the model without one (the encoders' states go to the decoder as they are)."""

from __future__ import annotations

from torch import nn

from speechmt.models.encoders.base import EncoderOutput, Record


class Identity(nn.Module):
    """Passes both paths through unchanged; no parameters."""

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        return enc

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        return enc


def identity(cfg, **options) -> Identity:
    if options:
        raise ValueError(f"semantic 'identity' takes no options, got {', '.join(sorted(options))}")
    return Identity()
