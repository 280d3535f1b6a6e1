"""Decoding time against utterance length: a model whose decoder attends to every acoustic state (the plain
Whisper ST model: 50 states a second) against one with a fixed-size memory (Chimera: M slots whatever the
length), on the same clips.

    python benchmarks/bench_memory_decoding.py --model exp/st_whisper_200/checkpoint_avg.safetensors \
        --model exp/chimera/checkpoint_last.safetensors --data data/full/en-de --split tst-COMMON \
        --seconds 5 10 20 30 --steps 40 --repeats 3 --json OUT.json

Each length is a real clip sequence: the split's segments concatenated (0.3 s pauses) and cut to that
length, one utterance per call (batch 1, beam --beam). Every model decodes exactly --steps tokens (min and
max length both set), so the time does not depend on what the weights say: a model trained for minutes
and a converged one cost the same, and the comparison is of the architectures alone. Reported per model
and length: the median over --repeats of translate() (encoder + search), of the encoder alone, and their
difference (search); the models alternate within each repeat. RTF = seconds / audio seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

SAMPLE_RATE = 16000


PAUSE_SECONDS = 0.3  # the silence between two segments of a clip sequence


def clip_sequence(data: str, split: str, seconds: float) -> np.ndarray:
    """The split's segments, in manifest order, joined by 0.3 s of silence and cut to `seconds`."""
    return clip_sequence_segments(data, split, seconds)[0]


def clip_sequence_segments(data: str, split: str, seconds: float) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """`clip_sequence`'s wave and, for each segment wholly inside it, (start ms in the wave, duration ms, its
    tgt_text); the segment the cut runs through, if any, is left out."""
    from speechmt.audio import read_audio
    from speechmt.data.manifest import read_manifest

    pause = int(PAUSE_SECONDS * SAMPLE_RATE)
    pieces, segments, total, want = [], [], 0, int(seconds * SAMPLE_RATE)
    for r in read_manifest(f"{data}/{split}.jsonl"):
        w = read_audio(r.audio, r.offset, r.duration)
        if total + len(w) <= want:
            segments.append((total * 1000 / SAMPLE_RATE, len(w) * 1000 / SAMPLE_RATE, r.tgt_text))
        pieces += [w, np.zeros(pause, np.float32)]
        total += len(w) + pause
        if total >= want:
            return np.concatenate(pieces)[:want].astype(np.float32), segments
    raise SystemExit(f"{data}/{split}.jsonl holds less than {seconds:g} s of audio")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(models: dict, wave: np.ndarray, args) -> dict[str, dict[str, float]]:
    """{model: {"total": s, "encoder": s, "search": s, "memory": decoder memory length}}, medians."""
    from speechmt import translate
    from speechmt.decoding.segment import SegmentConfig
    from speechmt.decoding.translate import encode_audio

    seg = SegmentConfig(max_seconds=len(wave) / SAMPLE_RATE)  # one chunk: the whole wave
    runs = {name: {"total": [], "encoder": []} for name in models}
    for lm in models.values():  # warm-up: first calls allocate and pick kernels
        translate(lm, [wave[: 2 * SAMPLE_RATE]], beam=args.beam, batch_size=1, min_len=2, max_len_b=2, max_len_a=0.0)
    for _ in range(args.repeats):
        for name, lm in models.items():
            with torch.inference_mode():
                runs[name]["encoder"].append(timed(lambda: encode_audio(lm, [wave])))
            runs[name]["total"].append(
                timed(
                    lambda: translate(
                        lm,
                        [wave],
                        beam=args.beam,
                        batch_size=1,
                        segment=seg,
                        min_len=args.steps,
                        max_len_b=args.steps,
                        max_len_a=0.0,
                    )
                )
            )
    out = {}
    for name, lm in models.items():
        with torch.inference_mode():
            memory = int(encode_audio(lm, [wave]).lengths[0])
        total, encoder = statistics.median(runs[name]["total"]), statistics.median(runs[name]["encoder"])
        out[name] = {"total": total, "encoder": encoder, "search": total - encoder, "memory": memory}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, help="checkpoint; give two or more")
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="tst-COMMON")
    p.add_argument("--seconds", type=float, nargs="+", default=[5.0, 10.0, 20.0, 30.0])
    p.add_argument("--steps", type=int, default=40, help="tokens every model decodes")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from speechmt import load_model

    models = {path: load_model(path) for path in args.model}
    results = []
    for seconds in args.seconds:
        wave = clip_sequence(args.data, args.split, seconds)
        for name, r in measure(models, wave, args).items():
            results.append({"model": name, "seconds": seconds, **r})
            print(
                f"{seconds:5.1f} s  memory {r['memory']:5d}  RTF {r['total'] / seconds:.4f}  encoder "
                f"{r['encoder']:.3f} s  search {r['search']:.3f} s  {name}",
                flush=True,
            )
    first = args.model[0]
    print("\n| seconds | " + " | ".join(f"RTF {m}" for m in args.model) + " | search time / first's |")
    print("|---|" + "---|" * (len(args.model) + 1))
    for seconds in args.seconds:
        rows = {r["model"]: r for r in results if r["seconds"] == seconds}
        ratios = ", ".join(f"{rows[m]['search'] / rows[first]['search']:.2f}" for m in args.model[1:])
        print(
            f"| {seconds:g} | " + " | ".join(f"{rows[m]['total'] / seconds:.4f}" for m in args.model) + f" | {ratios} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "threads": torch.get_num_threads(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
