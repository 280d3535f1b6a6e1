"""An uploaded file -> the chunks the batcher decodes, and their texts -> a Translation, as `translate` makes them
for a file (speechmt.decoding.translate): the same cuts at pauses, resampling per chunk, voiced spans and joined
texts, so that a request's result is what `speechmt translate` gives for the same file."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

from speechmt.audio import SAMPLE_RATE, quiet_decoder, resample
from speechmt.decoding.segment import SegmentConfig, find_segments, voiced_span
from speechmt.decoding.translate import Translation
from speechmt.serve.errors import bad_request


@dataclass
class Chunk:
    """One decodable piece of an upload: [start, end) seconds and its 16 kHz wave (n,)."""

    start: float
    end: float
    wave: np.ndarray


@dataclass
class Upload:
    """An upload cut into chunks: those long enough to decode, the voiced span of each, the audio's length."""

    source: str
    audio_seconds: float = 0.0
    chunks: list[Chunk] = field(default_factory=list)
    voiced: list[tuple[float, float]] = field(default_factory=list)


def decode_upload(data: bytes, name: str) -> tuple[np.ndarray, int]:
    """The file's samples, channels averaged: (mono float32 (n,), sample rate). 400 for bytes that are not audio
    libsndfile reads (wav, flac, ogg, mp3), no samples, or NaN/Inf samples."""
    if not data:
        raise bad_request("file", f"{name}: empty file")
    try:
        with quiet_decoder(), sf.SoundFile(io.BytesIO(data)) as f:
            wave = f.read(dtype="float32", always_2d=True)
            rate = f.samplerate
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        reason = re.sub(r"^Error opening <[^>]*>: ", "", (str(e).strip().splitlines() or [type(e).__name__])[0])
        raise bad_request(
            "file", f"{name}: not audio in a format the server reads (wav, flac, ogg, mp3) or damaged ({reason})"
        ) from None
    if wave.shape[0] == 0:
        raise bad_request("file", f"{name}: no samples")
    mono = wave.mean(axis=1, dtype=np.float32)
    if not np.isfinite(mono).all():
        raise bad_request("file", f"{name}: non-finite samples (NaN or Inf)")
    return mono, rate


def cut_upload(wave: np.ndarray, rate: int, name: str, segment: SegmentConfig, min_samples: int) -> Upload:
    """A mono wave (n,) at `rate` cut at pauses into 16 kHz chunks (translate's rule for a file: cut at the file's
    rate, each chunk resampled); chunks shorter than `min_samples` are counted, not decoded. 400 when no chunk is
    long enough to translate."""
    upload = Upload(name)
    for s, e in find_segments(wave, rate, segment):
        start, end = s / rate, e / rate
        chunk = resample(wave[s:e], rate, SAMPLE_RATE)
        upload.audio_seconds += end - start
        if len(chunk) >= min_samples:
            span = voiced_span(chunk, SAMPLE_RATE, segment) or (0, 0)  # (0, 0): silence
            upload.voiced.append((start + span[0] / SAMPLE_RATE, start + span[1] / SAMPLE_RATE))
            upload.chunks.append(Chunk(start, end, chunk))
    if not upload.chunks:
        raise bad_request(
            "file",
            f"{name}: {upload.audio_seconds * 1000:.4g} ms of audio, shorter than the model's "
            f"smallest input ({min_samples * 1000 / SAMPLE_RATE:g} ms); nothing to translate",
        )
    return upload


def assemble(upload: Upload, nbests: list[list[str]]) -> Translation:
    """The Translation of an upload from each chunk's n-best texts (best first), in chunk order."""
    result = Translation(upload.source, audio_seconds=upload.audio_seconds, voiced=list(upload.voiced))
    for chunk, nbest in zip(upload.chunks, nbests):
        result.chunks.append((chunk.start, chunk.end))
        result.chunk_texts.append(nbest[0])
        result.text = f"{result.text} {nbest[0]}".strip()
    result.nbest = nbests[0] if len(nbests) == 1 else []
    return result
