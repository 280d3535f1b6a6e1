"""The server's settings: one dataclass, what `speechmt serve`'s options fill in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeConfig:
    """How `speechmt serve` batches, bounds and answers requests (docs/serving.md).

    Batching: the decoding thread waits at most `max_wait_ms` after the oldest queued chunk for more, and decodes
    at most `max_batch` chunks at once. Limits: at most `max_queue` requests waiting or decoding (more get 503
    with Retry-After: `retry_after_s`), uploads of at most `max_upload_mb` MiB (413) and `max_audio_seconds` of
    audio (400), an answer within `request_timeout_s` (504). Decoding: `beam` unless a request asks for another (up
    to `max_beam`), at most `max_len_b` tokens a chunk, audio cut at pauses into chunks of at most `max_chunk_seconds`.
    """

    model: str | None = None  # checkpoint path; None: the bundled English -> German model
    model_name: str | None = None  # the id /v1/models lists (default: the checkpoint's file stem)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # processes, each with its own copy of the model, taking connections from one socket
    device: str = "cpu"
    dtype: str = "float32"
    beam: int = 5
    max_beam: int = 16
    max_len_b: int = 200  # output tokens per chunk at most (translate's --max-len-b)
    max_batch: int = 8
    max_wait_ms: float = 30.0
    max_queue: int = 32
    max_streams: int = 2  # WebSocket streams decoding at once; more are refused (close code 1013)
    max_upload_mb: float = 25.0
    max_audio_seconds: float = 1800.0
    max_chunk_seconds: float = 20.0
    request_timeout_s: float = 300.0
    retry_after_s: int = 2
    shutdown_timeout_s: float = 30.0  # finishing what is in flight at shutdown; what is left then gets 503
    source_language: str | None = None  # ISO 639-1 code; None: what the model says, when it says it
    target_language: str | None = None

    def __post_init__(self) -> None:
        problems = [
            name
            for name, ok in (
                ("beam", 1 <= self.beam <= self.max_beam),
                ("max_batch", self.max_batch >= 1),
                ("max_len_b", self.max_len_b >= 1),
                ("max_wait_ms", 0 <= self.max_wait_ms <= 10_000),
                ("max_queue", self.max_queue >= 1),
                ("max_streams", self.max_streams >= 1),
                ("max_upload_mb", self.max_upload_mb > 0),
                ("max_audio_seconds", self.max_audio_seconds > 0),
                ("max_chunk_seconds", self.max_chunk_seconds > 1),
                ("request_timeout_s", self.request_timeout_s > 0),
                ("port", 0 <= self.port <= 65535),
                ("workers", self.workers >= 1),
            )
            if not ok
        ]
        if problems:
            raise ValueError(f"ServeConfig: invalid {', '.join(problems)}")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 2**20)
