"""What every semantic variant's builder shares: its options read into its dataclass, with one-line errors."""

from __future__ import annotations


def parse_options(kind: str, cls: type, options: dict):
    """`cls(**options)`; an unknown option is ValueError "bad ModelConfig: semantic <kind> options: ..."."""
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"bad ModelConfig: semantic {kind} options: {e}") from None


def text_positions(cfg) -> bool:
    """True when the text path's embedder adds no positions (a language model's own table, text_encoder.embeddings
    lm: the LM adds them after the semantic layer): a layer that gives the speech path sinusoidal positions then
    gives the text path the same, so that both reach its stack alike."""
    return cfg.text_encoder.embeddings == "lm"
