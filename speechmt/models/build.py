"""The one place a model config becomes a model: a Translator (`build_model`, where its variants are chosen:
encoder, decoder, text encoder, shrink, semantic layer, fusion, fine-tuning), or a pretraining model that is
none, FAT-MLM's fused encoder (speechmt.models.fat_mlm), which a config names as `semantic: {kind: fat_mlm}`;
and a checkpoint of either read on a Translator's names (FAT-ST)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Callable

from torch import Tensor, nn

from speechmt.models.config import ModelConfig
from speechmt.models.ctc_head import CTC_BLANK_ID, FIRST_LABEL, CTCHead, LabelEmbeddings
from speechmt.models.decoder import TransformerDecoder, transformer_decoder
from speechmt.models.encoders import ConvEncoder, TextEncoder, subsampler
from speechmt.models.fat_mlm import fat_mlm, translator_state
from speechmt.models.finetune import set_finetuning
from speechmt.models.fusion import build_fusion
from speechmt.models.layers import TransformerEncoder, config_stack, embedding
from speechmt.models.memory import checkpoint_decoder_layers, enable_hf_checkpointing, torch_dtype, train_in_float32
from speechmt.models.semantic import SEMANTICS
from speechmt.models.shrink import build_shrink
from speechmt.models.translator import Translator
from speechmt.tokenizers.sentencepiece import Tokenizer

__all__ = ["PRETRAINING_MODELS", "build", "build_model", "count_parameters", "translator_weights",
           "whisper_text_encoder"]

PRETRAINING_MODELS: dict[str, Callable[[ModelConfig, bool], nn.Module]] = {"fat_mlm": fat_mlm}
"""The builders of the models a config names by its semantic kind that are no Translator."""


def build(cfg: ModelConfig, pretrained: bool = True) -> nn.Module:
    """The model `cfg` describes: its pretraining model (PRETRAINING_MODELS), else a Translator; `pretrained`
    as build_model's."""
    return PRETRAINING_MODELS.get(cfg.semantic.kind, build_model)(cfg, pretrained)


