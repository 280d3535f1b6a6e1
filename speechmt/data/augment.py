"""On-the-fly waveform augmentation for the training data of models that read audio (wav2vec2's waveform,
Whisper's log-mel): room reverberation, additive noise at a signal-to-noise ratio, and a telephone channel.
Each utterance draws its own settings from a generator seeded by (seed, epoch, index), so a resumed run sees
the same audio; validation and test data are never augmented.

- reverberation: convolution with a room impulse response, either one of the files in `rir_dir` or a
  synthetic one: Gaussian noise under an exponential decay reaching -60 dB at RT60 (drawn from `rt60`), after
  a direct-path impulse (Lehmann & Johansson 2008 describe such diffuse tails); the output keeps the input's
  length and RMS level;
- noise: white Gaussian noise or a random stretch of a file in `noise_dir`, scaled so that the ratio of the
  utterance's power to the noise's is the SNR drawn from `noise_snr` (dB);
- telephone: resampled to 8 kHz, band-limited to 300-3400 Hz (ITU-T G.712's pass band), companded through
  8-bit mu-law (G.711), and resampled back to 16 kHz.

Models that read stored fbank features (encoder `conv`) use SpecAugment instead, and a frozen Whisper
encoder whose states are cached (data.cache_encoder) computes them once per split from clean audio: both are
refused with a ConfigError by `augment_problem`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechmt.audio import SAMPLE_RATE, AudioError, read_audio, resample

TELEPHONE_RATE = 8000
TELEPHONE_BAND = (300.0, 3400.0)
MU = 255.0
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
MAX_RIR_SECONDS = 2.0


class AugmentError(ValueError):
    """An augmentation setting that cannot be used (a folder without audio); one line naming it."""


@dataclass(frozen=True)
class AugmentConfig:
    """Probabilities (0: off) and ranges of each augmentation, applied in this order: reverb, noise, telephone."""

    reverb: float = 0.0
    rir_dir: str = ""  # room impulse responses (wav/flac/ogg); "": synthetic ones
    rt60: tuple[float, float] = (0.2, 0.8)  # seconds, for synthetic impulse responses
    noise: float = 0.0
    noise_snr: tuple[float, float] = (5.0, 20.0)  # dB
    noise_dir: str = ""  # noise recordings; "": white Gaussian noise
    telephone: float = 0.0

    @property
    def active(self) -> bool:
        return self.reverb > 0 or self.noise > 0 or self.telephone > 0


def power(wave: np.ndarray) -> float:
    """Mean square of a wave (T,)."""
    return float(np.mean(np.square(wave, dtype=np.float64))) if wave.size else 0.0


def snr_db(signal: np.ndarray, noise: np.ndarray) -> float:
    """10 log10 of the power ratio of `signal` to `noise` (both (T,))."""
    return 10.0 * np.log10(power(signal) / power(noise))


def add_noise(wave: np.ndarray, snr: float, rng: np.random.Generator, noise: np.ndarray | None = None) -> np.ndarray:
    """`wave` (T,) plus noise scaled to `snr` dB below its power: white Gaussian noise, or a random stretch of
    `noise` (repeated when shorter). Silence (zero power) is returned as it is. (T,) float32."""
    wave = np.asarray(wave, dtype=np.float32)
    if power(wave) == 0.0:
        return wave.copy()
    if noise is None or noise.size == 0 or power(noise) == 0.0:
        piece = rng.standard_normal(len(wave))
    else:
        reps = -(-len(wave) // len(noise)) + 1
        start = int(rng.integers(len(noise)))
        piece = np.tile(noise, reps)[start : start + len(wave)].astype(np.float64)
    scale = np.sqrt(power(wave) / (power(piece) * 10.0 ** (snr / 10.0)))
    return (wave + scale * piece).astype(np.float32)


def synthetic_rir(rt60: float, rng: np.random.Generator, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A room impulse response (L,): a unit direct path, then Gaussian noise decaying by 60 dB over `rt60`
    seconds (the tail's energy about a third of the direct path's for 0.5 s)."""
    n = max(2, int(min(rt60, MAX_RIR_SECONDS) * sample_rate))
    t = np.arange(n) / sample_rate
    tail = rng.standard_normal(n) * np.exp(-np.log(1000.0) * t / rt60)
    tail *= np.sqrt(rt60 / 1.5 / (np.sum(tail[1:] ** 2) + 1e-12))  # tail energy rt60 / 1.5
    tail[0] = 1.0
    return tail.astype(np.float32)


