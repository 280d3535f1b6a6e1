"""The waveform front end of the wav2vec2 encoder: no fbank; the 16 kHz wave itself, normalised to zero mean
and unit variance over the utterance when the encoder's feature extractor says `do_normalize` (as Hugging
Face's Wav2Vec2FeatureExtractor does). Its settings (`WaveformConfig`) are the checkpoint's
features.waveform, so training and inference share them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch

from speechmt.audio import SAMPLE_RATE

CONV_RECEPTIVE_FIELD = 400
"""Samples under one output frame of wav2vec2's convolutional feature encoder (kernels 10, 3, 3, 3, 3, 2, 2;
strides 5, 2, 2, 2, 2, 2, 2: 25 ms), shared by the wav2vec2, HuBERT and WavLM families: a shorter wave has
no frame."""


@dataclass(frozen=True)
class WaveformConfig:
    """The waveform front end: sample rate (16 kHz only) and per-utterance normalisation."""

    sample_rate: int = SAMPLE_RATE
    do_normalize: bool = True

    def __post_init__(self):
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(
                f"waveform input must be {SAMPLE_RATE} Hz; the feature extractor says {self.sample_rate} Hz"
            )


def normalize_waveform(wave: np.ndarray) -> np.ndarray:
    """(T,) -> (T,) float32: (x - mean) / sqrt(var + 1e-7) over the utterance, HF's zero_mean_unit_var_norm."""
    wave = np.asarray(wave, dtype=np.float32)
    return ((wave - wave.mean()) / np.sqrt(wave.var() + 1e-7)).astype(np.float32)


def waveform_input(wave: np.ndarray, cfg: WaveformConfig) -> torch.Tensor:
    """A 16 kHz wave (T,) as the encoder's input: a float32 tensor (T,), normalised when cfg says so."""
    wave = normalize_waveform(wave) if cfg.do_normalize else np.asarray(wave, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(wave))


@dataclass(frozen=True)
class WaveformFrontend:
    """A 16 kHz wave (S,) -> the encoder's input (S,) (waveform_input)."""

    config: WaveformConfig = WaveformConfig()

    name: ClassVar[str] = "waveform"
    prepared: ClassVar[bool] = False  # read from the audio
    max_seconds: ClassVar[float | None] = None
    min_samples: ClassVar[int] = CONV_RECEPTIVE_FIELD

    def __call__(self, wave: np.ndarray) -> torch.Tensor:
        return waveform_input(wave, self.config)

    @property
    def settings(self) -> WaveformConfig:
        return self.config

    def state_dict(self) -> dict:
        return {"waveform": asdict(self.config)}
