"""Dynamic batching: the chunks of concurrent requests decoded together by one worker thread.

Requests put their chunks in (`submit`); the thread takes a batch when `max_batch` chunks of one kind (task and
beam) are waiting or the oldest has waited `max_wait_ms` (counted from when the thread became free, if later: the
clients answered by the last batch send their next requests meanwhile, and those join the next batch; once more
`max_wait_ms` while requests are still `arriving`: read and cut, not yet submitted), one chunk from each request
in turn (so a long file's
chunks share batches with the short requests that come after it instead of holding them up), and decodes it with
`decode` (speechmt.decoding.translate.decode_inputs under the model's front end). Each request's future gets its
own chunks' texts, in its chunk order, when the last is decoded. A cancelled request (its client left, or it timed
out) has its chunks dropped from the queue. The event loop never decodes: it stays free to take requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import numpy as np

from speechmt.serve.errors import QueueFull, ShuttingDown

DecodeFn = Callable[[Hashable, list[np.ndarray]], list[list[str]]]  # (kind, waves) -> each wave's n-best texts


@dataclass(eq=False)
class Job:
    """One request's chunks (16 kHz waves) of one kind; `future` resolves to their n-best texts, in order."""

    kind: Hashable
    waves: list[np.ndarray]
    future: asyncio.Future
    id: int = 0
    texts: list[list[str] | None] = field(default_factory=list)
    next_chunk: int = 0  # the first chunk not yet taken into a batch
    left: int = 0  # chunks not yet decoded
    queued_at: float = 0.0
    cancelled: bool = False


@dataclass
class BatchStats:
    """What the thread has done: batches, chunks decoded, the largest batch, requests finished or dropped."""

    batches: int = 0
    chunks: int = 0
    largest: int = 0
    finished: int = 0
    cancelled: int = 0


class Batcher:
    """A bounded queue of requests (`max_queue`) and the one thread that decodes their chunks in batches."""

    def __init__(self, decode: DecodeFn, max_batch: int = 8, max_wait_ms: float = 30.0, max_queue: int = 32):
        self.decode, self.max_batch, self.max_wait, self.max_queue = decode, max_batch, max_wait_ms / 1000, max_queue
        self.stats = BatchStats()
        self._jobs: OrderedDict[int, Job] = OrderedDict()  # requests with chunks not yet decoded, oldest first
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._closing = False
        self._arriving = 0  # requests being read and cut, not yet submitted
        self._thread = threading.Thread(target=self._run, name="speechmt-batcher", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Requests waiting or decoding."""
        return len(self._jobs)

    def submit(self, kind: Hashable, waves: list[np.ndarray]) -> Job:
        """Queues one request's chunks (at least one) of one kind; its Job's future resolves to their n-best
        texts. QueueFull when `max_queue` requests are pending, ShuttingDown once `close` has begun."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._closing:
                raise ShuttingDown()
            if len(self._jobs) >= self.max_queue:
                raise QueueFull()
            job = Job(
                kind, waves, loop.create_future(), next(self._ids), [None] * len(waves), 0, len(waves), time.monotonic()
            )
            self._jobs[job.id] = job
            self._cond.notify()
        return job

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Marks a request as on its way (being read and cut) until the block ends, with or without a `submit`:
        a batch waits a little for such requests."""
        with self._cond:
            self._arriving += 1
        try:
            yield
        finally:
            with self._cond:
                self._arriving -= 1
                self._cond.notify()

    def cancel(self, job: Job) -> None:
        """Drops a request's chunks not yet decoded; a batch already decoding finishes, its texts unused."""
        with self._cond:
            if self._jobs.pop(job.id, None) is not None:
                job.cancelled = True
                self.stats.cancelled += 1

    def close(self, timeout: float = 30.0) -> None:
        """Takes no new request, lets the thread finish what is queued for up to `timeout` seconds, then refuses
        what is left (ShuttingDown on its future) and stops the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            left, self._jobs = list(self._jobs.values()), OrderedDict()
            self._cond.notify_all()
        for job in left:  # the thread, a daemon, ends after the batch it may still be decoding
            job.cancelled = True
            _resolve(job, ShuttingDown())

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            kind = batch[0][0].kind
            try:
                texts = self.decode(kind, [job.waves[k] for job, k in batch])
            except Exception as e:  # a failed batch fails its requests, not the server
                for job in {job for job, _ in batch}:
                    self.cancel(job)
                    _resolve(job, e)
                continue
            self._deliver(batch, texts)

    def _next_batch(self) -> list[tuple[Job, int]] | None:
        """Waits for a batch (module docstring) and takes it; None once closing with nothing left."""
        free_since = time.monotonic()
        with self._cond:
            while True:
                ready = [j for j in self._jobs.values() if j.next_chunk < len(j.waves)]
                if not ready and self._closing and not self._jobs:
                    return None
                if ready:
                    kind = ready[0].kind
                    same = [j for j in ready if j.kind == kind]
                    waiting = sum(len(j.waves) - j.next_chunk for j in same)
                    deadline = max(ready[0].queued_at, free_since) + self.max_wait
                    if self._arriving:
                        deadline += self.max_wait
                    wait = deadline - time.monotonic()
                    if waiting >= self.max_batch or wait <= 0 or self._closing:
                        return self._take(same)
                    self._cond.wait(wait)
                else:
                    self._cond.wait()

    def _take(self, jobs: list[Job]) -> list[tuple[Job, int]]:
        """Up to max_batch chunks, one from each job in turn, oldest job first."""
        batch: list[tuple[Job, int]] = []
        while len(batch) < self.max_batch and any(j.next_chunk < len(j.waves) for j in jobs):
            for job in jobs:
                if job.next_chunk < len(job.waves) and len(batch) < self.max_batch:
                    batch.append((job, job.next_chunk))
                    job.next_chunk += 1
        return batch

    def _deliver(self, batch: list[tuple[Job, int]], texts: list[list[str]]) -> None:
        """Puts each chunk's texts into its own job; resolves the jobs that are complete."""
        done = []
        with self._cond:
            self.stats.batches += 1
            self.stats.chunks += len(batch)
            self.stats.largest = max(self.stats.largest, len(batch))
            for (job, k), nbest in zip(batch, texts):
                job.texts[k] = nbest
                job.left -= 1
                if job.left == 0 and not job.cancelled and self._jobs.pop(job.id, None) is not None:
                    self.stats.finished += 1
                    done.append(job)
        for job in done:
            _resolve(job, list(job.texts))


def _resolve(job: Job, outcome: object) -> None:
    """Sets the job's future (from the worker thread) to its texts, or to an exception."""

    def settle() -> None:
        if job.future.done():
            return
        if isinstance(outcome, BaseException):
            job.future.set_exception(outcome)
        else:
            job.future.set_result(outcome)

    try:
        job.future.get_loop().call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass
