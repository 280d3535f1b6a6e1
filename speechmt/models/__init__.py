"""Models: layers, subsamplers, encoders, decoder and the Translator that composes them."""

from speechmt.models.decoder import DecoderCache, TransformerDecoder
from speechmt.models.encoders import EncoderOutput
from speechmt.models.translator import ModelConfig, Translator, build_model, count_parameters, preset

__all__ = ["DecoderCache", "EncoderOutput", "ModelConfig", "TransformerDecoder", "Translator", "build_model",
           "count_parameters", "preset"]
