"""Where the built-in component kinds are registered: each slot's kinds, their options dataclasses and builders
(speechmt.models.components). The semantic layers have their own registry beside their files
(speechmt.models.semantic.SEMANTICS).

    encoder   conv         fbank -> subsampler -> Transformer          encoders/conv.py
              wav2vec2     HF wav2vec2 / HuBERT / data2vec audio       encoders/wav2vec2.py
              whisper      HF Whisper's encoder                        encoders/whisper.py
              whisper_asr  a cascade with a bridge: Whisper            encoders/whisper_asr.py,
                           transcribes (ASR), its decoder states       whisper_handover.py; its search:
                           handed to the decoder (the LM)              decoding/transcribe.py
    decoder   transformer  trained pre-norm Transformer decoder        decoder.py
              whisper      Whisper's pretrained decoder                hf_whisper.py
              lm           a pretrained causal LM                      lm_decoder.py
    shrink    none         the acoustic states as they are             shrink.py
              conv         stride-2 convolutions                       shrink.py
              ctc          CTC-guided merging of runs of one label     shrink.py
"""

from __future__ import annotations

from speechmt.models.components import Slot
from speechmt.models.decoder import TransformerDecoderConfig, build_transformer_decoder
from speechmt.models.encoders.conv import ConvEncoderConfig, build_conv_encoder
from speechmt.models.encoders.wav2vec2 import Wav2Vec2EncoderConfig, build_wav2vec2_encoder
from speechmt.models.encoders.whisper import WhisperEncoderConfig, build_whisper_encoder
from speechmt.models.encoders.whisper_asr import WhisperASRConfig, build_whisper_asr_encoder
from speechmt.models.hf_whisper import WhisperDecoderConfig, build_whisper_decoder
from speechmt.models.lm_decoder import LMDecoderConfig, build_lm_decoder
from speechmt.models.shrink import (
    ConvShrinkConfig,
    CTCShrinkConfig,
    NoShrinkConfig,
    build_conv_shrink,
    build_ctc_shrink,
    build_no_shrink,
)

__all__ = ["DECODERS", "ENCODERS", "SHRINKS"]

ENCODERS = Slot("encoder", default="conv")
ENCODERS.register("conv", ConvEncoderConfig, build_conv_encoder)
ENCODERS.register("wav2vec2", Wav2Vec2EncoderConfig, build_wav2vec2_encoder)
ENCODERS.register("whisper", WhisperEncoderConfig, build_whisper_encoder)
ENCODERS.register("whisper_asr", WhisperASRConfig, build_whisper_asr_encoder)

DECODERS = Slot("decoder", default="transformer")
DECODERS.register("transformer", TransformerDecoderConfig, build_transformer_decoder)
DECODERS.register("whisper", WhisperDecoderConfig, build_whisper_decoder)
DECODERS.register("lm", LMDecoderConfig, build_lm_decoder)

SHRINKS = Slot("shrink", default="none")
SHRINKS.register("none", NoShrinkConfig, build_no_shrink)
SHRINKS.register("conv", ConvShrinkConfig, build_conv_shrink)
SHRINKS.register("ctc", CTCShrinkConfig, build_ctc_shrink)
