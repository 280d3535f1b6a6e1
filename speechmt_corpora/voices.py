"""Speech synthesis back ends for the mini corpora: espeak-ng, pico2wave (SVOX Pico), MBROLA and flite voices.

A `Speaker` is one voice with one speed and pitch setting; `synthesize` turns a sentence into a trimmed,
peak-normalised float32 waveform at the requested sample rate, or raises TTSError with the reason.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt.audio import resample
from speechmt_corpora.common import SynthError

TTS_TIMEOUT_S = 60.0
TRIM_THRESHOLD = 0.01  # relative to the peak: -40 dB
TRIM_MARGIN_S = 0.05
PEAK = 0.8
MIN_PEAK = 1e-3  # an output quieter than this is silence, not speech
ESPEAK_SPEEDS = (140, 155, 170)  # words per minute
ESPEAK_PITCHES = (35, 50, 65)  # 0-99
PICO_RATES = (92, 100, 108)  # percent of the normal rate, applied by resampling (pitch moves with it)
FLITE_RATES = (90, 100, 110)  # percent of the normal rate (flite's duration_stretch is its inverse)
FLITE_PITCHES = (88, 100, 114)  # percent of the voice's mean F0 (FLITE_F0)
FLITE_F0 = {"kal": 105, "kal16": 105, "awb": 110, "rms": 100, "slt": 170}  # Hz, about each voice's own mean


class TTSError(RuntimeError):
    """One sentence that a voice could not speak; the message is the reason counted in the summary."""


@dataclass(frozen=True)
class Voice:
    """A synthesis voice: `engine` is espeak-ng, pico2wave, mbrola (run through espeak-ng) or flite."""

    engine: str
    name: str
    gender: str
    package: str


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker: a voice with a speed (wpm, or percent for pico and flite) and a pitch (0-99, or
    percent of the voice's mean F0 for flite)."""

    voice: Voice
    speed: int
    pitch: int

    @property
    def label(self) -> str:
        """A readable name, e.g. `espeak-ng:en-us+f3:s155:p50` or `pico2wave:en-US:r108`."""
        if self.voice.engine == "pico2wave":
            return f"pico2wave:{self.voice.name}:r{self.speed}"
        if self.voice.engine == "flite":
            return f"flite:{self.voice.name}:r{self.speed}:p{self.pitch}"
        return f"{self.voice.engine}:{self.voice.name}:s{self.speed}:p{self.pitch}"

    @property
    def client_id(self) -> str:
        """A Common Voice style speaker hash (128 hex digits) of the voice setting."""
        return hashlib.sha512(self.label.encode("utf-8")).hexdigest()


def _espeak(name: str, gender: str) -> Voice:
    """An espeak-ng voice (language plus optional `+variant`)."""
    return Voice("espeak-ng", name, gender, "espeak-ng")


def _pico(name: str) -> Voice:
    """A pico2wave language voice (all are female)."""
    return Voice("pico2wave", name, "female", "libttspico-utils")


def _mbrola(name: str, gender: str) -> Voice:
    """An MBROLA voice used as `espeak-ng -v mb-xxN`."""
    return Voice("mbrola", f"mb-{name}", gender, f"mbrola-{name}")


def _flite(name: str, gender: str) -> Voice:
    """A voice built into Debian's flite (kal: 8 kHz diphones; kal16, awb, rms, slt: 16 kHz)."""
    return Voice("flite", name, gender, "flite")


