"""Cutting long audio into segments at pauses, so that translating a talk needs bounded memory.

Segments are contiguous and cover the whole input: concatenating them gives back the waveform, and no
stretch is dropped, silence included. A cut is made only where a segment would otherwise pass
`max_seconds`:

1. Frame energy: mean square of each frame (`frame_ms` long, every `hop_ms`) in dB, floored at -100 dB.
2. Quiet frames: energy below the file's `reference_percentile` frame energy plus `threshold_db`
   (by default 35 dB below the 95th percentile). A pause is a run of k consecutive quiet frames whose span,
   (k - 1) * hop_ms + frame_ms, is at least `min_pause_ms`.
3. From the start of the current segment, the allowed cut points are the frame centres that keep the
   segment between `min_seconds` and `max_seconds` long. Among the pauses that reach into that window, take
   the longest (the latest of equals), and cut at the centre of its lowest-energy frame inside the window.
   When no pause reaches into the window, cut hard at exactly `max_seconds`.
4. The rest of the file after the last cut, when at most `max_seconds`, is the last segment; it (like a
   short file) may be shorter than `min_seconds`.

With `pause_cut_ms` > 0 (subtitles: one sentence or so per segment), a segment also ends at the first pause of
at least `pause_cut_ms` that begins once it is `min_seconds` long and whose lowest-energy frame keeps it within
`max_seconds` and leaves at least `min_seconds` after it; the cut is at that frame. Without such a pause, rule 3
applies.

A file that is mostly silence puts the reference percentile in the silence, so that nothing counts as
quiet and every cut is a hard one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from speechmt.audio import decode_error, open_audio, quiet_decoder

_FLOOR_DB = -100.0
_BLOCK_FRAMES = 4096  # frames whose energies are computed at once, bounding the temporary memory


@dataclass(frozen=True)
class SegmentConfig:
    """Settings of `find_segments`; times in seconds or milliseconds as named, levels in dB."""

    max_seconds: float = 20.0
    min_seconds: float = 1.0
    frame_ms: float = 25.0
    hop_ms: float = 10.0
    threshold_db: float = -35.0
    reference_percentile: float = 95.0
    min_pause_ms: float = 200.0
    speech_floor_db: float = -60.0  # voiced_span: quieter frames are never speech
    pause_cut_ms: float = 0.0  # > 0: cut at every pause this long (module docstring)

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_seconds < self.max_seconds:
            raise ValueError(f"need 0 <= min_seconds < max_seconds; got {self.min_seconds}, {self.max_seconds}")
        if self.frame_ms <= 0 or self.hop_ms <= 0:
            raise ValueError(f"frame_ms and hop_ms must be positive; got {self.frame_ms}, {self.hop_ms}")
        if not 0.0 < self.reference_percentile <= 100.0:
            raise ValueError(f"reference_percentile must be in (0, 100]; got {self.reference_percentile}")


@dataclass
class AudioSegment:
    """One segment of a file: samples [start, end) at the file's `sample_rate`, `wave` mono float32 (end-start,)."""

    start: int
    end: int
    sample_rate: int
    wave: np.ndarray

    @property
    def start_seconds(self) -> float:
        return self.start / self.sample_rate

    @property
    def end_seconds(self) -> float:
        return self.end / self.sample_rate


def _frame_shape(sample_rate: int, cfg: SegmentConfig) -> tuple[int, int]:
    """(frame length, hop) in samples."""
    return max(1, round(cfg.frame_ms * sample_rate / 1000)), max(1, round(cfg.hop_ms * sample_rate / 1000))


def _to_db(energy: np.ndarray) -> np.ndarray:
    return np.maximum(10.0 * np.log10(np.maximum(energy, 1e-30)), _FLOOR_DB)


