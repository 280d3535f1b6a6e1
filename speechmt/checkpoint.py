"""Checkpoints: one file with everything needed to rebuild, translate with, or resume a model.

Contents: {"model_config", "model", "tokenizers", "features", "train_config", "train_state", ...}.

Format "speechmt-checkpoint-2" is one safetensors file, so that loading one cannot run code (a pickle can):
- every tensor of the nested state is a safetensors entry named by its path in the state, e.g.
  "model/decoder.embed.weight", "train_state/optimizer/state/0/exp_avg"; bytes (SentencePiece protos) and
  numpy arrays (numpy's RNG state) are uint8 entries too;
- everything else is one JSON document in the header metadata, {"format": FORMAT, "state": json}, where
  {"$tensor": name} stands for a tensor, and tuples, dicts with non-string keys, bytes, numpy arrays and
  non-finite floats are tagged objects ({"$tuple": [...]}, {"$dict": [[key, value], ...]}, ...).
A tensor that is another one (tied embeddings) is stored once and both names load as the same tensor.
Files are recognised by content, not by name: an old pickled checkpoint (torch.save, speechmt 0.1) is
refused with the `speechmt import convert` command that converts one. Writes are atomic (temporary file, fsync,
rename), so a crash leaves the previous checkpoint intact.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

FORMAT = "speechmt-checkpoint-2"
PICKLE_FORMAT = "speechmt-checkpoint-1"  # torch.save pickles, refused; `speechmt import convert` reads them
_NUMPY_TYPES = (np.bool_, np.integer, np.floating)  # numpy dtypes stored as raw bytes


def _raw_numpy(dtype: np.dtype) -> bool:
    """True for the numpy dtypes a checkpoint stores as raw bytes: bool, signed and unsigned int, float."""
    return any(np.issubdtype(dtype, t) for t in _NUMPY_TYPES)


class CheckpointError(ValueError):
    """A file that is not a usable speechmt checkpoint; the message names it and says why."""


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Writes `state` (a nested dict; a "format" key is ignored) to `path` atomically, as FORMAT."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encoder = _Encoder()
    doc = encoder.encode({k: v for k, v in state.items() if k != "format"}, ())
    metadata = {"format": FORMAT, "state": json.dumps(doc, ensure_ascii=False, allow_nan=False)}
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.touch()  # the permissions of any new file here (safetensors would make it owner-only)
        mode = tmp.stat().st_mode
        save_file(encoder.tensors, tmp, metadata=metadata)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Reads a checkpoint (with "format" added), tensors on `map_location`; never unpickles. Raises
    CheckpointError (one line) for a missing, old pickled, foreign, truncated or corrupt file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    _check_kind(path)
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            metadata = f.metadata() or {}
            _check_format(path, metadata)
            state = _Decoder(f, torch.device(map_location)).decode(json.loads(metadata["state"]))
    except CheckpointError:
        raise
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt ({reason})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt (its state is not a dict)")
    return {"format": FORMAT, **state}


def file_kind(path: str | os.PathLike) -> str:
    """ "pickle" (torch.save's zip or a bare pickle), "safetensors" or "other", by the first bytes."""
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{":  # 8-byte header length, then the JSON header (checked first:
        return "safetensors"  # a length whose low byte is 0x80 would look like a pickle's protocol mark)
    if head.startswith(b"PK") or head.startswith(b"\x80"):
        return "pickle"
    return "other"


def _check_kind(path: Path) -> None:
    kind = file_kind(path)
    if kind == "pickle":
        raise CheckpointError(
            f"{path}: an old pickled speechmt checkpoint; pickles can run code, so it is not "
            f"loaded. Convert it once, if you trust its source: speechmt import convert {path} --out "
            "NEW.safetensors --trust"
        )
    if kind == "other":
        what = "an empty file" if path.stat().st_size == 0 else "neither safetensors nor an old pickled checkpoint"
        raise CheckpointError(f"{path}: not a speechmt model file ({what})")


def _check_format(path: Path, metadata: dict[str, str]) -> None:
    found = metadata.get("format")
    if found != FORMAT or "state" not in metadata:
        what = (
            f"format {found!r}; this speechmt reads {FORMAT!r}"
            if found and found != FORMAT
            else f"a safetensors file without the {FORMAT!r} format tag and state"
        )
        raise CheckpointError(f"{path}: not a speechmt model file ({what})")


LONG_STRING = 4096  # characters; longer strings are stored as UTF-8 tensors, not inside the JSON header


class _Encoder:
    """Turns a nested state into a JSON document and the flat {name: tensor} dict safetensors stores."""

    def __init__(self):
        self.tensors: dict[str, torch.Tensor] = {}
        self._views: dict[tuple, str] = {}  # an identical view (tied weights) -> the entry holding it
        self._storages: set[tuple] = set()  # storages already stored (a partial view of one is copied)

    def encode(self, value: Any, path: tuple[str, ...]) -> Any:
        kind = type(value)
        if kind is str and len(value) > LONG_STRING:  # e.g. a tokenizer's JSON: stored once, not escaped twice
            return {"$str": self._add(_uint8(value.encode("utf-8")), path)}
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, torch.Tensor):
            return {"$tensor": self._tensor(value, path)}
        if kind is list:
            return [self.encode(v, (*path, str(i))) for i, v in enumerate(value)]
        if kind is tuple:
            return {"$tuple": [self.encode(v, (*path, str(i))) for i, v in enumerate(value)]}
        if isinstance(value, dict):  # an OrderedDict (state_dict()) comes back as a dict
            return self._dict(value, path)
        if kind is bytes:
            return {"$bytes": self._add(_uint8(value), path)}
        if isinstance(value, (np.ndarray, np.generic)) and _raw_numpy(value.dtype):
            return self._numpy(value, path)
        raise TypeError(
            f"cannot store a {kind.__name__} in a checkpoint (at {'/'.join(path) or 'the top'}): "
            "checkpoints hold tensors, numbers, strings, bytes, None, lists, tuples, dicts, numpy arrays"
        )

    def _dict(self, value: dict, path: tuple[str, ...]) -> dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: self.encode(v, (*path, k)) for k, v in value.items()}
        return {"$dict": [[self.encode(k, (*path, "key")), self.encode(v, (*path, str(k)))] for k, v in value.items()]}

    def _numpy(self, value: np.ndarray | np.generic, path: tuple[str, ...]) -> dict:
        array = np.asarray(value)
        return {
            "$ndarray": self._add(_uint8(array.tobytes()), path),
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            **({"scalar": True} if isinstance(value, np.generic) else {}),
        }

    def _tensor(self, t: torch.Tensor, path: tuple[str, ...]) -> str:
        """The entry name holding `t`: an earlier one when `t` is the same view of the same storage."""
        t = t.detach()
        if t.layout != torch.strided:
            raise TypeError(f"cannot store a {t.layout} tensor in a checkpoint (at {'/'.join(path)})")
        if t.numel() == 0:
            return self._add(t.cpu().contiguous(), path)
        storage = (t.device, t.untyped_storage().data_ptr())
        view = (*storage, t.dtype, t.storage_offset(), tuple(t.shape), t.stride())
        if view in self._views:
            return self._views[view]
        shared = storage in self._storages
        self._storages.add(storage)
        t = t.cpu()
        stored = t.clone(memory_format=torch.contiguous_format) if shared else t.contiguous()
        self._views[view] = name = self._add(stored, path)
        return name

    def _add(self, t: torch.Tensor, path: tuple[str, ...]) -> str:
        name = base = "/".join(path) or "tensor"
        n = 1
        while name in self.tensors:  # a key holding "/" can spell another path
            name, n = f"{base}#{n}", n + 1
        self.tensors[name] = t
        return name


