"""One way to check a value: configuration fields, variant options and command-line options.

What a value may be is declared once, where the option is: a config or options dataclass field carries a
`Check` in its metadata (`memory: int = checked(64, lo=1)`), and a command-line option's argparse type is
built from one (`integer(1, 256)`). One checker reads them, and every message says the same thing the same
way, one line naming the option, the value and what is allowed:

    speechmt train: error: argument overrides: invalid value '0' for data.max_tokens: expected an integer >= 1
    speechmt translate: error: argument --beam: invalid value '0': expected an integer from 1 to 256
    bad ModelConfig: semantic chimera memory must be an integer >= 1, got 0

`check_override("train.lr=abc")` checks one `section.key=value` of `speechmt train` as it is parsed (the key may
be a dotted path into a nested dataclass, model.encoder.layers); `check_config(cfg)` checks a whole loaded
ExperimentConfig, nested dataclasses included, so that values from a YAML file are held to the same rules;
both raise ConfigError. Values are YAML scalars, as `apply_overrides` reads them; a float field also takes a
number YAML 1.1 reads as a string ("1e-3"), and `check_config` converts it. A dataclass checks itself when
built with `raise_problems(what, field_problems(self) + [...])` (variant options, stages), the list holding
the problems that involve several fields.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import types
import typing
from argparse import ArgumentTypeError
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

# Upper limits of command-line and API options, far beyond any useful setting, that keep absurd values (a beam
# of 10**9) from failing later in an allocation or an integer overflow.
MAX_BEAM = 256
MAX_BATCH = 4096
MAX_TOKENS = 10**9
MAX_OUTPUT_TOKENS = 100_000
DTYPES = ("float32", "bfloat16")  # the weights' types a model decodes in (load_model's dtype)
MAX_CHUNK_SECONDS = 3600.0
MAX_JOBS = 256


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


@dataclasses.dataclass(frozen=True)
class Check:
    """What an option's value may be, beyond its type: a number from `lo` to `hi` (None: unbounded; each end
    allowed itself unless `lo_in`/`hi_in` is False), one of `choices`, or a device of this machine ("auto"
    too). `note` is said in parentheses after what is allowed. The type (bool, int, float) comes from the
    field's annotation or the option's parser."""

    lo: float | None = None
    hi: float | None = None
    lo_in: bool = True
    hi_in: bool = True
    choices: tuple = ()
    note: str = ""
    device: bool = False

    def admits(self, value: Any, kind: type | None) -> bool:
        """True when `value` is of `kind` (a bool is no number) and in the bounds or choices."""
        if self.choices:
            return value in self.choices
        if kind is bool:
            return isinstance(value, bool)
        if kind not in (int, float):
            return True
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (kind is int and not isinstance(value, int)) or not math.isfinite(value):
            return False
        below = self.lo is not None and (value < self.lo or (value == self.lo and not self.lo_in))
        above = self.hi is not None and (value > self.hi or (value == self.hi and not self.hi_in))
        return not (below or above)

    def allowed(self, kind: type | None) -> str:
        """What is allowed: "an integer >= 1", "an integer from 1 to 256", "a number from 0 to 10", "a finite
        number > 0", "a finite number > 1 and <= 3600", "one of mse, cosine", "true or false"."""
        if self.choices:
            text = f"one of {', '.join(map(str, self.choices))}"
        elif kind is bool:
            text = "true or false"
        elif kind is int:
            text = "an integer" + self._bounds()
        elif self.lo is not None and self.hi is not None and self.lo_in and self.hi_in:
            text = "a number" + self._bounds()  # bounded: finite goes without saying
        else:
            text = "a finite number" + self._bounds()
        return text + (f" ({self.note})" if self.note else "")

    def _bounds(self) -> str:
        lo, hi = _shown(self.lo), _shown(self.hi)
        if self.lo is not None and self.hi is not None and self.lo_in and self.hi_in:
            return f" from {lo} to {hi}"
        ends = [f"{'>=' if self.lo_in else '>'} {lo}"] if self.lo is not None else []
        ends += [f"{'<=' if self.hi_in else '<'} {hi}"] if self.hi is not None else []
        return " " + " and ".join(ends) if ends else ""

    def problem(self, name: str, value: Any, kind: type | None) -> str | None:
        """ "<name> must be <allowed>, got <value>" unless `value` is admitted."""
        return None if self.admits(value, kind) else f"{name} must be {self.allowed(kind)}, got {value!r}"


