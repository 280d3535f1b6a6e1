"""The tokenizers of a model: the source side (transcripts) and the target side (what the decoder writes),
each SentencePiece (speechmt.tokenizers.sentencepiece), Whisper's (speechmt.tokenizers.whisper) or a language model's
(speechmt.tokenizers.lm), and their saved form."""

from __future__ import annotations

from dataclasses import dataclass

from speechmt.tokenizers.lm import LMTokenizer
from speechmt.tokenizers.sentencepiece import Tokenizer
from speechmt.tokenizers.whisper import WhisperTokenizer

AnyTokenizer = Tokenizer | WhisperTokenizer | LMTokenizer


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
    """A SentencePiece, Whisper or language-model tokenizer from its state_dict."""
    kinds = {"whisper": WhisperTokenizer, "lm": LMTokenizer}
    return kinds.get(state.get("kind"), Tokenizer).from_state_dict(state)