VOICES: dict[str, tuple[Voice, ...]] = {
    "en": (
        _espeak("en-us", "male"),
        _espeak("en-gb", "male"),
        _espeak("en-us+f3", "female"),
        _espeak("en-gb+m3", "male"),
        _espeak("en-us+m7", "male"),
        _espeak("en-us+f4", "female"),
        _espeak("en-gb-x-rp+f2", "female"),
        _pico("en-US"),
        _pico("en-GB"),
        _mbrola("us1", "female"),
        _mbrola("us2", "male"),
        _mbrola("us3", "male"),
        _flite("kal", "male"),
        _flite("kal16", "male"),
        _flite("awb", "male"),
        _flite("rms", "male"),
        _flite("slt", "female"),
    ),
    "de": (
        _pico("de-DE"),
        _mbrola("de2", "male"),
        _mbrola("de6", "male"),
        _espeak("de", "male"),
        _espeak("de+f2", "female"),
        _espeak("de+m3", "male"),
        _espeak("de+f4", "female"),
    ),
    "es": (
        _pico("es-ES"),
        _espeak("es", "male"),
        _espeak("es+f3", "female"),
        _espeak("es-419", "male"),
        _espeak("es+m2", "male"),
        _espeak("es-419+f4", "female"),
    ),
    # CoVoST-mini's other sources (speechmt_corpora.languages): pico where it speaks the language, else espeak-ng
    "fr": (
        _pico("fr-FR"),
        _espeak("fr-fr", "male"),
        _espeak("fr-fr+f3", "female"),
        _espeak("fr-be", "male"),
        _espeak("fr-fr+m3", "male"),
        _espeak("fr-ch+f4", "female"),
    ),
    "it": (
        _pico("it-IT"),
        _espeak("it", "male"),
        _espeak("it+f3", "female"),
        _espeak("it+m3", "male"),
        _espeak("it+f4", "female"),
    ),
    "pt": (
        _espeak("pt-br", "male"),
        _espeak("pt-br+f3", "female"),
        _espeak("pt", "male"),
        _espeak("pt+f4", "female"),
        _espeak("pt-br+m3", "male"),
    ),
    "nl": (_espeak("nl", "male"), _espeak("nl+f3", "female"), _espeak("nl+m3", "male"), _espeak("nl+f4", "female")),
    "ru": (_espeak("ru", "male"), _espeak("ru+f3", "female"), _espeak("ru+m3", "male"), _espeak("ru+f4", "female")),
    "ca": (_espeak("ca", "male"), _espeak("ca+f3", "female"), _espeak("ca+m3", "male"), _espeak("ca+f4", "female")),
}


def find_voice(lang: str, name: str) -> Voice:
    """The voice of `lang` named `name` (e.g. `kal`, or `flite:kal` with its engine). Raises SynthError."""
    found = [v for v in VOICES[lang] if name in (v.name, voice_label(v))]
    if len(found) != 1:
        choices = ", ".join(voice_label(v) for v in VOICES[lang])
        raise SynthError(f"voice {name!r}: {'ambiguous' if found else 'no such'} {lang} voice; one of {choices}")
    return found[0]


def voice_label(voice: Voice) -> str:
    """`engine:name`, e.g. flite:kal: a voice without its speed and pitch."""
    return f"{voice.engine}:{voice.name}"


def other_voices(lang: str, held_out: Voice | None) -> tuple[Voice, ...]:
    """The voices of `lang` without the held-out one (all of them when it is None)."""
    return tuple(v for v in VOICES[lang] if v != held_out)


def draw_speaker(lang: str, rng: np.random.Generator, voices: tuple[Voice, ...] | None = None) -> Speaker:
    """A seeded speaker of `lang`: a voice drawn uniformly (from `voices`, default every voice of `lang`),
    then a speed and a pitch setting."""
    voices = VOICES[lang] if voices is None else voices
    voice = voices[rng.integers(len(voices))]
    if voice.engine == "pico2wave":
        return Speaker(voice, speed=int(rng.choice(PICO_RATES)), pitch=0)
    if voice.engine == "flite":
        return Speaker(voice, speed=int(rng.choice(FLITE_RATES)), pitch=int(rng.choice(FLITE_PITCHES)))
    return Speaker(voice, speed=int(rng.choice(ESPEAK_SPEEDS)), pitch=int(rng.choice(ESPEAK_PITCHES)))


