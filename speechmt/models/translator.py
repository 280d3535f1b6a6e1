"""The translation model: acoustic encoder (`conv` on fbank or `wav2vec2` on waveforms) + CTC head, optional
length shrinking (`conv` or `ctc`), optional text encoder, Transformer decoder.

`ModelConfig` is saved in checkpoints as a dict and rebuilt with `ModelConfig(**d)`; `build_model` is the
one place where variants are chosen. Fields added later default to what models did before them, so older
checkpoints load unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torch import Tensor, nn

from speechmt.models.decoder import DecoderCache, TransformerDecoder, transformer_decoder
from speechmt.models.encoders import AcousticEncoder, ConvEncoder, EncoderOutput, TextEncoder, subsampler
from speechmt.models.layers import TransformerEncoder, embedding, transformer_encoder
from speechmt.models.shrink import SHRINK_MODES, Shrink, build_shrink

__all__ = ["EncoderOutput", "ModelConfig", "PRESETS", "Translator", "build_model", "count_parameters", "preset"]

CTC_BLANK_ID = 4  # the tokenizers' <blank>
ENCODERS = ("conv", "wav2vec2")
SHRINKS = ("none", "conv", "ctc")


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
    # the acoustic encoder: "conv" (fbank -> subsampler -> Transformer: input_dim, subsampler, conv_*,
    # encoder_layers) or "wav2vec2" (a Hugging Face wav2vec2 / HuBERT / data2vec audio model on waveforms)
    encoder: str = "conv"
    encoder_name_or_path: str = ""  # wav2vec2: a hub id or local directory; "" = random init from encoder_hf_config
    # wav2vec2: HF config fields, overriding the pretrained config, or the whole architecture for a random init
    # (with "model_type": wav2vec2, hubert or data2vec-audio). A built model holds its complete config here.
    encoder_hf_config: dict = field(default_factory=dict)
    freeze_feature_extractor: bool = False  # wav2vec2: freeze the CNN over the waveform (usual when pretrained)
    freeze_encoder: bool = False  # wav2vec2: freeze the whole pretrained encoder
    lna_finetune: bool = False  # wav2vec2: train only its LayerNorms and self-attention projections (LNA)
    encoder_layerdrop: float = 0.0  # wav2vec2: probability of skipping each Transformer layer in training
    mask_time_prob: float = 0.0  # wav2vec2: share of frames masked in spans in training (HF's mask_time_prob)
    mask_time_length: int = 10  # wav2vec2: frames per masked span
    gradient_checkpointing: bool = False  # wav2vec2: recompute its layers' activations in the backward pass
    # shrinking of the acoustic states before the decoder: "none", "conv" (two stride-2 Conv1d + GLU with
    # shrink_channels and shrink_kernel) or "ctc" (merge runs of one CTC label: shrink_mode "mean" or "first";
    # needs the CTC head, trained by the CTC loss: train.ctc_weight > 0)
    shrink: str = "none"
    shrink_channels: int = 1024
    shrink_kernel: int = 5
    shrink_mode: str = "mean"

    def __post_init__(self):
        self.conv_kernels = tuple(self.conv_kernels)
        self.encoder_hf_config = dict(self.encoder_hf_config)
        w2v_only = [name for name in ("encoder_name_or_path", "encoder_hf_config", "freeze_feature_extractor",
                                      "freeze_encoder", "lna_finetune", "encoder_layerdrop", "mask_time_prob",
                                      "gradient_checkpointing") if getattr(self, name)]
        problems = [
            self.encoder not in ENCODERS and f"unknown encoder {self.encoder!r}; expected one of {', '.join(ENCODERS)}",
            self.encoder == "conv" and w2v_only and f"{', '.join(w2v_only)}: options of encoder 'wav2vec2' only",
            self.freeze_encoder and self.lna_finetune and "freeze_encoder and lna_finetune exclude each other",
            not 0 <= self.encoder_layerdrop <= 1 and
            f"encoder_layerdrop must be in [0, 1], got {self.encoder_layerdrop}",
            not 0 <= self.mask_time_prob < 1 and f"mask_time_prob must be in [0, 1), got {self.mask_time_prob}",
            self.mask_time_length < 1 and f"mask_time_length must be >= 1, got {self.mask_time_length}",
            self.encoder == "wav2vec2" and self.share_text_encoder and
            "share_text_encoder needs the conv encoder's Transformer (encoder 'conv')",
            self.shrink not in SHRINKS and f"unknown shrink {self.shrink!r}; expected one of {', '.join(SHRINKS)}",
            self.shrink_mode not in SHRINK_MODES and
            f"unknown shrink_mode {self.shrink_mode!r}; expected one of {', '.join(SHRINK_MODES)}",
            self.shrink_kernel < 1 and f"shrink_kernel must be >= 1, got {self.shrink_kernel}",
            self.subsampler not in ("conv1d", "conv2d") and f"unknown subsampler {self.subsampler!r}",
            self.d_model % self.n_heads and f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}",
            not self.conv_kernels and "conv_kernels is empty",
            self.position_offset < 0 and f"position_offset must be >= 0, got {self.position_offset}",
            self.share_text_encoder and self.text_encoder_layers != self.encoder_layers and
            f"share_text_encoder needs text_encoder_layers == encoder_layers ({self.encoder_layers}), "
            f"got {self.text_encoder_layers}",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError("bad ModelConfig: " + "; ".join(problems))

    def check_vocabularies(self) -> None:
        """ValueError unless the vocabulary sizes (filled in from the tokenizers after the config file is
        read) fit the parts that use them."""
        problems = [
            self.tgt_vocab_size <= 0 and f"tgt_vocab_size must be > 0, got {self.tgt_vocab_size}",
            self.ctc and self.src_vocab_size <= 0 and "ctc=True needs src_vocab_size > 0",
            self.text_encoder_layers > 0 and self.src_vocab_size <= 0 and
            "text_encoder_layers > 0 needs src_vocab_size > 0",
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
                 text_encoder: TextEncoder | None = None, ctc_head: nn.Linear | None = None,
                 shrink: Shrink | None = None):
        super().__init__()
        self.config = config
        self.speech_encoder, self.decoder = speech_encoder, decoder
        self.text_encoder, self.ctc_head, self.shrink = text_encoder, ctc_head, shrink

    def encode_speech(self, feats: Tensor, lengths: Tensor) -> EncoderOutput:
        """feats (B, T, F) fbank (conv encoder) or waves (B, T) at 16 kHz (wav2vec2), lengths (B,) ->
        EncoderOutput x (B, T', D), lengths; with a CTC head ctc_logits (B, T_a, V_src) on the acoustic states
        and their lengths ctc_lengths (B,); T' = T_a unless the states are shrunk."""
        out = self.speech_encoder(feats, lengths)
        if self.ctc_head is not None:
            out = replace(out, ctc_logits=self.ctc_head(out.x), ctc_lengths=out.lengths)
        return out if self.shrink is None else self.shrink(out)

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


def _text_encoder(cfg: ModelConfig, shared: TransformerEncoder | None) -> TextEncoder | None:
    if cfg.text_encoder_layers <= 0:
        return None
    stack = shared if cfg.share_text_encoder else transformer_encoder(
        cfg.text_encoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
        cfg.activation_dropout)
    return TextEncoder(embedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id), stack, cfg.dropout,
                       cfg.position_offset)


