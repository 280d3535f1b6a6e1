"""Scale: a simulated MuST-C-sized training split, its per-rank index memory, batches and loader throughput.

Builds in a temporary folder a split shaped like MuST-C En-De's training set (`--utterances` 250,000 segments,
durations ~6 s on average and at most 30 s, English transcripts of ~20 words and ~110 characters, German targets
a little longer), its manifest, a global CMVN, a SentencePiece model of its texts and a SPARSE fbank80 feature
store (the .bin file is sized with truncate: it holds ~20 GB of zeros and costs no disk). Then, each figure in
fresh subprocesses (one per run, `--runs` runs, medians):

- index: load time and RSS increase of one process (= one rank) for the manifest + feature index, the compact
  one (`load_split`: RecordTable + FeatureStore) against the former list of Records + ids list + id dict;
- batches per epoch at max_tokens 40000 (one rank, and per rank of 8);
- loader: utterances/s through `make_loader` with 0, 2 and 4 workers under fork and spawn, reading what
  training reads (stored fbank, global CMVN, SpecAugment, both texts tokenized; the frames it reads put in the
  page cache first, as after a first epoch), after a warm-up, each run bounded by `--seconds`, with the CPU milliseconds per utterance of all its processes and of the main one, and a
  spawned worker's heap; the former reads and handoff (frames through a memory map, each tensor of each batch in
  a new shared-memory file, the manifest table pickled whole into a spawned worker) with 2 workers as the reference of the same run; and, as the ceiling
  of any two-way parallelism on this machine at that moment (others' programs share its CPUs), two one-process
  loaders side by side, reading different batches;
- prepare: speechmt's feature extraction (`prepare_split`: decode, fbank, store, CMVN statistics) on the
  repository's real clips, per audio hour, extrapolated to 400 h.

Prints a markdown table (and writes it to `--out`). One process per figure keeps the RSS and start costs honest.

    python benchmarks/bench_scale.py [--utterances 250000] [--runs 3] [--seconds 8] [--out /tmp/scale.md]
    python benchmarks/bench_scale.py --split /tmp/scale_split --workers 0 2 --prepare-passes 0  # the loader part
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REAL_AUDIO = sorted(ROOT.glob("examples/*.flac")) + sorted(ROOT.glob("tests/assets/mustc/en-de/data/*/wav/*.wav"))
MAX_TOKENS = 40000
MUSTC_HOURS = 400


def words(rng: np.random.Generator, n: int, letters: str, mean_len: float) -> np.ndarray:
    """A vocabulary of n made-up words with about mean_len letters each."""
    lengths = np.clip(rng.poisson(mean_len - 1, n) + 1, 1, 18)
    pool = np.array(list(letters))
    return np.array(["".join(rng.choice(pool, k)) for k in lengths])


def texts(rng: np.random.Generator, vocab: np.ndarray, counts: np.ndarray) -> list[str]:
    """One sentence of counts[i] Zipf-drawn words of `vocab` per utterance, capitalised, with a full stop."""
    ranks = np.minimum(rng.zipf(1.3, int(counts.sum())) - 1, len(vocab) - 1)
    flat, ends = vocab[ranks], np.cumsum(counts)
    return [" ".join(flat[e - c : e]).capitalize() + "." for c, e in zip(counts.tolist(), ends.tolist())]


def build_split(folder: Path, n: int, seed: int = 0) -> dict:
    """Writes folder/train.jsonl, folder/fbank80/train.{bin (sparse), index.npz}, global_cmvn.npz, spm.model."""
    from speechmt.data.manifest import Record, write_manifest
    from speechmt.tokenizers.sentencepiece import TokenizerConfig, train_tokenizer

    rng = np.random.default_rng(seed)
    seconds = np.clip(rng.gamma(2.5, 2.4, n), 0.3, 29.9)  # mean 6 s, MuST-C's 400 h / ~230k-250k segments
    frames = (1 + (seconds * 16000 - 400) // 160).astype(np.int64)
    src = texts(rng, words(rng, 20000, "abcdefghijklmnoprstuwy", 4.6), np.maximum(rng.poisson(3.3 * seconds), 1))
    tgt = texts(rng, words(rng, 30000, "abcdefghiklmnorstuwzäöüß", 5.8), np.maximum(rng.poisson(3.1 * seconds), 1))
    talk = np.arange(n) // 100
    offsets = np.concatenate([[0.0], np.cumsum(seconds + 0.5)[:-1]])
    offsets -= offsets[talk * 100]
    records = (
        Record(
            f"ted_{t}_{i % 100}",
            f"wav/ted_{t}.wav",
            round(float(o), 2),
            round(float(s), 2),
            int(f),
            a,
            b,
            f"spk.{t}",
            "en",
            "de",
        )
        for i, (t, o, s, f, a, b) in enumerate(zip(talk, offsets, seconds, frames, src, tgt))
    )
    write_manifest(folder / "train.jsonl", records)
    store = folder / "fbank80"
    store.mkdir()
    with open(store / "train.bin", "wb") as f:
        f.truncate(int(frames.sum()) * 80 * 2)  # float16 frames: a hole, no disk
    ids = np.array([f"ted_{t}_{i % 100}" for i, t in enumerate(talk)])
    np.savez(
        store / "train.index.npz",
        ids=ids,
        offsets=np.concatenate([[0], np.cumsum(frames)[:-1]]),
        lengths=frames,
        dim=80,
        dtype="float16",
    )
    np.savez(folder / "global_cmvn.npz", mean=np.zeros(80), std=np.ones(80))
    sample = rng.choice(n, min(n, 20000), replace=False)
    train_tokenizer(
        [src[i] for i in sample] + [tgt[i] for i in sample],
        TokenizerConfig(vocab_size=2000, lang_tags=("<en>", "<de>")),
    ).save(folder / "spm.model")
    return {
        "hours": float(seconds.sum() / 3600),
        "frames": int(frames.sum()),
        "src_chars": float(np.mean([len(s) for s in src])),
        "tgt_chars": float(np.mean([len(t) for t in tgt])),
        "src_words": float(np.mean([s.count(" ") + 1 for s in src])),
        "manifest_mb": (folder / "train.jsonl").stat().st_size / 2**20,
        "store_gb": (store / "train.bin").stat().st_size / 1e9,
        "store_disk_mb": (store / "train.bin").stat().st_blocks * 512 / 2**20,
    }


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident (VmRSS) or peak resident (VmHWM) memory in MiB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def former_index(folder: Path) -> tuple:
    """The index as it was before RecordTable: a list of Records, the store's ids list and id -> position dict."""
    from speechmt.data.manifest import read_manifest

    records = read_manifest(folder / "train.jsonl")
    with np.load(folder / "fbank80" / "train.index.npz") as idx:
        ids = [str(i) for i in idx["ids"]]
        offsets, lengths = idx["offsets"], idx["lengths"]
    return records, ids, {u: i for i, u in enumerate(ids)}, offsets, lengths


