"""The model's config: `ModelConfig` holds the dimensions the modules share and one sub-config per module
(encoder, shrink, text_encoder, semantic, decoder, lora, fusion); `preset` names a starting point.

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
from speechmt.models.encoders.whisper_asr import ASR_STATES
from speechmt.models.finetune import FINETUNE_MODES, LoraSettings
from speechmt.models.fusion import FusionConfig
from speechmt.models.memory import BASE_DTYPES
from speechmt.models.migrate import merge_model_configs, migrate_model_config
from speechmt.models.semantic import SemanticConfig
from speechmt.models.shrink import ShrinkConfig
from speechmt.tokenizers.whisper import language_token

__all__ = ["DECODERS", "ENCODERS", "ENCODER_INPUTS", "DecoderConfig", "EncoderConfig", "ModelConfig", "PARTS",
           "PRESETS", "PRETRAINED_ENCODERS", "TEXT_EMBEDDINGS", "TextEncoderConfig", "preset"]

ENCODERS = ("conv", "wav2vec2", "whisper", "whisper_asr")
DECODERS = ("transformer", "whisper", "lm")
TEXT_EMBEDDINGS = ("learned", "whisper", "lm")  # TextEncoderConfig.embeddings
PRETRAINED_ENCODERS = ("wav2vec2", "whisper", "whisper_asr")
ASR_EMBEDS = ("states", "lm", "text")  # whisper_asr: what a transcript token becomes (EncoderConfig.asr_embed)
ENCODER_INPUTS = {"conv": "fbank", "wav2vec2": "waveform", "whisper": "whisper_mel", "whisper_asr": "whisper_mel"}
"""The front end (speechmt.frontend, by name) whose output each acoustic encoder reads."""


@dataclass
class EncoderConfig:
    """The acoustic encoder: "conv" (fbank -> subsampler -> Transformer: input_dim, subsampler, conv_*,
    layers), "wav2vec2" (a Hugging Face wav2vec2 / HuBERT / data2vec audio model on waveforms), "whisper"
    (a Hugging Face Whisper model's encoder on its log-mel features, at the utterance's length) or
    "whisper_asr" (a whole Whisper model, frozen, transcribing its padded input greedily: its decoder's states
    at the transcript's tokens, speechmt.models.encoders.whisper_asr; needs finetune frozen and
    data.whisper_pad_seconds of at least 10)."""

    kind: str = "conv"
    layers: int = checked(12, lo=0)  # conv: Transformer layers
    input_dim: int = checked(80, lo=1)  # conv: fbank bins
    subsampler: str = "conv1d"  # conv: "conv1d" (fairseq S2T) or "conv2d" (ESPnet; 3x3 kernels, conv_kernels unused)
    conv_channels: int = checked(1024, lo=1)
    conv_kernels: tuple[int, ...] = (5, 5)
    # wav2vec2, whisper: a hub id, a local directory or a name set-up converted under $SPEECHMT_HOME
    # (e.g. whisper-base); "" = random init from hf_config
    name_or_path: str = ""
    # wav2vec2, whisper: HF config fields, overriding the pretrained config, or the whole architecture for a
    # random init (wav2vec2: with "model_type": wav2vec2, hubert or data2vec-audio). A built model holds its
    # complete config here.
    hf_config: dict = field(default_factory=dict)
    # wav2vec2, whisper: full, frozen (whisper: its states cacheable), lna (only its LayerNorms and attention
    # projections train) or lora (adapters with ModelConfig.lora, the rest frozen)
    finetune: str = "full"
    layerdrop: float = checked(0.0, lo=0, hi=1)  # wav2vec2, whisper: probability of skipping each layer in training
    # whisper: the convolutions and the first N layers stay frozen whatever `finetune` says, which then
    # applies to the layers above (and the final LayerNorm); their input, the states after layer N, is
    # cached when data.cache_encoder is on, so an update runs only the layers above
    frozen_layers: int = checked(0, lo=0)
    freeze_feature_extractor: bool = False  # wav2vec2: freeze the CNN over the waveform (usual when pretrained)
    # wav2vec2: share of frames masked in spans in training (HF's mask_time_prob)
    mask_time_prob: float = checked(0.0, lo=0, hi=1, hi_in=False)
    mask_time_length: int = checked(10, lo=1)  # wav2vec2: frames per masked span
    # wav2vec2, whisper: recompute its layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    # whisper: the type its frozen weights are kept in (float32, bfloat16 or float16: half the bytes); what trains
    # stays float32; needs something frozen (finetune frozen, lna or lora, or frozen_layers); speechmt.models.memory
    base_dtype: str = checked("float32", choices=BASE_DTYPES)
    # whisper_asr: the decoder prompt's ids (<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>),
    # filled in from the Whisper model's generation config for `asr_language` when the model is built
    asr_prompt: tuple[int, ...] = ()
    asr_language: str = "en"
    asr_beam: int = checked(1, lo=1, hi=16)  # whisper_asr: 1 greedy search; more: a beam search of that many
    # whisper_asr: what each transcript token becomes: "states" (its decoder state, projected), "lm" (the LM
    # decoder's soft embeddings of Whisper's candidates for it, plus that projection) or "text" (the transcript
    # re-tokenised as the LM's own source text, each LM token's embedding plus the projection of the state of
    # the Whisper piece that completes it); lm and text need decoder 'lm'
    asr_embed: str = "states"
    # whisper_asr with asr_embed states: which of Whisper's decoder states a transcript token's vector projects:
    # "after" (the state after reading it), "before" (the state that predicted it: its output layer scores that
    # token) or "both" (the two concatenated)
    asr_state: str = "after"

    def __post_init__(self):
        self.conv_kernels, self.hf_config = tuple(self.conv_kernels), dict(self.hf_config)
        self.asr_prompt = tuple(int(i) for i in self.asr_prompt)
        pretrained_only = [f"encoder.{name}" for name in ("name_or_path", "hf_config", "layerdrop")
                           if getattr(self, name)] + ["encoder.finetune"] * (self.finetune != "full")
        w2v_only = [f"encoder.{name}" for name in ("freeze_feature_extractor", "mask_time_prob")
                    if getattr(self, name)]
        raise_problems("bad ModelConfig", field_problems(self, "encoder.") + [
            self.kind not in ENCODERS and f"unknown encoder {self.kind!r}; expected one of {', '.join(ENCODERS)}",
            self.kind == "conv" and pretrained_only and
            f"{', '.join(pretrained_only)}: options of encoders {', '.join(PRETRAINED_ENCODERS[:-1])} and "
            f"{PRETRAINED_ENCODERS[-1]} only",
            self.kind != "wav2vec2" and w2v_only and f"{', '.join(w2v_only)}: options of encoder 'wav2vec2' only",
            self.gradient_checkpointing and self.kind not in ("wav2vec2", "whisper") and
            "encoder.gradient_checkpointing: an option of encoders wav2vec2 and whisper only",
            self.base_dtype in BASE_DTYPES[1:] and self.kind != "whisper" and
            f"encoder.base_dtype {self.base_dtype}: an option of encoder 'whisper' only",
            self.base_dtype in BASE_DTYPES[1:] and self.finetune == "full" and not self.frozen_layers and
            f"encoder.base_dtype {self.base_dtype} keeps frozen weights only: it needs encoder.finetune frozen, lna "
            f"or lora, or encoder.frozen_layers (full fine-tuning trains every weight in float32)",
            self.finetune not in FINETUNE_MODES and
            f"unknown encoder.finetune {self.finetune!r}; expected one of {', '.join(FINETUNE_MODES)}",
            self.frozen_layers and self.kind != "whisper" and "encoder.frozen_layers: an option of encoder 'whisper' only",
            self.frozen_layers and self.finetune == "frozen" and
            "encoder.frozen_layers needs encoder.finetune full, lna or lora (frozen freezes every layer)",
            self.subsampler not in ("conv1d", "conv2d") and
            f"unknown encoder.subsampler {self.subsampler!r}; expected conv1d or conv2d",
            not self.conv_kernels and "encoder.conv_kernels is empty",
            self.asr_embed not in ASR_EMBEDS and
            f"unknown encoder.asr_embed {self.asr_embed!r}; expected {', '.join(ASR_EMBEDS[:-1])} or {ASR_EMBEDS[-1]}",
            self.asr_state not in ASR_STATES and
            f"unknown encoder.asr_state {self.asr_state!r}; expected {', '.join(ASR_STATES[:-1])} or {ASR_STATES[-1]}",
            self.asr_state != "after" and (self.kind != "whisper_asr" or self.asr_embed != "states") and
            f"encoder.asr_state {self.asr_state} needs encoder whisper_asr with asr_embed states (lm reads the state "
            f"before each token through Whisper's output layer already; text reads the one completing it)",
            self.kind == "whisper_asr" and self.finetune != "frozen" and
            f"encoder whisper_asr needs encoder.finetune frozen (got {self.finetune!r}): its search is not trained",
        ])

    @property
    def frontend(self) -> str:
        """The name of the front end whose output this encoder reads: fbank, waveform or whisper_mel."""
        return ENCODER_INPUTS[self.kind]

    @property
    def reads_stored_features(self) -> bool:
        """True when the encoder reads the features preparation stored (the conv encoder's fbank), not audio."""
        return self.kind == "conv"

    @property
    def cacheable_states(self) -> bool:
        """True when some of the encoder's states are computed by nothing trained, so data.cache_encoder can
        cache them once per split: a Whisper encoder's, frozen or below encoder.frozen_layers."""
        return self.kind == "whisper_asr" or \
            self.kind == "whisper" and (self.finetune == "frozen" or self.frozen_layers > 0)


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
        raise_problems("bad ModelConfig", [
            self.embed_only and (self.layers or self.shared) and
            "text_encoder.embed_only excludes text_encoder.layers and .shared",
            self.embeddings not in TEXT_EMBEDDINGS and
            f"unknown text_encoder.embeddings {self.embeddings!r}; expected one of {', '.join(TEXT_EMBEDDINGS)}",
            self.embeddings == "lm" and not self.embed_only and
            "text_encoder.embeddings lm needs text_encoder.embed_only (the LM decoder is the text's stack)",
            self.freeze_embeddings and self.embeddings != "whisper" and
            "text_encoder.freeze_embeddings needs text_encoder.embeddings whisper (learned ones start random)",
        ])

    @property
    def enabled(self) -> bool:
        return self.layers > 0 or self.embed_only


@dataclass
class DecoderConfig:
    """The decoder: "transformer" (`layers` of the shared dimensions), "whisper" (a Whisper model's
    pretrained decoder, from name_or_path or else encoder.name_or_path; d_model, layers, heads, vocabulary and
    positions are Whisper's, and targets use Whisper's tokenizer and language tokens) or "lm" (a pretrained
    causal language model from name_or_path, reading [prompt | source | target]: speechmt.models.lm_decoder;
    d_model is its width; `vocab`: the LM ids of its trimmed output vocabulary and `prompt`: the LM ids read
    before the source, both filled in from the LM's tokenizer and the training targets when a run starts)."""

    kind: str = "transformer"
    layers: int = checked(6, lo=1)
    name_or_path: str = ""
    hf_config: dict = field(default_factory=dict)  # whisper: as encoder.hf_config
    finetune: str = "full"  # full, frozen, lna (LayerNorms + attention) or lora (ModelConfig.lora adapters)
    tie_embeddings: bool = True  # decoder input embedding == output projection
    output_bias: bool = False  # a bias on the output projection (imported models)
    vocab: tuple[int, ...] = ()  # lm: the LM ids of the output vocabulary (speechmt.tokenizers.lm)
    prompt: tuple[int, ...] = ()  # lm: the LM ids before the source ("<bos>English:")
    # lm: up to this many retrieved translation pairs read before each source (text, or the speech bridge's
    # vectors), as few-shot examples (`speechmt data retrieve` writes them beside a split for training; decoding speech
    # retrieves them by the model's own transcript: speechmt.data.retrieval); 0: none
    examples: int = checked(0, lo=0, hi=16)
    # examples: the translation memory that decoding speech searches when none is given (--memory): a manifest,
    # a folder with memory.jsonl, or a folder's name under $SPEECHMT_HOME (`ding-en-de`: `speechmt data synth-memory`);
    # "": none named
    memory: str = ""
    # recompute the layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    # whisper, lm: the type the frozen pretrained weights are kept in (float32, bfloat16 or float16: half the
    # bytes); what trains (LoRA adapters, LNA's parts) stays float32; needs finetune frozen, lna or lora
    base_dtype: str = checked("float32", choices=BASE_DTYPES)

    def __post_init__(self):
        self.hf_config, self.vocab, self.prompt = dict(self.hf_config), tuple(self.vocab), tuple(self.prompt)
        raise_problems("bad ModelConfig", field_problems(self, "decoder.") + [
            self.base_dtype in BASE_DTYPES[1:] and self.kind == "transformer" and
            f"decoder.base_dtype {self.base_dtype}: an option of the pretrained decoders whisper and lm only",
            self.base_dtype in BASE_DTYPES[1:] and self.finetune == "full" and
            f"decoder.base_dtype {self.base_dtype} keeps frozen weights only: it needs decoder.finetune frozen, lna "
            f"or lora (full fine-tuning trains every weight in float32)",
            self.kind not in DECODERS and f"unknown decoder {self.kind!r}; expected one of {', '.join(DECODERS)}",
            self.finetune not in FINETUNE_MODES and
            f"unknown decoder.finetune {self.finetune!r}; expected one of {', '.join(FINETUNE_MODES)}",
            self.examples and self.kind != "lm" and
            f"decoder.examples ({self.examples}) needs decoder.kind lm (few-shot examples are an LM's prompt)",
            self.memory and not self.examples and
            f"decoder.memory ({self.memory!r}) needs decoder.examples > 0 (the memory is where examples come from)",
        ])

    @property
    def whisper_tokens(self) -> bool:
        """True when the decoder writes Whisper's tokenizer's ids (Whisper's decoder)."""
        return self.kind == "whisper"

    @property
    def lm_tokens(self) -> bool:
        """True when the decoder writes a language model's tokens (an LM decoder; its trimmed vocabulary)."""
        return self.kind == "lm"

    @property
    def one_vocabulary(self) -> bool:
        """True when the decoder writes every task (ASR, ST, MT) in one pretrained tokenizer's vocabulary
        (Whisper's, an LM's); a Transformer decoder writes the SentencePiece vocabulary of its side."""
        return self.whisper_tokens or self.lm_tokens

    def language_tag(self, lang: str, src_lang: str, whisper_task: str) -> str:
        """The tag that starts a target in `lang`: "<lang>", or Whisper's language token, which in Whisper's
        translate task names the source language (`src_lang`)."""
        if self.whisper_tokens:
            return language_token(src_lang if whisper_task == "translate" else lang)
        return f"<{lang}>"


PARTS: dict[str, type] = {"encoder": EncoderConfig, "shrink": ShrinkConfig, "text_encoder": TextEncoderConfig,
                          "semantic": SemanticConfig, "decoder": DecoderConfig, "lora": LoraSettings,
                          "fusion": FusionConfig}
"""ModelConfig's sub-configs (speechmt.models.migrate.GROUPS) and their dataclasses."""


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
    ctc: bool = False  # CTC head over src_vocab_size (the blank is id 4 of the tokenizer layout)
    # the LM ids of the CTC head's text labels 5.. when it writes a language-model decoder's tokens
    # (speechmt.models.ctc_head; filled in from the training transcripts when a run starts), else empty
    ctc_vocab: tuple[int, ...] = ()
    pad_id: int = checked(0, lo=0)
    # number of the first position (fairseq / HF Speech2Text: padding_idx + 1 = 2)
    position_offset: int = checked(0, lo=0)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    shrink: ShrinkConfig = field(default_factory=ShrinkConfig)
    text_encoder: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    fusion: FusionConfig = field(default_factory=FusionConfig)  # the encoder layers the bridge reads (models/fusion.py)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """The config of a dict in today's nested form or the flat one of older checkpoints and configs."""
        return cls(**migrate_model_config(d))

    @property
    def whisper_decoder_source(self) -> str:
        return self.decoder.name_or_path or self.encoder.name_or_path

    def __post_init__(self):
        for name, cls in PARTS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, cls(**value))
            elif not isinstance(value, cls):
                raise ValueError(f"bad ModelConfig: {name} must be given as {cls.__name__}(...) or a mapping of its "
                                 f"fields, got {value!r} (a flat config: ModelConfig.from_dict)")
        enc, dec, text = self.encoder, self.decoder, self.text_encoder
        self.ctc_vocab = tuple(int(i) for i in self.ctc_vocab)
        raise_problems("bad ModelConfig", field_problems(self) + [
            self.shrink.embed == "lm" and dec.kind != "lm" and
            "shrink.embed lm needs decoder 'lm' (the segments become that LM's token embeddings)",
            dec.kind == "whisper" and not (self.whisper_decoder_source or dec.hf_config) and
            "decoder 'whisper' needs decoder.name_or_path (or encoder.name_or_path) or decoder.hf_config",
            enc.kind != "conv" and text.shared and
            "text_encoder.shared needs the conv encoder's Transformer (encoder 'conv')",
            self.d_model % self.n_heads and f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}",
            text.shared and text.layers != enc.layers and
            f"text_encoder.shared needs text_encoder.layers == encoder.layers ({enc.layers}), got {text.layers}",
            text.embeddings == "whisper" and dec.kind != "whisper" and
            "text_encoder.embeddings whisper needs decoder 'whisper' (its tables are the decoder's)",
            text.embeddings == "lm" and dec.kind != "lm" and
            "text_encoder.embeddings lm needs decoder 'lm' (its table is the language model's)",
            dec.kind == "lm" and not (dec.name_or_path or dec.hf_config) and
            "decoder 'lm' needs decoder.name_or_path (e.g. gemma-3-270m) or decoder.hf_config",
            dec.examples and not (text.embed_only and text.embeddings == "lm") and
            "decoder.examples needs text_encoder.embed_only with embeddings lm (the examples are the LM's own text)",
        ])

    def check_vocabularies(self) -> None:
        """ValueError unless the vocabulary sizes (filled in from the tokenizers after the config file is
        read) fit the parts that use them."""
        raise_problems("bad ModelConfig", [
            self.tgt_vocab_size <= 0 and f"tgt_vocab_size must be > 0, got {self.tgt_vocab_size}",
            self.ctc and self.src_vocab_size <= 0 and "ctc=True needs src_vocab_size > 0",
            self.text_encoder.enabled and self.src_vocab_size <= 0 and
            "a text encoder (text_encoder.layers > 0 or embed_only) needs src_vocab_size > 0",
        ])


PRESETS: dict[str, dict] = {
    # fairseq s2t_transformer_s; fairseq does not share the decoder's input and output embeddings
    # (share_decoder_input_output_embed=False), which is what makes its ~31M at an 8000 vocabulary.
    "s2t_s": dict(d_model=256, n_heads=4, ffn_dim=2048,
                  encoder=dict(layers=12, subsampler="conv1d", conv_channels=1024, conv_kernels=(5, 5)),
                  decoder=dict(layers=6, tie_embeddings=False)),
    "tiny": dict(d_model=64, n_heads=2, ffn_dim=128, tgt_vocab_size=64,
                 encoder=dict(layers=2, conv_channels=64, conv_kernels=(5, 5)), decoder=dict(layers=2)),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named configuration ("s2t_s" or "tiny"), with fields replaced by `overrides`: nested (encoder=
    {"layers": 3}, or an EncoderConfig) or in the old flat names (encoder_layers=3)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return ModelConfig(**merge_model_configs(PRESETS[name], migrate_model_config(overrides)))