def translator_weights(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The weights `state` of a model of `config` on a Translator's names: a FAT-MLM model's through
    translator_state (FAT-ST), a Translator's as they are."""
    return translator_state(state) if config.semantic.kind in PRETRAINING_MODELS else state


def build_model(cfg: ModelConfig, pretrained: bool = True) -> Translator:
    """Builds the Translator that `cfg` describes. Pretrained parts (wav2vec2 or Whisper encoder, Whisper
    decoder) load the weights of their name_or_path when `pretrained`; otherwise (a checkpoint's weights
    follow) they are built from their stored HF config alone. Fine-tuning modes (frozen, LNA, LoRA) are
    applied last, so a checkpoint's trained parameters load into the same structure."""
    if cfg.semantic.kind not in SEMANTICS:
        raise ValueError(f"bad ModelConfig: semantic {cfg.semantic.kind!r} names a pretraining model, not a "
                         "Translator: build it with speechmt.models.build.build")
    from speechmt.models.hf_whisper import whisper_models

    kinds = (cfg.encoder.kind, cfg.decoder.kind)
    hf_enc, hf_dec = whisper_models(cfg, pretrained) if {"whisper", "whisper_asr"} & set(kinds) else (None, None)
    decoder = None
    if hf_dec is not None:
        decoder, cfg = _whisper_decoder(cfg, hf_dec)
    elif cfg.decoder.kind == "lm":
        decoder, cfg = _lm_decoder(cfg, pretrained)
    cfg.check_vocabularies()
    shared = None
    if cfg.encoder.kind == "wav2vec2":
        speech, cfg = _wav2vec2_encoder(cfg, pretrained)
    elif cfg.encoder.kind == "whisper":
        from speechmt.models.hf_whisper import hf_config_dict, whisper_encoder_from_hf

        speech = whisper_encoder_from_hf(hf_enc, cfg.d_model, cfg.encoder.layerdrop, cfg.encoder.frozen_layers,
                                         cfg.encoder.gradient_checkpointing)
        cfg = replace(cfg, encoder=replace(cfg.encoder, hf_config=hf_config_dict(hf_enc)))
    elif cfg.encoder.kind == "whisper_asr":
        speech, cfg = _whisper_asr_encoder(cfg, hf_enc, decoder)
    else:
        speech = _conv_encoder(cfg)
        shared = speech.encoder
    if cfg.shrink.kind == "ctc" and not cfg.ctc:
        raise ValueError("shrink 'ctc' needs the CTC head: ctc=True with src_vocab_size > 0 (train.ctc_weight > 0)")
    if decoder is None:
        d = cfg.decoder
        decoder = transformer_decoder(cfg.tgt_vocab_size, d.layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim,
                                      cfg.dropout, cfg.attention_dropout, cfg.activation_dropout, d.tie_embeddings,
                                      cfg.pad_id, cfg.position_offset, d.output_bias)
    ctc_head = CTCHead(cfg.d_model, cfg.src_vocab_size, cfg.ctc_vocab) if cfg.ctc else None
    shrink = build_shrink(cfg.shrink, cfg.d_model, CTC_BLANK_ID, _label_embeddings(cfg, ctc_head, decoder), FIRST_LABEL)
    semantic = SEMANTICS[cfg.semantic.kind](cfg, **cfg.semantic.options)
    fusion = build_fusion(cfg.fusion, cfg.encoder.kind, speech, cfg.encoder.frozen_layers)
    _finetune_encoder(cfg, speech)
    set_finetuning(decoder, cfg.decoder.finetune, cfg.lora)
    model = Translator(cfg, speech, decoder, _text_encoder(cfg, shared, decoder), ctc_head, shrink, semantic, fusion)
    _memory_options(cfg, speech, decoder)  # after the text encoder's copies of Whisper's tables (they stay float32)
    return model


def _memory_options(cfg: ModelConfig, speech: nn.Module, decoder: nn.Module) -> None:
    """The Transformer decoder's (Whisper's) activation checkpointing, and each pretrained part's frozen weights in
    its base_dtype with what trains in float32 (speechmt.models.memory); the HF parts checkpoint from their load."""
    if cfg.decoder.gradient_checkpointing and isinstance(decoder, TransformerDecoder):
        checkpoint_decoder_layers(decoder)
    for part, options in ((speech, cfg.encoder), (decoder, cfg.decoder)):
        if options.base_dtype != "float32":
            train_in_float32(part, torch_dtype(options.base_dtype))


def _label_embeddings(cfg: ModelConfig, head: CTCHead | None, decoder: nn.Module) -> LabelEmbeddings | None:
    """The table of shrink.embed lm (its CTC head must write the LM's tokens: ctc_vocab), else None."""
    if cfg.shrink.embed != "lm":
        return None
    if head is None or not cfg.ctc_vocab:
        raise ValueError("shrink.embed lm needs a CTC head over the LM's tokens (model.ctc_vocab, filled in from "
                         "the transcripts when a run starts; train a ctc objective)")
    return LabelEmbeddings(head, decoder)


def _text_encoder(cfg: ModelConfig, shared: TransformerEncoder | None,
                  decoder: TransformerDecoder) -> TextEncoder | None:
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
    return TextEncoder(embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id), stack, cfg.dropout,
                       cfg.position_offset)


def whisper_text_encoder(decoder: TransformerDecoder, stack: TransformerEncoder | None, dropout: float,
                         freeze: bool) -> TextEncoder:
    """A text encoder whose input embedding is Whisper's decoder's: copies of its token table (V, D) and
    learned positions, at its scale (1 for Whisper), so that source text in Whisper's tokenizer starts from
    pretrained vectors; `freeze`: the copies are not trained."""
    tokens, positions = copy.deepcopy(decoder.embed), copy.deepcopy(decoder.positions)
    for p in (*tokens.parameters(), *positions.parameters()):
        p.requires_grad_(not freeze)
    return TextEncoder(tokens, stack, dropout, positions=positions, scale=decoder.scale)


def _conv_encoder(cfg: ModelConfig) -> ConvEncoder:
    e = cfg.encoder
    stack = config_stack(cfg, e.layers)
    sub = subsampler(e.subsampler, e.input_dim, e.conv_channels, cfg.d_model, e.conv_kernels)
    return ConvEncoder(sub, stack, cfg.d_model, cfg.dropout, cfg.position_offset)


