"""Type and range checks of configuration values against the dataclass fields they set.

`check_override("train.lr=abc")` checks one `section.key=value` of `speechmt train` as it is parsed (the
argparse type of those arguments; the key may be a dotted path into a nested dataclass, model.encoder.layers);
`check_config(cfg)` checks a whole loaded ExperimentConfig, nested dataclasses included, so that values
from a YAML file are held to the same rules. Both raise ConfigError, one line naming the option, the value
and what is allowed. Values are YAML scalars, as `apply_overrides` reads them; a float field also takes a
number YAML 1.1 reads as a string ("1e-3"), and `check_config` converts it.

Types come from the dataclass annotations; ranges from RANGES below (integers and floats not named there
need only be integers, or finite numbers).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any

import yaml



class ConfigError(ValueError):
    """A configuration that cannot be used; one line naming the option or file."""


def read_yaml_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A YAML file's top-level mapping ({} for an empty file). FileNotFoundError for a missing file;
    ConfigError, one line, for a file that is not YAML ("conf.yaml:2:1: not valid YAML: expected the node
    content, but found '<stream end>'", line and column 1-based) or whose top level is not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: config file not found")
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a mapping {what}")
    return d


def raise_problems(what: str, checklist: list, subject: str = "") -> None:
    """ValueError "<what>: [<subject> ]<problem>; <problem>" for the entries of `checklist` that are messages (a check
    that passed leaves False or None there); nothing when all passed. The one way a config dataclass checks
    itself in __post_init__ (model sections, variant options, stages), its entries written with the
    helpers below so that every message says the same thing the same way."""
    problems = [p for p in checklist if p]
    if problems:
        raise ValueError(f"{what}: {subject + ' ' if subject else ''}" + "; ".join(problems))


def count_problem(name: str, value: Any, least: int, note: str = "") -> str | None:
    """"<name> must be an integer >= <least>, got <value>" unless value is one (a bool is not); `note` is added
    in parentheses."""
    if not isinstance(value, bool) and isinstance(value, int) and value >= least:
        return None
    return f"{name} must be an integer >= {least}{f' ({note})' if note else ''}, got {value!r}"


def number_problem(name: str, value: Any, lo: float = 0, lo_in: bool = True, hi: float | None = None,
                   hi_in: bool = True) -> str | None:
    """"<name> must be a finite number > 0, got <value>" (the range as describe_range says it) unless value is
    a finite number (not a bool) in it."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > lo or (lo_in and value == lo)) and (hi is None or value < hi or (hi_in and value == hi))
    return None if ok else f"{name} must be a finite number {describe_range(lo, hi, lo_in, hi_in)}, got {value!r}"


def choice_problem(name: str, value: Any, choices: tuple) -> str | None:
    """"<name> must be one of a, b, got <value>" unless value is one of `choices`."""
    return None if value in choices else f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}"


