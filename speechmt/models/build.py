"""The one place a model config becomes a model: a Translator (`build_model`, where its variants are chosen:
encoder, decoder, text encoder, shrink, semantic layer, fusion, fine-tuning), or a pretraining model that is
none, FAT-MLM's fused encoder (speechmt.models.fat_mlm), which a config names as `semantic: {kind: fat_mlm}`;
and a checkpoint of either read on a Translator's names (FAT-ST)."""

from __future__ import annotations

import copy
from typing import Any, Callable

from torch import Tensor, nn

from speechmt.models.components import BuildParts
from speechmt.models.config import ModelConfig
from speechmt.models.ctc_head import RESOLVED as CTC_RESOLVED
from speechmt.models.ctc_head import CTCHead
from speechmt.models.decoder import TransformerDecoder
from speechmt.models.encoders import ConvEncoder, TextEncoder
from speechmt.models.fat_mlm import fat_mlm, translator_state
from speechmt.models.finetune import set_finetuning
from speechmt.models.fusion import build_fusion
from speechmt.models.layers import TransformerEncoder, config_stack, embedding
from speechmt.models.memory import checkpoint_decoder_layers, torch_dtype, train_in_float32
from speechmt.models.registry import DECODERS, ENCODERS, SHRINKS
from speechmt.models.semantic import SEMANTICS
from speechmt.models.translator import Translator
from speechmt.tokenizers.sentencepiece import Tokenizer

__all__ = [
    "PRETRAINING_MODELS",
    "build",
    "build_model",
    "count_parameters",
    "translator_weights",
    "whisper_text_encoder",
]

PRETRAINING_MODELS: dict[str, Callable[[ModelConfig, bool, dict[str, Any] | None], nn.Module]] = {"fat_mlm": fat_mlm}
"""The builders of the models a config names by its semantic kind that are no Translator."""


def build(
    cfg: ModelConfig, pretrained: bool = True, transcription: Any = None, resolved: dict[str, Any] | None = None
) -> nn.Module:
    """The model `cfg` describes: its pretraining model (PRETRAINING_MODELS, which derives the complete HF configs of
    its pretrained parts alone), else a Translator; `pretrained`, `transcription` and `resolved` as build_model's."""
    if cfg.semantic.kind in PRETRAINING_MODELS:
        return PRETRAINING_MODELS[cfg.semantic.kind](cfg, pretrained, resolved)
    return build_model(cfg, pretrained, transcription, resolved)


