"""The batcher alone, with a decode function that names each wave: batches are formed, every request gets its own
chunks' texts in order, the queue is bounded, cancelled work is dropped, and close finishes or refuses."""

import asyncio
import threading

import numpy as np
import pytest

from speechmt.serve.batcher import Batcher
from speechmt.serve.errors import QueueFull, ShuttingDown


def wave(n: int) -> np.ndarray:
    """A wave that says its own name: n samples of value n."""
    return np.full(n, float(n), np.float32)


class Recorder:
    """A decode function that returns "<kind>:<n>" for each wave of n samples, and records each batch."""

    def __init__(self, gate: threading.Event | None = None):
        self.batches: list[list[int]] = []
        self.gate = gate

    def __call__(self, kind, waves):
        if self.gate is not None:
            assert self.gate.wait(10)
        self.batches.append([len(w) for w in waves])
        return [[f"{kind}:{len(w)}", "second"] for w in waves]


def run(coro):
    return asyncio.run(coro)


def test_concurrent_requests_share_batches_and_get_their_own_texts():
    decode = Recorder()

    async def main():
        batcher = Batcher(decode, max_batch=4, max_wait_ms=200, max_queue=16)
        jobs = [batcher.submit("st", [wave(100 + 10 * i + k) for k in range(i % 3 + 1)]) for i in range(6)]
        results = await asyncio.gather(*(j.future for j in jobs))
        batcher.close()
        return jobs, results

    jobs, results = run(main())
    for i, texts in enumerate(results):
        assert [t[0] for t in texts] == [f"st:{100 + 10 * i + k}" for k in range(i % 3 + 1)]
        assert all(t[1] == "second" for t in texts)
    assert sorted(n for b in decode.batches for n in b) == sorted(len(w) for j in jobs for w in j.waves)
    assert max(map(len, decode.batches)) == 4 and len(decode.batches) == 3  # 12 chunks, batches of 4
    assert len({j.id for j in jobs}) == 6


def test_a_long_request_shares_its_batches_round_robin():
    """A 6-chunk request queued first does not hold up the 1-chunk requests behind it: each batch takes one chunk
    from each request in turn."""
    decode = Recorder()

    async def main():
        batcher = Batcher(decode, max_batch=3, max_wait_ms=200, max_queue=16)
        long = batcher.submit("st", [wave(1000 + k) for k in range(6)])
        short = [batcher.submit("st", [wave(10 + i)]) for i in range(2)]
        await asyncio.gather(long.future, *(s.future for s in short))
        batcher.close()

    run(main())
    assert decode.batches[0] == [1000, 10, 11] and decode.batches[1:] == [[1001, 1002, 1003], [1004, 1005]]


def test_kinds_are_never_mixed_in_a_batch():
    decode = Recorder()

    async def main():
        batcher = Batcher(decode, max_batch=8, max_wait_ms=100, max_queue=16)
        a = [batcher.submit(("st", 5), [wave(100 + i)]) for i in range(3)]
        b = [batcher.submit(("st", 1), [wave(200 + i)]) for i in range(3)]
        texts = await asyncio.gather(*(j.future for j in a + b))
        batcher.close()
        return texts

    texts = run(main())
    assert [t[0][0] for t in texts] == [f"('st', 5):{100 + i}" for i in range(3)] + [
        f"('st', 1):{200 + i}" for i in range(3)
    ]
    assert sorted(decode.batches) == [[100, 101, 102], [200, 201, 202]]


def test_a_full_queue_refuses_at_once_and_frees_when_work_is_done():
    gate = threading.Event()
    decode = Recorder(gate)

    async def main():
        batcher = Batcher(decode, max_batch=2, max_wait_ms=0, max_queue=2)
        first = [batcher.submit("st", [wave(1)]), batcher.submit("st", [wave(2)])]
        with pytest.raises(QueueFull):
            batcher.submit("st", [wave(3)])
        assert batcher.pending == 2
        gate.set()
        await asyncio.gather(*(j.future for j in first))
        again = batcher.submit("st", [wave(4)])
        assert (await again.future)[0][0] == "st:4"
        batcher.close()

    run(main())


