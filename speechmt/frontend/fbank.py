"""The fbank front end of the conv encoder: Kaldi-compatible log-mel filterbank features, then CMVN
(speechmt.audio computes both). Preparation stores the fbank of every utterance (speechmt.data.prepare), so
training and evaluation read the store and only normalise it; translating computes it from the wave."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch

from speechmt.audio import CMVNConfig, FbankConfig, apply_cmvn, fbank


@dataclass(frozen=True)
class FbankFrontend:
    """A 16 kHz wave (S,) -> normalised fbank features (T, num_mel_bins), T = 1 + (S - 400) // 160."""

    fbank: FbankConfig = FbankConfig()
    cmvn: CMVNConfig = CMVNConfig()

    name: ClassVar[str] = "fbank"
    prepared: ClassVar[bool] = True  # preparation stores its features: datasets read them and `normalise`
    max_seconds: ClassVar[float | None] = None  # any length goes

    @property
    def min_samples(self) -> int:
        """The shortest wave with one frame: one analysis window (25 ms)."""
        return self.fbank.window_size

    def __call__(self, wave: np.ndarray) -> torch.Tensor:
        return self.normalise(fbank(wave, self.fbank))

    def normalise(self, feats: np.ndarray) -> torch.Tensor:
        """Stored fbank features (T, F) as the encoder's input: CMVN applied."""
        return apply_cmvn(torch.from_numpy(feats), self.cmvn)

    @property
    def settings(self) -> tuple[FbankConfig, CMVNConfig]:
        return self.fbank, self.cmvn

    def state_dict(self) -> dict:
        """The checkpoint's "features": fbank and CMVN settings (global CMVN's statistics included)."""
        return {"fbank": asdict(self.fbank), "cmvn": asdict(self.cmvn)}