def child_index(folder: Path, kind: str) -> dict:
    """Load time and RSS increase of the manifest + feature index, `kind` "table" (now) or "list" (before)."""
    import pickle

    from speechmt.data.dataset import load_split

    gc.collect()
    base, start = rss_mb(), time.perf_counter()
    index = load_split(folder, "train") if kind == "table" else former_index(folder)
    seconds = time.perf_counter() - start
    gc.collect()
    out = {"seconds": seconds, "rss_mb": rss_mb() - base, "peak_mb": rss_mb("VmHWM") - base}
    if kind == "table":
        from multiprocessing.reduction import ForkingPickler

        import speechmt.data.loader  # noqa: F401  (registers the RecordTable reduction for workers)

        out["pickled_mb"] = len(pickle.dumps(index)) / 2**20
        out["worker_kib"] = len(ForkingPickler.dumps(index)) / 2**10
    return out


def speech_dataset(folder: Path):
    """What training reads: stored fbank with global CMVN and SpecAugment (lb), both texts tokenized."""
    from speechmt.audio import SpecAugmentConfig
    from speechmt.data.dataset import SpeechDataset, StoredFeatures, global_cmvn, load_split
    from speechmt.frontend import FbankFrontend
    from speechmt.tokenizers.sentencepiece import Tokenizer

    records, store = load_split(folder, "train")
    tok = Tokenizer.load(folder / "spm.model")
    return SpeechDataset(
        records,
        StoredFeatures(store, FbankFrontend(cmvn=global_cmvn(folder))),
        tok,
        tok,
        src_tag="<en>",
        tgt_tag="<de>",
        spec_augment=SpecAugmentConfig.policy("lb"),
        seed=1,
    )


