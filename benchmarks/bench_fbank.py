"""Feature extraction throughput: speechmt's fbank against torchaudio.compliance.kaldi.fbank, same clips.

Throughput is audio seconds per wall second in this one process (torch threads as set by --threads);
both extractors run over the same decoded clips, alternately, `--repeats` times; medians are reported and
the features are checked to be equal (max abs diff against torchaudio's float64 path).

    python benchmarks/bench_fbank.py [--manifest data/mustc-en-de/dev.jsonl] [--repeats 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from speechmt.audio import fbank, read_audio
from speechmt.data.manifest import read_manifest

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets"


def load_clips(manifest: str | None, limit: int) -> list[np.ndarray]:
    """Decoded 16 kHz clips: a manifest's segments, or the committed MuST-C replica's segments."""
    if manifest is None:
        manifests = []
        from speechmt.data.mustc import read_mustc_split

        for split in ("train", "dev", "tst-COMMON"):
            manifests += [r for r in read_mustc_split(ASSETS / "mustc", "de", split) if hasattr(r, "audio")]
        records = manifests
    else:
        records = read_manifest(manifest)
    return [read_audio(r.audio, r.offset, r.duration or None) for r in records[:limit]]


def time_pass(fn, clips: list[np.ndarray]) -> float:
    start = time.perf_counter()
    for c in clips:
        fn(c)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torchaudio.compliance.kaldi as kaldi

    torch.set_num_threads(args.threads)
    clips = load_clips(args.manifest, args.limit)
    audio_s = sum(len(c) for c in clips) / 16000

    def ours(c):
        return fbank(c)

    def ref(c, dtype=torch.float32):
        return kaldi.fbank(torch.from_numpy(c).to(dtype)[None] * 32768, num_mel_bins=80, dither=0.0)

    diff = max(float(np.abs(ours(c) - ref(c, torch.float64).float().numpy()).max()) for c in clips)
    diff32 = max(float(np.abs(ours(c) - ref(c).numpy()).max()) for c in clips)
    ours_t, ref_t = [], []
    for _ in range(args.repeats):
        ours_t.append(time_pass(ours, clips))
        ref_t.append(time_pass(ref, clips))
    o, r = statistics.median(ours_t), statistics.median(ref_t)
    print(f"clips: {len(clips)}, audio: {audio_s:.1f} s, threads: {args.threads}, repeats: {args.repeats}")
    print(f"max abs diff vs torchaudio float64: {diff:.2e}; vs torchaudio float32: {diff32:.2e}")
    print(f"speechmt fbank:   {audio_s / o:10.0f} audio s / s  (median {o * 1000:.1f} ms)")
    print(f"torchaudio kaldi: {audio_s / r:10.0f} audio s / s  (median {r * 1000:.1f} ms)")
    print(f"ratio (speechmt / torchaudio throughput): {r / o:.2f}x")


if __name__ == "__main__":
    main()