def _uint8(data: bytes) -> torch.Tensor:
    """`data` as a 1-D uint8 tensor (a copy)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


class _Decoder:
    """Rebuilds the nested state from the JSON document and the file's entries (each read once)."""

    def __init__(self, f, device: torch.device):
        self.f, self.device, self._read, self._moved = f, device, {}, {}

    def entry(self, name: str) -> torch.Tensor:
        """The entry `name` on the CPU."""
        if name not in self._read:
            self._read[name] = self.f.get_tensor(name)
        return self._read[name]

    def tensor(self, name: str) -> torch.Tensor:
        """The entry `name` on the device, one tensor however many names refer to it (tied weights)."""
        if name not in self._moved:
            t = self.entry(name)
            self._moved[name] = t if self.device.type == "cpu" else t.to(self.device)
        return self._moved[name]

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        tag = next((k for k in value if k.startswith("$")), None)
        if tag is None:
            return {k: self.decode(v) for k, v in value.items()}
        if tag == "$tensor":
            return self.tensor(value[tag])
        if tag == "$tuple":
            return tuple(self.decode(v) for v in value[tag])
        if tag == "$dict":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in value[tag]}
        if tag == "$float":
            return float(value[tag])
        if tag == "$bytes":
            return self.entry(value[tag]).numpy().tobytes()
        if tag == "$str":
            return self.entry(value[tag]).numpy().tobytes().decode("utf-8")
        if tag == "$ndarray":
            return self._numpy(value)
        raise ValueError(f"unknown tag {tag!r} in the state")

    def _numpy(self, value: dict) -> np.ndarray | np.generic:
        dtype = np.dtype(value["dtype"])
        if not _raw_numpy(dtype):
            raise ValueError(f"numpy dtype {dtype} is not one a checkpoint holds")
        array = np.frombuffer(self.entry(value["$ndarray"]).numpy().tobytes(), dtype=dtype).reshape(value["shape"])
        return array[()] if value.get("scalar") else array.copy()


def _hashable(key: Any) -> Any:
    if isinstance(key, (list, dict)):
        raise ValueError(f"a dict key of type {type(key).__name__} in the state")
    return key


def average_checkpoints(paths: list[str | os.PathLike]) -> dict[str, Any]:
    """The first checkpoint with its model weights replaced by the mean over all `paths` (float math,
    cast back to each tensor's dtype); integer buffers are taken from the last checkpoint."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    states = [load_checkpoint(p)["model"] for p in paths]
    keys = list(states[0])
    for p, s in zip(paths, states):
        if list(s) != keys:
            raise CheckpointError(f"{p}: its parameters differ from {paths[0]}'s; cannot average")
    averaged, done = {}, {}  # done: tied tensors (one object under two names) are averaged once
    for k in keys:
        if id(states[0][k]) in done:
            averaged[k] = done[id(states[0][k])]
        elif states[0][k].is_floating_point():
            averaged[k] = (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
        else:
            averaged[k] = states[-1][k]
        done[id(states[0][k])] = averaged[k]
    result = load_checkpoint(paths[0])
    result["model"] = averaged
    result.pop("train_state", None)
    result["averaged_from"] = [str(p) for p in paths]
    return result


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over the names, shapes, dtypes and bytes of a state dict's tensors (floats as float32)."""
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        t = t.detach().cpu()
        t = t.float() if t.is_floating_point() else t
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()