def bool_problem(name: str, value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{name} must be true or false, got {value!r}"


# (lowest, highest, lowest allowed itself, highest allowed itself); None: unbounded
_AT_LEAST_1 = (1, None, True, True)
_AT_LEAST_0 = (0, None, True, True)
_POSITIVE = (0, None, False, True)
_PROBABILITY = (0, 1, True, False)  # [0, 1)
_WEIGHT = (0, 1, True, True)  # [0, 1]
RANGES: dict[str, tuple] = {
    **{f"data.{k}": _AT_LEAST_1 for k in ("max_tokens",)},
    **{f"data.{k}": _AT_LEAST_0 for k in ("max_sentences", "num_workers")},
    "train.threads": _AT_LEAST_0,
    **{f"train.{k}": _AT_LEAST_1 for k in ("update_freq", "log_interval")},
    # max_updates 0 writes the model as built and initialised (a pretrained model as it is, parts composed
    # by train.init_from) without training it
    **{f"train.{k}": _AT_LEAST_0 for k in ("max_updates", "warmup_updates", "max_epochs", "save_interval_updates", "keep_last",
                                           "validate_interval_updates", "seed", "clip_norm", "weight_decay")},
    "train.lr": _POSITIVE,
    "train.label_smoothing": _PROBABILITY,
    "train.ctc_weight": _WEIGHT,
    **{f"model.{k}": _AT_LEAST_1 for k in ("d_model", "n_heads", "ffn_dim", "encoder.input_dim",
                                           "encoder.conv_channels", "encoder.mask_time_length", "decoder.layers",
                                           "shrink.channels", "shrink.kernel", "lora.rank")},
    **{f"model.{k}": _AT_LEAST_0 for k in ("tgt_vocab_size", "src_vocab_size", "position_offset", "pad_id",
                                           "encoder.layers", "text_encoder.layers")},
    **{f"model.{k}": _PROBABILITY for k in ("dropout", "attention_dropout", "activation_dropout",
                                            "encoder.mask_time_prob", "lora.dropout")},
    "model.encoder.layerdrop": _WEIGHT,
    "model.lora.alpha": _POSITIVE,
}
# pretrain-audio's flat options (speechmt.training.pretrain_audio.PretrainAudioConfig)
PRETRAIN_RANGES: dict[str, tuple] = {
    **{k: _AT_LEAST_1 for k in ("max_updates", "max_tokens", "mask_length", "log_interval")},
    **{k: _AT_LEAST_0 for k in ("warmup_updates", "max_sentences", "min_masks", "seed", "save_interval_updates",
                                "weight_decay", "clip_norm")},
    "lr": _POSITIVE,
}
DEVICE_FIELDS = {"train.device", "device"}  # "auto" or a device this machine has


class _Mismatch(Exception):
    """A value that does not fit a type; the message says what would."""


def check_override(item: str, sections: dict[str, type]) -> str:
    """Checks one `section.key=value` override of a field of the dataclass `sections[section]` (the
    ExperimentConfig's: speechmt.config.SECTIONS), `key` a dotted path through nested dataclasses
    (model.encoder.layers); returns `item`. Malformed items, unknown sections and keys (older flat names
    too) are left to `load_config`, which names or migrates them."""
    key, sep, text = item.partition("=")
    section, *path = key.split(".")
    cls = sections.get(section)
    if not sep or not path or cls is None:
        return item
    for name in path[:-1]:  # down to the dataclass holding the last name
        cls = _hints(cls).get(name)
        if not dataclasses.is_dataclass(cls):
            return item
    if path[-1] in _hints(cls) and not dataclasses.is_dataclass(_hints(cls)[path[-1]]):
        check_field(cls, path[-1], _yaml_scalar(text), key, raw=text)
    return item


def check_key_value(cls: type, item: str, ranges: dict[str, tuple] = PRETRAIN_RANGES) -> str:
    """Checks one `key=value` of a flat dataclass config (pretrain-audio's --set); returns `item`.
    Malformed items and unknown keys are left to the config's loader."""
    key, sep, text = item.partition("=")
    if sep and key in _hints(cls):
        check_field(cls, key, _yaml_scalar(text), key, raw=text, ranges=ranges)
    return item


def check_config(cfg: Any, sections: dict[str, type]) -> Any:
    """Checks every field of `cfg`'s sections (attribute name -> dataclass) against its type and range, and
    converts what YAML left as a string or an int in a float field (e.g. lr: 1e-3) in place; returns cfg.
    Raises ConfigError naming the first bad field."""
    for section, cls in sections.items():
        _check_dataclass(getattr(cfg, section), cls, section)
    return cfg


def _check_dataclass(part: Any, cls: type, label: str) -> None:
    """check_config of one dataclass instance, recursing into the fields that hold dataclasses."""
    for name, hint in _hints(cls).items():
        value = getattr(part, name)
        if dataclasses.is_dataclass(hint):
            _check_dataclass(value, hint, f"{label}.{name}")
            continue
        checked = check_field(cls, name, value, f"{label}.{name}")
        if checked is not value:
            setattr(part, name, checked)


def check_field(cls: type, name: str, value: Any, label: str, raw: str | None = None,
                ranges: dict[str, tuple] = RANGES) -> Any:
    """`value` as field `name` of dataclass `cls` holds it (a float for an int or numeric string in a float
    field, a tuple for a list), or ConfigError: "invalid value 'abc' for train.lr: expected a finite number".
    `label` names the field in messages and is its key in `ranges`."""
    shown = repr(raw) if raw is not None else repr(value)
    try:
        checked = _coerce(value, _hints(cls)[name])
    except _Mismatch as e:
        raise ConfigError(f"invalid value {shown} for {label}: expected {e}") from None
    if label in DEVICE_FIELDS and checked != "auto":
        problem = device_problem(checked)
        if problem:
            raise ConfigError(f"invalid value {shown} for {label}: {problem.replace('expected', 'expected auto,')}")
    bounds = ranges.get(label)
    if bounds is not None and isinstance(checked, (int, float)) and not isinstance(checked, bool):
        lo, hi, lo_in, hi_in = bounds
        below = lo is not None and (checked < lo or (checked == lo and not lo_in))
        above = hi is not None and (checked > hi or (checked == hi and not hi_in))
        if below or above:
            kind = "an integer" if isinstance(checked, int) else "a number"
            raise ConfigError(f"invalid value {shown} for {label}: expected {kind} {describe_range(*bounds)}")
    return checked


def describe_range(lo, hi, lo_in: bool = True, hi_in: bool = True) -> str:
    """">= 1", "> 0", "in [0, 1)", "from 1 to 256" (integers, both ends allowed)."""
    if lo is not None and hi is not None:
        return f"in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"
    if lo is not None:
        return f"{'>=' if lo_in else '>'} {lo}"
    if hi is not None:
        return f"{'<=' if hi_in else '<'} {hi}"
    return ""


def device_problem(name: str) -> str | None:
    """Why `name` is not a device this machine has (cpu, cuda, cuda:N with CUDA, mps on Apple), or None."""
    import torch

    known = "expected cpu, cuda, cuda:N or mps"
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        return f"not a known device; {known}"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device found"
            return f"CUDA is not available on this machine ({why}); use cpu"
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        return "MPS (Apple GPU) is not available on this machine; use cpu"
    elif dev.type not in ("cpu", "cuda", "mps"):
        return f"not a device speechmt runs on; {known}"
    return None


def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


def _yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # load_config will say so; as a string it fails any non-string field here


def _coerce(value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        problems = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option)
            except _Mismatch as e:
                problems.append(str(e))
        raise _Mismatch(" or ".join(problems + (["null"] if type(None) in args else [])))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch("true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch("an integer")
    if hint is float:
        number = _float(value)
        if number is None or not math.isfinite(number):
            raise _Mismatch("a finite number")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        if value is None:
            return ""
        if isinstance(value, bool):  # YAML 1.1 reads no, yes, on, off as booleans
            raise _Mismatch("a string (YAML reads yes, no, on and off as booleans: quote the value)")
        if isinstance(value, (int, float)):
            return str(value)
        raise _Mismatch("a string")
    if hint is dict or origin is dict:
        if isinstance(value, dict):
            return value
        raise _Mismatch("a mapping, e.g. {key: value}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            examples = [_EXAMPLES.get(a) for a in args if a is not Ellipsis]
            raise _Mismatch(f"a list, e.g. [{', '.join(examples)}]" if examples and all(examples) else "a list")
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        inner = list(args) if fixed else [args[0] if args else Any] * len(value)
        what = f"a list of {len(args)} values" if fixed else "a list of values"
        if len(value) != len(inner):
            raise _Mismatch(what)
        try:
            items = [_coerce(v, a) for v, a in zip(value, inner)]
        except _Mismatch as e:
            raise _Mismatch(f"{what}, each {e}") from None
        return tuple(items) if origin is tuple else items
    return value  # Any, or a type this module does not know: the dataclass decides


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


_EXAMPLES = {int: "1", float: "0.5", str: "a", bool: "true"}
