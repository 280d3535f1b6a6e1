"""The WebSocket stream: PCM frames in, partial hypotheses out, and a final one that is what
speechmt.simultaneous gives for the same audio; bad options and a full house are one error message."""

import json

import numpy as np
import pytest

import speechmt
from speechmt.audio import read_audio
from speechmt.serve.app import create_app
from speechmt.serve.config import ServeConfig

testclient = pytest.importorskip("starlette.testclient")
CONFIG = ServeConfig(max_len_b=24, max_streams=1)


def pcm(wave: np.ndarray) -> bytes:
    return (np.clip(wave, -1, 1) * 32767).astype("<i2").tobytes()


def test_a_stream_gives_partials_then_what_simultaneous_gives(served, tiny_lm, talks):
    data = pcm(read_audio(talks[0]))
    heard = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    want = speechmt.simultaneous(tiny_lm, heard, policy="wait-k", k=2, step_ms=400, max_len_b=24)
    with testclient.TestClient(create_app(served, CONFIG)) as client:
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"policy": "wait-k", "k": 2, "step_ms": 400}))
            for i in range(0, len(data), 8000):  # 250 ms frames
                ws.send_bytes(data[i : i + 8000])
            ws.send_text(json.dumps({"type": "end"}))
            messages = []
            while not messages or messages[-1]["type"] == "partial":
                messages.append(json.loads(ws.receive_text()))
    partials, final = messages[:-1], messages[-1]
    assert len(want.commits) > 1
    assert final["type"] == "final" and final["text"] == want.text
    assert "".join(m["text"] for m in partials).strip() == want.text and len(partials) == len(want.commits)
    assert [m["delay_ms"] for m in partials] == [round(c.delay_ms, 1) for c in want.commits]
    assert final["source_ms"] == pytest.approx(len(heard) / 16, abs=0.1)
    assert set(final["latency_ms"]) == {"AL", "LAAL", "AL_CA", "LAAL_CA"}
    assert final["word_delays_ms"] == want.word_delays_ms


def error_of(ws) -> tuple[str, int]:
    message = json.loads(ws.receive_text())
    assert message["type"] == "error" and "\n" not in message["message"]
    with pytest.raises(testclient.WebSocketDisconnect) as closed:
        ws.receive_text()
    return message["message"], closed.value.code


def test_bad_options_and_a_full_house_are_one_error_each(served):
    with testclient.TestClient(create_app(served, CONFIG)) as client:
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"policy": "wait-k", "beam": 3}))
            message, code = error_of(ws)
            assert "options" in message and code == 1008
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"policy": "greedy"}))
            message, code = error_of(ws)
            assert "policy" in message and code == 1008
        with client.websocket_connect("/v1/audio/stream") as first:
            first.send_text(json.dumps({"k": 2}))
            with client.websocket_connect("/v1/audio/stream") as second:
                message, code = error_of(second)
                assert "busy" in message and code == 1013
            first.send_text(json.dumps({"type": "end"}))
            assert json.loads(first.receive_text())["type"] == "final"


def test_the_page_is_served(served):
    with testclient.TestClient(create_app(served, CONFIG)) as client:
        page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="translation"' in page.text and "v1/audio/translations" in page.text


def test_a_stream_over_a_real_socket(served, tiny_lm, talks):
    """The same through uvicorn and the `websockets` client, with the first frame of audio as the first message
    (the policy's defaults)."""
    client = pytest.importorskip("websockets.sync.client")
    from tests.serve.conftest import live_server

    data = pcm(read_audio(talks[1]))
    heard = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    want = speechmt.simultaneous(tiny_lm, heard, max_len_b=24)
    with live_server(served, CONFIG) as live:
        with client.connect(live.url.replace("http", "ws") + "/v1/audio/stream") as ws:
            for i in range(0, len(data), 6400):
                ws.send(data[i : i + 6400])
            ws.send(json.dumps({"type": "end"}))
            messages = [json.loads(m) for m in ws]
    assert [m["type"] for m in messages] == ["partial"] * (len(messages) - 1) + ["final"]
    final = messages[-1]
    assert final["text"] == want.text
    assert [final["latency_ms"][m] for m in ("AL", "LAAL")] == pytest.approx(
        [want.latency_ms[m] for m in ("AL", "LAAL")]
    )
