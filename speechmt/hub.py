"""Where pretrained models come from: a local folder, a name that set-up converted under $SPEECHMT_HOME
(`whisper-base`, `gemma-3-270m`), or a Hugging Face hub id (for users who are online)."""

from __future__ import annotations

import os
from pathlib import Path


def speechmt_home() -> Path:
    """Where set-up puts converted pretrained models: $SPEECHMT_HOME, by default ~/.cache/speechmt."""
    return Path(os.environ.get("SPEECHMT_HOME") or Path.home() / ".cache" / "speechmt")


def resolve_pretrained(name_or_path: str) -> str:
    """A local folder as it is; a name that set-up converted ($SPEECHMT_HOME/<name>) as that folder; anything
    else (a hub id) unchanged, for from_pretrained."""
    if Path(name_or_path).is_dir():
        return name_or_path
    local = speechmt_home() / name_or_path
    return str(local) if local.is_dir() else name_or_path
