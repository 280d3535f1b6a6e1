"""Whisper's tokenizer (byte-level BPE with its special tokens) behind the interface of speechmt's Tokenizer,
so that one pretrained vocabulary serves ST, ASR and MT with a Whisper decoder.

A target is `<|lang|> <|task|> <|notimestamps|>` + the text's tokens (with Whisper's leading space) +
`<|endoftext|>`, and decoding starts from `<|startoftranscript|>` (bos_id) with that prefix forced: the
language token is the target's language (`<|de|>` for ST into German, `<|en|>` for English transcripts)
and the task token `<|transcribe|>`, unless a config asks for `<|translate|>` (Whisper's own X -> English
prompt, whose language token names the source). Special tokens and timestamps are never generated
(`suppress_ids`). `<|nospeech|>` pads batches: Whisper pads with `<|endoftext|>`, which speechmt's loss
and search need as a real token. The tokenizer.json is stored whole in checkpoints (JSON, no code).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer as HFTokenizer

from speechmt.tokenizers.sentencepiece import UnknownTagError

TASKS = ("transcribe", "translate")
_PAD_CANDIDATES = ("<|nospeech|>", "<|nocaptions|>")


def language_token(lang: str) -> str:
    """Whisper's token for a corpus language code: "de" -> "<|de|>", "zh-CN" -> "<|zh|>", "sv-SE" -> "<|sv|>"."""
    return f"<|{lang.split('-')[0].lower()}|>"


@dataclass(frozen=True)
class WhisperTokenizerConfig:
    """The task token of every prefix, and whether timestamps are predicted (not supported: always off)."""

    task: str = "transcribe"

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"unknown Whisper task {self.task!r}; expected one of {', '.join(TASKS)}")


class WhisperTokenizer:
    """Encodes text to Whisper ids and back; wraps a `tokenizers` Tokenizer (tokenizer.json)."""

    kind = "whisper"
    blank_id = None  # no CTC blank: CTC heads use a SentencePiece source vocabulary
    first_text_id = 0  # text ids come first; the special tokens start at <|endoftext|>

    def __init__(self, tokenizer_json: str, config: WhisperTokenizerConfig = WhisperTokenizerConfig()):
        self.config, self._json = config, tokenizer_json
        self._tok = HFTokenizer.from_str(tokenizer_json)
        ids = {
            s: self._tok.token_to_id(s)
            for s in (
                "<|endoftext|>",
                "<|startoftranscript|>",
                "<|notimestamps|>",
                "<|translate|>",
                f"<|{config.task}|>",
            )
        }
        missing = [s for s, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"not a Whisper tokenizer: it lacks {', '.join(missing)}")
        self.eos_id, self.bos_id = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
        self.unk_id, self.task_id, self.no_timestamps_id = (
            self.eos_id,
            ids[f"<|{config.task}|>"],
            ids["<|notimestamps|>"],
        )
        self._first_task_id = ids["<|translate|>"]  # language tokens lie between <|startoftranscript|> and it
        pads = [i for i in map(self._tok.token_to_id, _PAD_CANDIDATES) if i is not None]
        if not pads:
            raise ValueError(f"Whisper tokenizer without {' or '.join(_PAD_CANDIDATES)} to pad with")
        self.pad_id = pads[0]

    @classmethod
    def from_pretrained(
        cls, folder: str | Path, config: WhisperTokenizerConfig = WhisperTokenizerConfig()
    ) -> "WhisperTokenizer":
        """Reads folder/tokenizer.json (a Hugging Face Whisper folder)."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no Whisper tokenizer.json in {folder}")
        return cls(path.read_text(encoding="utf-8"), config)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def tag_id(self, tag: str) -> int:
        """The id of a language token such as "<|de|>"."""
        i = self._tok.token_to_id(tag) if tag.startswith("<|") else None
        if i is None or not self.bos_id < i < self._first_task_id:
            raise UnknownTagError(f"unknown Whisper language token {tag!r}; e.g. <|en|>, <|de|>, <|fr|>")
        return i

    def prefix_ids(self, tag: str | None) -> tuple[int, ...]:
        """The forced decoder prefix after <|startoftranscript|>: language, task, no-timestamps."""
        return ((self.tag_id(tag),) if tag else ()) + (self.task_id, self.no_timestamps_id)

    def encode(self, text: str, add_eos: bool = True, lang_tag: str | None = None) -> list[int]:
        """Ids of `text` (with Whisper's leading space): prefix (when lang_tag) + tokens + [eos]."""
        ids = self._tok.encode(" " + text.strip(), add_special_tokens=False).ids
        prefix = list(self.prefix_ids(lang_tag)) if lang_tag is not None else []
        return prefix + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: Sequence[str], add_eos: bool = True, lang_tag: str | None = None) -> list[list[int]]:
        return [self.encode(t, add_eos, lang_tag) for t in texts]

    def decode(self, ids: Iterable[int], strip_tags: bool = True) -> str:
        """Text of `ids` up to the first <|endoftext|>, special tokens left out."""
        kept = []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            kept.append(i)
        return self._tok.decode(kept, skip_special_tokens=True).strip()

    @cached_property
    def suppress_ids(self) -> tuple[int, ...]:
        """Ids never to generate: every special token and timestamp after <|endoftext|>."""
        return tuple(range(self.eos_id + 1, len(self)))

    def pieces(self, text: str) -> list[str]:
        return self._tok.encode(" " + text.strip(), add_special_tokens=False).tokens

    def id_to_piece(self, i: int) -> str:
        return self._tok.id_to_token(i)

    def state_dict(self) -> dict:
        """{"kind": "whisper", "config": dict, "tokenizer_json": str}, for checkpoints."""
        return {"kind": self.kind, "config": asdict(self.config), "tokenizer_json": self._json}

    @classmethod
    def from_state_dict(cls, state: dict) -> "WhisperTokenizer":
        return cls(state["tokenizer_json"], WhisperTokenizerConfig(**state["config"]))

    def save(self, path: str | Path) -> None:
        """Writes tokenizer.json to `path` and the config beside it (`path` with suffix .config.json)."""
        path = Path(path)
        path.write_text(self._json, encoding="utf-8")
        path.with_suffix(".config.json").write_text(json.dumps(asdict(self.config)) + "\n", encoding="utf-8")
