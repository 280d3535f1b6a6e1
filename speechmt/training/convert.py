"""`speechmt import convert OLD --out NEW --trust`: an old pickled checkpoint (torch.save, "speechmt-checkpoint-1")
rewritten in the safe format of speechmt.checkpoint ("speechmt-checkpoint-2", safetensors + JSON).

Unpickling can run any code the file asks for, so this is the one place in speechmt that unpickles, only when
the caller says it trusts the file (`trust=True`, the command's --trust), and even then through torch's restricted
unpickler (`weights_only=True`): tensors, numpy arrays and plain containers, numbers and strings (what speechmt 0.1
saved), never another global the file names, so a crafted file is refused as unreadable instead of running. Convert once, then use and
share the new file.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from speechmt.checkpoint import FORMAT, PICKLE_FORMAT, CheckpointError, file_kind, load_checkpoint, save_checkpoint


def _numpy_data() -> list:
    """The numpy constructors of arrays, dtypes and scalars: what a pickled array names, and nothing that runs
    code of the file's choosing."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    return [
        np.ndarray,
        np.dtype,
        core.multiarray._reconstruct,
        core.multiarray.scalar,
        *(getattr(np.dtypes, name) for name in getattr(np.dtypes, "__all__", ())),
    ]


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
        raise CheckpointError(
            f"{old}: converting unpickles it, and a pickle can run any code; pass --trust "
            "only if you trust where the file came from"
        )
    try:
        with torch.serialization.safe_globals(_numpy_data()):  # numpy arrays beside the tensors (features' CMVN)
            state = torch.load(old, map_location="cpu", weights_only=True)  # data only: no other global is run
    except Exception as e:  # an unpickler fails in many ways (a refused global too); all mean "not readable"
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CheckpointError(f"{old}: not a readable checkpoint, truncated or corrupt ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != PICKLE_FORMAT:
        raise CheckpointError(f"{old}: not a speechmt checkpoint (no '{PICKLE_FORMAT}' format tag)")
    save_checkpoint(out, state)
    converted = load_checkpoint(out)  # read back: the new file is complete
    return {"model_tensors": len(converted.get("model", {})), "bytes": out.stat().st_size}
