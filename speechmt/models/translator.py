"""The translation model: acoustic encoder (`conv` on fbank, `wav2vec2` on waveforms or `whisper` on log-mel
features) + CTC head, optional length shrinking (`conv` or `ctc`), optional text encoder, Transformer decoder
(trained from scratch, or Whisper's pretrained one).

`ModelConfig` is saved in checkpoints as a dict and rebuilt with `ModelConfig(**d)`; `build_model` is the
one place where variants are chosen. Fields added later default to what models did before them, so older
checkpoints load unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torch import Tensor, nn

from speechmt.models.decoder import DecoderCache, TransformerDecoder, transformer_decoder
from speechmt.models.encoders import AcousticEncoder, ConvEncoder, EncoderOutput, Record, TextEncoder, note, subsampler
from speechmt.models.finetune import FINETUNE_MODES, LoraSettings, set_finetuning
from speechmt.models.layers import TransformerEncoder, embedding, transformer_encoder
from speechmt.models.semantic import SEMANTICS
from speechmt.models.shrink import SHRINK_MODES, Shrink, build_shrink
from speechmt.tokenizer import Tokenizer

__all__ = ["EncoderOutput", "ModelConfig", "PRESETS", "Translator", "build_model", "count_parameters", "preset"]

CTC_BLANK_ID = Tokenizer.blank_id  # the CTC blank of every SentencePiece tokenizer (speechmt.tokenizer)
ENCODERS = ("conv", "wav2vec2", "whisper")
DECODERS = ("transformer", "whisper")
SHRINKS = ("none", "conv", "ctc")
PRETRAINED_ENCODERS = ("wav2vec2", "whisper")


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
    # encoder_layers), "wav2vec2" (a Hugging Face wav2vec2 / HuBERT / data2vec audio model on waveforms) or
    # "whisper" (a Hugging Face Whisper model's encoder on its log-mel features, at the utterance's length)
    encoder: str = "conv"
    # wav2vec2, whisper: a hub id, a local directory or a name set-up converted under $SPEECHMT_HOME
    # (e.g. whisper-base); "" = random init from encoder_hf_config
    encoder_name_or_path: str = ""
    # wav2vec2, whisper: HF config fields, overriding the pretrained config, or the whole architecture for a
    # random init (wav2vec2: with "model_type": wav2vec2, hubert or data2vec-audio). A built model holds its
    # complete config here.
    encoder_hf_config: dict = field(default_factory=dict)
    freeze_feature_extractor: bool = False  # wav2vec2: freeze the CNN over the waveform (usual when pretrained)
    freeze_encoder: bool = False  # wav2vec2, whisper: freeze the whole pretrained encoder (whisper: cacheable)
    lna_finetune: bool = False  # wav2vec2, whisper: train only its LayerNorms and attention projections (LNA)
    encoder_lora: bool = False  # wav2vec2, whisper: LoRA adapters (lora_*) on the encoder, the rest frozen
    encoder_layerdrop: float = 0.0  # wav2vec2, whisper: probability of skipping each layer in training
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
    # the decoder: "transformer" (built from the fields above) or "whisper" (a Whisper model's pretrained
    # decoder, from decoder_name_or_path or else encoder_name_or_path; d_model, layers, heads, vocabulary and
    # positions are Whisper's, and targets use Whisper's tokenizer and language tokens)
    decoder: str = "transformer"
    decoder_name_or_path: str = ""
    decoder_hf_config: dict = field(default_factory=dict)  # whisper: as encoder_hf_config
    decoder_finetune: str = "full"  # full, frozen, lna (LayerNorms + attention) or lora (lora_* adapters)
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
    # the semantic layer between the encoders and the decoder (speechmt.models.semantic): "identity" (none)
    # or a variant, with its own settings in semantic_options (checked by the variant's builder)
    semantic: str = "identity"
    semantic_options: dict = field(default_factory=dict)

    @property
    def lora(self) -> LoraSettings:
        return LoraSettings(self.lora_rank, self.lora_alpha, self.lora_dropout, self.lora_targets)

    @property
    def whisper_decoder_source(self) -> str:
        return self.decoder_name_or_path or self.encoder_name_or_path

    def __post_init__(self):
        self.conv_kernels, self.lora_targets = tuple(self.conv_kernels), tuple(self.lora_targets)
        self.encoder_hf_config, self.decoder_hf_config = dict(self.encoder_hf_config), dict(self.decoder_hf_config)
        self.semantic_options = dict(self.semantic_options)
        pretrained_only = [name for name in ("encoder_name_or_path", "encoder_hf_config", "freeze_encoder",
                                             "lna_finetune", "encoder_lora", "encoder_layerdrop")
                           if getattr(self, name)]
        w2v_only = [name for name in ("freeze_feature_extractor", "mask_time_prob", "gradient_checkpointing")
                    if getattr(self, name)]
        problems = [
            self.encoder not in ENCODERS and f"unknown encoder {self.encoder!r}; expected one of {', '.join(ENCODERS)}",
            self.encoder == "conv" and pretrained_only and
            f"{', '.join(pretrained_only)}: options of encoders {' and '.join(PRETRAINED_ENCODERS)} only",
            self.encoder != "wav2vec2" and w2v_only and f"{', '.join(w2v_only)}: options of encoder 'wav2vec2' only",
            sum((self.freeze_encoder, self.lna_finetune, self.encoder_lora)) > 1 and
            "freeze_encoder, lna_finetune and encoder_lora exclude each other",
            self.decoder not in DECODERS and f"unknown decoder {self.decoder!r}; expected one of {', '.join(DECODERS)}",
            self.decoder == "whisper" and not (self.whisper_decoder_source or self.decoder_hf_config) and
            "decoder 'whisper' needs decoder_name_or_path (or encoder_name_or_path) or decoder_hf_config",
            self.decoder_finetune not in FINETUNE_MODES and
            f"unknown decoder_finetune {self.decoder_finetune!r}; expected one of {', '.join(FINETUNE_MODES)}",
            not (self.lora_rank >= 1 and self.lora_alpha > 0 and 0 <= self.lora_dropout < 1) and
            f"lora_rank must be >= 1, lora_alpha > 0 and lora_dropout in [0, 1); got {self.lora_rank}, "
            f"{self.lora_alpha}, {self.lora_dropout}",
            not 0 <= self.encoder_layerdrop <= 1 and
            f"encoder_layerdrop must be in [0, 1], got {self.encoder_layerdrop}",
            not 0 <= self.mask_time_prob < 1 and f"mask_time_prob must be in [0, 1), got {self.mask_time_prob}",
            self.mask_time_length < 1 and f"mask_time_length must be >= 1, got {self.mask_time_length}",
            self.encoder != "conv" and self.share_text_encoder and
            "share_text_encoder needs the conv encoder's Transformer (encoder 'conv')",
            self.semantic not in SEMANTICS and
            f"unknown semantic {self.semantic!r}; expected one of {', '.join(SEMANTICS)}",
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
    """Speech (or text) encoder -> semantic layer -> Transformer decoder. No forward: tasks call encode_*
    and decode; `states` returns every stage's states by name."""

    def __init__(self, config: ModelConfig, speech_encoder: AcousticEncoder, decoder: TransformerDecoder,
                 text_encoder: TextEncoder | None = None, ctc_head: nn.Linear | None = None,
                 shrink: Shrink | None = None, semantic: nn.Module | None = None):
        super().__init__()
        self.config = config
        self.speech_encoder, self.decoder = speech_encoder, decoder
        self.text_encoder, self.ctc_head, self.shrink = text_encoder, ctc_head, shrink
        self.semantic = semantic if semantic is not None else SEMANTICS["identity"](config)

    def encode_speech(self, feats: Tensor, lengths: Tensor, precomputed: bool = False,
                      record: Record | None = None) -> EncoderOutput:
        """feats (B, T, F) fbank (conv encoder), waves (B, T) at 16 kHz (wav2vec2) or log-mel (B, T, n_mels)
        (whisper), lengths (B,) -> EncoderOutput x (B, T', D), lengths; with a CTC head ctc_logits (B, T_a,
        V_src) on the acoustic states and their lengths ctc_lengths (B,); T' = T_a unless the states are shrunk.
        `precomputed`: feats are the frozen encoder's cached states (B, T_a, H) (speechmt.data.encoder_cache).
        `record`: see `states`."""
        sub = None if record is None else {}
        if precomputed:
            note(sub, "out", feats, lengths)
            out = self.speech_encoder.project(feats, lengths, sub)
        else:
            out = self.speech_encoder(feats, lengths, sub)
        _merge(record, "speech.encoder.", sub)
        if self.ctc_head is not None:
            out = replace(out, ctc_logits=self.ctc_head(out.x), ctc_lengths=out.lengths)
        if self.shrink is not None:
            out = self.shrink(out)
            note(record, "speech.shrink", out.x, out.lengths)
        return self._semantic(self.semantic.speech, out, record, "speech")

    def encode_text(self, tokens: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """tokens (B, S), lengths (B,) -> EncoderOutput x (B, S, D), lengths. `record`: see `states`."""
        if self.text_encoder is None:
            raise ValueError("this model has no text encoder: build it with text_encoder_layers > 0 "
                             "(and src_vocab_size > 0) to encode text")
        sub = None if record is None else {}
        out = self.text_encoder(tokens, lengths, sub)
        _merge(record, "text.encoder.", sub)
        return self._semantic(self.semantic.text, out, record, "text")

    @staticmethod
    def _semantic(path, out: EncoderOutput, record: Record | None, side: str) -> EncoderOutput:
        sub = None if record is None else {}
        out = path(out, sub)
        _merge(record, f"{side}.semantic.", sub)
        note(record, f"{side}.out", out.x, out.lengths)
        return out

    def states(self, inputs: Tensor, lengths: Tensor, modality: str = "speech",
               precomputed: bool = False) -> Record:
        """Every stage's states on the way to the decoder, in order, as {name: (x (B, T, D), lengths (B,))}:
        speech: "speech.encoder.<...>" (the acoustic encoder's own: "subsampled"/"conv", "layer.<i>",
        "out", "projected"), "speech.shrink", "speech.semantic.<...>", "speech.out"; text: "text.encoder.
        <...>" ("embedded", "layer.<i>", "out"), "text.semantic.<...>", "text.out". "<side>.out" is what the
        decoder attends to. Padded frames are arbitrary: use the lengths. For the analysis tool and the
        distance losses; no gradients are stopped."""
        record: Record = {}
        if modality == "speech":
            self.encode_speech(inputs, lengths, precomputed, record)
        elif modality == "text":
            self.encode_text(inputs, lengths, record)
        else:
            raise ValueError(f"unknown modality {modality!r}; expected speech or text")
        return record

    def decode(self, tokens: Tensor, enc: EncoderOutput, cache: DecoderCache | None = None) -> Tensor:
        """tokens (B, U) decoder input (only the new positions with a cache) -> logits (B, U, tgt_vocab_size)."""
        return self.decoder(tokens, enc.x, enc.lengths, cache)

    def new_cache(self) -> DecoderCache:
        return self.decoder.new_cache()


def _merge(record: Record | None, prefix: str, sub: Record | None) -> None:
    if record is not None and sub:
        record.update({prefix + k: v for k, v in sub.items()})


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


def _whisper_models(cfg: ModelConfig, pretrained: bool) -> tuple[nn.Module | None, nn.Module | None]:
    """The HF Whisper models the encoder and the decoder come from (one load when they name the same)."""
    from speechmt.models.whisper import load_hf_whisper

    enc = load_hf_whisper(cfg.encoder_name_or_path, cfg.encoder_hf_config, pretrained) \
        if cfg.encoder == "whisper" else None
    if cfg.decoder != "whisper":
        return enc, None
    if enc is not None and cfg.whisper_decoder_source == cfg.encoder_name_or_path and \
            (not cfg.decoder_hf_config or cfg.decoder_hf_config == cfg.encoder_hf_config):
        return enc, enc
    return enc, load_hf_whisper(cfg.whisper_decoder_source, cfg.decoder_hf_config or cfg.encoder_hf_config,
                                pretrained)


def _whisper_decoder(cfg: ModelConfig, hf_model: nn.Module) -> tuple[TransformerDecoder, ModelConfig]:
    """Whisper's decoder, and `cfg` with Whisper's dimensions and complete HF config filled in."""
    from speechmt.models.whisper import hf_config_dict, whisper_decoder_from_hf

    c = hf_model.config
    cfg = replace(cfg, d_model=c.d_model, n_heads=c.decoder_attention_heads, ffn_dim=c.decoder_ffn_dim,
                  decoder_layers=c.decoder_layers, tgt_vocab_size=c.vocab_size, tie_embeddings=True,
                  decoder_hf_config=hf_config_dict(hf_model))
    return whisper_decoder_from_hf(hf_model.model.decoder, cfg.pad_id, cfg.dropout, cfg.attention_dropout,
                                   cfg.activation_dropout), cfg


def _finetune_encoder(cfg: ModelConfig, speech: nn.Module) -> None:
    """A pretrained encoder's fine-tuning mode (wav2vec2 applies freeze/LNA itself; LoRA for both)."""
    if cfg.encoder == "whisper":
        mode = "frozen" if cfg.freeze_encoder else "lna" if cfg.lna_finetune else "full"
        set_finetuning(speech.model, mode)
    if cfg.encoder_lora:
        set_finetuning(speech.model, "lora", cfg.lora)


def build_model(cfg: ModelConfig, pretrained: bool = True) -> Translator:
    """Builds the Translator that `cfg` describes. Pretrained parts (wav2vec2 or Whisper encoder, Whisper
    decoder) load the weights of their name_or_path when `pretrained`; otherwise (a checkpoint's weights
    follow) they are built from their stored HF config alone. Fine-tuning modes (frozen, LNA, LoRA) are
    applied last, so a checkpoint's trained parameters load into the same structure."""
    hf_enc, hf_dec = _whisper_models(cfg, pretrained) if "whisper" in (cfg.encoder, cfg.decoder) else (None, None)
    decoder = None
    if hf_dec is not None:
        decoder, cfg = _whisper_decoder(cfg, hf_dec)
    cfg.check_vocabularies()
    shared = None
    if cfg.encoder == "wav2vec2":
        speech, cfg = _wav2vec2_encoder(cfg, pretrained)
    elif cfg.encoder == "whisper":
        from speechmt.models.whisper import hf_config_dict, whisper_encoder_from_hf

        speech = whisper_encoder_from_hf(hf_enc, cfg.d_model, cfg.encoder_layerdrop)
        cfg = replace(cfg, encoder_hf_config=hf_config_dict(hf_enc))
    else:
        speech = _conv_encoder(cfg)
        shared = speech.encoder
    if cfg.shrink == "ctc" and not cfg.ctc:
        raise ValueError("shrink 'ctc' needs the CTC head: ctc=True with src_vocab_size > 0 (train.ctc_weight > 0)")
    if decoder is None:
        decoder = transformer_decoder(cfg.tgt_vocab_size, cfg.decoder_layers, cfg.d_model, cfg.n_heads,
                                      cfg.ffn_dim, cfg.dropout, cfg.attention_dropout, cfg.activation_dropout,
                                      cfg.tie_embeddings, cfg.pad_id, cfg.position_offset, cfg.output_bias)
    ctc_head = nn.Linear(cfg.d_model, cfg.src_vocab_size) if cfg.ctc else None
    shrink = build_shrink(cfg.shrink, cfg.d_model, cfg.shrink_channels, cfg.shrink_kernel, CTC_BLANK_ID,
                          cfg.shrink_mode)
    semantic = SEMANTICS[cfg.semantic](cfg, **cfg.semantic_options)
    _finetune_encoder(cfg, speech)
    set_finetuning(decoder, cfg.decoder_finetune, cfg.lora)
    return Translator(cfg, speech, decoder, _text_encoder(cfg, shared), ctc_head, shrink, semantic)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