def child_loader(
    folder: Path, workers: int, context: str, seconds: float, warmup: int, handoff: str = "slots", seed: int = 1
) -> dict:
    """Utterances per second through make_loader over one window of about `seconds`, after `warmup` batches
    (which include the workers' start); the CPU milliseconds per utterance of all processes and of the main one;
    the largest anonymous memory (heap) of a worker at the end. `handoff` "former": batches handed over as before
    the slot pool (each tensor of each batch in a new shared-memory file) and the manifest table pickled whole
    into each spawned worker, for comparison in the same run. `seed`: the batch order's (warm_store has put the frames
    of its first batches in the page cache)."""
    import torch

    from speechmt.data.batching import BucketBatchSampler
    from speechmt.data.loader import make_loader

    torch.set_num_threads(1)  # as each worker: one core per process
    ds = speech_dataset(folder)
    loader = make_loader(
        ds,
        BucketBatchSampler(ds.sizes, MAX_TOKENS, seed=seed),
        pad_id=1,
        num_workers=workers,
        device=torch.device("cpu"),
        context=context,
    )
    if handoff == "former":
        from multiprocessing.reduction import ForkingPickler

        from speechmt.data.manifest import RecordTable

        loader.collate_fn = functools.partial(former_collate, pad_id=1)
        loader.worker_init_fn = former_worker_init
        ForkingPickler._extra_reducers.pop(RecordTable, None)
    start = time.perf_counter()
    batches = iter(loader)
    for _ in range(warmup):
        next(batches)
    first = time.perf_counter() - start
    pids = [w.pid for w in getattr(batches, "_workers", [])]  # torch's worker processes
    utts, start, cpu, main = 0, time.perf_counter(), cpu_seconds(pids), time.process_time()
    while time.perf_counter() - start < seconds:
        utts += len(next(batches))
    rate, cpu, main = utts / (time.perf_counter() - start), cpu_seconds(pids) - cpu, time.process_time() - main
    anonymous = max((anonymous_mb(pid) for pid in pids), default=0.0)
    del batches, loader  # the workers stop here, not in the interpreter's exit
    gc.collect()
    return {
        "utt_per_s": rate,
        "first_s": first,
        "cpu_ms_per_utt": 1000 * cpu / utts,
        "main_ms_per_utt": 1000 * main / utts,
        "worker_anon_mb": anonymous,
    }


def former_collate(examples: list, pad_id: int):
    """The collate of the loader before the slot pool: in a worker, each tensor of the batch in a new
    shared-memory file."""
    import torch
    from torch.utils.data import get_worker_info

    from speechmt.data.dataset import collate

    def fresh(specs):
        return [
            torch.empty(0, dtype=torch.uint8)
            .set_(torch.UntypedStorage._new_shared(math.prod(shape) * dtype.itemsize))
            .view(dtype)
            .view(shape)
            for shape, dtype in specs
        ]

    return collate(examples, pad_id, None if get_worker_info() is None else fresh)


