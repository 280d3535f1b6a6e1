"""Encoders: acoustic (`conv`; wav2vec2 to come) and text; all return an EncoderOutput."""

from speechmt.models.encoders.base import AcousticEncoder, EncoderOutput
from speechmt.models.encoders.conv import ConvEncoder, subsampler
from speechmt.models.encoders.text import TextEncoder

__all__ = ["AcousticEncoder", "ConvEncoder", "EncoderOutput", "TextEncoder", "subsampler"]
