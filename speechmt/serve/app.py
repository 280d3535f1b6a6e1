"""The ASGI app (Starlette): OpenAI's audio endpoints over the dynamic batcher, with its limits.

    POST /v1/audio/translations     multipart: file, model, response_format, ... (speechmt.serve.options)
    POST /v1/audio/transcriptions   the same, task asr (a model trained for it)
    GET  /v1/models, /v1/models/{id}   the model: its tasks, languages and the directions it knows
    GET  /health
    WS   /v1/audio/stream               simultaneous translation of live audio (speechmt.serve.stream)
    GET  /                              a web page: upload or record, see and download (speechmt.serve.page)

Each request: 503 with Retry-After when `max_queue` requests are pending (before its upload is read), 413 for an
upload over `max_upload_mb`, 400 (one JSON line naming the field) for a bad field, a file that is not audio or has
nothing to translate, a direction the model does not know (`language`, `target_language`); its chunks go to
the batcher, keyed by (task, beam, direction), and it waits for its own texts at most `request_timeout_s`
(504), or until its client leaves, which drops its chunks not yet decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Hashable
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speechmt.decoding.segment import SegmentConfig
from speechmt.serve.batcher import Batcher
from speechmt.serve.config import ServeConfig
from speechmt.serve.errors import ApiError, QueueFull, ShuttingDown, bad_request
from speechmt.serve.formats import render
from speechmt.serve.models import TASK_NAMES, ServedModel
from speechmt.serve.options import RequestOptions, request_options
from speechmt.serve.page import page_routes
from speechmt.serve.stream import stream_routes
from speechmt.serve.uploads import Upload, assemble, cut_upload, decode_upload

log = logging.getLogger("speechmt.serve")
FORM_SLACK = 64 * 1024  # the multipart body's bytes besides the file: boundaries, headers, the other fields


class UploadTooLarge(Exception):
    """The request body passed the upload limit while it was being read."""


class ServerState:
    """What the routes share: the served model, the settings, the batcher (made at startup) and the decode
    options of each kind of batch: (task, beam, direction), the direction None for a model of one."""

    def __init__(self, served: ServedModel, config: ServeConfig):
        self.served, self.config = served, config
        self.batcher: Batcher | None = None
        self.model_lock = threading.Lock()  # the batches and the streams' steps take turns at the model
        self.streams = threading.BoundedSemaphore(config.max_streams)
        self.closing = False
        self.started = time.time()
        self._options: dict[Hashable, Any] = {}

    def decode(self, kind: Hashable, waves: list[np.ndarray]) -> list[list[str]]:
        """One batch of 16 kHz waves (each (n,)) of one (task, beam, direction) -> each one's n-best texts (the
        worker thread's call: speechmt.decoding.translate.decode_inputs under the model's front end; the
        direction's tag is the forced prefix of its decode options)."""
        from speechmt.decoding.translate import decode_inputs

        task, beam, direction = kind  # type: ignore[misc]
        lm = self.served.model(task, direction)
        if kind not in self._options:
            self._options[kind] = lm.decode_options(beam, max_len_b=self.config.max_len_b)
        with self.model_lock:
            return decode_inputs(lm, [lm.frontend(w) for w in waves], self._options[kind])[0]

    def segment(self, options: RequestOptions) -> SegmentConfig:
        """Where a request's audio is cut: `translate`'s rule with the server's chunk length and its pauses."""
        return SegmentConfig(max_seconds=self.config.max_chunk_seconds, pause_cut_ms=options.cut_pauses)