def _wav2vec2_encoder(cfg: ModelConfig, pretrained: bool) -> tuple[nn.Module, ModelConfig]:
    """The encoder, and `cfg` with the complete HF config in encoder.hf_config (so that a checkpoint
    rebuilds the same architecture without the pretrained model at hand)."""
    from speechmt.models.encoders.wav2vec2 import Wav2Vec2Options, wav2vec2_encoder

    e = cfg.encoder
    options = Wav2Vec2Options(freeze_feature_extractor=e.freeze_feature_extractor, freeze=e.finetune == "frozen",
                              lna=e.finetune == "lna", layerdrop=e.layerdrop, mask_time_prob=e.mask_time_prob,
                              mask_time_length=e.mask_time_length, gradient_checkpointing=e.gradient_checkpointing)
    encoder = wav2vec2_encoder(e.name_or_path, e.hf_config, cfg.d_model, options, pretrained)
    return encoder, replace(cfg, encoder=replace(e, hf_config=encoder.model.config.to_dict()))


def _whisper_decoder(cfg: ModelConfig, hf_model: nn.Module) -> tuple[TransformerDecoder, ModelConfig]:
    """Whisper's decoder, and `cfg` with Whisper's dimensions and complete HF config filled in."""
    from speechmt.models.hf_whisper import whisper_decoder_config, whisper_decoder_from_hf

    cfg = whisper_decoder_config(cfg, hf_model)
    return whisper_decoder_from_hf(hf_model.model.decoder, cfg.pad_id, cfg.dropout, cfg.attention_dropout,
                                   cfg.activation_dropout), cfg


def _lm_decoder(cfg: ModelConfig, pretrained: bool) -> tuple[nn.Module, ModelConfig]:
    """A causal LM as the decoder, and `cfg` with its width as d_model, its trimmed vocabulary's size and its
    complete HF config filled in."""
    from speechmt.models.lm_decoder import lm_config_dict, lm_decoder, load_causal_lm

    d = cfg.decoder
    decoder = lm_decoder(load_causal_lm(d.name_or_path, d.hf_config, pretrained, torch_dtype(d.base_dtype)), d.vocab,
                         d.prompt)
    if d.gradient_checkpointing:
        enable_hf_checkpointing(decoder.lm)
    return decoder, replace(cfg, d_model=decoder.dim, tgt_vocab_size=len(d.vocab),
                            decoder=replace(d, hf_config=lm_config_dict(decoder.lm)))


def _whisper_asr_encoder(cfg: ModelConfig, hf_model: nn.Module, decoder: nn.Module) -> tuple[nn.Module, ModelConfig]:
    """Whisper transcribing (frozen), its decoder's states projected to d_model (with asr_embed lm: plus the LM
    decoder's soft embeddings of its tokens); `cfg` with the complete HF config and the search's prompt filled in."""
    from speechmt.models.hf_whisper import (
        hf_config_dict,
        whisper_asr_encoder_from_hf,
        whisper_asr_prompt,
        whisper_lm_table,
        whisper_lm_text,
    )

    e = cfg.encoder
    prompt = e.asr_prompt or whisper_asr_prompt(hf_model, e.asr_language)
    if e.asr_embed != "states" and cfg.decoder.kind != "lm":
        raise ValueError(f"encoder.asr_embed {e.asr_embed} needs decoder 'lm' (its input embeddings are the table)")
    tokenizers = (e.name_or_path, cfg.decoder.name_or_path, int(hf_model.config.eos_token_id), decoder)
    pieces = whisper_lm_table(*tokenizers) if e.asr_embed == "lm" else None
    text = whisper_lm_text(*tokenizers) if e.asr_embed == "text" else None
    speech = whisper_asr_encoder_from_hf(hf_model, cfg.d_model, prompt, pieces, beam=e.asr_beam, text=text,
                                         state=e.asr_state)
    return speech, replace(cfg, encoder=replace(e, hf_config=hf_config_dict(hf_model), asr_prompt=prompt))


def _finetune_encoder(cfg: ModelConfig, speech: nn.Module) -> None:
    """A pretrained encoder's fine-tuning mode (wav2vec2 applies freeze/LNA itself; LoRA for both); with
    encoder.frozen_layers N (whisper), to the layers above N and the final LayerNorm only."""
    e = cfg.encoder
    if e.kind == "whisper_asr":  # frozen when built; only its projection trains
        return
    if e.frozen_layers:
        speech.model.requires_grad_(False)
        for layer in speech.model.layers[e.frozen_layers:]:
            layer.requires_grad_(True)
            set_finetuning(layer, e.finetune, cfg.lora)
        speech.model.layer_norm.requires_grad_(e.finetune in ("full", "lna"))
    elif e.kind == "whisper" or e.finetune == "lora":
        set_finetuning(speech.model, e.finetune, cfg.lora)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