def _conv_encoder(cfg: ModelConfig) -> ConvEncoder:
    stack = transformer_encoder(cfg.encoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim, cfg.dropout,
                                cfg.attention_dropout, cfg.activation_dropout)
    sub = subsampler(cfg.subsampler, cfg.input_dim, cfg.conv_channels, cfg.d_model, cfg.conv_kernels)
    return ConvEncoder(sub, stack, cfg.d_model, cfg.dropout, cfg.position_offset)


def _wav2vec2_encoder(cfg: ModelConfig, pretrained: bool) -> tuple[nn.Module, ModelConfig]:
    """The encoder, and `cfg` with the complete HF config in encoder_hf_config (so that a checkpoint
    rebuilds the same architecture without the pretrained model at hand)."""
    from speechmt.models.encoders.wav2vec2 import Wav2Vec2Options, wav2vec2_encoder

    options = Wav2Vec2Options(cfg.freeze_feature_extractor, cfg.freeze_encoder, cfg.lna_finetune,
                              cfg.encoder_layerdrop, cfg.mask_time_prob, cfg.mask_time_length,
                              cfg.gradient_checkpointing)
    encoder = wav2vec2_encoder(cfg.encoder_name_or_path, cfg.encoder_hf_config, cfg.d_model, options, pretrained)
    return encoder, replace(cfg, encoder_hf_config=encoder.model.config.to_dict())


def build_model(cfg: ModelConfig, pretrained: bool = True) -> Translator:
    """Builds the Translator that `cfg` describes. A wav2vec2 encoder loads the weights of
    cfg.encoder_name_or_path when `pretrained`; otherwise (a checkpoint's weights follow) it is built from
    cfg.encoder_hf_config alone."""
    cfg.check_vocabularies()
    if cfg.encoder == "wav2vec2":
        speech, cfg = _wav2vec2_encoder(cfg, pretrained)
        shared = None
    else:
        speech = _conv_encoder(cfg)
        shared = speech.encoder
    if cfg.shrink == "ctc" and not cfg.ctc:
        raise ValueError("shrink 'ctc' needs the CTC head: ctc=True with src_vocab_size > 0 (train.ctc_weight > 0)")
    decoder = transformer_decoder(cfg.tgt_vocab_size, cfg.decoder_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim,
                                  cfg.dropout, cfg.attention_dropout, cfg.activation_dropout,
                                  cfg.tie_embeddings, cfg.pad_id, cfg.position_offset, cfg.output_bias)
    ctc_head = nn.Linear(cfg.d_model, cfg.src_vocab_size) if cfg.ctc else None
    shrink = build_shrink(cfg.shrink, cfg.d_model, cfg.shrink_channels, cfg.shrink_kernel, CTC_BLANK_ID,
                          cfg.shrink_mode)
    return Translator(cfg, speech, decoder, _text_encoder(cfg, shared), ctc_head, shrink)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