def test_a_cancelled_request_is_not_decoded():
    gate = threading.Event()
    decode = Recorder(gate)

    async def main():
        batcher = Batcher(decode, max_batch=1, max_wait_ms=0, max_queue=8)
        busy = batcher.submit("st", [wave(1)])
        await asyncio.sleep(0.05)  # the thread is now decoding `busy`, held by the gate
        gone = batcher.submit("st", [wave(2), wave(3)])
        kept = batcher.submit("st", [wave(4)])
        batcher.cancel(gone)
        gate.set()
        await asyncio.gather(busy.future, kept.future)
        batcher.close()
        return batcher.stats

    stats = run(main())
    assert decode.batches == [[1], [4]] and stats.cancelled == 1 and stats.finished == 2


def test_a_failing_batch_fails_its_requests_only():
    def decode(kind, waves):
        if any(len(w) == 13 for w in waves):
            raise RuntimeError("boom")
        return [[str(len(w))] for w in waves]

    async def main():
        batcher = Batcher(decode, max_batch=1, max_wait_ms=0, max_queue=8)
        bad, good = batcher.submit("st", [wave(13)]), batcher.submit("st", [wave(5)])
        outcome = await asyncio.gather(bad.future, good.future, return_exceptions=True)
        batcher.close()
        return outcome

    bad, good = run(main())
    assert isinstance(bad, RuntimeError) and good == [["5"]]


def test_close_finishes_the_queue_then_refuses_what_is_left():
    gate = threading.Event()
    decode = Recorder(gate)

    async def main():
        batcher = Batcher(decode, max_batch=1, max_wait_ms=0, max_queue=8)
        jobs = [batcher.submit("st", [wave(n)]) for n in (1, 2, 3)]
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(asyncio.to_thread(batcher.close, 0.3))
        await asyncio.sleep(0.05)
        with pytest.raises(ShuttingDown):
            batcher.submit("st", [wave(9)])
        gate.set()  # the thread finishes all three within close's timeout
        await closing
        return await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)

    outcome = run(main())
    assert [o[0][0] for o in outcome] == ["st:1", "st:2", "st:3"]


def test_close_refuses_what_it_cannot_finish_in_time():
    gate = threading.Event()
    decode = Recorder(gate)

    async def main():
        batcher = Batcher(decode, max_batch=1, max_wait_ms=0, max_queue=8)
        jobs = [batcher.submit("st", [wave(n)]) for n in (1, 2)]
        await asyncio.sleep(0.05)
        await asyncio.to_thread(batcher.close, 0.1)  # the first is stuck in decode: both are refused
        gate.set()
        return await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)

    outcome = run(main())
    assert all(isinstance(o, ShuttingDown) for o in outcome)


def test_a_freed_thread_waits_for_the_requests_its_answers_bring():
    """When a batch ends, the clients it answered send again: the next batch waits max_wait_ms from then (not from
    when its oldest request came), so that they share it instead of splitting into half batches."""
    gate = threading.Event()
    decode = Recorder(gate)

    async def main():
        batcher = Batcher(decode, max_batch=4, max_wait_ms=300, max_queue=8)
        first = batcher.submit("st", [wave(1)])
        await asyncio.sleep(0.4)  # `first` is decoding (its wait is over), held by the gate
        queued = batcher.submit("st", [wave(2)])
        await asyncio.sleep(0.4)  # `queued` has waited longer than max_wait_ms
        gate.set()
        await first.future
        again = batcher.submit("st", [wave(3)])  # the answered client's next request
        with batcher.arriving():  # and one that is still being read
            await asyncio.sleep(0.35)
            late = batcher.submit("st", [wave(4)])
        await asyncio.gather(queued.future, again.future, late.future)
        batcher.close()

    run(main())
    assert decode.batches == [[1], [2, 3, 4]]
