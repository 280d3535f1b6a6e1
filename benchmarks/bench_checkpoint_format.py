"""Model files before and after the safe format: size and load time of the same weights as a pickled
torch.save file (how speechmt stored models before issue 17, loaded with weights_only=False) and as
speechmt's safetensors + JSON checkpoint. Medians of --runs loads each, interleaved, in one process.

    python benchmarks/bench_checkpoint_format.py OLD.pt [--runs 7]

OLD.pt is a pickled checkpoint you trust (e.g. `git show 4fcf0da^:speechmt/pretrained/mustc_mini_en_de.pt`);
it is converted with `speechmt import convert --trust` into a temporary folder first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from speechmt.checkpoint import load_checkpoint
from speechmt.training.convert import convert_pickled_checkpoint


def _seconds(load) -> float:
    start = time.perf_counter()
    load()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        new = Path(tmp) / "converted.safetensors"
        convert_pickled_checkpoint(args.old, new, trust=True)  # the user vouches for OLD.pt (see the docstring)
        pickled, safe = [], []
        for _ in range(args.runs):
            pickled.append(_seconds(lambda: torch.load(args.old, map_location="cpu", weights_only=False)))
            safe.append(_seconds(lambda: load_checkpoint(new)))
        a, b = args.old.stat().st_size, new.stat().st_size
        print(f"size: pickled {a / 1e6:.2f} MB, safetensors {b / 1e6:.2f} MB (ratio {b / a:.3f})")
        print(
            f"load (median of {args.runs}): pickled {statistics.median(pickled) * 1000:.1f} ms, safetensors "
            f"{statistics.median(safe) * 1000:.1f} ms (ratio {statistics.median(safe) / statistics.median(pickled):.2f})"
        )


if __name__ == "__main__":
    main()
