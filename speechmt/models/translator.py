"""The translation model: acoustic encoder (+ CTC head), optional text encoder, Transformer decoder.

`ModelConfig` is saved in checkpoints as a dict and rebuilt with `ModelConfig(**d)`; `build_model` is the
one place where variants are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor, nn

from speechmt.models.decoder import DecoderCache, TransformerDecoder, transformer_decoder
from speechmt.models.encoders import AcousticEncoder, ConvEncoder, EncoderOutput, TextEncoder, subsampler
from speechmt.models.layers import TransformerEncoder, embedding, transformer_encoder

__all__ = ["EncoderOutput", "ModelConfig", "PRESETS", "Translator", "build_model", "count_parameters", "preset"]


@dataclass
class ModelConfig:
    """Model dimensions and variants."""

    input_dim: int = 80  # fbank bins
    tgt_vocab_size: int = 8000  # decoder vocabulary
    src_vocab_size: int = 0  # source side: CTC head and text-encoder embeddings; 0 = none
    d_model: int = 256
    n_heads: int = 4
    ffn_dim: int = 2048
    encoder_layers: int = 12
    decoder_layers: int = 6
    text_encoder_layers: int = 0  # >0: a text encoder for MT input
    share_text_encoder: bool = False  # the text encoder runs the speech encoder's Transformer (XSTNet)
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.1
    subsampler: str = "conv1d"  # "conv1d" (fairseq S2T) or "conv2d" (ESPnet; 3x3 kernels, conv_kernels unused)
    conv_channels: int = 1024
    conv_kernels: tuple[int, ...] = (5, 5)
    ctc: bool = False  # CTC head over src_vocab_size (the blank is id 4 of the tokenizer layout)
    tie_embeddings: bool = True  # decoder input embedding == output projection
    pad_id: int = 0
    position_offset: int = 0  # number of the first position (fairseq / HF Speech2Text: padding_idx + 1 = 2)
    output_bias: bool = False  # a bias on the decoder's output projection (imported models)

    def __post_init__(self):
        self.conv_kernels = tuple(self.conv_kernels)
        problems = [
            self.subsampler not in ("conv1d", "conv2d") and f"unknown subsampler {self.subsampler!r}",
            self.d_model % self.n_heads and f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}",
            not self.conv_kernels and "conv_kernels is empty",
            self.ctc and self.src_vocab_size <= 0 and "ctc=True needs src_vocab_size > 0",
            self.position_offset < 0 and f"position_offset must be >= 0, got {self.position_offset}",
            self.text_encoder_layers > 0 and self.src_vocab_size <= 0 and
            "text_encoder_layers > 0 needs src_vocab_size > 0",
            self.share_text_encoder and self.text_encoder_layers != self.encoder_layers and
            f"share_text_encoder needs text_encoder_layers == encoder_layers ({self.encoder_layers}), "
            f"got {self.text_encoder_layers}",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError("bad ModelConfig: " + "; ".join(problems))


PRESETS: dict[str, dict] = {
    # fairseq s2t_transformer_s; fairseq does not share the decoder's input and output embeddings
    # (share_decoder_input_output_embed=False), which is what makes its ~31M at an 8000 vocabulary.
    "s2t_s": dict(d_model=256, n_heads=4, ffn_dim=2048, encoder_layers=12, decoder_layers=6,
                  subsampler="conv1d", conv_channels=1024, conv_kernels=(5, 5), tie_embeddings=False),
    "tiny": dict(d_model=64, n_heads=2, ffn_dim=128, encoder_layers=2, decoder_layers=2,
                 conv_channels=64, conv_kernels=(5, 5), tgt_vocab_size=64),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named configuration ("s2t_s" or "tiny"), with fields replaced by `overrides`."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return replace(ModelConfig(**PRESETS[name]), **overrides)


class Translator(nn.Module):
    """Speech (or text) encoder + Transformer decoder. No forward: tasks call encode_* and decode."""

    def __init__(self, config: ModelConfig, speech_encoder: AcousticEncoder, decoder: TransformerDecoder,
                 text_encoder: TextEncoder | None = None, ctc_head: nn.Linear | None = None):
        super().__init__()
        self.config = config
        self.speech_encoder, self.decoder = speech_encoder, decoder
        self.text_encoder, self.ctc_head = text_encoder, ctc_head

    def encode_speech(self, feats: Tensor, lengths: Tensor) -> EncoderOutput:
        """feats (B, T, F), lengths (B,) -> EncoderOutput x (B, T', D), lengths, ctc_logits (B, T', V_src)."""
        out = self.speech_encoder(feats, lengths)
        if self.ctc_head is not None:
            out = replace(out, ctc_logits=self.ctc_head(out.x))
        return out

    def encode_text(self, tokens: Tensor, lengths: Tensor) -> EncoderOutput:
        """tokens (B, S), lengths (B,) -> EncoderOutput x (B, S, D), lengths."""
        if self.text_encoder is None:
            raise ValueError("this model has no text encoder: build it with text_encoder_layers > 0 "
                             "(and src_vocab_size > 0) to encode text")
        return self.text_encoder(tokens, lengths)

    def decode(self, tokens: Tensor, enc: EncoderOutput, cache: DecoderCache | None = None) -> Tensor:
        """tokens (B, U) decoder input (only the new positions with a cache) -> logits (B, U, tgt_vocab_size)."""
        return self.decoder(tokens, enc.x, enc.lengths, cache)

    def new_cache(self) -> DecoderCache:
        return self.decoder.new_cache()


def _text_encoder(cfg: ModelConfig, shared: TransformerEncoder) -> TextEncoder | None:
    if cfg.text_encoder_layers <= 0:
        return None
    stack = shared if cfg.share_text_encoder else transformer_encoder(
        cfg.text_encoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
        cfg.activation_dropout)
    return TextEncoder(embedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id), stack, cfg.dropout,
                       cfg.position_offset)


def build_model(cfg: ModelConfig) -> Translator:
    """Builds the Translator that `cfg` describes."""
    stack = transformer_encoder(cfg.encoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.dropout,
                                cfg.attention_dropout, cfg.activation_dropout)
    sub = subsampler(cfg.subsampler, cfg.input_dim, cfg.conv_channels, cfg.d_model, cfg.conv_kernels)
    speech = ConvEncoder(sub, stack, cfg.d_model, cfg.dropout, cfg.position_offset)
    decoder = transformer_decoder(cfg.tgt_vocab_size, cfg.decoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim,
                                  cfg.dropout, cfg.attention_dropout, cfg.activation_dropout,
                                  cfg.tie_embeddings, cfg.pad_id, cfg.position_offset, cfg.output_bias)
    ctc_head = nn.Linear(cfg.d_model, cfg.src_vocab_size) if cfg.ctc else None
    return Translator(cfg, speech, decoder, _text_encoder(cfg, stack), ctc_head)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