def _shown(x: float | None) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def checked(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **check: Any) -> Any:
    """A dataclass field whose values are checked by `Check(**check)` (and by its annotated type):
    `layers: int = checked(6, lo=1)`, `init: str = checked("random", choices=("random", "identity"))`."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"check": Check(**check)})


def field_check(cls: type, name: str) -> Check | None:
    """The Check declared on field `name` of dataclass `cls`, or None."""
    return _checks(cls).get(name)


@functools.cache
def _checks(cls: type) -> dict[str, Check]:
    return {f.name: f.metadata["check"] for f in dataclasses.fields(cls) if "check" in f.metadata}


def field_problems(obj: Any, prefix: str = "") -> list[str]:
    """The problems ("<prefix><name> must be ..., got ...") of the fields of dataclass instance `obj` that
    declare a Check; None passes where the annotation allows it."""
    cls, problems = type(obj), []
    for name, check in _checks(cls).items():
        value, hint = getattr(obj, name), _hints(cls)[name]
        if value is None and _optional(hint):
            continue
        problems.append(check.problem(prefix + name, value, _base(hint)))
    return [p for p in problems if p]


def raise_problems(what: str, checklist: list, subject: str = "") -> None:
    """ValueError "<what>: [<subject> ]<problem>; <problem>" for the entries of `checklist` that are messages (a check
    that passed leaves False or None there); nothing when all passed. The one way a config dataclass checks
    itself in __post_init__ (model sections, variant options, stages): `field_problems(self)` and the problems
    that involve several fields, written with the helpers below so that every message says the same thing
    the same way."""
    problems = [p for p in checklist if p]
    if problems:
        raise ValueError(f"{what}: {subject + ' ' if subject else ''}" + "; ".join(problems))


def count_problem(name: str, value: Any, least: int, note: str = "") -> str | None:
    """ "<name> must be an integer >= <least>, got <value>" unless value is one (a bool is not); `note` is added
    in parentheses. For values that are no field (items of a list or mapping)."""
    return Check(least, note=note).problem(name, value, int)


def number_problem(
    name: str, value: Any, lo: float = 0, lo_in: bool = True, hi: float | None = None, hi_in: bool = True
) -> str | None:
    """ "<name> must be a finite number > 0, got <value>" unless value is a finite number (not a bool) in the
    range. For values that are no field (items of a list or mapping)."""
    return Check(lo, hi, lo_in, hi_in).problem(name, value, float)


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
    for i, name in enumerate(path[:-1]):  # down to the dataclass holding the last name
        cls = _hints(cls).get(name)
        if not dataclasses.is_dataclass(cls):
            return item
        cls = _declaring(cls, path[i + 1]) or cls
    if path[-1] in _hints(cls) and not dataclasses.is_dataclass(_hints(cls)[path[-1]]):
        check_field(cls, path[-1], _yaml_scalar(text), key, raw=text)
    return item


def _declaring(cls: type, name: str) -> type | None:
    """`cls` when it has the field `name`, else the first dataclass derived from it that has (a component
    kind's options, whose slot's field names the base: an override checked before the kind is known)."""
    if name in _hints(cls):
        return cls
    for sub in cls.__subclasses__():
        found = _declaring(sub, name) if dataclasses.is_dataclass(sub) else None
        if found is not None:
            return found
    return None


def check_key_value(cls: type, item: str) -> str:
    """Checks one `key=value` of a flat dataclass config (pretrain-audio's KEY=VALUE items); returns `item`.
    Malformed items and unknown keys are left to the config's loader."""
    key, sep, text = item.partition("=")
    if sep and key in _hints(cls):
        check_field(cls, key, _yaml_scalar(text), key, raw=text)
    return item


def check_config(cfg: Any, sections: dict[str, type]) -> Any:
    """Checks every field of `cfg`'s sections (attribute name -> dataclass) against its type and Check, and
    converts what YAML left as a string or an int in a float field (e.g. lr: 1e-3) in place; returns cfg.
    Raises ConfigError naming the first bad field."""
    for section, cls in sections.items():
        _check_dataclass(getattr(cfg, section), cls, section)
    return cfg


def _check_dataclass(part: Any, cls: type, label: str) -> None:
    """check_config of one dataclass instance, recursing into the fields that hold dataclasses."""
    for name, hint in _hints(cls).items():
        value = getattr(part, name)
        if dataclasses.is_dataclass(hint):  # a component kind's options: the kind's dataclass (a subclass)
            _check_dataclass(value, type(value) if isinstance(value, hint) else hint, f"{label}.{name}")
            continue
        checked_value = check_field(cls, name, value, f"{label}.{name}")
        if checked_value is not value:
            setattr(part, name, checked_value)


def check_field(cls: type, name: str, value: Any, label: str, raw: str | None = None) -> Any:
    """`value` as field `name` of dataclass `cls` holds it (a float for an int or numeric string in a float
    field, a tuple for a list), or ConfigError: "invalid value 'abc' for train.lr: expected a finite number",
    the field's type checked first, then its Check (bounds of a number, a device). `label` names the field."""
    shown = repr(raw) if raw is not None else repr(value)
    try:
        value = _coerce(value, _hints(cls)[name])
    except _Mismatch as e:
        raise ConfigError(f"invalid value {shown} for {label}: expected {e}") from None
    check = field_check(cls, name)
    if check is None:
        return value
    if check.device and value != "auto":
        problem = device_problem(value)
        if problem:
            raise ConfigError(f"invalid value {shown} for {label}: {problem.replace('expected', 'expected auto,')}")
    kind = int if isinstance(value, int) else float
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not check.admits(value, kind):
        raise ConfigError(f"invalid value {shown} for {label}: expected {check.allowed(kind)}")
    return value


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A command-line option's type (argparse, and the API's keyword arguments): an integer in [lo, hi]
    (None: unbounded)."""
    return option_type(Check(lo, hi), int)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """A command-line option's type: a finite float, at least `lo` (above it when `lo_open`) and at most `hi`."""
    return option_type(Check(lo, hi, lo_in=not lo_open), float)


