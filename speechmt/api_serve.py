"""The public API of `speechmt serve` (the front door the command calls): an OpenAI-compatible speech translation
server over a model, speechmt.serve; docs/serving.md."""

from __future__ import annotations

import speechmt.serve as _serve
from speechmt.serve import MissingExtraError, ServeConfig

__all__ = ["MissingExtraError", "ServeConfig", "serve"]


def serve(config: ServeConfig, log_level: str = "info") -> None:
    """Serves config.model on config.host:config.port until interrupted; MissingExtraError (one line) without the
    `serve` extra."""
    _serve.serve(config, log_level)
