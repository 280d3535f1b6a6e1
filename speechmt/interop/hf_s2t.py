"""Imports a Hugging Face `Speech2TextForConditionalGeneration` (the port of fairseq's s2t_transformer, e.g.
facebook/s2t-small-mustc-en-de-st: a hub id where the machine is online, a local directory otherwise) as a
speechmt checkpoint that `speechmt.decoding.translate.load_model` rebuilds and translates with.

What differs, and how it is bridged:
- Vocabulary: HF keeps fairseq's dictionary (<s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces) over its own
  SentencePiece model; ours is pad 0, unk 1, bos 2, eos 3, <blank> 4, language tags, then the pieces. The
  SentencePiece model is rewritten in our order (same pieces, scores and types, so texts split alike) and
  the embedding and output rows are permuted to match. <blank>, which HF lacks, gets zero rows and an
  output bias of NEVER, so its probability is exactly 0 in float32 and the others' equal HF's.
- Positions: HF (as fairseq) numbers the first frame / token padding_idx + 1 (= 2): position_offset.
- Decoder start: fairseq-trained models start decoding from </s>: "decoder_start": "eos" in the checkpoint.
- Multilingual models: the forced target language token <lang:xx> becomes the checkpoint's decoder tag.
- Features: Speech2TextFeatureExtractor (80-dim kaldi fbank, utterance CMVN) maps to an FbankFrontend.
Encoder and decoder layers are already alike (pre-norm, ReLU, final LayerNorms, embeddings scaled by
sqrt(d_model), head_dim^-0.5 attention scaling, bias-free output projection).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Callable, TypeVar

import torch
from sentencepiece import sentencepiece_model_pb2 as spm_pb2
from torch import Tensor
from transformers import (
    AutoConfig,
    Speech2TextConfig,
    Speech2TextFeatureExtractor,
    Speech2TextForConditionalGeneration,
    Speech2TextTokenizer,
)

from speechmt.audio import SAMPLE_RATE, CMVNConfig, FbankConfig
from speechmt.bundle import ModelBundle
from speechmt.checkpoint import save_checkpoint
from speechmt.frontend import FbankFrontend
from speechmt.interop import HFImportError
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.decoder import TransformerDecoderConfig
from speechmt.models.encoders.conv import ConvEncoderConfig
from speechmt.tokenizers.pair import Tokenizers
from speechmt.tokenizers.sentencepiece import BLANK, BOS, EOS, PAD, UNK, Tokenizer, TokenizerConfig

__all__ = [
    "NEVER",
    "convert_tokenizer",
    "convert_weights",
    "fbank_frontend",
    "import_hf_s2t",
    "model_config",
    "vocab_order",
]

T = TypeVar("T")
NEVER = -1e4  # output bias of our rows that HF lacks (<blank>): exp(-1e4 - logsumexp) is 0 in float32
_Piece = spm_pb2.ModelProto.SentencePiece
_TAG = re.compile(r"<lang:[^>\s]+>")
_LAYER_KEY = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.(\w+)\.(.+)")
_LAYER_NAMES = {
    "encoder": {
        "self_attn": "attn",
        "self_attn_layer_norm": "attn_norm",
        "fc1": "ffn.fc1",
        "fc2": "ffn.fc2",
        "final_layer_norm": "ffn_norm",
    },
    "decoder": {
        "self_attn": "self_attn",
        "self_attn_layer_norm": "self_norm",
        "encoder_attn": "cross_attn",
        "encoder_attn_layer_norm": "cross_norm",
        "fc1": "ffn.fc1",
        "fc2": "ffn.fc2",
        "final_layer_norm": "ffn_norm",
    },
}
_STACKS = {"encoder": "speech_encoder.encoder", "decoder": "decoder"}
_MODULES = {
    "model.encoder.conv.conv_layers": "speech_encoder.subsampler.convs",
    "model.encoder.layer_norm": "speech_encoder.encoder.norm",
    "model.decoder.embed_tokens": "decoder.embed",
    "model.decoder.layer_norm": "decoder.norm",
    "lm_head": "decoder.output",
}


def import_hf_s2t(
    src_dir_or_hub_id: str | os.PathLike, out_path: str | os.PathLike, tgt_lang: str | None = None, task: str = "st"
) -> Path:
    """Converts a HF Speech2Text model (directory or hub id) into a speechmt checkpoint at `out_path`.

    `tgt_lang` picks the target language of a multilingual model (its <lang:xx> tag); `task` is "st", or
    "asr" for a speech recognition model (it decides which tokenizer slot holds the vocabulary).
    """
    name = os.fspath(src_dir_or_hub_id)
    if task not in ("st", "asr"):
        raise HFImportError(f"{name}: unknown task {task!r}; expected 'st' or 'asr'")
    hf, tok, extractor = _load(name)
    hf_ids, pieces, tags = vocab_order(hf.config, tok, name)
    tag, start = _decoder_tag(hf, tok, pieces, tags, tgt_lang, name), _decoder_start(hf, tok, name)
    tokenizer = convert_tokenizer(tok, hf_ids, pieces, tags, name)
    cfg = model_config(hf.config, len(hf_ids), name)
    frontend = fbank_frontend(extractor, cfg.encoder.input_dim, name)
    model = build_model(cfg)
    try:
        model.load_state_dict(convert_weights(hf.state_dict(), hf_ids, name))
    except RuntimeError as e:
        raise HFImportError(
            f"{name}: its weights do not fit the model its config describes ({_first_line(e)})"
        ) from None
    _warn_about_case(tok, name)
    slots = Tokenizers(tokenizer, None) if task == "asr" else Tokenizers(None, tokenizer)
    bundle = ModelBundle(cfg, slots, frontend, task, {task: tag}, decoder_start=start)
    save_checkpoint(
        out_path,
        {
            **bundle.state_dict(),
            "model": model.state_dict(),
            "imported_from": {"source": name, "format": "hf-speech2text", "hf_ids": hf_ids},
        },
    )
    return Path(out_path)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _load(name: str) -> tuple[Speech2TextForConditionalGeneration, Speech2TextTokenizer, Speech2TextFeatureExtractor]:
    """The HF model (eval mode), tokenizer and feature extractor; HFImportError for anything else."""
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError, KeyError) as e:
        what = (
            "not a Hugging Face Speech2Text model"
            if os.path.isdir(name)
            else "no such directory, nor a hub model this machine can load"
        )
        raise HFImportError(f"{name}: {what} ({_first_line(e)})") from None
    if not isinstance(config, Speech2TextConfig):
        raise HFImportError(f"{name}: not a Hugging Face Speech2Text model (model_type {config.model_type!r})")
    model = _load_part(name, "weights", Speech2TextForConditionalGeneration.from_pretrained).eval()
    tok = _load_part(name, "tokenizer (vocab.json, sentencepiece.bpe.model)", Speech2TextTokenizer.from_pretrained)
    extractor = _load_part(
        name, "feature extractor (preprocessor_config.json)", Speech2TextFeatureExtractor.from_pretrained
    )
    return model, tok, extractor


def _load_part(name: str, what: str, load: Callable[[str], T]) -> T:
    """`load(name)`, its failures turned into one HFImportError line that says `what` could not be loaded."""
    try:
        return load(name)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise HFImportError(f"{name}: cannot load its {what} ({_first_line(e)})") from None


def _problems(name: str, what: str, problems: list[object]) -> None:
    """Raises one HFImportError listing the true entries of `problems`, if any."""
    found = [p for p in problems if p]
    if found:
        raise HFImportError(f"{name}: cannot import this {what}: " + "; ".join(found))


def vocab_order(
    config: Speech2TextConfig, tok: Speech2TextTokenizer, name: str = "model"
) -> tuple[list[int | None], list[str], tuple[str, ...]]:
    """Our ids in terms of HF's: hf_ids[our id] = HF id (None for <blank>); HF's piece per HF id; the
    language tags (<lang:xx>) in HF id order, which come right after <blank> in our layout."""
    if len(tok.encoder) > config.vocab_size or max(tok.encoder.values()) >= config.vocab_size:
        raise HFImportError(f"{name}: vocab.json has ids beyond the model's {config.vocab_size} output rows")
    by_id = {i: p for p, i in tok.encoder.items()}
    pieces = [by_id.get(i, f"<hf_unused_{i}>") for i in range(config.vocab_size)]
    specials = [tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id]
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else (config.eos_token_id or [None])[0]
    _problems(
        name,
        "vocabulary",
        [
            (None in specials or len(set(specials)) < 4) and f"special ids pad/unk/bos/eos {specials} are not distinct",
            config.pad_token_id != tok.pad_token_id and f"config pad id {config.pad_token_id} != tokenizer's",
            eos != tok.eos_token_id and f"config eos id {config.eos_token_id} != tokenizer's {tok.eos_token_id}",
        ],
    )
    tag_ids = [i for i, p in enumerate(pieces) if _TAG.fullmatch(p) and i not in specials]
    taken = set(specials) | set(tag_ids)
    rest = [i for i in range(len(pieces)) if i not in taken]
    return [*specials, None, *tag_ids, *rest], pieces, tuple(pieces[i] for i in tag_ids)


def _special(piece: str, kind: int) -> _Piece:
    return _Piece(piece=piece, score=0.0, type=kind)


def convert_tokenizer(
    tok: Speech2TextTokenizer, hf_ids: list[int | None], pieces: list[str], tags: tuple[str, ...], name: str = "model"
) -> Tokenizer:
    """A speechmt Tokenizer whose SentencePiece model is HF's with its pieces in our order (`hf_ids`)."""
    proto = spm_pb2.ModelProto.FromString(tok.sp_model.serialized_model_proto())
    own = {p.piece: p for p in proto.pieces}
    lost = [
        p.piece
        for p in proto.pieces
        if p.type != _Piece.CONTROL and p.type != _Piece.UNKNOWN and p.piece not in tok.encoder
    ]
    kinds = {1: "unigram", 2: "bpe"}
    _problems(
        name,
        "tokenizer",
        [
            lost
            and f"{len(lost)} SentencePiece pieces are not in vocab.json (e.g. {lost[0]!r}); HF turns them into "
            "<unk>, which a SentencePiece model cannot do",
            proto.trainer_spec.model_type not in kinds
            and f"SentencePiece model type {proto.trainer_spec.model_type} (speechmt takes unigram or bpe)",
        ],
    )
    new = [
        _special(PAD, _Piece.CONTROL),
        _special(UNK, _Piece.UNKNOWN),
        _special(BOS, _Piece.CONTROL),
        _special(EOS, _Piece.CONTROL),
        _special(BLANK, _Piece.USER_DEFINED),
    ]
    new += [_special(tag, _Piece.USER_DEFINED) for tag in tags]
    for i in hf_ids[len(new) :]:
        piece = _special(pieces[i], _Piece.UNUSED)
        if pieces[i] in own:
            piece.CopyFrom(own[pieces[i]])
        new.append(piece)
    del proto.pieces[:]
    proto.pieces.extend(new)
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = 0, 1, 2, 3
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = PAD, UNK, BOS, EOS
    spec.vocab_size = len(new)
    del spec.user_defined_symbols[:]
    spec.user_defined_symbols.extend([BLANK, *tags])
    config = TokenizerConfig(
        model_type=kinds[spec.model_type],
        vocab_size=len(new),
        lang_tags=tags,
        character_coverage=spec.character_coverage,
        normalization_rule_name=proto.normalizer_spec.name or "nmt_nfkc",
    )
    return Tokenizer(proto.SerializeToString(), config)