def _command(speaker: Speaker, text: str, wav: Path) -> tuple[list[str], str | None]:
    """The command line and its stdin text for one synthesis into `wav`."""
    if speaker.voice.engine == "pico2wave":
        return ["pico2wave", "-l", speaker.voice.name, "-w", str(wav), "--", text], None
    if speaker.voice.engine == "flite":
        f0 = FLITE_F0.get(speaker.voice.name, 110) * speaker.pitch / 100
        return [
            "flite",
            "-voice",
            speaker.voice.name,
            "--setf",
            f"duration_stretch={100 / speaker.speed:.3f}",
            "--setf",
            f"int_f0_target_mean={f0:.0f}",
            "-o",
            str(wav),
            "-t",
            text,
        ], None
    return [
        "espeak-ng",
        "-v",
        speaker.voice.name,
        "-s",
        str(speaker.speed),
        "-p",
        str(speaker.pitch),
        "-w",
        str(wav),
        "--stdin",
    ], text


def _run_tts(speaker: Speaker, text: str, wav: Path) -> tuple[np.ndarray, int]:
    """Runs the engine and reads its output as float32 mono; (wave (T,), sample_rate)."""
    cmd, stdin = _command(speaker, text, wav)
    wav.unlink(missing_ok=True)
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=TTS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TTSError(f"{speaker.voice.engine} timed out after {TTS_TIMEOUT_S:.0f} s") from None
    except OSError as e:
        raise TTSError(f"{speaker.voice.engine} could not run ({e.strerror})") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise TTSError(f"{speaker.voice.engine} exit {proc.returncode}: {first[:100]}")
    try:
        wave, sr = sf.read(wav, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise TTSError(f"{speaker.voice.engine} wrote unreadable audio ({e})") from None
    return wave.mean(axis=1), sr


def trim(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """Cuts leading and trailing silence (below -40 dB of the peak), keeping a 50 ms margin. (T,) -> (T',)."""
    loud = np.flatnonzero(np.abs(wave) >= TRIM_THRESHOLD * np.abs(wave).max())
    margin = int(TRIM_MARGIN_S * sample_rate)
    return wave[max(0, loud[0] - margin) : min(len(wave), loud[-1] + 1 + margin)]


def synthesize(speaker: Speaker, text: str, sample_rate: int, workdir: Path) -> np.ndarray:
    """Speaks `text`: trimmed, peak-normalised float32 mono at `sample_rate`. Raises TTSError."""
    wave, sr = _run_tts(speaker, text, workdir / "tts.wav")
    if wave.size == 0 or not np.isfinite(wave).all() or np.abs(wave).max() < MIN_PEAK:
        raise TTSError(f"{speaker.voice.engine} produced no speech")
    if speaker.voice.engine == "pico2wave" and speaker.speed != 100:
        wave = resample(wave, sr, round(sr * 100 / speaker.speed))
    wave = trim(resample(wave, sr, sample_rate), sample_rate)
    return (wave * (PEAK / np.abs(wave).max())).astype(np.float32)


def _tools(voice: Voice) -> list[tuple[str, str]]:
    """(program, Debian package) pairs that a voice needs."""
    if voice.engine == "pico2wave":
        return [("pico2wave", "libttspico-utils")]
    if voice.engine == "mbrola":
        return [("espeak-ng", "espeak-ng"), ("mbrola", "mbrola")]
    if voice.engine == "flite":
        return [("flite", "flite")]
    return [("espeak-ng", "espeak-ng")]


def check_voices(lang: str, workdir: Path) -> None:
    """Raises SynthError naming the Debian package to install when a voice of `lang` does not speak."""
    for voice in VOICES[lang]:
        for tool, package in _tools(voice):
            if shutil.which(tool) is None:
                raise SynthError(f"{tool} not found: install the Debian package {package}")
        probe = (
            Speaker(voice, speed=100, pitch=0)
            if voice.engine == "pico2wave"
            else Speaker(voice, speed=100, pitch=100)
            if voice.engine == "flite"
            else Speaker(voice, speed=ESPEAK_SPEEDS[1], pitch=ESPEAK_PITCHES[1])
        )
        try:
            synthesize(probe, "Hello.", 16000, workdir)
        except TTSError as e:
            raise SynthError(
                f"voice {voice.name} of {voice.engine} does not speak ({e}): install the Debian package {voice.package}"
            ) from None
