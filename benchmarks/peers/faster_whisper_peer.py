"""Peer system: OpenAI Whisper base through faster-whisper (CTranslate2) on a prepared speechmt split.

Writes a peer hypotheses file that `speechmt research benchmark --peer FILE.json` scores next to speechmt models.
Runs in the peer environment (`make peers` builds .venv-peers), never in the project's .venv:

    .venv-peers/bin/python benchmarks/peers/faster_whisper_peer.py --data recipes/covost2/data/de-en \\
        --split test --out recipes/covost2/exp/peers/faster-whisper-base.test.json --beam 5 --threads 2

The model is loaded and the clips are read (and resampled to 16 kHz) before the clock starts;
decode_seconds is the wall time of decoding all clips, feature extraction included (notes add the process
CPU time, a steadier number on a shared machine).
Of speechmt it imports only the manifest reader (standard library only; no torch in this environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: speechmt is not installed here
from speechmt.data.manifest import ManifestError, iter_manifest  # noqa: E402  (standard library only)

SAMPLE_RATE = 16000
# Whisper base: 74M parameters, as listed in Table 1 of Radford et al. (2022), "Robust Speech Recognition
# via Large-Scale Weak Supervision" (the CTranslate2 model.bin does not expose a count).
WHISPER_BASE_PARAMS = 74_000_000
DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / ".venv-peers" / "whisper-base"
TASKS = {"translate": "st", "transcribe": "asr"}


class PeerError(Exception):
    """Bad input (data dir, split, manifest line, audio, model folder); the message names the file."""


@dataclass(frozen=True)
class Clip:
    """One manifest record's audio: file path (resolved), offset and duration in seconds (0.0 = to the end)."""

    id: str
    audio: str
    offset: float
    duration: float
    src_lang: str = ""


def read_clips(data_dir: Path, split: str) -> list[Clip]:
    """Reads DATA/SPLIT.jsonl (speechmt manifest records); relative audio paths are resolved against DATA."""
    if not data_dir.is_dir():
        raise PeerError(f"{data_dir}: data directory not found (prepare it with `speechmt data prepare`)")
    path = data_dir / f"{split}.jsonl"
    if not path.is_file():
        raise PeerError(f"{path}: split '{split}' not found in {data_dir}")
    try:
        records = list(iter_manifest(path))
    except ManifestError as e:  # names the file and line
        raise PeerError(str(e)) from None
    clips = [Clip(r.id, str(data_dir / r.audio), float(r.offset), float(r.duration), r.src_lang) for r in records]
    if not clips:
        raise PeerError(f"{path}: no records")
    return clips


def source_language(clips: list[Clip], given: str | None) -> str:
    """Whisper's language code for the clips: `given` (--language), else the one src_lang their manifest names;
    PeerError when it names none or several (Whisper told the wrong language translates nonsense)."""
    if given:
        return given
    langs = sorted({c.src_lang.split("-")[0] for c in clips if c.src_lang})
    if len(langs) != 1:
        named = "no source language" if not langs else "source languages " + ", ".join(langs)
        raise PeerError(f"the split's records name {named}; pass --language CODE (Whisper's)")
    return langs[0]


