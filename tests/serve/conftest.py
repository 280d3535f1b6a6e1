"""A tiny trained model served on a free loopback port, in a thread of the test process."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@dataclass
class LiveServer:
    """A running server: its base URL ("http://127.0.0.1:PORT"), the app's shared state, the uvicorn server."""

    url: str
    state: object
    server: object
    thread: threading.Thread

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        assert not self.thread.is_alive()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(served, config, patch: Callable[[object], None] | None = None) -> Iterator[LiveServer]:
    """Serves `served` under `config` (its port replaced by a free one) until the block ends; `patch(state)` runs
    before startup (a test's decode function)."""
    import dataclasses

    import uvicorn

    from speechmt.serve.app import create_app

    config = dataclasses.replace(config, port=free_port())
    app = create_app(served, config)
    if patch:
        patch(app.state.server)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=config.port,
            log_level="warning",
            timeout_graceful_shutdown=int(config.shutdown_timeout_s),
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    live = LiveServer(f"http://127.0.0.1:{config.port}", app.state.server, server, thread)
    try:
        yield live
    finally:
        if thread.is_alive():
            live.stop()


@pytest.fixture(scope="session")
def st_checkpoint(tiny_data, tmp_path_factory) -> str:
    from tests.helpers import two_update_st

    return two_update_st(tiny_data, tmp_path_factory.mktemp("serve_st"))


@pytest.fixture(scope="session")
def tiny_lm(st_checkpoint):
    import speechmt

    return speechmt.load_model(st_checkpoint)


@pytest.fixture(scope="session")
def served(tiny_lm):
    from speechmt.serve.config import ServeConfig
    from speechmt.serve.models import served_model

    return served_model(tiny_lm, ServeConfig(model_name="tiny", source_language="en"))  # the replica: en-de


@pytest.fixture(scope="session")
def clips(tiny_data, tmp_path_factory) -> list[Path]:
    """The replica's 10 utterances, each cut into a wav file of its own (1-3 s of different speech)."""
    import json

    import soundfile as sf

    from speechmt.audio import read_audio

    out = tmp_path_factory.mktemp("clips")
    rows = [
        json.loads(line)
        for split in ("train", "dev", "tst-COMMON")
        for line in (tiny_data / f"{split}.jsonl").read_text().splitlines()
    ]
    for r in rows:
        sf.write(out / f"{r['id']}.wav", read_audio(r["audio"], r["offset"], r["duration"]), 16000)
    return sorted(out.glob("*.wav"))


@pytest.fixture(scope="session")
def talks(tiny_data) -> list[Path]:
    """The replica's 4 talks (3.6-6.4 s, several utterances with pauses between them)."""
    return sorted((Path(__file__).parents[1] / "assets" / "mustc").rglob("*.wav"))