def former_worker_init(worker_id: int) -> None:
    """A worker of the loader before positional reads: the feature store's frames read through a memory map."""
    from speechmt.data.features import FeatureStore
    from speechmt.data.loader import end_as_forked

    FeatureStore.get = mapped_get
    end_as_forked(worker_id)


def mapped_get(store, i: int):
    """FeatureStore.get as it was: frames (T, dim) float32 through a memory map of the store's file."""
    import numpy as np

    if getattr(store, "_map", None) is None:
        store._map = np.memmap(store._bin, dtype=store.dtype, mode="r", shape=(int(store.lengths.sum()), store.dim))
    start = int(store.offsets[i])
    return np.asarray(store._map[start : start + int(store.lengths[i])], dtype=np.float32)


def anonymous_mb(pid: int) -> float:
    """A process's anonymous memory (its heap: not the pages of mapped files or of shared memory) in MiB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Anonymous line in /proc/{pid}/smaps_rollup")


def child_pair(folder: Path, seconds: float, warmup: int) -> dict:
    """Two one-process loaders side by side: what any two-way parallelism can get from this machine right now
    (the ceiling of 2 workers; other programs may be using its CPUs). They read different batches (seeds 1 and
    2), as two workers do."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                "loader",
                str(folder),
                "0",
                "fork",
                str(seconds),
                str(warmup),
                "slots",
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return {
        "utt_per_s": sum(r["utt_per_s"] for r in results),
        "first_s": max(r["first_s"] for r in results),
        "cpu_ms_per_utt": statistics.mean(r["cpu_ms_per_utt"] for r in results),
    }


def warm_store(folder: Path, utterances: int, seeds: tuple[int, ...] = (1, 2)) -> float:
    """Reads into the page cache the frames of the first `utterances` utterances of the batch order of each seed
    (what the loader runs read), as training finds them after its first epoch where the RAM holds the store;
    returns the seconds it took. Read cold, the sparse file's pages cost ~2 CPU ms per utterance in the kernel
    and do not get faster with more processes on this machine: that would be the figure, not the loader."""
    from speechmt.data.batching import BucketBatchSampler
    from speechmt.data.manifest import read_split

    start = time.perf_counter()
    sizes = read_split(folder, "train").column("n_frames")
    with np.load(folder / "fbank80" / "train.index.npz") as idx:
        offsets, lengths, row = idx["offsets"], idx["lengths"], int(idx["dim"]) * np.dtype(str(idx["dtype"])).itemsize
    chosen = []
    for seed in seeds:
        order = np.concatenate(BucketBatchSampler(sizes, MAX_TOKENS, seed=seed).rank_batches())
        chosen.append(order[:utterances])
    chosen = np.unique(np.concatenate(chosen))  # in file order
    buffer = bytearray(int(lengths[chosen].max()) * row)
    with open(folder / "fbank80" / "train.bin", "rb", buffering=0) as f:
        for i in chosen.tolist():
            f.seek(int(offsets[i]) * row)
            f.readinto(memoryview(buffer)[: int(lengths[i]) * row])
    return time.perf_counter() - start


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by this process and the processes `pids`."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in pids]
    return time.process_time() + sum(int(s[11]) + int(s[12]) for s in stats) / ticks


def child_prepare(out: Path, passes: int, jobs: int) -> dict:
    """Wall seconds of prepare_split over `passes` passes of the repository's real clips, and their hours."""
    from speechmt.audio import CMVNStats
    from speechmt.data.manifest import Record
    from speechmt.data.prepare import PrepareConfig, _pool, prepare_split

    records = [
        Record(f"{p}_{f.stem}", str(f), 0.0, 0.0, 0, "", "", "", "en", "de") for p in range(passes) for f in REAL_AUDIO
    ]
    cfg = PrepareConfig(jobs=jobs)
    start = time.perf_counter()
    with _pool(jobs) as pool:
        summary = prepare_split("train", records, out, cfg, True, CMVNStats(80), pool)
    return {"seconds": time.perf_counter() - start, "hours": summary.hours}