def model_config(c: Speech2TextConfig, vocab_size: int, name: str = "model") -> ModelConfig:
    """The ModelConfig of a HF Speech2Text config; `vocab_size` is ours (HF's + <blank>)."""
    kernels = tuple(c.conv_kernel_sizes)
    _problems(
        name,
        "model",
        [
            c.activation_function != "relu" and f"activation {c.activation_function!r} (speechmt's layers use relu)",
            not c.scale_embedding and "scale_embedding=False (speechmt scales embeddings by sqrt(d_model))",
            c.input_channels != 1 and f"input_channels={c.input_channels} (speechmt takes one feature channel)",
            c.encoder_attention_heads != c.decoder_attention_heads and "encoder and decoder attention heads differ",
            c.encoder_ffn_dim != c.decoder_ffn_dim and "encoder and decoder feed-forward sizes differ",
            len(kernels) != c.num_conv_layers and f"num_conv_layers {c.num_conv_layers} != {len(kernels)} kernels",
            any(k % 2 == 0 for k in kernels) and f"even conv kernels {kernels} (HF's length formula needs odd ones)",
        ],
    )
    return ModelConfig(
        tgt_vocab_size=vocab_size,
        d_model=c.d_model,
        n_heads=c.encoder_attention_heads,
        ffn_dim=c.encoder_ffn_dim,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        pad_id=0,
        position_offset=c.pad_token_id + 1,
        encoder=ConvEncoderConfig(
            layers=c.encoder_layers,
            input_dim=c.input_feat_per_channel,
            subsampler="conv1d",
            conv_channels=c.conv_channels,
            conv_kernels=kernels,
        ),
        decoder=TransformerDecoderConfig(
            layers=c.decoder_layers, tie_embeddings=c.tie_word_embeddings, output_bias=True
        ),
    )


