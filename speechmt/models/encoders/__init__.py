"""Encoders: acoustic (`conv` on fbank, `wav2vec2` on waveforms) and text; all return an EncoderOutput.

The wav2vec2 encoder imports Hugging Face transformers, so it is imported on first use.
"""

from speechmt.models.encoders.base import AcousticEncoder, EncoderOutput, Record, note
from speechmt.models.encoders.conv import ConvEncoder, subsampler
from speechmt.models.encoders.text import TextEncoder

__all__ = [
    "AcousticEncoder",
    "ConvEncoder",
    "EncoderOutput",
    "Record",
    "TextEncoder",
    "note",
    "Wav2Vec2Encoder",
    "Wav2Vec2Options",
    "subsampler",
    "wav2vec2_encoder",
]


def __getattr__(name: str):
    if name in ("Wav2Vec2Encoder", "Wav2Vec2Options", "wav2vec2_encoder"):
        from speechmt.models.encoders import wav2vec2

        return getattr(wav2vec2, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
