"""Running the app under uvicorn: `speechmt serve` (one process), and the factory that process managers and
`uvicorn --workers N` call in each worker (the settings from SPEECHMT_SERVE_* variables)."""

from __future__ import annotations

import dataclasses
import os

from speechmt.serve.config import ServeConfig


def serve(config: ServeConfig, log_level: str = "info") -> None:
    """Loads the model and serves it on config.host:config.port until SIGINT/SIGTERM, which stops taking
    connections and finishes the requests in flight (for up to config.shutdown_timeout_s). With
    config.workers > 1, uvicorn starts that many processes, each loading the model (`app_from_environment`)."""
    import uvicorn

    from speechmt.serve.app import create_app
    from speechmt.serve.models import load_served_model

    common = dict(
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=int(config.shutdown_timeout_s),
    )
    if config.workers > 1:
        os.environ.update(environment(config))
        uvicorn.run(f"{__name__}:app_from_environment", factory=True, workers=config.workers, **common)
        return
    uvicorn.run(create_app(load_served_model(config), config), **common)


def environment(config: ServeConfig) -> dict[str, str]:
    """The SPEECHMT_SERVE_* variables that `config_from_environment` reads back as `config`."""
    return {
        f"SPEECHMT_SERVE_{f.name.upper()}": str(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if getattr(config, f.name) is not None
    }


def config_from_environment(environ: os._Environ | dict[str, str] = os.environ) -> ServeConfig:
    """A ServeConfig whose fields are read from SPEECHMT_SERVE_<FIELD> variables (SPEECHMT_SERVE_MODEL,
    SPEECHMT_SERVE_MAX_BATCH, ...), the defaults elsewhere."""
    values = {}
    for f in dataclasses.fields(ServeConfig):
        text = environ.get(f"SPEECHMT_SERVE_{f.name.upper()}")
        if text is not None:
            kind = type(f.default) if f.default is not None else str
            values[f.name] = kind(text)
    return ServeConfig(**values)


def app_from_environment():
    """The ASGI app for `uvicorn --factory speechmt.serve.server:app_from_environment` (several workers: each
    loads its own copy of the model)."""
    from speechmt.serve.app import create_app
    from speechmt.serve.models import load_served_model

    config = config_from_environment()
    return create_app(load_served_model(config), config)
