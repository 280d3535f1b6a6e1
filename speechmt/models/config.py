"""The model's config: `ModelConfig` holds the dimensions the modules share and one sub-config per module
(encoder, shrink, text_encoder, semantic, decoder, lora, fusion); `preset` names a starting point. The encoder
and the decoder are component slots: a kind and that kind's own options (speechmt.models.registry), given as
one mapping `{kind: whisper, name_or_path: whisper-base, finetune: frozen}` or as the kind's options dataclass.

A ModelConfig is saved in checkpoints as a dict and rebuilt with `ModelConfig(**d)`, or with
`ModelConfig.from_dict(d)`, which also reads the flat dicts of older checkpoints and configs
(speechmt.models.migrate). speechmt.models.build.build_model turns it into a Translator. Fields added later
default to what models did before them, so older checkpoints load unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import Slot
from speechmt.models.decoder import DecoderConfig, TransformerDecoderConfig
from speechmt.models.encoders.base import EncoderConfig
from speechmt.models.encoders.conv import ConvEncoderConfig
from speechmt.models.finetune import LoraSettings
from speechmt.models.fusion import FusionConfig
from speechmt.models.migrate import merge_model_configs, migrate_model_config
from speechmt.models.registry import DECODERS, ENCODERS, SHRINKS
from speechmt.models.semantic import SemanticConfig
from speechmt.models.shrink import NoShrinkConfig, ShrinkConfig

__all__ = [
    "DECODERS",
    "ENCODERS",
    "SHRINKS",
    "DecoderConfig",
    "EncoderConfig",
    "ModelConfig",
    "PARTS",
    "PRESETS",
    "SLOTS",
    "TEXT_EMBEDDINGS",
    "TextEncoderConfig",
    "preset",
]

TEXT_EMBEDDINGS = ("learned", "whisper", "lm")  # TextEncoderConfig.embeddings


@dataclass
class TextEncoderConfig:
    """The text path for MT input (it needs src_vocab_size > 0): `layers` > 0 builds a Transformer text
    encoder; `shared`: it runs the conv speech encoder's Transformer, which needs layers == encoder.layers;
    `embed_only`: token embeddings + positions alone, a plain embedder for a semantic layer that is itself
    the shared encoder (XSTNet's shape). `embeddings`: "learned" (a table over the SentencePiece source
    vocabulary, random at first, scaled by sqrt(D), sinusoidal positions) or "whisper" (the source text in
    Whisper's tokenizer, embedded as Whisper's decoder embeds its input: copies of its pretrained token and
    position tables, unscaled; needs decoder 'whisper') or "lm" (the source text in a language model's
    tokenizer, embedded by that LM decoder's own input table, shared with it, no positions of its own: the LM
    adds them; needs decoder 'lm' and embed_only); `freeze_embeddings` keeps Whisper's tables as they are
    (they then come from the base model, not the checkpoint's delta)."""

    layers: int = checked(0, lo=0)
    shared: bool = False
    embed_only: bool = False
    embeddings: str = "learned"
    freeze_embeddings: bool = False

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            [
                self.embed_only
                and (self.layers or self.shared)
                and "text_encoder.embed_only excludes text_encoder.layers and .shared",
                self.embeddings not in TEXT_EMBEDDINGS
                and f"unknown text_encoder.embeddings {self.embeddings!r}; expected one of {', '.join(TEXT_EMBEDDINGS)}",
                self.embeddings == "lm"
                and not self.embed_only
                and "text_encoder.embeddings lm needs text_encoder.embed_only (the LM decoder is the text's stack)",
                self.freeze_embeddings
                and self.embeddings != "whisper"
                and "text_encoder.freeze_embeddings needs text_encoder.embeddings whisper (learned ones start random)",
            ],
        )

    @property
    def enabled(self) -> bool:
        return self.layers > 0 or self.embed_only


SLOTS: dict[str, Slot] = {"encoder": ENCODERS, "shrink": SHRINKS, "decoder": DECODERS}
"""ModelConfig's component slots: a kind and its own options each (speechmt.models.components)."""
PARTS: dict[str, type] = {
    "text_encoder": TextEncoderConfig,
    "semantic": SemanticConfig,
    "lora": LoraSettings,
    "fusion": FusionConfig,
}
"""ModelConfig's other sub-configs and their dataclasses (with SLOTS: speechmt.models.migrate.GROUPS)."""


