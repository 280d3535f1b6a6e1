"""Plain builder functions that turn an ExperimentConfig into tokenizers, datasets and a model."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from speechmt.audio import CMVNConfig, FbankConfig, SpecAugmentConfig
import torch

from speechmt.config import ConfigError, DataConfig, ExperimentConfig
from speechmt.data.dataset import SpeechDataset, TextDataset, global_cmvn, load_split
from speechmt.data.waveform import WaveformConfig, WaveformDataset
from speechmt.models.translator import ModelConfig
from speechmt.data.whisper_mel import WhisperMelConfig
from speechmt.tasks import TaskConfig
from speechmt.tokenizer import Tokenizer
from speechmt.tokenizer_whisper import WhisperTokenizer, WhisperTokenizerConfig, language_token

AnyTokenizer = Tokenizer | WhisperTokenizer


@dataclass
class Tokenizers:
    """The source-side (transcripts) and target-side (translations) tokenizers; either may be None."""

    src: AnyTokenizer | None
    tgt: AnyTokenizer | None

    def state_dict(self) -> dict:
        return {k: (t.state_dict() if t is not None else None) for k, t in (("src", self.src), ("tgt", self.tgt))}

    @classmethod
    def from_state_dict(cls, d: dict) -> "Tokenizers":
        return cls(*(tokenizer_from_state(d[k]) if d.get(k) else None for k in ("src", "tgt")))


def tokenizer_from_state(state: dict) -> AnyTokenizer:
    """A SentencePiece or Whisper tokenizer from its state_dict."""
    return WhisperTokenizer.from_state_dict(state) if state.get("kind") == "whisper" else Tokenizer.from_state_dict(state)


def load_tokenizers(data: DataConfig, model: ModelConfig | None = None, task: str = "st") -> Tokenizers:
    """Reads the vocabularies a data config names (an empty path gives None). With a Whisper decoder, the
    decoder's side (the source for asr, the target otherwise) is Whisper's tokenizer, from its model folder."""
    toks = Tokenizers(Tokenizer.load(data.src_vocab) if data.src_vocab else None,
                      Tokenizer.load(data.tgt_vocab) if data.tgt_vocab else None)
    if model is None or model.decoder != "whisper":
        return toks
    from speechmt.models.whisper import resolve_pretrained

    whisper = WhisperTokenizer.from_pretrained(resolve_pretrained(model.whisper_decoder_source),
                                               WhisperTokenizerConfig(data.whisper_task))
    return Tokenizers(whisper, toks.tgt) if task == "asr" else Tokenizers(toks.src, whisper)


def decoder_tokenizer(task: str, toks: Tokenizers) -> AnyTokenizer:
    """The tokenizer of what the decoder writes: the transcript for asr, the translation otherwise."""
    tok = toks.src if task == "asr" else toks.tgt
    if tok is None:
        side = "data.src_vocab" if task == "asr" else "data.tgt_vocab"
        raise ValueError(f"task {task} needs {side} (a SentencePiece model from `speechmt vocab`)")
    return tok


def decoder_tag(cfg: ExperimentConfig) -> str | None:
    """The language tag that starts every decoder target (None when data.lang_tag is off)."""
    if not cfg.data.lang_tag:
        return None
    lang = cfg.data.src_lang if cfg.train.task == "asr" else cfg.data.tgt_lang
    if cfg.model.decoder == "whisper":  # Whisper's translate prompt names the source language
        return language_token(cfg.data.src_lang if cfg.data.whisper_task == "translate" else lang)
    return f"<{lang}>"


def feature_settings(cfg: ExperimentConfig) -> tuple[FbankConfig, CMVNConfig]:
    """The fbank settings preparation used (from prepare_summary.json) and the CMVN the model trains with."""
    summary = Path(cfg.data.dir) / "prepare_summary.json"
    fbank = FbankConfig(**json.loads(summary.read_text())["fbank"]) if summary.exists() else FbankConfig()
    cmvn = global_cmvn(cfg.data.dir) if cfg.data.cmvn == "global" else CMVNConfig(cfg.data.cmvn)
    return fbank, cmvn


def waveform_settings(cfg: ExperimentConfig) -> WaveformConfig | None:
    """The waveform front end of a wav2vec2 model (its feature extractor's settings); None for fbank models."""
    if cfg.model.encoder != "wav2vec2":
        return None
    from speechmt.models.encoders.wav2vec2 import feature_extractor_settings

    return feature_extractor_settings(cfg.model.encoder_name_or_path)


def mel_settings_for(cfg: ExperimentConfig) -> WhisperMelConfig | None:
    """The log-mel front end of a Whisper encoder (its feature extractor's settings); None otherwise."""
    if cfg.model.encoder != "whisper":
        return None
    from speechmt.data.whisper_mel import mel_settings
    from speechmt.models.whisper import resolve_pretrained

    if not cfg.model.encoder_name_or_path:
        mel = WhisperMelConfig(int(cfg.model.encoder_hf_config.get("num_mel_bins", 80)))
    else:
        mel = mel_settings(resolve_pretrained(cfg.model.encoder_name_or_path))
    return dataclasses.replace(mel, pad_to_30s=cfg.data.whisper_pad_30s)


def build_dataset(cfg: ExperimentConfig, split: str, toks: Tokenizers, cmvn: CMVNConfig, train: bool,
                  waveform: WaveformConfig | None = None, mel: WhisperMelConfig | None = None,
                  encoder: "torch.nn.Module | None" = None):
    """The dataset of one split for the configured task; SpecAugment only when `train`. A wav2vec2 model
    reads waveforms (`waveform`, by default its feature extractor's settings), a Whisper encoder log-mel
    features (`mel`), or, when it is frozen and data.cache_encoder is on, its cached states (`encoder`
    computes them once)."""
    task, data = cfg.train.task, cfg.data
    tag = decoder_tag(cfg)
    if task != "mt" and cfg.model.encoder == "wav2vec2":
        return _waveform_dataset(cfg, split, toks, tag, waveform or waveform_settings(cfg))
    if task != "mt" and cfg.model.encoder == "whisper":
        return _whisper_dataset(cfg, split, toks, tag, mel or mel_settings_for(cfg), encoder)
    records, store = load_split(data.dir, split)
    if task == "mt":
        return TextDataset.from_records(records, toks.src, toks.tgt, tgt_tag=tag)
    augment = SpecAugmentConfig.policy(data.spec_augment) if train and data.spec_augment else None
    if task == "asr":
        return SpeechDataset(records, store, cmvn, src_tokenizer=decoder_tokenizer(task, toks), src_tag=tag,
                             spec_augment=augment, seed=cfg.train.seed)
    src = toks.src if cfg.train.ctc_weight > 0 else None
    return SpeechDataset(records, store, cmvn, src_tokenizer=src, tgt_tokenizer=decoder_tokenizer(task, toks),
                         tgt_tag=tag, spec_augment=augment, seed=cfg.train.seed)


def _waveform_dataset(cfg: ExperimentConfig, split: str, toks: Tokenizers, tag: str | None,
                      waveform: WaveformConfig) -> WaveformDataset:
    if cfg.train.task == "asr":
        return WaveformDataset.from_split(cfg.data.dir, split, waveform, src_tokenizer=decoder_tokenizer("asr", toks),
                                          src_tag=tag)
    src = toks.src if cfg.train.ctc_weight > 0 else None
    return WaveformDataset.from_split(cfg.data.dir, split, waveform, src_tokenizer=src,
                                      tgt_tokenizer=decoder_tokenizer(cfg.train.task, toks), tgt_tag=tag)


def _sides(cfg: ExperimentConfig, toks: Tokenizers) -> dict:
    """The tokenizers and tags of the transcript (src) and the translation (tgt) an audio dataset encodes."""
    tag = decoder_tag(cfg)
    if cfg.train.task == "asr":
        return dict(src_tokenizer=decoder_tokenizer("asr", toks), src_tag=tag)
    return dict(src_tokenizer=toks.src if cfg.train.ctc_weight > 0 else None,
                tgt_tokenizer=decoder_tokenizer(cfg.train.task, toks), tgt_tag=tag)


def _whisper_dataset(cfg: ExperimentConfig, split: str, toks: Tokenizers, tag: str | None, mel: WhisperMelConfig,
                     encoder: "torch.nn.Module | None"):
    """Log-mel features read from the audio, or a frozen encoder's cached states of them."""
    from speechmt.data.encoder_cache import CachedStatesDataset, cached_split
    from speechmt.data.manifest import read_manifest
    from speechmt.data.waveform import record_audio
    from speechmt.data.whisper_mel import whisper_log_mel

    frontend = lambda wave: whisper_log_mel(wave, mel)  # noqa: E731
    if encoder is None or not cfg.data.cache_encoder or any(p.requires_grad for p in encoder.parameters()):
        return WaveformDataset.from_split(cfg.data.dir, split, WaveformConfig(), frontend=frontend,
                                          **_sides(cfg, toks))
    records = read_manifest(Path(cfg.data.dir) / f"{split}.jsonl")
    store = cached_split(cfg.data.dir, split, encoder, mel,
                         lambda i: frontend(record_audio(records[i], cfg.data.dir)), records)
    return CachedStatesDataset(records, store, **_sides(cfg, toks))


def model_config_for(cfg: ExperimentConfig, toks: Tokenizers) -> ModelConfig:
    """The model config with vocabulary sizes taken from the tokenizers."""
    dec = decoder_tokenizer(cfg.train.task, toks)
    src_size = len(toks.src) if toks.src is not None and (cfg.train.ctc_weight > 0 or cfg.train.task == "mt") else 0
    if cfg.model.shrink == "ctc" and cfg.train.ctc_weight <= 0:
        raise ConfigError("model.shrink ctc merges frames by the CTC head's labels: it needs train.ctc_weight > 0 "
                          "(and data.src_vocab) to train that head")
    return dataclasses.replace(cfg.model, tgt_vocab_size=len(dec), src_vocab_size=src_size,
                               ctc=cfg.train.ctc_weight > 0 or cfg.model.ctc, pad_id=dec.pad_id)


def task_config_for(cfg: ExperimentConfig, toks: Tokenizers) -> TaskConfig:
    dec = decoder_tokenizer(cfg.train.task, toks)
    src = toks.src if toks.src is not dec else None
    return TaskConfig(label_smoothing=cfg.train.label_smoothing, ctc_weight=cfg.train.ctc_weight,
                      first_text_id=src.first_text_id if src is not None else 5, pad_id=dec.pad_id,
                      bos_id=dec.bos_id)
