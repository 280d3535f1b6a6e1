"""The Python API's model conversion, what `speechmt import ...` does: a Hugging Face Speech2Text model into a
speechmt checkpoint (`import_hf`), Whisper weights in CTranslate2's format (`import_whisper`) and a causal LM in GGUF
format (`import_gguf`) into Hugging Face folders, and an old pickled checkpoint into the safe format (`convert`).
Each raises speechmt.interop.HFImportError or speechmt.checkpoint.CheckpointError, one line naming the file, for
input it cannot convert.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal


def import_hf(
    source: str | os.PathLike, out: str | os.PathLike, *, tgt_lang: str | None = None, task: Literal["st", "asr"] = "st"
) -> Path:
    """Converts a Hugging Face Speech2Text model (a local folder, or a hub id such as
    facebook/s2t-small-mustc-en-de-st) into the speechmt checkpoint `out`; `tgt_lang`: a multilingual model's target
    language (its <lang:xx> tag). Returns `out`."""
    from speechmt.interop.hf_s2t import import_hf_s2t

    return import_hf_s2t(source, out, tgt_lang=tgt_lang, task=task)


def import_whisper(ct2_dir: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Converts a CTranslate2 Whisper folder (faster-whisper's model.bin, config.json, tokenizer.json) into a
    Hugging Face Whisper folder `out` that transformers loads offline; the folder appears complete or not at all.
    Returns `out`."""
    from speechmt.interop.whisper_ct2 import import_whisper as _import

    return _import(ct2_dir, out)


def import_gguf(
    gguf_file: str | os.PathLike,
    out: str | os.PathLike,
    *,
    dtype: Literal["float32", "bfloat16", "float16"] = "float32",
) -> Path:
    """Converts a causal LM in GGUF format (llama.cpp's file, e.g. Gemma 3; needs the `gguf` extra) into a Hugging
    Face folder `out`, dequantised to `dtype`; the folder appears complete or not at all. Returns `out`."""
    from speechmt.interop.gguf import import_gguf as _import

    return _import(gguf_file, out, dtype=dtype)


def convert(old: str | os.PathLike, out: str | os.PathLike, *, trust: bool = False) -> dict[str, int]:
    """Rewrites an old pickled checkpoint (.pt) as a safe .safetensors file `out`. Unpickling can run code: it is
    done only with `trust`, for a file from a source you trust. Returns {"model_tensors", "bytes"} of `out`."""
    from speechmt.training.convert import convert_pickled_checkpoint

    return convert_pickled_checkpoint(old, out, trust=trust)
