"""What every semantic variant's builder shares: its options read into its dataclass, with one-line errors."""

from __future__ import annotations


def parse_options(kind: str, cls: type, options: dict):
    """`cls(**options)`; an unknown option is ValueError "bad ModelConfig: semantic <kind> options: ..."."""
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"bad ModelConfig: semantic {kind} options: {e}") from None

