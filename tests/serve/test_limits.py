"""The server's limits under a decoder held still by a gate: a full queue answers 503 with Retry-After at once,
a request past its timeout gets 504, a client that leaves has its chunks dropped, and a shutdown finishes the
requests in flight."""

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from speechmt.serve.config import ServeConfig
from tests.serve.conftest import live_server
from tests.serve.test_app import assert_one_line, post


class Gate:
    """A decode function that waits for `open` and records the length of each chunk it decodes."""

    def __init__(self):
        self.open = threading.Event()
        self.decoded: list[int] = []

    def __call__(self, state):
        def decode(kind, waves):
            assert self.open.wait(30)
            self.decoded += [len(w) for w in waves]
            return [[f"n={len(w)}"] for w in waves]

        state.decode = decode


def wait_until(check, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def health(url: str) -> dict:
    return httpx.get(f"{url}/health").json()


def test_a_full_queue_answers_503_at_once_and_serves_again_after(served, clips):
    gate = Gate()
    config = ServeConfig(max_queue=2, max_batch=1, max_wait_ms=0, retry_after_s=3)
    with live_server(served, config, gate) as live, ThreadPoolExecutor(2) as pool:
        held = [pool.submit(post, live.url, clips[i]) for i in range(2)]
        wait_until(lambda: health(live.url)["pending"] == 2)
        start = time.monotonic()
        full = post(live.url, clips[2])
        assert time.monotonic() - start < 2.0
        assert "queue is full" in assert_one_line(full, 503, None) and full.headers["retry-after"] == "3"
        gate.open.set()
        assert [f.result().status_code for f in held] == [200, 200]
        assert post(live.url, clips[2]).status_code == 200


def test_a_request_past_its_timeout_gets_504_and_its_work_is_dropped(served, clips):
    gate = Gate()
    config = ServeConfig(request_timeout_s=0.5, max_batch=1, max_wait_ms=0)
    with live_server(served, config, gate) as live, ThreadPoolExecutor(2) as pool:
        first = pool.submit(post, live.url, clips[0])  # held in the decoder
        wait_until(lambda: health(live.url)["pending"] == 1)
        late = post(live.url, clips[1])  # queued behind it, never decoded
        assert "timeout" in assert_one_line(late, 504, None)
        assert "timeout" in assert_one_line(first.result(), 504, None)
        gate.open.set()
        wait_until(lambda: health(live.url)["pending"] == 0)
        assert len(gate.decoded) == 1 and health(live.url)["cancelled"] == 2


def test_a_client_that_leaves_frees_its_queued_work(served, clips):
    import soundfile as sf

    gate = Gate()
    config = ServeConfig(max_batch=1, max_wait_ms=0)
    with live_server(served, config, gate) as live, ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, live.url, clips[0])
        wait_until(lambda: health(live.url)["pending"] == 1)
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            with open(clips[1], "rb") as f:
                httpx.post(f"{live.url}/v1/audio/translations", files={"file": f}, timeout=1.0)
        wait_until(lambda: health(live.url)["cancelled"] == 1)
        assert health(live.url)["pending"] == 1
        gate.open.set()
        assert first.result().json()["text"] == f"n={sf.info(clips[0]).frames}"
        wait_until(lambda: health(live.url)["pending"] == 0)
        assert gate.decoded == [sf.info(clips[0]).frames]


def test_shutdown_finishes_the_requests_in_flight_then_takes_no_more(served, clips):
    gate = Gate()
    config = ServeConfig(max_batch=2, max_wait_ms=0, shutdown_timeout_s=20)
    with live_server(served, config, gate) as live, ThreadPoolExecutor(2) as pool:
        held = [pool.submit(post, live.url, clips[i]) for i in range(2)]
        wait_until(lambda: health(live.url)["pending"] == 2)
        live.server.should_exit = True  # what SIGTERM does
        time.sleep(0.3)
        with pytest.raises(OSError):  # the listening socket is closed
            socket.create_connection(("127.0.0.1", int(live.url.rsplit(":", 1)[1])), timeout=2).close()
        gate.open.set()
        assert [f.result().status_code for f in held] == [200, 200]
        live.thread.join(20)
        assert not live.thread.is_alive() and live.state.batcher.stats.finished == 2
