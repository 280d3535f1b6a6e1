"""Plain builder functions that turn an ExperimentConfig into tokenizers, datasets and a model."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from speechmt.audio import CMVNConfig, FbankConfig, SpecAugmentConfig
from speechmt.config import ConfigError, DataConfig, ExperimentConfig
from speechmt.data.dataset import SpeechDataset, TextDataset, global_cmvn, load_split
from speechmt.data.waveform import WaveformConfig, WaveformDataset
from speechmt.models.translator import ModelConfig
from speechmt.tasks import TaskConfig
from speechmt.tokenizer import Tokenizer


@dataclass
class Tokenizers:
    """The source-side (transcripts) and target-side (translations) tokenizers; either may be None."""

    src: Tokenizer | None
    tgt: Tokenizer | None

    def state_dict(self) -> dict:
        return {k: (t.state_dict() if t is not None else None) for k, t in (("src", self.src), ("tgt", self.tgt))}

    @classmethod
    def from_state_dict(cls, d: dict) -> "Tokenizers":
        return cls(*(Tokenizer.from_state_dict(d[k]) if d.get(k) else None for k in ("src", "tgt")))


def load_tokenizers(data: DataConfig) -> Tokenizers:
    """Reads the vocabularies a data config names (an empty path gives None)."""
    return Tokenizers(Tokenizer.load(data.src_vocab) if data.src_vocab else None,
                      Tokenizer.load(data.tgt_vocab) if data.tgt_vocab else None)


def decoder_tokenizer(task: str, toks: Tokenizers) -> Tokenizer:
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
    return f"<{cfg.data.src_lang}>" if cfg.train.task == "asr" else f"<{cfg.data.tgt_lang}>"


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


def build_dataset(cfg: ExperimentConfig, split: str, toks: Tokenizers, cmvn: CMVNConfig, train: bool,
                  waveform: WaveformConfig | None = None):
    """The dataset of one split for the configured task; SpecAugment only when `train`. A wav2vec2 model
    reads waveforms (`waveform`, by default its feature extractor's settings) instead of features."""
    task, data = cfg.train.task, cfg.data
    tag = decoder_tag(cfg)
    if task != "mt" and cfg.model.encoder == "wav2vec2":
        return _waveform_dataset(cfg, split, toks, tag, waveform or waveform_settings(cfg))
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


def model_config_for(cfg: ExperimentConfig, toks: Tokenizers) -> ModelConfig:
    """The model config with vocabulary sizes taken from the tokenizers."""
    dec = decoder_tokenizer(cfg.train.task, toks)
    src_size = len(toks.src) if toks.src is not None and (cfg.train.ctc_weight > 0 or cfg.train.task == "mt") else 0
    if cfg.model.shrink == "ctc" and cfg.train.ctc_weight <= 0:
        raise ConfigError("model.shrink ctc merges frames by the CTC head's labels: it needs train.ctc_weight > 0 "
                          "(and data.src_vocab) to train that head")
    return dataclasses.replace(cfg.model, tgt_vocab_size=len(dec), src_vocab_size=src_size,
                               ctc=cfg.train.ctc_weight > 0 or cfg.model.ctc)


def task_config_for(cfg: ExperimentConfig, toks: Tokenizers) -> TaskConfig:
    src = toks.src
    first_text_id = 5 + (len(src.config.lang_tags) if src is not None else 0)
    return TaskConfig(label_smoothing=cfg.train.label_smoothing, ctc_weight=cfg.train.ctc_weight,
                      first_text_id=first_text_id)
