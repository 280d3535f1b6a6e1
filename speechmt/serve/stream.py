"""WebSocket `/v1/audio/stream`: simultaneous translation of live audio (speechmt.api.simultaneous: wait-k or
AlignAtt), partial hypotheses out as they are committed, the final one with its latency at the end.

Protocol (JSON text messages, binary audio):
    client -> {"policy": "wait-k", "k": 3, "step_ms": 400}     optional, first; the policy's defaults otherwise;
              also "language", "target_language": the direction of a model of several (as the HTTP fields)
    client -> binary frames: 16-bit little-endian 16 kHz mono PCM, any sizes
    client -> {"type": "end"}                                    the audio is over
    server <- {"type": "partial", "text": " Das", "delay_ms": 800.0, "elapsed_ms": 912.4}   per commit (text to append)
    server <- {"type": "final", "text": ..., "source_ms", "compute_ms", "word_delays_ms", "latency_ms":
               {"AL", "LAAL", "AL_CA", "LAAL_CA"}}                then the server closes (1000)
    server <- {"type": "error", "message": one line}             then the server closes (1008, or 1013: busy)

Each stream decodes in a thread of its own; the model is used by one thread at a time (the batcher's batches and
the streams' steps take turns under one lock, which a stream releases while it waits for audio).
"""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Iterator

import numpy as np
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

STREAM_OPTIONS = ("policy", "k", "step_ms", "language", "target_language")
LANGUAGE_OPTIONS = ("language", "target_language")
END = object()  # the audio is over
GONE = object()  # the client left: stop decoding


class StreamClosed(Exception):
    """The client left while its stream was being decoded."""


def stream_routes(state) -> list[WebSocketRoute]:
    """The WebSocket route of `state` (speechmt.serve.app.ServerState)."""

    async def endpoint(ws: WebSocket) -> None:
        await stream(state, ws)

    return [WebSocketRoute("/v1/audio/stream", endpoint)]


async def stream(state, ws: WebSocket) -> None:
    """One client's stream (module docstring)."""
    await ws.accept()
    if not state.streams.acquire(blocking=False):
        await _fail(ws, f"busy: {state.config.max_streams} streams are running; retry later", 1013)
        return
    audio: queue.Queue = queue.Queue()
    reader = None
    try:
        options, pending = _options(await asyncio.wait_for(ws.receive(), state.config.request_timeout_s))
        lm = _model(state.served, options)
        if pending is not None:
            audio.put(pending)
        loop = asyncio.get_running_loop()
        out: asyncio.Queue = asyncio.Queue()
        work = asyncio.ensure_future(asyncio.to_thread(_decode, state, lm, audio, options, out, loop))
        reader = asyncio.ensure_future(_read(ws, audio, state.config))
        await _forward(ws, out, work)
    except ValueError as e:
        await _fail(ws, str(e).splitlines()[0], 1008)
    except (WebSocketDisconnect, StreamClosed, asyncio.TimeoutError):
        pass
    finally:
        if reader is not None:
            reader.cancel()
        audio.put(GONE)  # a decoding thread still waiting for audio stops
        state.streams.release()


def _options(message: dict) -> tuple[dict, np.ndarray | None]:
    """The first message: its options (a JSON text), or the first audio frame (binary) with the defaults.
    ValueError (one line) for a field that is not one of STREAM_OPTIONS or not JSON."""
    if message.get("type") == "websocket.disconnect":
        raise WebSocketDisconnect()
    if message.get("bytes") is not None:
        return {}, _pcm(message["bytes"])
    try:
        options = json.loads(message.get("text") or "{}")
    except json.JSONDecodeError:
        raise ValueError("the first message is neither JSON options nor audio") from None
    if not isinstance(options, dict) or set(options) - set(STREAM_OPTIONS):
        raise ValueError(f"options: expected a JSON object with {', '.join(STREAM_OPTIONS)}")
    return options, None


