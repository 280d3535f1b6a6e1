"""`speechmt convert OLD --out NEW --trust`: an old pickled checkpoint (torch.save, "speechmt-checkpoint-1")
rewritten in the safe format of speechmt.checkpoint ("speechmt-checkpoint-2", safetensors + JSON).

Unpickling can run any code the file asks for, so this is the one place in speechmt that unpickles, and only
when the caller says it trusts the file (`trust=True`, the command's --trust). Convert once, then use and
share the new file.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from speechmt.checkpoint import (FORMAT, PICKLE_FORMAT, CheckpointError, file_kind, load_checkpoint,
                                         save_checkpoint)


def convert_pickled_checkpoint(old: str | os.PathLike, out: str | os.PathLike, trust: bool = False) -> dict:
    """Unpickles the speechmt checkpoint `old` (only with `trust`) and writes it to `out` in FORMAT; the
    result is read back before returning. Returns {"model_tensors", "bytes"} of the new file."""
    old, out = Path(old), Path(out)
    if not old.is_file():
        raise CheckpointError(f"{old}: checkpoint not found")
    if file_kind(old) != "pickle":
        load_checkpoint(old)  # says what the file is: already converted, foreign, truncated
        raise CheckpointError(f"{old}: already a {FORMAT} file; nothing to convert")
    if not trust:
        raise CheckpointError(f"{old}: converting unpickles it, and a pickle can run any code; pass --trust "
                              "only if you trust where the file came from")
    try:
        state = torch.load(old, map_location="cpu", weights_only=False)  # trusted by the caller
    except Exception as e:  # an unpickler fails in many ways; all mean "not readable"
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CheckpointError(f"{old}: not a readable checkpoint, truncated or corrupt ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != PICKLE_FORMAT:
        raise CheckpointError(f"{old}: not a speechmt checkpoint (no '{PICKLE_FORMAT}' format tag)")
    save_checkpoint(out, state)
    converted = load_checkpoint(out)  # read back: the new file is complete
    return {"model_tensors": len(converted.get("model", {})), "bytes": out.stat().st_size}