def slice_audio(wave: np.ndarray, offset: float, duration: float, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The samples [offset, offset + duration) of a mono wave (T,) -> (T',); duration 0.0 means to the end.

    Raises ValueError when the slice starts past the end or is empty.
    """
    start = int(round(offset * sample_rate))
    end = len(wave) if duration <= 0.0 else start + int(round(duration * sample_rate))
    if start >= len(wave):
        raise ValueError(f"offset {offset:.3f}s is past the end ({len(wave) / sample_rate:.3f}s)")
    piece = wave[start : min(end, len(wave))]
    if piece.size == 0:
        raise ValueError("empty slice")
    return piece


def load_waves(clips: list[Clip]) -> list[np.ndarray]:
    """Decodes each clip's file (any format PyAV reads, resampled to 16 kHz mono) and slices it.

    Consecutive clips of one file (talk segments) decode the file once. Returns float32 arrays (T,).
    """
    from faster_whisper import decode_audio

    waves, cached_path, cached = [], None, np.zeros(0, dtype=np.float32)
    for clip in clips:
        if clip.audio != cached_path:
            if not os.path.isfile(clip.audio):
                raise PeerError(f"{clip.audio}: audio file not found (record {clip.id})")
            try:
                cached, cached_path = decode_audio(clip.audio, sampling_rate=SAMPLE_RATE), clip.audio
            except Exception as e:  # PyAV raises several error types for undecodable input
                raise PeerError(f"{clip.audio}: cannot decode audio ({e})") from None
        try:
            waves.append(slice_audio(cached, clip.offset, clip.duration))
        except ValueError as e:
            raise PeerError(f"{clip.audio}: record {clip.id}: {e}") from None
    return waves


def load_model(model_dir: Path, compute_type: str, threads: int):
    """faster-whisper's WhisperModel from an assembled CTranslate2 folder, on the CPU."""
    if not (model_dir / "model.bin").is_file() or not (model_dir / "config.json").is_file():
        raise PeerError(f"{model_dir}: Whisper base model folder not assembled (run `make peers`)")
    from faster_whisper import WhisperModel

    return WhisperModel(str(model_dir), device="cpu", compute_type=compute_type, cpu_threads=threads, num_workers=1)


# Whisper's decoding is beam search at temperature 0, then sampling at rising temperatures where the output
# repeats itself (gzip compression ratio > 2.4) or is unlikely (mean log-prob < -1). Kinds of fallback:
# "full" is Whisper's (and faster-whisper's) default, "repetition" keeps only the first rule, "none" neither.
FALLBACKS = {
    "full": {
        "temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        "compression_ratio_threshold": 2.4,
        "log_prob_threshold": -1.0,
    },
    "repetition": {
        "temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        "compression_ratio_threshold": 2.4,
        "log_prob_threshold": None,
    },
    "none": {"temperature": (0.0,)},
}


def decode(model, waves: list[np.ndarray], task: str, language: str, beam: int, fallback: str) -> list[str]:
    """One hypothesis per wave: Whisper's segments joined; `fallback` is a key of FALLBACKS."""
    import ctranslate2

    ctranslate2.set_random_seed(0)  # the fallback's sampling
    hyps = []
    for i, wave in enumerate(waves, 1):
        segments, _ = model.transcribe(
            wave, language=language, task=task, beam_size=beam, vad_filter=False, **FALLBACKS[fallback]
        )
        hyps.append(" ".join(s.text.strip() for s in segments).strip())
        if i % 50 == 0:
            print(f"faster_whisper_peer: {i}/{len(waves)} clips", file=sys.stderr, flush=True)
    return hyps


def write_json(path: Path, obj: dict) -> None:
    """Writes obj as JSON atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> dict:
    """Loads the model and the clips, times decoding, and returns the peer hypotheses object."""
    clips = read_clips(Path(args.data), args.split)[: args.limit]
    args.language = source_language(clips, args.language)
    model = load_model(Path(args.model_dir), args.compute_type, args.threads)
    waves = load_waves(clips)
    start, cpu_start = time.perf_counter(), time.process_time()
    hyps = decode(model, waves, args.task, args.language, args.beam, args.fallback)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "system": f"faster-whisper base ({args.compute_type}{', transcribe' if args.task == 'transcribe' else ''})",
        "params": WHISPER_BASE_PARAMS,
        "task": TASKS[args.task],
        "split": args.split,
        "ids": [c.id for c in clips],
        "hypotheses": hyps,
        "decode_seconds": round(seconds, 3),
        "audio_seconds": round(sum(len(w) for w in waves) / SAMPLE_RATE, 3),
        "threads": args.threads,
        "device": "cpu",
        "notes": (
            f"beam {args.beam}, task={args.task}, language={args.language}, compute_type "
            f"{args.compute_type}, temperature fallback {args.fallback} (seed 0), no VAD, batch 1, "
            f"{args.threads} CPU threads, process CPU time {cpu_seconds:.1f} s; params 74M from the Whisper "
            f"paper (Table 1)"
        ),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="prepared data directory holding SPLIT.jsonl")
    p.add_argument("--split", required=True)
    p.add_argument("--out", required=True, help="peer hypotheses JSON to write")
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR), help="assembled CTranslate2 Whisper base")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--task", choices=tuple(TASKS), default="translate")
    p.add_argument(
        "--language", default=None, help="source language code (Whisper's; default: the manifest's src_lang)"
    )
    p.add_argument("--compute-type", default="int8", help="CTranslate2 compute type: int8, float32, ...")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--fallback",
        choices=tuple(FALLBACKS),
        default="repetition",
        help="when to sample again at higher temperature (see FALLBACKS); full = Whisper's default",
    )
    p.add_argument("--limit", type=int, default=None, help="decode only the first N records")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        peer = run(args)
    except PeerError as e:
        print(f"faster_whisper_peer: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(
            f"faster_whisper_peer: error: {e.name} is not installed here; run `make peers` and use "
            f".venv-peers/bin/python",
            file=sys.stderr,
        )
        return 2
    write_json(Path(args.out), peer)
    rtf = peer["decode_seconds"] / peer["audio_seconds"]
    print(
        f"{args.out}: {len(peer['ids'])} clips, {peer['audio_seconds']:.1f} s of audio decoded in "
        f"{peer['decode_seconds']:.1f} s (RTF {rtf:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
