"""`speechmt serve`: its options fill ServeConfig, a missing extra is one line, and a real process serves a
request and stops on SIGTERM."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from speechmt.cli import main, parse_args
from tests.serve.conftest import free_port


def test_the_options_fill_the_config(monkeypatch):
    import speechmt.serve

    seen = {}
    monkeypatch.setattr(speechmt.serve, "serve", lambda config, log_level: seen.update(c=config, level=log_level))
    assert (
        main(
            [
                "serve",
                "--port",
                "9001",
                "--beam",
                "2",
                "--max-batch",
                "4",
                "--max-queue",
                "7",
                "--max-upload-mb",
                "3",
                "--request-timeout",
                "12",
                "--log-level",
                "warning",
            ]
        )
        == 0
    )
    config = seen["c"]
    assert (
        config.port,
        config.beam,
        config.max_batch,
        config.max_queue,
        config.max_upload_bytes,
        config.request_timeout_s,
        config.model,
    ) == (9001, 2, 4, 7, 3 * 2**20, 12.0, None)
    assert seen["level"] == "warning"


@pytest.mark.parametrize("argv", [["--port", "70000"], ["--beam", "17"], ["--max-batch", "0"]])
def test_bad_options_are_one_line(argv, capsys):
    with pytest.raises(SystemExit):
        parse_args(["serve", *argv])
    assert capsys.readouterr().err.count("\n") == 1


def test_a_missing_extra_is_named_in_one_line(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == "speechmt: error: speechmt serve needs uvicorn: pip install 'speechmt[serve]'\n"


def test_the_workers_read_the_config_from_the_environment():
    from speechmt.serve.config import ServeConfig
    from speechmt.serve.server import config_from_environment, environment

    config = ServeConfig(
        model="m.safetensors", port=9, workers=2, beam=3, max_wait_ms=12.5, max_queue=5, source_language="en"
    )
    assert config_from_environment(environment(config)) == config
    assert config_from_environment({}) == ServeConfig()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_served_process_answers_and_stops_on_sigterm(st_checkpoint, talks, workers):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "speechmt",
            "serve",
            "--model",
            st_checkpoint,
            "--port",
            str(port),
            "--beam",
            "1",
            "--max-len-b",
            "8",
            "--workers",
            str(workers),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.2)
        for _ in range(2 * workers):  # the workers take turns at the socket
            with open(talks[0], "rb") as f:
                answer = httpx.post(f"http://127.0.0.1:{port}/v1/audio/translations", files={"file": f}, timeout=60)
            assert answer.status_code == 200 and answer.json()["text"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn ends by the signal once it has shut down
        assert "Application shutdown complete" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
