"""Progress of long jobs: a tqdm bar on a terminal; elsewhere (a pipe, a file, nohup, CI) one line every
`interval` seconds with the count, the rate and the time left, so that a log shows the job is alive.

    with Progress(len(records), "evaluate tst-COMMON", "utt") as bar:
        for batch in batches:
            ...
            bar.update(len(batch))

    for talk in progress(talks, "synth train", "talk"):
        ...

Off a terminal nothing is printed for a job shorter than one interval; after that a line every interval
(`speechmt: evaluate tst-COMMON: 120/2641 utt (5%), 2.1 utt/s, 0:00:57 elapsed, 0:20:01 left`), and a last
line when it ends; a line comes on time even while one step of the job (a batch) takes longer than the
interval. Two environment variables set it for every command:
- SPEECHMT_PROGRESS_INTERVAL: seconds between lines (default 30; 0: a line at every update);
- SPEECHMT_PROGRESS: auto (default: bar on a terminal, lines elsewhere), bar, lines or off.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL = 30.0
INTERVAL_ENV = "SPEECHMT_PROGRESS_INTERVAL"
MODE_ENV = "SPEECHMT_PROGRESS"
MODES = ("auto", "bar", "lines", "off")


def env_interval() -> float:
    """Seconds between progress lines: SPEECHMT_PROGRESS_INTERVAL, or 30 (a bad value warns and gives 30)."""
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        warnings.warn(
            f"{INTERVAL_ENV}={text!r} is not a number of seconds >= 0; progress lines every {DEFAULT_INTERVAL:g} s",
            stacklevel=3,
        )
        return DEFAULT_INTERVAL
    return value


def env_mode() -> str:
    """SPEECHMT_PROGRESS: auto, bar, lines or off (default auto; a bad value warns and gives auto)."""
    mode = os.environ.get(MODE_ENV, "").strip().lower() or "auto"
    if mode not in MODES:
        warnings.warn(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}; using auto", stacklevel=3)
        return "auto"
    return mode


def clock_text(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """Counts work done towards `total` (None: unknown) and shows it: a tqdm bar on a terminal, else a line
    on `stream` (default stderr) every `interval` seconds of `clock` and a last one at `close()` when any
    line was printed. Lines come from `update()` and, with `background` (default: when interval > 0), from a
    thread that prints on time while one step of the job takes longer than the interval. `mode` and `interval`
    default to the environment (module docstring); `enabled=False` shows nothing."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "it",
        *,
        stream: TextIO | None = None,
        interval: float | None = None,
        mode: str | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        background: bool | None = None,
    ):
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval = env_interval() if interval is None else interval
        mode = env_mode() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"progress mode must be one of {', '.join(MODES)}; got {mode!r}")
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "lines"
        self.mode = mode if enabled else "off"
        self.clock, self.n, self.lines = clock, 0, 0
        self.start = self.last = clock()
        self._lock = threading.Lock()
        self._bar = self._thread = None
        self._stop = threading.Event()
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=desc, unit=unit, file=self.stream, leave=False, mininterval=1.0, dynamic_ncols=True
            )
        elif self.mode == "lines" and (self.interval > 0 if background is None else background):
            self._thread = threading.Thread(target=self._ticker, name=f"progress {desc}", daemon=True)
            self._thread.start()

    def update(self, n: int = 1) -> None:
        """Adds `n` done; off a terminal prints a line when `interval` seconds have passed since the last."""
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "lines":
            self._tick()

    def line(self, now: float | None = None) -> str:
        """The progress line: count (of total, percent), rate, elapsed time and, with a total, time left."""
        elapsed = (self.clock() if now is None else now) - self.start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        count = (
            f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
            if self.total
            else f"{self.n} {self.unit}"
        )
        text = f"{self.desc}: {count}, {rate:.3g} {self.unit}/s, {clock_text(elapsed)} elapsed"
        if self.total:
            left = clock_text((self.total - self.n) / rate) if rate > 0 else "?"
            text += f", {left} left"
        return text

    def close(self) -> None:
        """Ends the bar, or after any progress line, prints what was done in how long."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.lines:
            elapsed = self.clock() - self.start
            rate = f", {self.n / elapsed:.3g} {self.unit}/s" if elapsed > 0 else ""
            self._print(f"{self.desc}: done, {self.n} {self.unit} in {clock_text(elapsed)}{rate}")
            self.lines = 0

    def _tick(self) -> None:
        """Prints the progress line when it is due."""
        with self._lock:
            now = self.clock()
            if now - self.last >= self.interval:
                self.last = now
                self._print(self.line(now))

    def _ticker(self) -> None:
        """The background thread: wakes when the next line is due, until close()."""
        while not self._stop.wait(max(self.last + self.interval - self.clock(), 0.01)):
            self._tick()

    def _print(self, text: str) -> None:
        self.lines += 1
        print(f"speechmt: {text}", file=self.stream, flush=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(items: Iterable[T], desc: str, unit: str = "it", total: int | None = None, **options) -> Iterator[T]:
    """Yields `items`, counting each one done when the loop comes back for the next (Progress's options);
    `total` defaults to len(items) when it has one."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, desc, unit, **options) as bar:
        for item in items:
            yield item
            bar.update()


def batch_starts(n: int, batch_size: int, desc: str, unit: str = "it", **options) -> Iterator[int]:
    """Yields 0, batch_size, 2 * batch_size, ... below `n`, counting each batch's items done when the loop
    comes back for the next (Progress's options)."""
    with Progress(n, desc, unit, **options) as bar:
        for start in range(0, n, batch_size):
            yield start
            bar.update(min(batch_size, n - start))