def _rename(key: str) -> str | None:
    """Our name of a HF parameter, or None for one we have no place for."""
    m = _LAYER_KEY.fullmatch(key)
    if m:
        stack, i, module, rest = m.groups()
        ours = _LAYER_NAMES[stack].get(module)
        return f"{_STACKS[stack]}.layers.{i}.{ours}.{rest}" if ours else None
    for hf, ours in _MODULES.items():
        if key.startswith(hf + "."):
            return ours + key[len(hf) :]
    return None


def _rows(weight: Tensor, hf_ids: list[int | None]) -> Tensor:
    """weight (V_hf, ...) -> (len(hf_ids), ...): row j is HF row hf_ids[j], or zeros where that is None."""
    out = weight.new_zeros((len(hf_ids), *weight.shape[1:]))
    ours = [j for j, i in enumerate(hf_ids) if i is not None]
    out[ours] = weight[[hf_ids[j] for j in ours]]
    return out


def convert_weights(hf_state: dict[str, Tensor], hf_ids: list[int | None], name: str = "model") -> dict[str, Tensor]:
    """A HF Speech2Text state dict in our names, vocabulary rows in our order, plus the output bias."""
    out: dict[str, Tensor] = {}
    for key, value in hf_state.items():
        ours = _rename(key)
        if ours is None:
            raise HFImportError(f"{name}: cannot import this model: unknown parameter {key}")
        out[ours] = _rows(value, hf_ids) if ours.startswith(("decoder.embed.", "decoder.output.")) else value
    out.setdefault("decoder.output.weight", out["decoder.embed.weight"])
    out["decoder.output.bias"] = torch.tensor([0.0 if i is not None else NEVER for i in hf_ids])
    return out