def _energy_db(read: Callable[[int, int], np.ndarray], n_samples: int, frame: int, hop: int) -> np.ndarray:
    """Frame energies in dB, (n_frames,), frame i covering samples [i * hop, i * hop + frame).

    `read(start, stop)` returns samples [start, stop) as a 1-D array; it is called once per block of
    frames. A signal shorter than one frame is one frame over all its samples; an empty one has no frames.
    """
    if n_samples == 0:
        return np.empty(0)
    if n_samples < frame:
        x = read(0, n_samples).astype(np.float64)
        return _to_db(np.array([np.dot(x, x) / n_samples]))
    n_frames = 1 + (n_samples - frame) // hop
    energy = np.empty(n_frames)
    for first in range(0, n_frames, _BLOCK_FRAMES):
        last = min(n_frames, first + _BLOCK_FRAMES)
        chunk = read(first * hop, (last - 1) * hop + frame)
        frames = np.lib.stride_tricks.sliding_window_view(chunk, frame)[::hop]  # (last - first, frame)
        energy[first:last] = np.einsum("ij,ij->i", frames, frames, dtype=np.float64) / frame
    return _to_db(energy)


def frame_energy_db(wave: np.ndarray, sample_rate: int, cfg: SegmentConfig = SegmentConfig()) -> np.ndarray:
    """Energy of each analysis frame of a mono wave (num_samples,) in dB (mean square), (n_frames,)."""
    frame, hop = _frame_shape(sample_rate, cfg)
    return _energy_db(lambda start, stop: wave[start:stop], len(wave), frame, hop)


def _pauses(energy_db: np.ndarray, cfg: SegmentConfig) -> tuple[np.ndarray, np.ndarray]:
    """Pauses as (starts, ends) frame indices, end exclusive, in increasing order."""
    if len(energy_db) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    threshold = np.percentile(energy_db, cfg.reference_percentile) + cfg.threshold_db
    quiet = np.concatenate(([False], energy_db < threshold, [False])).astype(np.int8)
    edges = np.diff(quiet)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    min_frames = max(1, math.ceil((cfg.min_pause_ms - cfg.frame_ms) / cfg.hop_ms) + 1)
    keep = ends - starts >= min_frames
    return starts[keep], ends[keep]


