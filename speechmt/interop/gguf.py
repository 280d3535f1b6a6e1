"""Imports a causal language model in GGUF format (llama.cpp's single-file format, e.g. Gemma 3 270M in Q4_K_M)
into a plain Hugging Face folder that `AutoModelForCausalLM.from_pretrained(folder)` and
`AutoTokenizer.from_pretrained(folder)` load offline, with no GGUF reader.

transformers reads the file itself (`from_pretrained(dir, gguf_file=name)`, which needs the `gguf` and
`accelerate` packages) and dequantises every tensor to float32; this module only writes what it read:
- model.safetensors: the model's state dict (in float32, or rounded to --dtype). Tied tensors (the output
  layer that is the input embedding) are stored once, under the name transformers keeps, and tied again on
  load; `save_pretrained` refuses a GGUF-loaded model, hence safetensors directly.
- config.json (without the GGUF quantization entry, so the folder loads as plain weights),
  generation_config.json, and the tokenizer as `save_pretrained` writes it (tokenizer.json, tokenizer_config.json).
Only the file's header (magic, version, metadata, tensor shapes) is read here, to give one clear error for a file
that is not GGUF, holds an architecture transformers does not read, or lacks what the model needs (transformers
would fill missing metadata with its defaults and missing tensors with random values).

Usage: `import_gguf(file, out_dir)`; `speechmt import gguf FILE --out DIR` on the command line.
"""

from __future__ import annotations

import importlib.util
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, TypeVar

import torch

from speechmt.interop import HFImportError
from speechmt.interop.folders import write_folder

__all__ = ["DTYPES", "GGUFHeader", "import_gguf", "load_gguf", "read_gguf_header", "untied_state_dict"]

T = TypeVar("T")
MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 1 << 26  # longer metadata strings (64 MiB) mean a corrupt file; chat templates are a few KiB
_NOT_ARCHITECTURES = {"general", "tokenizer"}  # keys of transformers' GGUF mapping beside the architectures
_LOAD_OPTIONS = ("is_local", "local_files_only", "gguf_file")  # how the tokenizer was loaded, not what it is


class GGUFHeader(dict):
    """What a GGUF file says before its tensor data: `version`, `tensor_count`, `kv_count`, `elements` (the
    number of values in all its tensors) and the `general.*` metadata (architecture, name, license, ...),
    keys without `general.`."""


class _HeaderReader:
    """Little-endian reads from the start of a GGUF file; running past its end is a truncated file."""

    def __init__(self, f: BinaryIO, path: Path):
        self.f, self.path = f, path

    def take(self, n: int) -> bytes:
        raw = self.f.read(n)
        if len(raw) < n:
            raise HFImportError(f"{self.path}: truncated GGUF file (ends inside its header)")
        return raw

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self) -> str:
        n = self.unpack("Q")
        if n > _MAX_STRING:
            raise HFImportError(f"{self.path}: corrupt GGUF header (a string of {n} bytes)")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int):
        """One metadata value of type `kind`; arrays are skipped (returned as None)."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("I"), self.unpack("Q")
            if item in _SCALARS:
                self.f.seek(count * struct.calcsize("<" + _SCALARS[item]), os.SEEK_CUR)
            else:
                for _ in range(count):
                    self.value(item)
            return None
        raise HFImportError(f"{self.path}: corrupt GGUF header (unknown value type {kind})")

    def tensor_elements(self) -> int:
        """Reads one tensor's description (name, dims, type, offset); returns its number of values."""
        self.string()
        n = 1
        for _ in range(self.unpack("I")):
            n *= self.unpack("Q")
        self.take(12)  # ggml type (u32), data offset (u64)
        return n


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """The header of a GGUF file (versions 2 and 3): counts, `general.*` metadata and the number of values its
    tensors hold; the tokenizer's arrays are skipped, the tensor data not read. Errors (no file, not GGUF,
    truncated, no architecture): HFImportError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise HFImportError(f"{path}: no such file (expected a GGUF model file)")
    with path.open("rb", buffering=1 << 20) as f:
        magic = f.read(4)
        if magic != MAGIC:
            raise HFImportError(f"{path}: not a GGUF file (starts with {magic!r}, not {MAGIC!r})")
        r = _HeaderReader(f, path)
        header = GGUFHeader(version=r.unpack("I"))
        if header["version"] not in SUPPORTED_VERSIONS:
            raise HFImportError(
                f"{path}: GGUF version {header['version']} is not supported (expected "
                f"{' or '.join(map(str, SUPPORTED_VERSIONS))})"
            )
        header["tensor_count"], header["kv_count"] = r.unpack("Q"), r.unpack("Q")
        for _ in range(header["kv_count"]):
            key = r.string()
            value = r.value(r.unpack("I"))
            if key.startswith("general."):
                header[key.removeprefix("general.")] = value
        header["elements"] = sum(r.tensor_elements() for _ in range(header["tensor_count"]))
    if not isinstance(header.get("architecture"), str):
        raise HFImportError(f"{path}: GGUF file without general.architecture")
    return header


def _check_readable(path: Path, header: GGUFHeader) -> None:
    """One-line errors for what transformers would fail on: a missing package, an architecture it lacks."""
    missing = [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]
    if missing:
        raise HFImportError(
            f"{path}: reading GGUF needs the {' and '.join(missing)} package(s) of speechmt's gguf "
            "extra: pip install 'speechmt[gguf]'"
        )
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if header["architecture"] not in set(GGUF_SUPPORTED_ARCHITECTURES) - _NOT_ARCHITECTURES:
        import transformers

        raise HFImportError(
            f"{path}: architecture {header['architecture']!r} is not one transformers "
            f"{transformers.__version__} reads from GGUF (it reads "
            f"{', '.join(sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - _NOT_ARCHITECTURES))})"
        )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _transformers(path: Path, read: Callable[[], T]) -> T:
    """`read()`, with transformers' failures on the file as one-line HFImportErrors naming it."""
    try:
        return read()
    except HFImportError:
        raise
    except (ValueError, KeyError, NotImplementedError, OSError, RuntimeError, ImportError, IndexError) as e:
        raise HFImportError(f"{path}: transformers cannot read it as a causal LM ({_first_line(e)})") from None