def option_type(check: Check, kind: type) -> Callable[[str], Any]:
    """An argparse type reading `kind` (int or float) from the option's text and holding it to `check`; a bad
    value is ArgumentTypeError "invalid value '0': expected an integer from 1 to 256" (argparse puts
    "argument --beam: " in front and exits with status 2)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not check.admits(value, kind):
            raise ArgumentTypeError(f"invalid value {text!r}: expected {check.allowed(kind)}")
        return value

    parse.__name__ = "integer" if kind is int else "number"
    return parse


LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(-[A-Z]{2})?")


def language(text: str) -> str:
    """A command-line option's type: a language code (en, fr, zh-CN)."""
    if not LANGUAGE_CODE.fullmatch(text):
        raise ArgumentTypeError(f"invalid value {text!r}: expected a language code such as en, fr or zh-CN")
    return text


def device(text: str) -> str:
    """A command-line option's type: a device this machine has: cpu, cuda, cuda:N (with CUDA) or mps (Apple)."""
    problem = device_problem(text)
    if problem:
        raise ArgumentTypeError(f"invalid value {text!r}: {problem.replace('; use cpu', '; use --device cpu')}")
    return text


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


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


def _optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _base(hint: Any) -> Any:
    """int for `int | None`; the hint itself otherwise."""
    if _optional(hint):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


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
