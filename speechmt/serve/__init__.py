"""`speechmt serve`: an OpenAI-compatible speech translation server (docs/serving.md).

An ASGI app (Starlette, run by uvicorn) with OpenAI's `/v1/audio/translations` and `/v1/audio/transcriptions`,
dynamic batching of concurrent requests in one decoding thread (batcher), and the limits of a server (a bounded
queue, an upload limit, a request timeout, one JSON error line per bad request). Needs the `serve` extra:
`pip install 'speechmt[serve]'`.
"""

from __future__ import annotations

from speechmt.serve.config import ServeConfig

EXTRA_MODULES = ("starlette", "uvicorn", "multipart")


class MissingExtraError(ImportError):
    """A package of the `serve` extra is not installed (one line naming the extra)."""


def require_serve_extra() -> None:
    """MissingExtraError naming the `serve` extra when starlette, uvicorn or python-multipart is missing."""
    import importlib.util

    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        names = {"multipart": "python-multipart"}
        raise MissingExtraError(
            f"speechmt serve needs {', '.join(names.get(m, m) for m in missing)}: pip install 'speechmt[serve]'"
        )


def serve(config: ServeConfig, log_level: str = "info") -> None:
    """Serves config.model on config.host:config.port (speechmt.serve.server.serve) once the extra is checked."""
    require_serve_extra()
    from speechmt.serve.server import serve as _serve

    _serve(config, log_level)


__all__ = ["ServeConfig", "MissingExtraError", "require_serve_extra", "serve"]