def run_child(args: list[str], timeout: float) -> dict:
    """One figure in a fresh interpreter (one thread per process): its JSON line, or {} when it timed out."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    try:
        res = subprocess.run(
            [sys.executable, __file__, "--child", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {}
    if res.returncode:
        raise RuntimeError(f"child {args} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def medians(children: dict, runs: int, timeout: float) -> dict:
    """Each child's figures, median over `runs` fresh processes; the children take turns (A B C A B C ...), so
    that a drift of the machine's speed falls on all alike. Timed-out runs are left out ({}: all timed out)."""
    results: dict = {key: [] for key in children}
    for _ in range(runs):
        for key, args in children.items():
            results[key] += [r for r in [run_child(args, timeout)] if r]
    return {key: {k: statistics.median(r[k] for r in rs) for k in rs[0]} if rs else {} for key, rs in results.items()}


def batches_per_epoch(folder: Path) -> dict:
    from speechmt.data.batching import BucketBatchSampler
    from speechmt.data.manifest import read_split

    sizes = read_split(folder, "train").column("n_frames")
    start = time.perf_counter()
    one = len(BucketBatchSampler(sizes, MAX_TOKENS, seed=1))
    eight = len(BucketBatchSampler(sizes, MAX_TOKENS, seed=1, rank=0, world_size=8))
    return {
        "one": one,
        "eight": eight,
        "seconds": time.perf_counter() - start,
        "utts": round(len(sizes) / one, 1),
        "padding": 1 - int(sizes.sum()) / (one * MAX_TOKENS),
    }


