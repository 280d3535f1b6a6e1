"""Models: layers, subsamplers, encoders, decoder and the Translator that composes them."""

from speechmt.models.build import build_model, count_parameters
from speechmt.models.config import ModelConfig, preset
from speechmt.models.decoder import DecoderCache, TransformerDecoder
from speechmt.models.encoders import EncoderOutput
from speechmt.models.translator import Translator

__all__ = [
    "DecoderCache",
    "EncoderOutput",
    "ModelConfig",
    "TransformerDecoder",
    "Translator",
    "build_model",
    "count_parameters",
    "preset",
]