def translator_weights(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The weights `state` of a model of `config` on a Translator's names: a FAT-MLM model's through
    translator_state (FAT-ST), a Translator's as they are."""
    return translator_state(state) if config.semantic.kind in PRETRAINING_MODELS else state


def build_model(
    cfg: ModelConfig, pretrained: bool = True, transcription: Any = None, resolved: dict[str, Any] | None = None
) -> Translator:
    """Builds the Translator that `cfg` describes. Pretrained parts (wav2vec2 or Whisper encoder, Whisper
    decoder) load the weights of their name_or_path when `pretrained`; otherwise (a checkpoint's weights
    follow) they are built from their complete HF config alone (`resolved`'s, a checkpoint's). Fine-tuning modes (frozen, LNA, LoRA) are
    applied last, so a checkpoint's trained parameters load into the same structure. `transcription`: the
    search of a cascade's ASR (encoder whisper_asr), speechmt.decoding.transcribe.SEARCH; without it such a model
    reads cached states only. `resolved`: what an earlier build or the run derived (a checkpoint bundle's; a
    run's from its tokenizers and transcripts, speechmt.training.builders.resolved_for: an LM decoder's
    "decoder.vocab" and "decoder.prompt", a CTC head's "ctc_vocab"; a checkpoint's also the complete HF configs of its
    pretrained parts, "encoder.hf_config" and "decoder.hf_config": speechmt.models.components.HF_CONFIGS), reused; the
    model's `resolved` holds it with what this build derived (speechmt.bundle.ModelBundle.resolved)."""
    if cfg.semantic.kind not in SEMANTICS:
        raise ValueError(
            f"bad ModelConfig: semantic {cfg.semantic.kind!r} names a pretraining model, not a "
            "Translator: build it with speechmt.models.build.build"
        )
    from speechmt.models.hf_whisper import whisper_models

    resolved = dict(resolved or {})
    hf_encoder, hf_decoder = whisper_models(cfg, pretrained, resolved)
    parts = BuildParts(pretrained, hf_encoder, hf_decoder, transcription=transcription, resolved=resolved)
    # a pretrained decoder (Whisper's, an LM) sets the model's width and vocabulary, which the encoder projects
    # to: it is built first; a trained one takes them from the config, after the encoder (the seeded order)
    if cfg.decoder.one_vocabulary:
        parts.decoder, cfg = DECODERS.builder(cfg.decoder.kind)(cfg, parts)
    cfg.check_vocabularies()
    speech, cfg = ENCODERS.builder(cfg.encoder.kind)(cfg, parts)
    shared = speech.encoder if isinstance(speech, ConvEncoder) else None  # what text_encoder.shared runs
    if parts.decoder is None:
        parts.decoder, cfg = DECODERS.builder(cfg.decoder.kind)(cfg, parts)
    decoder = parts.decoder
    ctc_head = parts.ctc_head = _ctc_head(cfg, parts)
    shrink, cfg = SHRINKS.builder(cfg.shrink.kind)(cfg, parts)
    semantic = SEMANTICS[cfg.semantic.kind](cfg, **cfg.semantic.options)
    fusion = build_fusion(cfg.fusion, cfg.encoder.kind, speech, cfg.encoder.frozen_layers)
    set_finetuning(decoder, cfg.decoder.finetune, cfg.lora)
    model = Translator(cfg, speech, decoder, _text_encoder(cfg, shared, decoder), ctc_head, shrink, semantic, fusion)
    _memory_options(cfg, speech, decoder)  # after the text encoder's copies of Whisper's tables (they stay float32)
    model.resolved = parts.resolved
    return model


def _ctc_head(cfg: ModelConfig, parts: BuildParts) -> CTCHead | None:
    """The CTC head over src_vocab_size labels (None without cfg.ctc); its text labels are an LM decoder's tokens
    when `parts.resolved` holds their LM ids (speechmt.models.ctc_head.RESOLVED)."""
    if not cfg.ctc:
        return None
    return CTCHead(cfg.d_model, cfg.src_vocab_size, tuple(int(i) for i in parts.resolved.get(CTC_RESOLVED) or ()))


def _memory_options(cfg: ModelConfig, speech: nn.Module, decoder: nn.Module) -> None:
    """The Transformer decoder's (Whisper's) activation checkpointing, and each pretrained part's frozen weights in
    its base_dtype with what trains in float32 (speechmt.models.memory); the HF parts checkpoint from their load."""
    if cfg.decoder.gradient_checkpointing and isinstance(decoder, TransformerDecoder):
        checkpoint_decoder_layers(decoder)
    for part, options in ((speech, cfg.encoder), (decoder, cfg.decoder)):
        if options.base_dtype != "float32":
            train_in_float32(part, torch_dtype(options.base_dtype))


def _text_encoder(
    cfg: ModelConfig, shared: TransformerEncoder | None, decoder: TransformerDecoder
) -> TextEncoder | None:
    """The source text's embedder (+ stack): a learned table over the SentencePiece vocabulary (its padding
    id is SentencePiece's; cfg.pad_id is the decoder's), or copies of Whisper's decoder's input tables."""
    t = cfg.text_encoder
    if not t.enabled:
        return None
    stack = None if t.embed_only else shared if t.shared else config_stack(cfg, t.layers)
    if t.embeddings == "whisper":
        return whisper_text_encoder(decoder, stack, cfg.dropout, t.freeze_embeddings)
    if t.embeddings == "lm":  # the LM's own table, shared (not copied: 262k x 640 for Gemma 3); it adds positions
        return TextEncoder(decoder.embed, None, cfg.dropout, positions=nn.Identity(), scale=1.0)
    return TextEncoder(
        embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id), stack, cfg.dropout, cfg.position_offset
    )


def whisper_text_encoder(
    decoder: TransformerDecoder, stack: TransformerEncoder | None, dropout: float, freeze: bool
) -> TextEncoder:
    """A text encoder whose input embedding is Whisper's decoder's: copies of its token table (V, D) and
    learned positions, at its scale (1 for Whisper), so that source text in Whisper's tokenizer starts from
    pretrained vectors; `freeze`: the copies are not trained."""
    tokens, positions = copy.deepcopy(decoder.embed), copy.deepcopy(decoder.positions)
    for p in (*tokens.parameters(), *positions.parameters()):
        p.requires_grad_(not freeze)
    return TextEncoder(tokens, stack, dropout, positions=positions, scale=decoder.scale)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
