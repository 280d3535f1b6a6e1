"""Raw-waveform input for the wav2vec2 encoder: no fbank; each utterance's slice of audio read from the
manifest at 16 kHz and, when the encoder's feature extractor says `do_normalize`, normalised to zero mean
and unit variance over the utterance (as Hugging Face's Wav2Vec2FeatureExtractor does).

The settings (`WaveformConfig`) are saved in a checkpoint's "features" beside fbank and CMVN, so training
and inference share them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from speechmt.audio import SAMPLE_RATE, read_audio
from speechmt.data.dataset import Example, encode_texts
from speechmt.data.manifest import Record, read_manifest
from speechmt.tokenizer import Tokenizer

if TYPE_CHECKING:
    from speechmt.data.augment import Augmenter


@dataclass(frozen=True)
class WaveformConfig:
    """The waveform front end: sample rate (16 kHz only) and per-utterance normalisation."""

    sample_rate: int = SAMPLE_RATE
    do_normalize: bool = True

    def __post_init__(self):
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(f"waveform input must be {SAMPLE_RATE} Hz; the feature extractor says "
                             f"{self.sample_rate} Hz")


def normalize_waveform(wave: np.ndarray) -> np.ndarray:
    """(T,) -> (T,) float32: (x - mean) / sqrt(var + 1e-7) over the utterance, HF's zero_mean_unit_var_norm."""
    wave = np.asarray(wave, dtype=np.float32)
    return ((wave - wave.mean()) / np.sqrt(wave.var() + 1e-7)).astype(np.float32)


def waveform_input(wave: np.ndarray, cfg: WaveformConfig) -> torch.Tensor:
    """A 16 kHz wave (T,) as the encoder's input: a float32 tensor (T,), normalised when cfg says so."""
    wave = normalize_waveform(wave) if cfg.do_normalize else np.asarray(wave, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(wave))


def record_audio(record: Record, base_dir: str | os.PathLike) -> np.ndarray:
    """The 16 kHz slice of audio a manifest record names (paths relative to `base_dir`, the manifest's folder)."""
    path = Path(record.audio)
    if not path.is_absolute():
        path = Path(base_dir) / path
    return read_audio(path, record.offset, record.duration or None)


class WaveformDataset(Dataset):
    """Utterances of a prepared split as encoder-ready waveforms (T,) (or, with a `frontend`, what it makes of
    each 16 kHz wave, e.g. Whisper's log-mel (T, n_mels)) with the transcript and/or translation encoded by
    the given tokenizers. Sizes are the records' 10 ms frame counts, so that `max_tokens` means
    the same amount of audio for fbank and waveform models. An `augment` (speechmt.data.augment.Augmenter,
    for a training split) alters each 16 kHz wave before the front end."""

    def __init__(self, records: list[Record], cfg: WaveformConfig, base_dir: str | os.PathLike,
                 src_tokenizer: Tokenizer | None = None, tgt_tokenizer: Tokenizer | None = None,
                 src_tag: str | None = None, tgt_tag: str | None = None,
                 frontend: Callable[[np.ndarray], torch.Tensor] | None = None, tgt_field: str = "tgt_text",
                 augment: "Augmenter | None" = None, seed: int = 0):
        self.records, self.cfg, self.base_dir = records, cfg, Path(base_dir)
        self.frontend = frontend or (lambda wave: waveform_input(wave, cfg))
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.src_tag, self.tgt_tag, self.tgt_field = src_tag, tgt_tag, tgt_field
        self.augment, self.seed, self.epoch = augment, seed, 0  # augment: training splits only

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @classmethod
    def from_split(cls, data_dir: str | os.PathLike, split: str, cfg: WaveformConfig, **kwargs) -> "WaveformDataset":
        """The utterances of data_dir/<split>.jsonl (no feature store needed)."""
        return cls(read_manifest(Path(data_dir) / f"{split}.jsonl"), cfg, data_dir, **kwargs)

    @property
    def sizes(self) -> list[int]:
        return [r.n_frames for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> Example:
        rec = self.records[i]
        wave = record_audio(rec, self.base_dir)
        if self.augment is not None:  # a function of (seed, epoch, index): a resumed run hears the same audio
            wave = self.augment(wave, np.random.default_rng([self.seed, self.epoch, i]))
        return Example(i, rec.id, self.frontend(wave), *encode_texts(self, rec))
