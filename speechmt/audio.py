"""Audio input and the acoustic front end: reading, resampling, Kaldi-compatible fbank, CMVN, SpecAugment.

Units: SAMPLE_RATE samples per second; fbank frames every FRAME_SHIFT_MS with FRAME_LENGTH_MS windows.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import soundfile as sf
import soxr
import torch

SAMPLE_RATE = 16000
FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0


class AudioError(ValueError):
    """Audio that cannot be used; the message names the file and what is wrong, `reason` a short category."""

    def __init__(self, message: str, reason: str = "unreadable audio"):
        super().__init__(message)
        self.reason = reason


def read_audio(
    path: str | os.PathLike,
    offset: float = 0.0,
    duration: float | None = None,
    sample_rate: int = SAMPLE_RATE,
) -> np.ndarray:
    """Reads a slice of an audio file as float32 mono at `sample_rate`, in [-1, 1].

    Only the requested slice is read from disk (seek by offset), so a segment of an hour-long talk costs
    what the segment costs. `duration=None` reads to the end. Returns shape (num_samples,).
    Raises AudioError for a missing, empty, undecodable or non-finite file, or a slice past its end.
    """
    path = os.fspath(path)
    with open_audio(path) as f, quiet_decoder():
        sr = f.samplerate
        start = int(round(offset * sr))
        if f.frames == 0:
            raise AudioError(f"{path}: no samples", "empty audio")
        if start >= f.frames:
            raise AudioError(
                f"{path}: offset {offset:.3f}s is past the end ({f.frames / sr:.3f}s)", "segment outside audio"
            )
        n = -1 if duration is None else int(round(duration * sr))
        try:
            if start:
                f.seek(start)
            wave = f.read(frames=n, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError, TypeError) as e:
            raise decode_error(path, e) from None
    if duration is not None and wave.shape[0] < int(round(duration * sr)) - 1:
        got = wave.shape[0] / sr
        raise AudioError(
            f"{path}: slice {offset:.3f}+{duration:.3f}s runs past the end of the file (only {got:.3f}s available)",
            "segment outside audio",
        )
    if wave.shape[0] == 0:
        raise AudioError(f"{path}: no samples", "empty audio")
    mono = wave.mean(axis=1) if wave.shape[1] > 1 else wave[:, 0]
    if not np.isfinite(mono).all():
        raise AudioError(f"{path}: non-finite samples (NaN or Inf)", "non-finite samples")
    return resample(mono, sr, sample_rate)


def resample(wave: np.ndarray, orig_sr: int, new_sr: int) -> np.ndarray:
    """Band-limited resampling (soxr, high quality). (T,) -> (round(T * new_sr / orig_sr),), float32."""
    if orig_sr == new_sr:
        return np.ascontiguousarray(wave, dtype=np.float32)
    return soxr.resample(np.asarray(wave, dtype=np.float32), orig_sr, new_sr, quality="HQ").astype(np.float32)


def audio_info(path: str | os.PathLike) -> tuple[int, int, int]:
    """(sample_rate, num_frames, channels) of a file, without reading its samples; AudioError as read_audio."""
    with open_audio(path) as f:
        return f.samplerate, f.frames, f.channels


@contextmanager
def quiet_decoder() -> Iterator[None]:
    """Silences what the C decoders under libsndfile print on file descriptor 2 while a file is opened or read
    (libmpg123's "Note: Illegal Audio-MPEG-Header ... Trying to resync..." of a damaged mp3): the reason a
    file cannot be read is said once, by AudioError. Other threads' stderr is silenced for that moment too."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no file descriptor 2 to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def decode_error(path: str | os.PathLike, e: Exception) -> AudioError:
    """The one-line AudioError of a file libsndfile could not decode. libsndfile says "File does not exist or
    is not a regular file" of an existing file whose decoder gave up (a damaged mp3): that becomes what it is."""
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if os.path.isfile(path) and "does not exist" in reason:
        reason = "not audio in a format libsndfile reads, or damaged"
    return AudioError(f"{path}: cannot decode audio ({reason})")


@contextmanager
def open_audio(path: str | os.PathLike) -> Iterator[sf.SoundFile]:
    """An audio file opened for reading (libsndfile, its decoders silenced), closed on exit. AudioError (one
    line naming the file) for a missing, empty or undecodable file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise AudioError(f"{path}: file not found", "missing audio")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise AudioError(f"{path}: empty file", "empty audio")
    try:
        with quiet_decoder():
            f = sf.SoundFile(path)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise decode_error(path, e) from None
    with f:
        yield f


@dataclass(frozen=True)
class FbankConfig:
    """Kaldi-compatible log-mel filterbank settings (Kaldi's and torchaudio's defaults, 80 bins).

    `scale` multiplies the [-1, 1] waveform before analysis (2**15 gives Kaldi's int16 range, as fairseq).
    """

    num_mel_bins: int = 80
    sample_rate: int = SAMPLE_RATE
    frame_length_ms: float = FRAME_LENGTH_MS
    frame_shift_ms: float = FRAME_SHIFT_MS
    preemphasis: float = 0.97
    low_freq: float = 20.0
    high_freq: float = 0.0
    scale: float = 32768.0
    dither: float = 0.0

    @property
    def window_size(self) -> int:
        return int(self.sample_rate * self.frame_length_ms / 1000)

    @property
    def window_shift(self) -> int:
        return int(self.sample_rate * self.frame_shift_ms / 1000)

    @property
    def fft_size(self) -> int:
        return 1 << (self.window_size - 1).bit_length()


def num_frames(num_samples: int | torch.Tensor, cfg: FbankConfig = FbankConfig()) -> int | torch.Tensor:
    """Frames Kaldi makes of `num_samples` samples (snip_edges=True): 1 + (N - window) // shift, or 0."""
    if isinstance(num_samples, torch.Tensor):
        n = torch.div(num_samples - cfg.window_size, cfg.window_shift, rounding_mode="floor") + 1
        return n.clamp(min=0)
    return max(0, 1 + (num_samples - cfg.window_size) // cfg.window_shift)


def _mel(f: np.ndarray) -> np.ndarray:
    return 1127.0 * np.log(1.0 + f / 700.0)


def mel_banks(cfg: FbankConfig) -> np.ndarray:
    """Kaldi's triangular mel filters on the FFT bins, (num_mel_bins, fft_size // 2 + 1), float64."""
    nyquist = 0.5 * cfg.sample_rate
    high = cfg.high_freq if cfg.high_freq > 0 else nyquist + cfg.high_freq
    mel_lo, mel_hi = _mel(np.float64(cfg.low_freq)), _mel(np.float64(high))
    delta = (mel_hi - mel_lo) / (cfg.num_mel_bins + 1)
    edges = mel_lo + delta * np.arange(cfg.num_mel_bins + 2)
    left, center, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    n_bins = cfg.fft_size // 2
    bin_mel = _mel(cfg.sample_rate / cfg.fft_size * np.arange(n_bins))[None, :]
    up = (bin_mel - left) / (center - left)
    down = (right - bin_mel) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    return np.pad(banks, ((0, 0), (0, 1)))  # Kaldi leaves the Nyquist bin out


def povey_window(n: int) -> np.ndarray:
    """Kaldi's povey window: a Hann window (non-periodic) to the power 0.85. (n,) float64."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / (n - 1))) ** 0.85


class Fbank(torch.nn.Module):
    """Kaldi-compatible log-mel filterbank, batched: waveforms (B, N) in [-1, 1] -> (B, T, num_mel_bins).

    Equal to torchaudio.compliance.kaldi.fbank on `waveform * cfg.scale` computed exactly (float64): within
    ~3e-4 (torchaudio's own float32 path is ~1e-2 off its float64 one on near-silent bins). Frames are
    processed in cache-sized blocks with DC removal, pre-emphasis, windowing and the FFT in float64 (a
    float32 FFT loses low-energy bins), the mel projection and log in float32; the waveform scale is
    folded into the window, and the mel projection of each group of filters reads only the FFT bins that
    the group covers (the filters are triangles: the full matrix is mostly zeros).
    """

    block = 256  # frames per block: fits in cache, amortises per-op overhead
    mel_groups = 4  # the mel projection is done per group of filters, on the FFT bins the group covers

    def __init__(self, cfg: FbankConfig = FbankConfig()):
        super().__init__()
        self.cfg = cfg
        window = povey_window(cfg.window_size) * cfg.scale
        self.register_buffer("window", torch.from_numpy(window), persistent=False)
        self.bands: list[tuple[int, int, int, int]] = []  # (first filter, end filter, first bin, end bin)
        banks = mel_banks(cfg)
        for g, filters in enumerate(np.array_split(np.arange(cfg.num_mel_bins), self.mel_groups)):
            bins = np.nonzero(banks[filters].any(0))[0]
            lo, hi = int(bins.min()), int(bins.max()) + 1
            self.bands.append((int(filters[0]), int(filters[-1]) + 1, lo, hi))
            # rows repeated for the interleaved (re, im) squares of the spectrum
            weights = np.repeat(banks[filters][:, lo:hi].T, 2, axis=0)
            self.register_buffer(f"mel{g}", torch.from_numpy(weights).float().contiguous(), persistent=False)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N) or (N,) waveforms with sample lengths (B,) -> features (B, T, F) and frame counts (B,).

        Frames past an utterance's own length are zero.
        """
        if wave.dim() == 1:
            wave = wave[None]
        if lengths is None:
            lengths = torch.full((wave.shape[0],), wave.shape[1], dtype=torch.long, device=wave.device)
        n_frames = num_frames(lengths, self.cfg)
        t_max = int(n_frames.max()) if n_frames.numel() else 0
        feats = torch.zeros(wave.shape[0], t_max, self.cfg.num_mel_bins, device=wave.device)
        if t_max == 0:
            return feats, n_frames
        padded = torch.zeros(min(self.block, t_max), self.cfg.fft_size, dtype=torch.float64, device=wave.device)
        for b, n in enumerate(n_frames.tolist()):
            frames = wave[b].unfold(0, self.cfg.window_size, self.cfg.window_shift)  # (T, W), a view
            for start in range(0, n, self.block):
                stop = min(start + self.block, n)
                self._block(frames[start:stop], padded[: stop - start], feats[b, start:stop])
        return feats, n_frames

    def _block(self, frames: torch.Tensor, padded: torch.Tensor, out: torch.Tensor) -> None:
        """Log-mel energies of a block of frames (n, W) into `out` (n, F); `padded` (n, fft_size) is scratch."""
        x = frames.to(torch.float64, copy=True)
        if self.training and self.cfg.dither > 0:
            x += torch.randn_like(x) * (self.cfg.dither / self.cfg.scale)
        x -= x.mean(1, keepdim=True)
        w = self.cfg.window_size
        torch.sub(x[:, 1:], x[:, :-1], alpha=self.cfg.preemphasis, out=padded[:, 1:w])
        padded[:, 0] = x[:, 0] * (1 - self.cfg.preemphasis)  # Kaldi replicates the first sample
        padded[:, :w] *= self.window
        spec = torch.fft.rfft(padded)  # (n, K) complex128
        squares = torch.view_as_real(spec).reshape(len(spec), -1).float().square_()  # (n, 2K): re², im²
        for g, (f0, f1, lo, hi) in enumerate(self.bands):
            torch.mm(squares[:, 2 * lo : 2 * hi], getattr(self, f"mel{g}"), out=out[:, f0:f1])
        out.clamp_(min=torch.finfo(torch.float32).eps).log_()


_FBANK_CACHE: dict[FbankConfig, Fbank] = {}


def fbank(wave: np.ndarray | torch.Tensor, cfg: FbankConfig = FbankConfig()) -> np.ndarray:
    """Log-mel filterbank of one waveform: (N,) float in [-1, 1] -> (T, num_mel_bins) float32 array."""
    module = _FBANK_CACHE.get(cfg)
    if module is None:
        module = _FBANK_CACHE[cfg] = Fbank(cfg).eval()
    x = torch.as_tensor(np.asarray(wave, dtype=np.float32))
    with torch.inference_mode():
        feats, _ = module(x)
    return feats[0].numpy()


def utterance_cmvn(feats: np.ndarray | torch.Tensor, norm_vars: bool = True):
    """Per-utterance mean (and variance) normalisation over time, as fairseq's utterance_cmvn. (T, F) -> (T, F)."""
    mean = feats.mean(0, keepdims=True) if isinstance(feats, np.ndarray) else feats.mean(0, keepdim=True)
    x = feats - mean
    if not norm_vars:
        return x
    var = (x * x).mean(0)
    std = np.sqrt(np.maximum(var, 1e-10)) if isinstance(feats, np.ndarray) else var.clamp(min=1e-10).sqrt()
    return x / std


@dataclass
class CMVNStats:
    """Running sums for global CMVN, accumulated at preparation over the training split (float64)."""

    count: int = 0
    sum: np.ndarray | None = None
    sumsq: np.ndarray | None = None

    def update(self, feats: np.ndarray) -> None:
        """Adds an utterance's frames, (T, F)."""
        f = feats.astype(np.float64)
        if self.sum is None:
            self.sum, self.sumsq = np.zeros(f.shape[1]), np.zeros(f.shape[1])
        self.count += f.shape[0]
        self.sum += f.sum(0)
        self.sumsq += (f * f).sum(0)

    def merge(self, other: "CMVNStats") -> None:
        if other.count == 0:
            return
        if self.sum is None:
            self.sum, self.sumsq = np.zeros_like(other.sum), np.zeros_like(other.sumsq)
        self.count += other.count
        self.sum += other.sum
        self.sumsq += other.sumsq

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """(F,) mean and standard deviation (floored at 1e-5) of all frames seen."""
        if not self.count:
            raise ValueError("global CMVN statistics are empty: no training frames were accumulated")
        mean = self.sum / self.count
        var = self.sumsq / self.count - mean * mean
        return mean.astype(np.float32), np.sqrt(np.maximum(var, 1e-10)).clip(min=1e-5).astype(np.float32)


@dataclass(frozen=True)
class CMVNConfig:
    """Which normalisation features get; `mean`/`std` (F values each) are set for kind "global"."""

    kind: str = "utterance"  # "utterance", "global" or "none"
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "mean", tuple(self.mean))  # lists from JSON or YAML
        object.__setattr__(self, "std", tuple(self.std))
        if self.kind not in CMVN_KINDS:
            raise ValueError(f"unknown CMVN kind {self.kind!r}; expected utterance, global or none")
        if self.kind == "global" and (not self.mean or len(self.mean) != len(self.std)):
            raise ValueError("global CMVN needs mean and std of equal, non-zero length")


def apply_cmvn(feats: torch.Tensor, cfg: CMVNConfig) -> torch.Tensor:
    """Normalises one utterance's features as `cfg` says. (T, F) -> (T, F)."""
    return CMVN_KINDS[cfg.kind](feats, cfg)


def _global_cmvn(feats: torch.Tensor, cfg: CMVNConfig) -> torch.Tensor:
    """(T, F) -> (T, F) normalised by the corpus statistics cfg.mean and cfg.std."""
    mean, std = _statistics(cfg.mean, cfg.std, feats.dtype)
    return (feats - mean.to(feats.device)) / std.to(feats.device)


@functools.lru_cache(maxsize=8)
def _statistics(mean: tuple[float, ...], std: tuple[float, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Global CMVN's (F,) mean and std as CPU tensors, made once per corpus statistics (a loader calls
    _global_cmvn per utterance; the tensors are read, never written)."""
    return torch.tensor(mean, dtype=dtype), torch.tensor(std, dtype=dtype)


CMVN_KINDS = {
    "utterance": lambda feats, cfg: utterance_cmvn(feats),
    "global": _global_cmvn,
    "none": lambda feats, cfg: feats,
}
"""Each CMVN kind's normalisation `(feats (T, F), CMVNConfig) -> (T, F)`."""


@dataclass(frozen=True)
class SpecAugmentConfig:
    """fairseq's SpecAugment settings; `policy("lb")` and `policy("ld")` give its two LibriSpeech policies."""

    freq_mask_n: int = 1
    freq_mask_f: int = 27
    time_mask_n: int = 1
    time_mask_t: int = 100
    time_mask_p: float = 1.0
    mask_value: float | None = None  # None: the utterance's mean

    @classmethod
    def policy(cls, name: str) -> "SpecAugmentConfig":
        policies = {"lb": cls(1, 27, 1, 100, 1.0), "ld": cls(2, 27, 2, 100, 1.0)}
        if name not in policies:
            raise ValueError(f"unknown SpecAugment policy {name!r}; known: {', '.join(policies)}")
        return policies[name]


def spec_augment(feats: torch.Tensor, cfg: SpecAugmentConfig, generator: torch.Generator | None = None) -> torch.Tensor:
    """Frequency and time masking of one utterance (no time warp), as fairseq. (T, F) -> new (T, F) tensor.

    Mask widths are drawn uniformly from [0, F) and [0, min(T_max, floor(p * T))).
    """
    n_t, n_f = feats.shape
    if n_t == 0 or n_f < cfg.freq_mask_f:
        return feats
    out = feats.clone()
    value = float(feats.mean()) if cfg.mask_value is None else cfg.mask_value

    def draw(high: int) -> int:
        return int(torch.randint(0, high, (1,), generator=generator)) if high > 0 else 0

    for _ in range(cfg.freq_mask_n):
        f = draw(cfg.freq_mask_f)
        f0 = draw(n_f - f)
        out[:, f0 : f0 + f] = value
    max_t = min(cfg.time_mask_t, math.floor(n_t * cfg.time_mask_p))
    if max_t < 1:
        return out
    for _ in range(cfg.time_mask_n):
        t = draw(max_t)
        t0 = draw(n_t - t)
        out[t0 : t0 + t, :] = value
    return out