def create_app(served: ServedModel, config: ServeConfig) -> Starlette:
    """The ASGI app serving `served` under `config` (module docstring); its batcher thread starts with the app's
    lifespan and stops with it, finishing the work in flight for up to `config.shutdown_timeout_s`."""
    state = ServerState(served, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        state.batcher = Batcher(state.decode, config.max_batch, config.max_wait_ms, config.max_queue)
        yield
        state.closing = True
        await asyncio.to_thread(state.batcher.close, config.shutdown_timeout_s)

    async def translations(request: Request) -> Response:
        return await audio_request(state, request, "st")

    async def transcriptions(request: Request) -> Response:
        return await audio_request(state, request, "asr")

    routes = [
        Route("/v1/audio/translations", translations, methods=["POST"]),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/models", lambda r: JSONResponse(model_list(state)), methods=["GET"]),
        Route("/v1/models/{model_id:path}", lambda r: model_entry(state, r), methods=["GET"]),
        Route("/health", lambda r: JSONResponse(health(state)), methods=["GET"]),
    ]
    app = Starlette(routes=[*routes, *stream_routes(state), *page_routes()], lifespan=lifespan)
    app.state.server = state
    return app


def model_list(state: ServerState) -> dict:
    """GET /v1/models: the one model, in OpenAI's list shape, with its tasks, its default direction's languages
    and the directions it knows ("directions": ["en-de", "en-fr"])."""
    return {"object": "list", "data": [model_card(state)]}


def model_card(state: ServerState) -> dict:
    served = state.served
    return {
        "id": served.name,
        "object": "model",
        "created": int(state.started),
        "owned_by": "speechmt",
        "tasks": [TASK_NAMES[t] for t in served.tasks],
        "source_language": served.source_language,
        "target_language": served.target_language,
        "directions": served.directions,
    }


def model_entry(state: ServerState, request: Request) -> Response:
    if request.path_params["model_id"] != state.served.name:
        return error_response(
            ApiError(
                404,
                f"model {request.path_params['model_id']!r} not found; this server serves {state.served.name!r}",
                "model",
            )
        )
    return JSONResponse(model_card(state))


def health(state: ServerState) -> dict:
    """GET /health: ok (or stopping), the queue and what the batcher has done."""
    batcher = state.batcher
    stats = batcher.stats if batcher else None
    return {
        "status": "stopping" if state.closing else "ok",
        "model": state.served.name,
        "pending": batcher.pending if batcher else 0,
        "max_queue": state.config.max_queue,
        "batches": stats.batches if stats else 0,
        "chunks": stats.chunks if stats else 0,
        "largest_batch": stats.largest if stats else 0,
        "finished": stats.finished if stats else 0,
        "cancelled": stats.cancelled if stats else 0,
    }


def error_response(error: ApiError) -> Response:
    return Response(error.body(), status_code=error.status, media_type="application/json", headers=error.headers)


def overloaded(state: ServerState, why: str) -> ApiError:
    return ApiError(503, why, None, {"Retry-After": str(state.config.retry_after_s)})


async def audio_request(state: ServerState, request: Request, task: str) -> Response:
    """One POST to an audio endpoint, answered within the request timeout (504 otherwise)."""
    try:
        if task not in state.served.tasks:
            raise bad_request(
                None,
                f"this model does not {TASK_NAMES[task]} (it was trained for "
                f"{', '.join(TASK_NAMES[t] for t in state.served.tasks)})",
            )
        return await asyncio.wait_for(_answer(state, request, task), state.config.request_timeout_s)
    except ApiError as e:
        return error_response(e)
    except asyncio.TimeoutError:
        return error_response(
            ApiError(504, f"no answer within the request timeout ({state.config.request_timeout_s:g} s)")
        )
    except Exception as e:  # a bug, not the request's fault: logged, and still one JSON line
        log.exception("request failed")
        return error_response(ApiError(500, f"internal error: {type(e).__name__}: {e}"))


async def _answer(state: ServerState, request: Request, task: str) -> Response:
    """Reads, checks and cuts the upload, has the batcher decode it, and renders the result."""
    batcher = state.batcher
    if state.closing or batcher is None:
        raise overloaded(state, "the server is shutting down")
    if batcher.pending >= state.config.max_queue:
        raise overloaded(state, f"the queue is full ({state.config.max_queue} requests); retry later")
    with batcher.arriving():
        form = await read_form(request, state.config.max_upload_bytes)
        try:
            options = request_options(form, task, state.served, state.config.beam, state.config.max_beam)
            data, name = await _file(form, state.config.max_upload_bytes)
        finally:
            await form.close()
        upload = await asyncio.to_thread(_prepare, state, data, name, options)
        try:
            job = batcher.submit((task, options.beam, options.direction), [c.wave for c in upload.chunks])
        except QueueFull:
            raise overloaded(state, f"the queue is full ({state.config.max_queue} requests); retry later") from None
        except ShuttingDown:
            raise overloaded(state, "the server is shutting down") from None
    texts = await _wait(state, request, job)
    language = state.served.output_language(task, options.direction)
    body, media = render(assemble(upload, texts), options.response_format, task, language)
    return Response(body, media_type=media, headers={"X-Request-Id": str(job.id)})


async def read_form(request: Request, limit: int) -> FormData:
    """The multipart form, its body at most `limit` bytes plus FORM_SLACK (413 beyond, before it is all read);
    400 for a malformed body."""
    if int(request.headers.get("content-length") or 0) > limit + FORM_SLACK:
        raise too_large(limit)
    seen = 0

    async def receive() -> dict:
        nonlocal seen
        message = await request.receive()
        seen += len(message.get("body", b""))
        if seen > limit + FORM_SLACK:
            raise UploadTooLarge()
        return message

    try:
        return await Request(request.scope, receive).form(max_files=1, max_fields=16)
    except UploadTooLarge:
        raise too_large(limit) from None
    except HTTPException as e:
        raise bad_request(None, f"malformed multipart form ({e.detail})") from None


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"file: the upload is larger than the server's limit ({limit / 2**20:g} MiB)", "file")


async def _file(form: FormData, limit: int) -> tuple[bytes, str]:
    """The uploaded file's bytes and name; 400 without one, 413 over `limit`."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise bad_request("file", "missing: send the audio as the multipart field 'file'")
    if upload.size is not None and upload.size > limit:
        raise too_large(limit)
    return await upload.read(), upload.filename or "upload"


def _prepare(state: ServerState, data: bytes, name: str, options: RequestOptions) -> Upload:
    """The upload decoded and cut into chunks (in a thread: it is CPU work); 400 for audio longer than
    `max_audio_seconds`."""
    wave, rate = decode_upload(data, name)
    if len(wave) / rate > state.config.max_audio_seconds:
        raise bad_request(
            "file",
            f"{name}: {len(wave) / rate:.1f} s of audio, more than the server's limit "
            f"({state.config.max_audio_seconds:g} s)",
        )
    lm = state.served.tasks[options.task]
    return cut_upload(wave, rate, name, state.segment(options), lm.min_input_samples)


async def _wait(state: ServerState, request: Request, job) -> list[list[str]]:
    """The job's texts; its chunks dropped when the client leaves (499, which nobody reads) or the request is
    cancelled (its timeout, a shutdown)."""
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({job.future, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not job.future.done():
            raise ApiError(499, "the client closed the connection")
        try:
            return job.future.result()
        except ShuttingDown:
            raise overloaded(state, "the server is shutting down") from None
        except Exception as e:
            raise ApiError(500, f"decoding failed: {type(e).__name__}: {e}") from None
    finally:
        gone.cancel()
        if not job.future.done():
            state.batcher.cancel(job)
            job.future.cancel()


async def _disconnect(request: Request) -> None:
    """Returns when the client has closed the connection (the body has been read: the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
