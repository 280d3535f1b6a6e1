"""Simultaneous translation of one long stream: memory and speed against the stream's length.

    python benchmarks/simultaneous_stream.py --data data/full/en-de --split tst-COMMON --seconds 30 60 120 \
        --policy wait-k --k 3 --repeats 3 --threads 1 --json OUT.json

Each length is a real clip sequence (the split's segments in manifest order joined by 0.3 s of silence,
`bench_memory_decoding.clip_sequence`) streamed through `speechmt.decoding.simultaneous.translate_stream` in
blocks of one decision step, each run in a fresh process (the default model unless --model). Reported per
length, medians over --repeats:

- peak RSS while streaming, above the RSS of the loaded and warmed-up model (the kernel's high-water mark,
  reset before streaming through /proc/self/clear_refs), and its ratio to the shortest length's: flat memory
  keeps the ratio near 1;
- RTF: compute seconds (wall clock) / audio seconds, and CPU RTF: this process's CPU seconds / audio seconds
  (on a machine whose cores other jobs share, the wall clock counts their turns too);
- the real-time backlog: the audio arrives in real time, step n at (n + 1) * step; a step starts when it has
  arrived and the previous one is done, and the backlog is how long after its arrival its computation ends.
  The largest over the stream stays below a step or two when the policy keeps up, and grows with the length
  when it does not;
- StreamLAAL, computation-unaware and -aware (`stream_laal_s`, `stream_laal_ca_s`; Papi et al. 2024, as the
  IWSLT simultaneous track scores a stream: speechmt.evaluation.stream_latency): the output words are
  re-segmented to the reference translations (tgt_text) of the segments wholly inside the stream by a minimal
  word edit distance alignment, and each segment's LAAL counts its words' delays from the segment's start, its
  duration as the source length. The aware one as SimulEval defines it: the source read plus all compute time
  spent so far. A segment the cut runs through has no whole reference: it is left out, and so are the words
  written after its audio began to be read (its start; the end of the stream when no segment is cut), which may
  translate it. The aware one grows with the stream (all compute so far counts, as if the whole stream had been
  waiting at the start); `stream_laal_rt_s` is the computation-aware StreamLAAL of a real-time stream instead:
  each word emitted when the step that read its source finished under real-time arrival (the backlog's
  timing). The JSON also says how many segments were scored and how many got no word (skipped). This is
  the latency to read: `laal_s` and `laal_ca_s` (JSON only) take the whole stream as one utterance with the
  output's word count as reference, which says little for a stream of many sentences.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def finish_times(step_seconds: float, compute: list[float]) -> list[float]:
    """When each step's computation ends (s from the stream's start) when step n arrives at (n + 1) *
    `step_seconds` and starts once it has arrived and the previous one is done (module docstring)."""
    done, out = 0.0, []
    for n, c in enumerate(compute):
        done = max(done, (n + 1) * step_seconds) + c
        out.append(done)
    return out


def backlog(step_seconds: float, compute: list[float]) -> float:
    """The largest real-time backlog (s) of steps arriving every `step_seconds` whose computations take
    `compute` seconds each, in order (module docstring)."""
    finish = finish_times(step_seconds, compute)
    return max((f - (n + 1) * step_seconds for n, f in enumerate(finish)), default=0.0)


def real_time_elapsed(delays: list[float], step_ms: float, compute: list[float]) -> list[float]:
    """Each word's emission time (ms) in real time: the end of the computation of the step that read its
    source (the step whose arrival is the word's delay; the stream's last step for words written at its end)."""
    finish = finish_times(step_ms / 1000, compute)
    last = len(finish) - 1
    return [finish[min(last, max(0, math.ceil(d / step_ms) - 1))] * 1000 for d in delays]


def stream_scores(
    words: list[str],
    delays: list[float],
    elapsed: list[float],
    real_time: list[float],
    segments: list[tuple[float, float, str]],
    source_ms: float,
) -> dict:
    """StreamLAAL (s) of a stream's output `words` against its whole `segments` (start ms, duration ms,
    tgt_text), without the words written after the audio of a segment cut short began to be read (module
    docstring): computation-unaware, aware with `elapsed` (SimulEval's) and with `real_time` (emission times)."""
    from bench_memory_decoding import PAUSE_SECONDS

    from speechmt.evaluation.stream_latency import stream_laal

    if len(words) != len(delays):
        raise RuntimeError(f"{len(words)} output words but {len(delays)} word delays")
    if not segments:  # the cut runs through the first segment
        return {
            "stream_laal_s": None,
            "stream_laal_ca_s": None,
            "stream_laal_rt_s": None,
            "stream_segments": 0,
            "stream_skipped": 0,
        }
    start, duration, _ = segments[-1]
    cut = min(start + duration + PAUSE_SECONDS * 1000, source_ms)  # the next segment's start, or the end
    keep = sum(d <= cut for d in delays)  # delays never decrease: the first `keep` words
    out = stream_laal(words[:keep], delays[:keep], elapsed[:keep], segments)
    rt = stream_laal(words[:keep], delays[:keep], real_time[:keep], segments)["StreamLAAL_CA"]
    seconds = [None if v is None else v / 1000 for v in (out["StreamLAAL"], out["StreamLAAL_CA"], rt)]
    return {
        "stream_laal_s": seconds[0],
        "stream_laal_ca_s": seconds[1],
        "stream_laal_rt_s": seconds[2],
        "stream_segments": out["n"],
        "stream_skipped": out["skipped"],
    }


def one_run(args) -> dict:
    """Streams one clip sequence in this process: the numbers of one run."""
    import torch

    torch.set_num_threads(args.threads)
    from bench_memory_decoding import clip_sequence_segments

    from speechmt.decoding.simultaneous import SimultaneousConfig, translate_stream
    from speechmt.decoding.translate import load_model
    from speechmt.evaluation.latency import length_adaptive_average_lagging, word_delays
    from speechmt.pretrained import default_model_path

    lm = load_model(args.model or default_model_path())
    cfg = SimultaneousConfig(args.policy, args.k, args.step_ms, args.window, args.pause_after, tail_beam=args.tail_beam)
    wave, segments = clip_sequence_segments(args.data, args.split, args.seconds[0])
    translate_stream(lm, wave[: 2 * SAMPLE_RATE], cfg)  # warm-up: first calls allocate and pick kernels
    step = cfg.step_samples
    pulled: list[float] = []

    def blocks():
        for start in range(0, len(wave), step):
            pulled.append(time.perf_counter())
            yield wave[start : start + step]
        pulled.append(time.perf_counter())

    base = _rss_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        peak_field = "VmHWM"
    except OSError:
        peak_field = "VmRSS"  # no reset: ru_maxrss below counts the load too
    cpu = time.process_time()
    result = translate_stream(lm, blocks(), cfg)
    cpu = time.process_time() - cpu
    peak = _rss_kib(peak_field) if peak_field == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # the generator pulls block n + 1 once block n - 1 is processed (it holds one back to know the last):
    # the gaps between pulls are the steps' computations, the last one after the final pull
    compute = list(np.diff(pulled)[1:]) + [max(0.0, result.compute_ms / 1000 - (pulled[-1] - pulled[0]))]
    delays, elapsed = word_delays(result.events())
    return {
        "seconds": args.seconds[0],
        "peak_mib": (peak - base) / 1024,
        "loaded_mib": base / 1024,
        "rtf": result.compute_ms / result.source_ms,
        "cpu_rtf": cpu * 1000 / result.source_ms,
        "backlog_s": backlog(cfg.step_ms / 1000, compute),
        "step_p95_s": float(np.percentile(compute, 95)) if compute else 0.0,
        "laal_s": length_adaptive_average_lagging(delays, result.source_ms) / 1000 if delays else None,
        "laal_ca_s": length_adaptive_average_lagging(elapsed, result.source_ms) / 1000 if delays else None,
        "words": len(result.text.split()),
        **stream_scores(
            result.text.split(),
            delays,
            elapsed,
            real_time_elapsed(delays, cfg.step_ms, compute),
            segments,
            result.source_ms,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint (default: the bundled model)")
    parser.add_argument("--data", required=True, help="a prepared data folder (its manifests name the audio)")
    parser.add_argument("--split", default="tst-COMMON")
    parser.add_argument("--seconds", type=float, nargs="+", default=[30.0, 60.0, 120.0])
    parser.add_argument("--policy", default="wait-k")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--tail-beam", type=int, default=1, help="beam after each window's end (1: greedy)")
    parser.add_argument("--step-ms", type=float, default=400.0)
    parser.add_argument("--window", type=float, default=20.0, help="max_seconds of the re-encoding window")
    parser.add_argument(
        "--pause-after",
        type=float,
        default=6.0,
        help="pause_after_seconds: a window this long ends at a pause (0: only when full)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write the runs and medians here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process: one run
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args)))
        return
    runs: dict[float, list[dict]] = {s: [] for s in args.seconds}
    for _ in range(args.repeats):  # lengths alternate within each repeat
        for s in args.seconds:
            child = [a for a in sys.argv[1:] if a != "--one"]
            cmd = [sys.executable, __file__, *child, "--one", "--seconds", str(s)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs[s].append(json.loads(out.strip().splitlines()[-1]))
    medians = {
        s: {k: statistics.median(v) for k in rs[0] if (v := [r[k] for r in rs if r[k] is not None])}
        for s, rs in runs.items()
    }  # over the runs that have the value (StreamLAAL: some output)
    first = medians[args.seconds[0]]
    print(
        f"{args.policy} k={args.k}, tail beam {args.tail_beam}, step {args.step_ms:g} ms, window {args.window:g} s, "
        f"ends at a pause after {args.pause_after:g} s, {args.threads} thread(s), medians of {args.repeats} runs"
    )
    print(
        "| stream s | peak RSS above model MiB | x shortest | RTF | CPU RTF | max backlog s | p95 step s "
        "| StreamLAAL s | StreamLAAL CA s | StreamLAAL real time s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s, m in medians.items():
        print(
            f"| {s:g} | {m['peak_mib']:.0f} | {m['peak_mib'] / max(first['peak_mib'], 1e-9):.2f} | {m['rtf']:.3f} | "
            f"{m['cpu_rtf']:.3f} | {m['backlog_s']:.2f} | {m['step_p95_s']:.2f} | "
            f"{m.get('stream_laal_s', float('nan')):.2f} | {m.get('stream_laal_ca_s', float('nan')):.2f} | "
            f"{m.get('stream_laal_rt_s', float('nan')):.2f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": {k: v for k, v in vars(args).items() if k != "one"},
                    "runs": {str(s): r for s, r in runs.items()},
                    "medians": {str(s): m for s, m in medians.items()},
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