def _next_cut(
    start: int,
    energy_db: np.ndarray,
    pauses: tuple[np.ndarray, np.ndarray],
    frame: int,
    hop: int,
    min_len: int,
    max_len: int,
) -> int:
    """Sample index of the cut that ends the segment beginning at sample `start` (rule 3 of the module)."""
    half = frame // 2
    # frames whose centre f * hop + half lies in [start + min_len, start + max_len]
    f_lo = max(0, -((half - start - min_len) // hop))
    f_hi = min(len(energy_db), (start + max_len - half) // hop + 1)
    starts, ends = pauses
    i_lo, i_hi = np.searchsorted(ends, f_lo, side="right"), np.searchsorted(starts, f_hi, side="left")
    if f_lo >= f_hi or i_lo >= i_hi:
        return start + max_len
    lengths = (ends - starts)[i_lo:i_hi]
    best = i_lo + len(lengths) - 1 - int(np.argmax(lengths[::-1]))
    a, b = max(int(starts[best]), f_lo), min(int(ends[best]), f_hi)
    return (a + int(np.argmin(energy_db[a:b]))) * hop + half


def _segments_from_energy(
    energy_db: np.ndarray, n_samples: int, sample_rate: int, cfg: SegmentConfig
) -> list[tuple[int, int]]:
    """Contiguous (start, end) sample spans covering [0, n_samples), cut by the module's rule."""
    if n_samples == 0:
        return []
    frame, hop = _frame_shape(sample_rate, cfg)
    max_len = max(1, round(cfg.max_seconds * sample_rate))
    min_len = max(1, round(cfg.min_seconds * sample_rate))
    pauses = _pauses(energy_db, cfg)
    bounds = [0]
    while True:
        cut = _pause_cut(bounds[-1], energy_db, pauses, frame, hop, min_len, max_len, n_samples, cfg)
        if cut is None and n_samples - bounds[-1] <= max_len:
            break
        if cut is None:
            cut = _next_cut(bounds[-1], energy_db, pauses, frame, hop, min_len, max_len)
        bounds.append(cut)
    bounds.append(n_samples)
    return list(zip(bounds[:-1], bounds[1:]))


def _pause_cut(
    start: int,
    energy_db: np.ndarray,
    pauses: tuple[np.ndarray, np.ndarray],
    frame: int,
    hop: int,
    min_len: int,
    max_len: int,
    n_samples: int,
    cfg: SegmentConfig,
) -> int | None:
    """The sample of the `pause_cut_ms` cut after `start` (module docstring); None when there is none."""
    if cfg.pause_cut_ms <= 0:
        return None
    half = frame // 2
    long_enough = max(1, math.ceil((cfg.pause_cut_ms - cfg.frame_ms) / cfg.hop_ms) + 1)
    starts, ends = pauses
    for i in range(int(np.searchsorted(starts, (start + min_len - half) / hop, side="left")), len(starts)):
        a, b = int(starts[i]), int(ends[i])
        if b - a < long_enough:
            continue
        cut = (a + int(np.argmin(energy_db[a:b]))) * hop + half
        return None if cut - start > max_len or n_samples - cut < min_len else cut
    return None


def find_segments(wave: np.ndarray, sample_rate: int, cfg: SegmentConfig = SegmentConfig()) -> list[tuple[int, int]]:
    """Cuts a mono wave (num_samples,) at pauses into segments of at most `cfg.max_seconds`.

    Returns (start, end) sample indices, end exclusive: contiguous, in order, covering the whole wave
    (`np.concatenate([wave[s:e] for s, e in segments])` equals `wave`); [] for an empty wave. The cut rule
    is in the module docstring.
    """
    if wave.ndim != 1:
        raise ValueError(f"expected a mono wave of shape (num_samples,); got shape {wave.shape}")
    return _segments_from_energy(frame_energy_db(wave, sample_rate, cfg), len(wave), sample_rate, cfg)


def voiced_span(wave: np.ndarray, sample_rate: int, cfg: SegmentConfig = SegmentConfig()) -> tuple[int, int] | None:
    """Samples [start, end) from the first to the last voiced frame of a mono wave (num_samples,); None when
    no frame is voiced. A frame is voiced when its energy is at least `speech_floor_db` and not quiet by
    the module's rule 2 (taken over this wave)."""
    energy = frame_energy_db(wave, sample_rate, cfg)
    if len(energy) == 0:
        return None
    threshold = max(np.percentile(energy, cfg.reference_percentile) + cfg.threshold_db, cfg.speech_floor_db)
    voiced = np.flatnonzero(energy >= threshold)
    if len(voiced) == 0:
        return None
    frame, hop = _frame_shape(sample_rate, cfg)
    return int(voiced[0]) * hop, min(len(wave), int(voiced[-1]) * hop + frame)


def iter_file_segments(path: str | os.PathLike, cfg: SegmentConfig = SegmentConfig()) -> Iterator[AudioSegment]:
    """Segments of an audio file by `find_segments`'s rule, reading the file in blocks.

    The file is read twice, block by block: once for the frame energies, once for the segments as they are
    yielded, so memory stays bounded by a segment whatever the file's length. Channels are averaged to
    mono; samples are at the file's own rate (resample before feature extraction when it is not 16 kHz).
    """
    with open_audio(path) as f:
        sample_rate, n_samples = f.samplerate, f.frames

        def read(start: int, stop: int) -> np.ndarray:
            try:
                with quiet_decoder():
                    f.seek(start)
                    wave = f.read(stop - start, dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError) as e:
                raise decode_error(path, e) from None
            return wave.mean(axis=1, dtype=np.float32)

        frame, hop = _frame_shape(sample_rate, cfg)
        energy_db = _energy_db(read, n_samples, frame, hop)
        for start, end in _segments_from_energy(energy_db, n_samples, sample_rate, cfg):
            yield AudioSegment(start, end, sample_rate, read(start, end))
