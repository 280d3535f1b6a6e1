"""Translation speed and memory: real-time factor at batch 1 and 16 on a prepared split's segments, and
the peak memory of translating one long file (cut at pauses), each measured in a fresh process.

    python benchmarks/bench_translate.py --model exp/st/checkpoint_avg.safetensors --data data/en-de --split tst-COMMON
    python benchmarks/bench_translate.py --model M --long-file talk.wav        # peak memory of one long file

RTF = wall seconds of translate() / audio seconds (lower is faster); medians over --repeats runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import soundfile as sf
import torch


def rtf(args) -> None:
    from speechmt import load_model, translate
    from speechmt.audio import read_audio
    from speechmt.data.manifest import read_manifest

    lm = load_model(args.model)
    records = read_manifest(f"{args.data}/{args.split}.jsonl")[: args.limit]
    waves = [read_audio(r.audio, r.offset, r.duration) for r in records]
    audio = sum(len(w) for w in waves) / 16000
    for batch in args.batch_sizes:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            translate(lm, waves, beam=args.beam, batch_size=batch)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        print(
            f"beam {args.beam}, batch {batch:3d}: RTF {t / audio:.4f} ({audio:.0f} s of audio in {t:.1f} s, "
            f"{len(waves)} segments, threads {torch.get_num_threads()})"
        )


def make_long_file(sources: list[str], minutes: float, path: str) -> None:
    """Concatenates the source files (16 kHz) with short pauses until `minutes` long."""
    pieces, total, i = [], 0, 0
    while total < minutes * 60 * 16000:
        w, sr = sf.read(sources[i % len(sources)], dtype="float32")
        pieces += [w, np.zeros(8000, np.float32)]
        total += len(w) + 8000
        i += 1
    sf.write(path, np.concatenate(pieces)[: int(minutes * 60 * 16000)], 16000, subtype="PCM_16")


def peak_memory(model: str, path: str | None) -> dict:
    """Peak RSS (MiB) of a fresh process that loads the model and, when `path` is given, translates it."""
    code = (
        "import resource, sys, json; from speechmt import load_model, translate; "
        f"lm = load_model({model!r}); "
        f"r = translate(lm, [{path!r}], beam=5)[0] if {path is not None} else None; "
        "print(json.dumps({'peak_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "
        "'chunks': len(r.chunks) if r else 0, 'audio_s': r.audio_seconds if r else 0}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data")
    parser.add_argument("--split", default="tst-COMMON")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long-file", help="an audio file to measure peak memory on")
    parser.add_argument("--make-long-file", nargs="+", help="16 kHz wavs to concatenate into --long-file")
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    if args.data:
        rtf(args)
    if args.long_file:
        if args.make_long_file:
            make_long_file(args.make_long_file, args.minutes, args.long_file)
        base, long = peak_memory(args.model, None), peak_memory(args.model, args.long_file)
        print(
            f"peak RSS: {base['peak_mib']:.0f} MiB after loading the model; {long['peak_mib']:.0f} MiB translating "
            f"{long['audio_s'] / 60:.1f} min in {long['chunks']} chunks (+{long['peak_mib'] - base['peak_mib']:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
