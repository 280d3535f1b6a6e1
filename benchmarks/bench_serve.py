"""`speechmt serve` under load, on the loopback address: N concurrent clients against one client at a time, and
the same load with 10 % bad uploads mixed in; then the server's RSS after 100 and after 1,000 requests of one kind.

    python benchmarks/bench_serve.py                          # the bundled model and examples/*.flac
    python benchmarks/bench_serve.py --model M --clients 8 --requests 40 --repeats 3 --rss-requests 1000

The server is started as its own process (`speechmt serve`), so its RSS is its own (read from /proc). Each
phase is bounded in requests and in time (--phase-timeout). Throughput is audio seconds answered per wall
second; latency is each request's time from sending to its answer (p50/p95/p99 over all of a phase's repeats);
throughput is the median over --repeats. A good request is right when its text is what the same clip gave when it
was the server's only request. A bad upload (not audio, empty, a truncated file, an unknown language, a bad
format) must get a 4xx with a one-line JSON error. The memory phase sends 1,000 requests of the clips' first
second at beam 1 (so that it fits in minutes on 2 cores) and reads the server's RSS after its 100th and its last.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

ROOT = Path(__file__).parents[1]


@dataclass
class Clip:
    """An upload: its name, bytes, audio seconds, extra form fields, and whether it is a bad one (4xx expected)."""

    name: str
    data: bytes
    seconds: float
    fields: dict = field(default_factory=dict)
    bad: bool = False


@dataclass
class Outcome:
    clip: str
    status: int
    seconds: float
    text: str | None
    one_line: bool


@dataclass
class Phase:
    """A phase's figures."""

    name: str
    clients: int
    requests: int
    throughput: float  # audio seconds per wall second (median over repeats), good requests only
    throughputs: list[float]
    p50: float
    p95: float
    p99: float
    failed_good: int = 0
    wrong_good: int = 0
    bad_not_4xx: int = 0
    bad_not_one_line: int = 0
    status_counts: dict = field(default_factory=dict)


