"""Training statistics: running sums between log lines, and the JSON-lines log (mirrored to TensorBoard)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm


class Meter:
    """Running sums of training statistics between log lines, with rates per wall second."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, float] = {}
        self.count, self.start = 0, time.perf_counter()

    def add(self, **values: float) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def value(self, key: str) -> float:
        return self.sums.get(key, 0.0) / max(self.count, 1)

    def rate(self, key: str) -> float:
        return self.sums.get(key, 0.0) / max(time.perf_counter() - self.start, 1e-9)

    def summary(self) -> dict[str, float]:
        means = {k: self.value(k) for k in self.sums if k not in ("nsentences", "ntokens")}
        return {**means, "utt_per_s": self.rate("nsentences"), "tokens_per_s": self.rate("ntokens")}


class JsonLog:
    """Appends JSON lines to save_dir/train_log.jsonl and mirrors numbers to TensorBoard when installed."""

    def __init__(self, save_dir: Path, enabled: bool = True):
        self.enabled, self.path, self.tb = enabled, save_dir / "train_log.jsonl", None
        if enabled:
            save_dir.mkdir(parents=True, exist_ok=True)
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(save_dir / "tensorboard"))
            except ImportError:
                self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        """Appends the record, and prints it as one line (above the progress bar when there is one)."""
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"time": time.time(), **record}) + "\n")
        tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        if self.tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k not in ("step", "time"):
                    self.tb.add_scalar(f"{record.get('type', 'train')}/{k}", v, record.get("step", 0))
            self.tb.flush()