def table(split: dict, index: dict, epoch: dict, loader: dict, prepare: dict, args) -> str:
    """The figures as a markdown table."""
    rows = [
        (
            "split",
            f"{args.utterances:,} utterances, {split['hours']:.0f} h, {split['src_words']:.1f} words / "
            f"{split['src_chars']:.0f} chars (en), {split['tgt_chars']:.0f} chars (de); manifest "
            f"{split['manifest_mb']:.0f} MiB, sparse store {split['store_gb']:.1f} GB "
            f"({split['store_disk_mb']:.1f} MiB on disk)",
        )
    ]
    for kind, name in (("table", "compact (RecordTable + FeatureStore)"), ("list", "former (list of Records + dict)")):
        r = index[kind]
        rows.append((f"index, {name}", f"+{r['rss_mb']:.0f} MiB RSS (peak +{r['peak_mb']:.0f}), {r['seconds']:.1f} s"))
    rows.append(
        (
            "manifest + feature index pickled",
            f"{index['table']['pickled_mb']:.0f} MiB; as a spawned worker "
            f"receives it (the table's columns in shared memory): {index['table']['worker_kib']:.1f} KiB",
        )
    )
    rows.append(
        (
            f"batches per epoch, max_tokens {MAX_TOKENS}",
            f"{epoch['one']:,} on 1 rank ({epoch['utts']} utt/batch, {epoch['padding']:.1%} padding), "
            f"{epoch['eight']:,} per rank on 8; {epoch['seconds']:.1f} s",
        )
    )
    base = loader.get((0, "fork", "slots"), {}).get("utt_per_s")
    ceiling = loader.get((0, "pair", "slots"), {}).get("utt_per_s")
    for (workers, context, handoff), r in loader.items():
        name = (
            "two one-process loaders side by side (the ceiling)"
            if context == "pair"
            else f"loader, {workers} workers"
            + (f", {context}" if workers else "")
            + (
                ", former reads and handoff (frames through a memory map, a new shared-memory file per tensor, the table pickled whole)"
                * (handoff == "former")
            )
        )
        if not r:
            rows.append((name, "timed out"))
            continue
        ratio = f", {r['utt_per_s'] / base:.2f}x one process" if base and (workers or context == "pair") else ""
        if ceiling and workers:
            ratio += f" ({r['utt_per_s'] / ceiling:.0%} of the ceiling)"
        main = f" (main process {r['main_ms_per_utt']:.3f})" if workers else ""
        heap = f"; a worker's heap {r['worker_anon_mb']:.0f} MiB" if context == "spawn" else ""
        rows.append(
            (
                name,
                f"{r['utt_per_s']:,.0f} utt/s{ratio}; {r['cpu_ms_per_utt']:.2f} CPU ms/utt{main}; first "
                f"{args.warmup} batches {r['first_s']:.1f} s{heap}",
            )
        )
    for jobs, r in prepare.items():
        per_hour = r["seconds"] / r["hours"]
        rows.append(
            (
                f"prepare, {jobs} job{'s' * (jobs > 1)}",
                f"{per_hour:.0f} s per audio hour (real clips, "
                f"{r['hours'] * 60:.1f} min of audio): {MUSTC_HOURS} h in {per_hour * MUSTC_HOURS / 3600:.1f} h",
            )
        )
    return "| figure | value |\n| --- | --- |\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=250000)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per figure (medians)")
    parser.add_argument("--seconds", type=float, default=8.0, help="the timed window of a loader run")
    parser.add_argument("--warmup", type=int, default=4, help="untimed batches first (workers' start included)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--contexts", nargs="+", default=["fork", "spawn"])
    parser.add_argument(
        "--former-workers",
        type=int,
        nargs="*",
        default=[2],
        help="worker counts also run with the former handoff, for comparison (none: leave out)",
    )
    parser.add_argument(
        "--warm-utterances",
        type=int,
        default=40000,
        help="utterances of each batch order whose frames are read into the page cache first",
    )
    parser.add_argument(
        "--split",
        type=Path,
        help="the simulated split's folder: built there once, then reused (default: a temporary folder)",
    )
    parser.add_argument(
        "--prepare-passes",
        type=int,
        default=60,
        help="passes over the real clips to prepare (0: leave preparation out)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        folder = args.split or Path(tmp)
        if args.split and (folder / "train.jsonl").exists():
            split = json.loads((folder / "split.json").read_text())
        else:
            folder.mkdir(parents=True, exist_ok=True)
            split = build_split(folder, args.utterances)
            (folder / "split.json").write_text(json.dumps(split))
            print(f"split built in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        index = medians({kind: ["index", str(folder), kind] for kind in ("table", "list")}, args.runs, 300)
        epoch = batches_per_epoch(folder)
        configs = [(w, c, "slots") for c in args.contexts for w in args.workers if w or c == args.contexts[0]]
        configs += [(w, c, "former") for c in args.contexts for w in args.former_workers]
        children = {
            (w, c, h): ["loader", str(folder), str(w), c, str(args.seconds), str(args.warmup), h] for w, c, h in configs
        }
        children[(0, "pair", "slots")] = ["pair", str(folder), str(args.seconds), str(args.warmup)]
        warm = warm_store(folder, args.warm_utterances)
        print(f"page cache warmed in {warm:.0f} s", file=sys.stderr)
        loader = medians(children, args.runs, 120 + args.seconds)
        prepare = (
            medians(
                {jobs: ["prepare", f"{tmp}/prepared{jobs}", str(args.prepare_passes), str(jobs)] for jobs in (1, 2)},
                1,
                300,
            )
            if args.prepare_passes
            else {}
        )
    text = table(split, index, epoch, loader, prepare, args)
    text += (
        f"\n`python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, "
        f"{time.perf_counter() - start:.0f} s in all\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text)


def child(argv: list[str]) -> None:
    kind, folder = argv[0], Path(argv[1])
    if kind == "index":
        result = child_index(folder, argv[2])
    elif kind == "loader":
        result = child_loader(
            folder, int(argv[2]), argv[3], float(argv[4]), int(argv[5]), *argv[6:7], *map(int, argv[7:8])
        )
    elif kind == "pair":
        result = child_pair(folder, float(argv[2]), int(argv[3]))
    else:
        result = child_prepare(folder, int(argv[2]), int(argv[3]))
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