def fbank_frontend(fe: Speech2TextFeatureExtractor, input_dim: int, name: str = "model") -> FbankFrontend:
    """Our fbank + CMVN front end for a Speech2TextFeatureExtractor (kaldi fbank, utterance CMVN)."""
    normalize = fe.do_ceptral_normalize and (fe.normalize_means or fe.normalize_vars)
    _problems(
        name,
        "feature extractor",
        [
            fe.sampling_rate != SAMPLE_RATE
            and f"sampling_rate {fe.sampling_rate} (speechmt's front end is {SAMPLE_RATE} Hz)",
            fe.num_mel_bins != input_dim and f"num_mel_bins {fe.num_mel_bins} but the model takes {input_dim} features",
            normalize
            and not (fe.normalize_means and fe.normalize_vars)
            and "mean-only or variance-only CMVN (speechmt's utterance CMVN does both)",
        ],
    )
    fbank = FbankConfig(num_mel_bins=fe.num_mel_bins, sample_rate=fe.sampling_rate, dither=float(fe.dither))
    return FbankFrontend(fbank, CMVNConfig("utterance" if normalize else "none"))


def _decoder_start(hf: Speech2TextForConditionalGeneration, tok: Speech2TextTokenizer, name: str) -> str:
    """ "eos" (fairseq) or "bos": the special token the decoder starts from."""
    start = hf.generation_config.decoder_start_token_id
    start = hf.config.decoder_start_token_id if start is None else start
    kinds = {tok.eos_token_id: "eos", tok.bos_token_id: "bos"}
    if start not in kinds:
        raise HFImportError(
            f"{name}: cannot import this model: it starts decoding from id {start}, neither </s> nor <s>"
        )
    return kinds[start]


def _decoder_tag(
    hf: Speech2TextForConditionalGeneration,
    tok: Speech2TextTokenizer,
    pieces: list[str],
    tags: tuple[str, ...],
    tgt_lang: str | None,
    name: str,
) -> str | None:
    """The <lang:xx> tag forced after the start token: from `tgt_lang`, the generation config's
    forced_bos_token_id or the tokenizer's tgt_lang, in that order; None for a model without tags."""
    forced = getattr(hf.generation_config, "forced_bos_token_id", None)
    saved = tok.init_kwargs.get("tgt_lang")
    if tgt_lang or (forced is None and saved):
        tag = f"<lang:{tgt_lang or saved}>"
    elif forced is not None:
        tag = pieces[forced]
    elif tags:
        raise HFImportError(
            f"{name}: a multilingual model: name the target language (tgt_lang, --tgt-lang), "
            f"one of {', '.join(t[6:-1] for t in tags)}"
        )
    else:
        return None
    if tag not in tags:
        raise HFImportError(f"{name}: the model has no language tag {tag}; known: {', '.join(tags) or 'none'}")
    return tag


def _warn_about_case(tok: Speech2TextTokenizer, name: str) -> None:
    """Warns where HF's tokenizer changes case, which speechmt's does not."""
    if tok.do_upper_case:
        warnings.warn(
            f"{name}: HF's tokenizer upper-cases decoded text (do_upper_case); speechmt's decodes "
            "the pieces as they are",
            stacklevel=3,
        )
    if tok.do_lower_case:
        warnings.warn(
            f"{name}: HF's tokenizer lower-cases text before encoding (do_lower_case); speechmt's encodes it as it is",
            stacklevel=3,
        )
