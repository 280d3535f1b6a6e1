"""Checked argparse types for the `speechmt` command line.

Every option's value is checked where it is parsed. A bad one stops the command with one line that names the
option, the value and what is allowed (argparse puts "argument --beam: " in front), and exit status 2:

    speechmt translate: error: argument --beam: invalid value '0': expected an integer from 1 to 256
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable

# Upper limits far beyond any useful setting, that keep absurd values (a beam of 10**9) from failing later
# in an allocation or an integer overflow.
MAX_BEAM = 256
MAX_BATCH = 4096
MAX_TOKENS = 10**9
MAX_OUTPUT_TOKENS = 100_000
MAX_CHUNK_SECONDS = 3600.0
MAX_JOBS = 256


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (None: unbounded)."""
    allowed = "an integer" + (f" from {lo} to {hi}" if lo is not None and hi is not None else
                              f" >= {lo}" if lo is not None else f" <= {hi}" if hi is not None else "")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ArgumentTypeError(f"invalid value {text!r}: expected {allowed}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ArgumentTypeError(f"invalid value {text!r}: expected {allowed}")
        return value

    parse.__name__ = "integer"
    return parse


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float, at least `lo` (above it when `lo_open`) and at most `hi`."""
    if lo is not None and hi is not None and not lo_open:
        allowed = f"a number from {lo:g} to {hi:g}"
    else:
        bounds = [f"{'>' if lo_open else '>='} {lo:g}"] if lo is not None else []
        bounds += [f"<= {hi:g}"] if hi is not None else []
        allowed = "a finite number" + (" " + " and ".join(bounds) if bounds else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ArgumentTypeError(f"invalid value {text!r}: expected {allowed}") from None
        if (not math.isfinite(value) or (lo is not None and (value < lo or (lo_open and value == lo)))
                or (hi is not None and value > hi)):
            raise ArgumentTypeError(f"invalid value {text!r}: expected {allowed}")
        return value

    parse.__name__ = "number"
    return parse


def device(text: str) -> str:
    """An argparse type: a device this machine has: cpu, cuda, cuda:N (with CUDA) or mps (Apple)."""
    from speechmt.config_check import device_problem

    problem = device_problem(text)
    if problem:
        raise ArgumentTypeError(f"invalid value {text!r}: {problem.replace('; use cpu', '; use --device cpu')}")
    return text


def override(item: str) -> str:
    """An argparse type: a `section.key=value` experiment config override, type- and range-checked."""
    from speechmt.config import SECTIONS, ConfigError
    from speechmt.config_check import check_override

    try:
        return check_override(item, SECTIONS)
    except ConfigError as e:
        raise ArgumentTypeError(str(e)) from None


def pretrain_override(item: str) -> str:
    """An argparse type: a `key=value` pretrain-audio option, type-checked (`hf_config.*` is left to HF)."""
    from speechmt.config import ConfigError
    from speechmt.config_check import check_key_value
    from speechmt.training.pretrain_audio import PretrainAudioConfig

    try:
        return check_key_value(PretrainAudioConfig, item)
    except ConfigError as e:
        raise ArgumentTypeError(str(e)) from None
