"""The tokenizers of a model: the source side (transcripts) and the target side (what the decoder writes),
each SentencePiece (speechmt.tokenizer) or Whisper's (speechmt.tokenizer_whisper), and their saved form."""

from __future__ import annotations

from dataclasses import dataclass

from speechmt.tokenizer import Tokenizer
from speechmt.tokenizer_whisper import WhisperTokenizer

AnyTokenizer = Tokenizer | WhisperTokenizer


@dataclass
class Tokenizers:
    """The source-side (transcripts) and target-side (translations) tokenizers; either may be None."""

    src: AnyTokenizer | None
    tgt: AnyTokenizer | None

    def state_dict(self) -> dict:
        return {k: (t.state_dict() if t is not None else None) for k, t in (("src", self.src), ("tgt", self.tgt))}

    @classmethod
    def from_state_dict(cls, d: dict) -> "Tokenizers":
        return cls(*(tokenizer_from_state(d[k]) if d.get(k) else None for k in ("src", "tgt")))


def tokenizer_from_state(state: dict) -> AnyTokenizer:
    """A SentencePiece or Whisper tokenizer from its state_dict."""
    return WhisperTokenizer.from_state_dict(state) if state.get("kind") == "whisper" else Tokenizer.from_state_dict(state)
