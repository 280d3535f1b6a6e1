"""The public API of `speechmt serve` (the front door the command calls): an OpenAI-compatible speech translation
server over a model, speechmt.serve; docs/serving.md."""

from __future__ import annotations

from speechmt.serve import MissingExtraError, ServeConfig, serve

__all__ = ["MissingExtraError", "ServeConfig", "serve"]
