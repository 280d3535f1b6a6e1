"""What Whisper's own search (the whisper_asr cascade's ASR: speechmt.decoding.transcribe) hears, and what it
costs, against how much padding its input gets: the clip padded to 30 s (Whisper's window, what whisper_asr
reads), to 15 s or 10 s (clips longer than that keep their length), or not at all. Greedy (or --beam) transcripts scored by WER (jiwer; lower-cased, punctuation dropped)
against the manifest's transcripts, and the seconds the encoder and search took, in one process.

    python benchmarks/whisper_window_wer.py --data /work/rs/DATA --split tst-REAL --windows 30 15 10 0 --out w.json
    python benchmarks/whisper_window_wer.py --data DATA --split test --language de --windows 15 --beam 5 --out b.json
"""

from __future__ import annotations

import argparse
import json
import re
import time

import jiwer
import torch

from speechmt.audio import read_audio
from speechmt.data.manifest import read_split
from speechmt.decoding.transcribe import SEARCH
from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel
from speechmt.hub import resolve_pretrained
from speechmt.models.encoders.whisper_asr import WHISPER_FRAMES, whisper_asr_encoder_from_hf
from speechmt.models.hf_whisper import load_hf_whisper, whisper_asr_prompt
from speechmt.tokenizers.whisper import WhisperTokenizer


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s']", " ", text.lower())).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--whisper", default="whisper-base")
    parser.add_argument("--language", default="en", help="the language Whisper transcribes (the source's)")
    parser.add_argument("--beam", type=int, default=1, help="1: whisper_asr's greedy search; more: its beam search")
    parser.add_argument("--windows", type=int, nargs="+", default=[30, 15, 10, 0], help="seconds; 0: the clip's length")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf = load_hf_whisper(args.whisper, {})
    asr = whisper_asr_encoder_from_hf(
        hf, hf.config.d_model, whisper_asr_prompt(hf, args.language), beam=args.beam, transcription=SEARCH
    ).eval()
    tokenizer = WhisperTokenizer.from_pretrained(resolve_pretrained(args.whisper))
    records = read_split(args.data, args.split)[: args.limit or None]
    padded = []
    for r in records:
        wave = read_audio(r.audio, offset=r.offset, duration=r.duration)
        padded.append((whisper_log_mel(wave, WhisperMelConfig(pad_seconds=30)), len(wave) // 160))
    refs = [normalise(r.src_text) for r in records]
    rows = []
    for window in args.windows:
        hyps, start = [], time.perf_counter()
        for mel, frames in padded:
            n = WHISPER_FRAMES if window >= 30 else max(frames, window * 100) if window else frames
            n = min(n + n % 2, WHISPER_FRAMES)
            with torch.no_grad():
                memory, lengths = asr.encoder.states(mel[None, :n], torch.tensor([n]))
                ids = SEARCH.tokens(asr, memory, lengths)
                hyps.append(normalise(tokenizer.decode(ids[0])))
        seconds = time.perf_counter() - start
        rows.append(
            {
                "window_s": window,
                "beam": args.beam,
                "wer": round(100 * jiwer.wer(refs, hyps), 2),
                "seconds": round(seconds, 1),
                "n": len(records),
            }
        )
        print(
            f"window {window or 'clip'} s: WER {rows[-1]['wer']:.1f}, {seconds:.1f} s for {len(records)} clips",
            flush=True,
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "data": args.data,
                    "split": args.split,
                    "whisper": args.whisper,
                    "language": args.language,
                    "beam": args.beam,
                    "threads": args.threads,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
