"""Whisper's front end: the log-mel spectrogram OpenAI's Whisper was trained on (25 ms Hann window, 10 ms hop,
80 or 128 Slaney mel bins, log10, floored at 8 below the utterance's maximum, then (x + 4) / 4), computed by
transformers' `WhisperFeatureExtractor` at the utterance's own length (no padding to 30 s), or of the wave
zero-padded to `pad_seconds` (30: Whisper's own input; 10-15 s hears as well for short clips, at half the cost).

The trimmed features equal the first frames of the 30 s-padded ones (the floor is set by the loudest frame,
which padding with zeros never changes; only a last frame whose window reaches past the end of the audio
sees reflected samples instead of zeros). What differs is the encoder's view: see
`speechmt.models.encoders.whisper`. `WhisperMelConfig` is saved in a checkpoint's "features".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
import torch

from speechmt.audio import SAMPLE_RATE

HOP = 160  # samples per frame at 16 kHz (10 ms)
CHUNK_SECONDS = 30  # Whisper's input window; its encoder has positions for this many seconds
MIN_SAMPLES = 400 // 2 + 1  # the shortest wave with a frame: the STFT reflect-pads n_fft // 2 samples each side


@dataclass(frozen=True)
class WhisperMelConfig:
    """The log-mel settings of a Whisper model (its preprocessor_config.json)."""

    n_mels: int = 80
    sample_rate: int = SAMPLE_RATE
    n_fft: int = 400
    hop_length: int = HOP
    pad_seconds: float = 0.0  # the wave zero-padded to this many seconds (30: Whisper's own input); 0: none

    def __post_init__(self):
        if not 0 <= self.pad_seconds <= CHUNK_SECONDS:
            raise ValueError(f"Whisper features pad to 0 (none) to {CHUNK_SECONDS} seconds; got {self.pad_seconds}")
        if self.sample_rate != SAMPLE_RATE or self.hop_length != HOP or self.n_fft != 400:
            raise ValueError(
                f"Whisper features need 16 kHz, n_fft 400 and hop 160; got {self.sample_rate} Hz, "
                f"n_fft {self.n_fft}, hop {self.hop_length}"
            )
        if self.n_mels not in (80, 128):
            raise ValueError(f"Whisper models use 80 or 128 mel bins; got {self.n_mels}")

    @classmethod
    def from_state(cls, d: dict) -> "WhisperMelConfig":
        """The settings a checkpoint's "features" hold (its `pad_to_30s` flag, before `pad_seconds`, read as 30 s)."""
        d = dict(d)
        if "pad_to_30s" in d:
            d.setdefault("pad_seconds", float(CHUNK_SECONDS) if d.pop("pad_to_30s") else 0.0)
        return cls(**d)


@lru_cache(maxsize=4)
def _extractor(n_mels: int):
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=n_mels)


def whisper_log_mel(wave: np.ndarray, cfg: WhisperMelConfig = WhisperMelConfig()) -> torch.Tensor:
    """A 16 kHz wave (S,) -> log-mel features (S' // 160, n_mels) float32: S' = S, or at least cfg.pad_seconds
    (30: 3000 frames, Whisper's own input) when the wave is zero-padded; none for a wave shorter than MIN_SAMPLES."""
    wave = np.asarray(wave, dtype=np.float32)
    if cfg.pad_seconds:
        wave = np.pad(wave, (0, max(0, round(cfg.pad_seconds * cfg.sample_rate) - len(wave))))
    if len(wave) < MIN_SAMPLES:  # the STFT's reflect padding needs more samples than it pads
        return torch.zeros(0, cfg.n_mels)
    mel = _extractor(cfg.n_mels)(
        wave, sampling_rate=cfg.sample_rate, padding="longest", truncation=False, return_tensors="np"
    )["input_features"][0]  # (n_mels, T)
    return torch.from_numpy(np.ascontiguousarray(mel.T))


def mel_settings(name_or_path: str) -> WhisperMelConfig:
    """The mel settings of a Whisper model: its feature extractor's feature_size, or its config's
    num_mel_bins when the folder has no preprocessor_config.json."""
    from transformers import AutoConfig, AutoFeatureExtractor

    try:
        return WhisperMelConfig(int(AutoFeatureExtractor.from_pretrained(name_or_path).feature_size))
    except (OSError, ValueError, AttributeError):
        return WhisperMelConfig(int(AutoConfig.from_pretrained(name_or_path).num_mel_bins))


@dataclass(frozen=True)
class WhisperMelFrontend:
    """A 16 kHz wave (S,) -> Whisper's log-mel features (S // 160, n_mels) (whisper_log_mel)."""

    config: WhisperMelConfig = WhisperMelConfig()

    name: ClassVar[str] = "whisper_mel"
    prepared: ClassVar[bool] = False  # read from the audio
    max_seconds: ClassVar[float | None] = float(CHUNK_SECONDS)  # the encoder's positions cover Whisper's window
    min_samples: ClassVar[int] = MIN_SAMPLES

    def __call__(self, wave: np.ndarray) -> torch.Tensor:
        return whisper_log_mel(wave, self.config)

    @property
    def settings(self) -> WhisperMelConfig:
        return self.config

    def state_dict(self) -> dict:
        return {"whisper_mel": asdict(self.config)}