class Server:
    """`speechmt serve` in a process of its own on a free port."""

    def __init__(self, args: argparse.Namespace):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [
            sys.executable,
            "-m",
            "speechmt",
            "serve",
            "--port",
            str(self.port),
            "--max-batch",
            str(args.max_batch),
            "--max-wait-ms",
            str(args.max_wait_ms),
            "--max-queue",
            "64",
            "--log-level",
            "warning",
        ] + (["--model", args.model] if args.model else [])
        self.proc = subprocess.Popen(cmd, cwd=ROOT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench_serve: the server did not start")
            time.sleep(0.5)

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def load_clips(paths: list[Path], first_seconds: float | None = None) -> list[Clip]:
    clips = []
    for p in paths:
        wave, rate = sf.read(p, dtype="float32")
        if first_seconds:
            wave = wave[: int(first_seconds * rate)]
        buf = io.BytesIO()
        sf.write(buf, wave, rate, format="FLAC")
        clips.append(Clip(p.name, buf.getvalue(), len(wave) / rate))
    return clips


def bad_clips(good: Clip) -> list[Clip]:
    """One of each kind of bad upload."""
    return [
        Clip("notes.txt", b"these are not audio samples\n" * 40, 0, bad=True),
        Clip("empty.flac", b"", 0, bad=True),
        Clip("truncated.flac", good.data[:200], 0, bad=True),
        Clip(good.name, good.data, 0, {"language": "xx"}, bad=True),
        Clip(good.name, good.data, 0, {"response_format": "docx"}, bad=True),
    ]


def send(client: httpx.Client, url: str, clip: Clip) -> Outcome:
    start = time.perf_counter()
    try:
        r = client.post(
            f"{url}/v1/audio/translations",
            files={"file": (clip.name, clip.data)},
            data={"model": "speechmt", **clip.fields},
            timeout=600,
        )
    except httpx.HTTPError as e:
        return Outcome(clip.name, -1, time.perf_counter() - start, f"{type(e).__name__}", False)
    elapsed = time.perf_counter() - start
    text = r.json().get("text") if r.status_code == 200 else None
    return Outcome(clip.name, r.status_code, elapsed, text, r.text.count("\n") == 1 and r.text.endswith("\n"))


def run_load(
    url: str, plan: list[Clip], clients: int, timeout: float, on_done=None
) -> tuple[list[tuple[Clip, Outcome]], float]:
    """Sends `plan` from `clients` threads, each taking the next clip when its last answer came; returns each
    (clip, outcome) and the wall seconds."""
    lock, queue, results = threading.Lock(), list(reversed(plan)), []
    deadline = time.monotonic() + timeout

    def worker() -> None:
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                with lock:
                    if not queue:
                        return
                    clip = queue.pop()
                outcome = send(client, url, clip)
                with lock:
                    results.append((clip, outcome))
                    if on_done:
                        on_done(len(results))

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return results, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def phase(
    name: str,
    url: str,
    plans: list[list[Clip]],
    clients: int,
    reference: dict[str, str] | None,
    timeout: float,
    on_done=None,
) -> Phase:
    """Runs each plan (one per repeat) and sums up: throughput over good requests, latency, faults."""
    throughputs, latencies, everything = [], [], []
    for plan in plans:
        results, wall = run_load(url, plan, clients, timeout, on_done)
        good = [(c, o) for c, o in results if not c.bad and o.status == 200]
        throughputs.append(sum(c.seconds for c, _ in good) / wall)
        latencies += [o.seconds for c, o in results if not c.bad]
        everything += results
    ph = Phase(
        name,
        clients,
        len(everything),
        statistics.median(throughputs),
        throughputs,
        percentile(latencies, 50),
        percentile(latencies, 95),
        percentile(latencies, 99),
    )
    for clip, o in everything:
        ph.status_counts[str(o.status)] = ph.status_counts.get(str(o.status), 0) + 1
        if clip.bad:
            ph.bad_not_4xx += not 400 <= o.status < 500
            ph.bad_not_one_line += not o.one_line
        elif o.status != 200:
            ph.failed_good += 1
        elif reference is not None and o.text != reference[clip.name]:
            ph.wrong_good += 1
    print(
        f"bench_serve: {name}: {ph.throughput:.2f} audio s/s, p50 {ph.p50:.2f} s, p99 {ph.p99:.2f} s",
        file=sys.stderr,
        flush=True,
    )
    return ph


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint (default: the bundled model)")
    p.add_argument("--clips", nargs="+", type=Path, default=sorted((ROOT / "examples").glob("*.flac")))
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=40, help="requests per repeat of each load phase")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--rss-requests", type=int, default=1000, help="requests of the memory phase (RSS after its 100th and its last)"
    )
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--max-wait-ms", type=float, default=30.0)
    p.add_argument("--phase-timeout", type=float, default=1800.0, help="seconds a phase's repeat may take")
    p.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = p.parse_args()

    clips = load_clips(args.clips)
    load_at_start = os.getloadavg()
    server = Server(args)
    rss = {}

    def count(done: int) -> None:  # the memory phase's requests: RSS read after the 100th and the last
        if done in (100, args.rss_requests):
            rss[done] = server.rss_mib()

    try:
        rss["loaded"] = server.rss_mib()
        reference = {}
        for c in clips:  # each clip alone: the text every later answer must have
            with httpx.Client() as client:
                reference[c.name] = send(client, server.url, c).text
        plan = [clips[i % len(clips)] for i in range(args.requests)]
        one = phase("1 client", server.url, [plan] * args.repeats, 1, reference, args.phase_timeout)
        many = phase(
            f"{args.clients} clients", server.url, [plan] * args.repeats, args.clients, reference, args.phase_timeout
        )
        bad = bad_clips(clips[0])
        mixed = [bad[i // 10 % len(bad)] if i % 10 == 9 else clips[i % len(clips)] for i in range(2 * args.requests)]
        faults = phase(
            f"{args.clients} clients, 10 % bad", server.url, [mixed], args.clients, reference, args.phase_timeout
        )
        rss["before memory phase"] = server.rss_mib()
        short = load_clips(args.clips, first_seconds=1.0)
        for c in short:
            c.fields = {"beam": "1"}
        memory = phase(
            "memory (1 s clips, beam 1)",
            server.url,
            [[short[i % len(short)] for i in range(args.rss_requests)]],
            args.clients,
            None,
            args.phase_timeout,
            count,
        )
        health = httpx.get(f"{server.url}/health").json()
    finally:
        server.stop()
    report = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "clips": {c.name: c.seconds for c in clips},
        "reference": reference,
        "phases": [asdict(x) for x in (one, many, faults, memory)],
        "speedup": many.throughput / one.throughput,
        "rss_mib": rss,
        "health": health,
    }
    if 100 in rss and args.rss_requests in rss:
        report["rss_growth"] = rss[args.rss_requests] / rss[100] - 1
    print(json.dumps(report, indent=1, ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print("\n| phase | requests | throughput (audio s/s) | p50 s | p95 s | p99 s | failed / wrong good | bad not 4xx |")
    print("|---|---|---|---|---|---|---|---|")
    for x in (one, many, faults, memory):
        print(
            f"| {x.name} | {x.requests} | {x.throughput:.2f} | {x.p50:.2f} | {x.p95:.2f} | {x.p99:.2f} | "
            f"{x.failed_good} / {x.wrong_good} | {x.bad_not_4xx} |"
        )
    print(f"\nspeedup {report['speedup']:.2f}x; RSS {json.dumps({k: round(v) for k, v in rss.items()})} MiB")


if __name__ == "__main__":
    main()