@contextmanager
def _errors_only() -> Iterator[None]:
    """transformers' logging at error level inside the block (its progress bars stay)."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _check_size(path: Path, config, elements: int) -> None:
    """Refuses a file whose metadata describe a larger model than its tensors hold (transformers fills what the
    metadata lack with its defaults, e.g. a 7B Llama), before any memory is taken for it."""
    from transformers import AutoModelForCausalLM

    if elements == 0:
        raise HFImportError(f"{path}: the GGUF file holds no tensors")
    with torch.device("meta"):
        model = _transformers(path, lambda: AutoModelForCausalLM.from_config(config))
    n = sum(p.numel() for p in model.parameters())
    if n > elements:
        raise HFImportError(
            f"{path}: its metadata describe a {type(model).__name__} of {n:,} parameters, but its "
            f"tensors hold {elements:,} values (metadata or tensors missing)"
        )


def load_gguf(path: Path, header: GGUFHeader, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) as transformers reads them from the GGUF file, the model dequantised to `dtype`, in
    eval mode. A model larger than the file, or one with weights the file lacks (which transformers would
    leave random), is refused with an HFImportError, as are transformers' own failures on the file."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    # an absolute gguf_file: transformers takes a bare name in the working directory first
    where = dict(pretrained_model_name_or_path=str(path.resolve().parent), gguf_file=str(path.resolve()))
    config = _transformers(path, lambda: AutoConfig.from_pretrained(**where))
    _check_size(path, config, header["elements"])
    with _errors_only():  # its load report of missing weights would repeat the error below in a table
        model, info = _transformers(
            path,
            lambda: AutoModelForCausalLM.from_pretrained(**where, config=config, dtype=dtype, output_loading_info=True),
        )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise HFImportError(
            f"{path}: {len(missing)} weights of {type(model).__name__} are not in the file: "
            f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}"
        )
    tokenizer = _transformers(path, lambda: AutoTokenizer.from_pretrained(**where))
    return model.eval(), tokenizer


def untied_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with each tensor stored once, contiguous, as safetensors needs: a tied copy that
    transformers re-ties on load (`model.all_tied_weights_keys`, target -> source) is dropped; any other
    tensor sharing memory with another is cloned."""
    state = model.state_dict()
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    for target, source in tied.items():
        if target in state and source in state and state[target].data_ptr() == state[source].data_ptr():
            del state[target]
    seen: set[int] = set()
    out = {}
    for name, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr()
        out[name] = tensor.detach().clone() if ptr in seen else tensor.detach().contiguous()
        seen.add(ptr)
    return out


def _plain_config(model):
    """The model's config as a plain (unquantised) checkpoint's: no GGUF quantization entry, its class named."""
    config = model.config
    config.__dict__.pop("quantization_config", None)
    config.architectures = [type(model).__name__]
    return config


def _write_folder(model, tokenizer, folder: Path) -> None:
    """config.json, generation_config.json, model.safetensors and the tokenizer files into `folder`."""
    from safetensors.torch import save_file

    _plain_config(model).save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    save_file(untied_state_dict(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    for key in _LOAD_OPTIONS:
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.save_pretrained(folder)


def import_gguf(gguf_file: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "float32") -> Path:
    """Converts a GGUF causal LM into a Hugging Face folder at `out_dir` (config.json, generation_config.json,
    model.safetensors in `dtype`, tokenizer files). The folder is written next to `out_dir` under a temporary
    name and renamed into place at the end (an existing `out_dir` is replaced). Returns `out_dir`. Errors (no
    file, not GGUF, truncated, an architecture transformers does not read as a causal LM, metadata or tensors
    missing): HFImportError, one line naming the file."""
    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    if dtype not in DTYPES:
        raise HFImportError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    header = read_gguf_header(gguf_file)
    _check_readable(gguf_file, header)
    model, tokenizer = load_gguf(gguf_file, header, DTYPES[dtype])

    return write_folder(out_dir, lambda tmp: _write_folder(model, tokenizer, tmp))