def _model(served, options: dict):
    """The model a stream decodes with: task st's (else the one task's) in the direction its `language` and
    `target_language` options pick (speechmt.serve.options.request_direction); ValueError (one line naming the
    option and the directions the model knows) for one it was not trained in."""
    from speechmt.serve.errors import ApiError
    from speechmt.serve.options import request_direction

    lm = served.tasks.get("st") or served.any
    asked = {name: options[name] for name in LANGUAGE_OPTIONS if options.get(name) is not None}
    for name, code in asked.items():
        if not isinstance(code, str):
            raise ValueError(f"{name}: expected a language code such as de, got {json.dumps(code)}")
    try:
        return served.model(lm.task, request_direction(asked, lm.task, served))
    except ApiError as e:
        raise ValueError(e.message) from None


def _pcm(data: bytes) -> np.ndarray:
    """16-bit little-endian PCM -> float32 (n,) in [-1, 1]."""
    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


async def _read(ws: WebSocket, audio: queue.Queue, config) -> None:
    """Puts each binary frame's samples on `audio`, END at {"type": "end"} or past config.max_audio_seconds, GONE
    when the client leaves or sends nothing for config.request_timeout_s."""
    samples, max_seconds = 0, config.max_audio_seconds
    try:
        while True:
            message = await asyncio.wait_for(ws.receive(), config.request_timeout_s)
            if message["type"] == "websocket.disconnect":
                audio.put(GONE)
                return
            if message.get("bytes") is not None:
                wave = _pcm(message["bytes"])
                samples += len(wave)
                audio.put(wave)
                if samples > max_seconds * 16000:
                    audio.put(END)
                    return
            elif "end" in (message.get("text") or ""):
                audio.put(END)
                return
    except (WebSocketDisconnect, RuntimeError, asyncio.TimeoutError):
        audio.put(GONE)


def _decode(state, lm, audio: queue.Queue, options: dict, out: asyncio.Queue, loop) -> dict:
    """Runs speechmt.api.simultaneous over the arriving audio (in a thread), holding the model lock except while
    waiting for audio; each commit goes to `out`. Returns the final message."""
    from speechmt.api import OptionError, simultaneous
    from speechmt.decoding.simultaneous import SimultaneousError

    lock = state.model_lock

    def blocks() -> Iterator[np.ndarray]:
        while True:
            lock.release()
            try:
                item = audio.get()
            finally:
                lock.acquire()
            if item is END:
                return
            if item is GONE:
                raise StreamClosed()
            yield item

    def commit(c) -> None:
        message = {
            "type": "partial",
            "text": c.text,
            "delay_ms": round(c.delay_ms, 1),
            "elapsed_ms": round(c.elapsed_ms, 1),
        }
        loop.call_soon_threadsafe(out.put_nowait, message)

    with lock:
        try:
            result = simultaneous(
                lm,
                blocks(),
                policy=options.get("policy", "wait-k"),
                k=options.get("k"),
                step_ms=options.get("step_ms", 400.0),
                max_len_b=state.config.max_len_b,
                window_seconds=min(state.config.max_chunk_seconds, lm.max_input_seconds or 30.0),
                on_commit=commit,
                source="stream",
            )
        except (OptionError, SimultaneousError) as e:
            raise ValueError(str(e)) from None
    return {
        "type": "final",
        "text": result.text,
        "source_ms": round(result.source_ms, 1),
        "compute_ms": round(result.compute_ms, 1),
        "word_delays_ms": result.word_delays_ms,
        "latency_ms": result.latency_ms,
    }


async def _forward(ws: WebSocket, out: asyncio.Queue, work: asyncio.Future) -> None:
    """Sends each partial as it comes, then the final message, and closes."""
    while True:
        getter = asyncio.ensure_future(out.get())
        await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            await ws.send_text(json.dumps(getter.result(), ensure_ascii=False))
            continue
        getter.cancel()
        while not out.empty():
            await ws.send_text(json.dumps(out.get_nowait(), ensure_ascii=False))
        final = work.result()  # raises the decoding's ValueError or StreamClosed
        await ws.send_text(json.dumps(final, ensure_ascii=False))
        await ws.close(1000)
        return


async def _fail(ws: WebSocket, message: str, code: int) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "message": message}, ensure_ascii=False))
        await ws.close(code)
    except (WebSocketDisconnect, RuntimeError):
        pass