def reverberate(wave: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """`wave` (T,) convolved with `rir` (L,) (FFT), cut to T samples from the direct path (the strongest tap)
    on, at the input's RMS level. (T,) float32."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.size == 0 or power(wave) == 0.0:
        return wave.copy()
    rir = np.asarray(rir, dtype=np.float64)
    start = int(np.argmax(np.abs(rir)))
    n = len(wave) + len(rir) - 1
    size = 1 << (n - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(wave, size) * np.fft.rfft(rir, size), size)[start : start + len(wave)]
    return (out * np.sqrt(power(wave) / max(power(out), 1e-20))).astype(np.float32)


def band_pass(wave: np.ndarray, sample_rate: int, low: float, high: float) -> np.ndarray:
    """Zeroes every frequency outside [low, high] Hz (FFT over the whole wave). (T,) -> (T,) float32."""
    spectrum = np.fft.rfft(np.asarray(wave, dtype=np.float64))
    freqs = np.fft.rfftfreq(len(wave), 1.0 / sample_rate)
    spectrum[(freqs < low) | (freqs > high)] = 0.0
    return np.fft.irfft(spectrum, len(wave)).astype(np.float32)


def mu_law(wave: np.ndarray, mu: float = MU) -> np.ndarray:
    """8-bit mu-law companding and back (G.711's quantisation). (T,) -> (T,) float32 in [-1, 1]."""
    x = np.clip(wave, -1.0, 1.0)
    code = np.round(np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu) * 127.5) / 127.5
    return (np.sign(code) * np.expm1(np.abs(code) * np.log1p(mu)) / mu).astype(np.float32)


def telephone(wave: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A telephone channel: to 8 kHz, 300-3400 Hz, mu-law, back to `sample_rate`; the length is kept. (T,) float32."""
    narrow = resample(wave, sample_rate, TELEPHONE_RATE)
    narrow = mu_law(band_pass(narrow, TELEPHONE_RATE, *TELEPHONE_BAND))
    wide = resample(narrow, TELEPHONE_RATE, sample_rate)
    wide = band_pass(np.pad(wide, (0, max(0, len(wave) - len(wide))))[: len(wave)], sample_rate, *TELEPHONE_BAND)
    return wide


def audio_files(folder: str, what: str) -> list[Path]:
    """The audio files under `folder` (recursively, sorted). AugmentError when there is none."""
    path = Path(folder)
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES) if path.is_dir() else []
    if not files:
        raise AugmentError(f"{folder}: no {what} files ({', '.join(AUDIO_SUFFIXES)}) in this folder")
    return files


class Augmenter:
    """Applies an AugmentConfig to 16 kHz waves: `augmenter(wave, rng)`. Recordings in rir_dir and noise_dir
    are read when first drawn and kept; one that cannot be read is left out with a warning line (counted in
    `unreadable`), and synthetic noise or reverberation takes its place."""

    def __init__(self, cfg: AugmentConfig):
        self.cfg = cfg
        self.rirs = audio_files(cfg.rir_dir, "impulse response") if cfg.reverb > 0 and cfg.rir_dir else []
        self.noises = audio_files(cfg.noise_dir, "noise") if cfg.noise > 0 and cfg.noise_dir else []
        self._cache: dict[Path, np.ndarray | None] = {}
        self.unreadable: list[str] = []

    def _load(self, files: list[Path], rng: np.random.Generator) -> np.ndarray | None:
        if not files:
            return None
        path = files[int(rng.integers(len(files)))]
        if path not in self._cache:
            try:
                self._cache[path] = read_audio(path)
            except AudioError as e:
                self._cache[path] = None
                self.unreadable.append(str(path))
                warnings.warn(f"augmentation: {e}; left out", stacklevel=2)
        return self._cache[path]

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """An augmented copy of a 16 kHz wave (T,) -> (T,) float32."""
        cfg = self.cfg
        draws = rng.random(3)  # one draw per augmentation, whatever is on: settings stay put when one changes
        if draws[0] < cfg.reverb:
            rir = self._load(self.rirs, rng)
            wave = reverberate(
                wave, rir if rir is not None and rir.size else synthetic_rir(rng.uniform(*cfg.rt60), rng)
            )
        if draws[1] < cfg.noise:
            wave = add_noise(wave, rng.uniform(*cfg.noise_snr), rng, self._load(self.noises, rng))
        if draws[2] < cfg.telephone:
            wave = telephone(wave)
        return np.asarray(wave, dtype=np.float32)


def augment_config(data) -> AugmentConfig | None:
    """The AugmentConfig of a DataConfig's augment_* options; None when all are off."""
    cfg = AugmentConfig(
        reverb=data.augment_reverb,
        rir_dir=data.augment_rir_dir,
        rt60=tuple(data.augment_rt60),
        noise=data.augment_noise,
        noise_snr=tuple(data.augment_noise_snr),
        noise_dir=data.augment_noise_dir,
        telephone=data.augment_telephone,
    )
    return cfg if cfg.active else None


def augment_problem(data, model) -> str | None:
    """Why a DataConfig's augmentation cannot act on a ModelConfig's input (None when it can): a conv encoder
    reads stored fbank features, and a frozen Whisper encoder's cached states are computed from clean audio."""
    if augment_config(data) is None:
        return None
    if model.encoder.reads_stored_features:
        return (
            "data.augment_*: encoder 'conv' reads the fbank features stored by preparation, not audio; "
            "waveform augmentation is for wav2vec2 and whisper encoders (use data.spec_augment here)"
        )
    if model.encoder.cacheable_states and data.cache_encoder:
        return (
            "data.augment_*: a frozen Whisper encoder's states are cached once from clean audio "
            "(data.cache_encoder), so they would never be augmented; set data.cache_encoder false to augment "
            "(the frozen layers then run at every update)"
        )
    return None