@dataclass
class ModelConfig:
    """Model dimensions shared by the modules, and one sub-config per module. A sub-config may be given as a
    mapping of its fields (as in a checkpoint's dict)."""

    tgt_vocab_size: int = checked(8000, lo=0)  # decoder vocabulary
    src_vocab_size: int = checked(0, lo=0)  # source side: CTC head and text-encoder embeddings; 0 = none
    d_model: int = checked(256, lo=1)
    n_heads: int = checked(4, lo=1)
    ffn_dim: int = checked(2048, lo=1)
    dropout: float = checked(0.1, lo=0, hi=1, hi_in=False)
    attention_dropout: float = checked(0.1, lo=0, hi=1, hi_in=False)
    activation_dropout: float = checked(0.1, lo=0, hi=1, hi_in=False)
    # CTC head over src_vocab_size (the blank is id 4 of the tokenizer layout); the LM ids of its text labels 5..
    # when it writes a language-model decoder's tokens, derived from the training transcripts when a run starts,
    # are the model bundle's `resolved` "ctc_vocab" (speechmt.models.ctc_head.RESOLVED)
    ctc: bool = False
    pad_id: int = checked(0, lo=0)
    # number of the first position (fairseq / HF Speech2Text: padding_idx + 1 = 2)
    position_offset: int = checked(0, lo=0)
    encoder: EncoderConfig = field(default_factory=ConvEncoderConfig)  # a kind of ENCODERS with its options
    shrink: ShrinkConfig = field(default_factory=NoShrinkConfig)  # a kind of SHRINKS with its options
    text_encoder: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    decoder: DecoderConfig = field(default_factory=TransformerDecoderConfig)  # a kind of DECODERS with its options
    lora: LoraSettings = field(default_factory=LoraSettings)
    fusion: FusionConfig = field(default_factory=FusionConfig)  # the encoder layers the bridge reads (models/fusion.py)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """The config a checkpoint saved: a dict in today's nested form, or the flat one of older checkpoints
        and configs, or one from before each kind had options of its own (whose fields of other kinds, which
        the model never read, are dropped)."""
        d = migrate_model_config(d)
        for name, slot in SLOTS.items():
            if isinstance(d.get(name), Mapping):
                d[name] = slot.options(d[name], saved=True)
        return cls(**d)

    @property
    def whisper_decoder_source(self) -> str:
        return self.decoder.name_or_path or self.encoder.name_or_path

    def __post_init__(self):
        for name, slot in SLOTS.items():
            setattr(self, name, slot.options(getattr(self, name)))
        for name, cls in PARTS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, cls(**value))
            elif not isinstance(value, cls):
                raise ValueError(
                    f"bad ModelConfig: {name} must be given as {cls.__name__}(...) or a mapping of its "
                    f"fields, got {value!r} (a flat config: ModelConfig.from_dict)"
                )
        enc, dec, text = self.encoder, self.decoder, self.text_encoder
        raise_problems(
            "bad ModelConfig",
            field_problems(self)
            + [
                self.shrink.embed == "lm"
                and not dec.lm_tokens
                and "shrink.embed lm needs decoder 'lm' (the segments become that LM's token embeddings)",
                dec.whisper_tokens
                and not (self.whisper_decoder_source or dec.hf_config)
                and "decoder 'whisper' needs decoder.name_or_path (or encoder.name_or_path) or decoder.hf_config",
                not isinstance(enc, ConvEncoderConfig)
                and text.shared
                and "text_encoder.shared needs the conv encoder's Transformer (encoder 'conv')",
                self.d_model % self.n_heads and f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}",
                isinstance(enc, ConvEncoderConfig)
                and text.shared
                and text.layers != enc.layers
                and f"text_encoder.shared needs text_encoder.layers == encoder.layers ({enc.layers}), got {text.layers}",
                text.embeddings == "whisper"
                and not dec.whisper_tokens
                and "text_encoder.embeddings whisper needs decoder 'whisper' (its tables are the decoder's)",
                text.embeddings == "lm"
                and not dec.lm_tokens
                and "text_encoder.embeddings lm needs decoder 'lm' (its table is the language model's)",
                dec.lm_tokens
                and not (dec.name_or_path or dec.hf_config)
                and "decoder 'lm' needs decoder.name_or_path (e.g. gemma-3-270m) or decoder.hf_config",
                getattr(enc, "asr_embed", "states") != "states"
                and not dec.lm_tokens
                and f"encoder.asr_embed {getattr(enc, 'asr_embed', '')} needs decoder 'lm' (its input embeddings are the table)",
                dec.examples
                and not (text.embed_only and text.embeddings == "lm")
                and "decoder.examples needs text_encoder.embed_only with embeddings lm (the examples are the LM's own text)",
            ],
        )

    def check_vocabularies(self) -> None:
        """ValueError unless the vocabulary sizes (filled in from the tokenizers after the config file is
        read) fit the parts that use them."""
        raise_problems(
            "bad ModelConfig",
            [
                self.tgt_vocab_size <= 0 and f"tgt_vocab_size must be > 0, got {self.tgt_vocab_size}",
                self.ctc and self.src_vocab_size <= 0 and "ctc=True needs src_vocab_size > 0",
                self.text_encoder.enabled
                and self.src_vocab_size <= 0
                and "a text encoder (text_encoder.layers > 0 or embed_only) needs src_vocab_size > 0",
            ],
        )


PRESETS: dict[str, dict] = {
    # fairseq s2t_transformer_s; fairseq does not share the decoder's input and output embeddings
    # (share_decoder_input_output_embed=False), which is what makes its ~31M at an 8000 vocabulary.
    "s2t_s": dict(
        d_model=256,
        n_heads=4,
        ffn_dim=2048,
        encoder=dict(layers=12, subsampler="conv1d", conv_channels=1024, conv_kernels=(5, 5)),
        decoder=dict(layers=6, tie_embeddings=False),
    ),
    "tiny": dict(
        d_model=64,
        n_heads=2,
        ffn_dim=128,
        tgt_vocab_size=64,
        encoder=dict(layers=2, conv_channels=64, conv_kernels=(5, 5)),
        decoder=dict(layers=2),
    ),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named configuration ("s2t_s" or "tiny"), with fields replaced by `overrides`: nested (encoder=
    {"layers": 3}, or an EncoderConfig) or in the old flat names (encoder_layers=3)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return ModelConfig(**merge_model_configs(PRESETS[name], migrate_model_config(overrides)))
