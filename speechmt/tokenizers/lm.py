"""A pretrained causal language model's tokenizer behind the interface of speechmt's Tokenizer, for a
decoder-only LM as the decoder (speechmt.models.lm_decoder).

The LM reads one sequence: a prompt naming the source language (`<bos>English:`), the source (speech through
the bridge, or the source text's own tokens), then `\\n`, the target language's name and a colon
(`German:`), then the target text and `<eos>` — the plain few-shot form `English: ...\\nGerman: ...` that a
base LM already continues. In speechmt's terms `\\n` is the decoder's start token (bos_id), `German:` the
prefix of the target's language tag `<de>` (an ASR target's `<en>` gives `English:`), so the search, the
losses and the datasets treat an LM decoder as any other.

Two roles:
- "target": the decoder's output vocabulary, trimmed to `vocab` (the LM ids that the training targets, tags
  and start token use, in that order; ids here are positions in `vocab`, so the output layer has len(vocab)
  rows: an LM's 262k-row output layer is most of an update's cost). pad, eos, start and unk come first.
  Text outside `vocab` encodes as unk, which is never generated.
- "source": the whole vocabulary, no eos, no tags: the source text of MT, embedded by the LM's own table.

The LM's tokenizer.json is not copied into checkpoints (tens of MB): the state names the LM (`source`, as the
model's decoder.name_or_path) and the sha256 of its tokenizer.json, checked when it loads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer as HFTokenizer

from speechmt.hub import resolve_pretrained
from speechmt.tokenizers.sentencepiece import UnknownTagError

ROLES = ("target", "source")
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "ca": "Catalan",
    "cs": "Czech",
    "cy": "Welsh",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "et": "Estonian",
    "fa": "Persian",
    "fr": "French",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "lv": "Latvian",
    "mn": "Mongolian",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sl": "Slovenian",
    "sv": "Swedish",
    "ta": "Tamil",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}
START_TEXT = "\n"  # the decoder's start token: the line break between the source and the target's language name


def language_name(tag_or_code: str) -> str:
    """ "<de>" or "de" (or "zh-CN", "sv-SE", or "German" itself) -> "German"; UnknownTagError for a code without a
    name here."""
    if tag_or_code in LANGUAGE_NAMES.values():
        return tag_or_code
    code = tag_or_code.strip("<>").split("-")[0].lower()
    if code not in LANGUAGE_NAMES:
        raise UnknownTagError(f"no language name for {tag_or_code!r}; known codes: {', '.join(sorted(LANGUAGE_NAMES))}")
    return LANGUAGE_NAMES[code]


@dataclass(frozen=True)
class LMTokenizerConfig:
    """`source`: the LM (name under $SPEECHMT_HOME, folder or hub id) whose tokenizer.json this is; `role`:
    "target" (trimmed to `vocab`) or "source" (whole vocabulary); `sha256`: of that tokenizer.json."""

    source: str = ""
    role: str = "target"
    vocab: tuple[int, ...] = ()
    sha256: str = ""

    def __post_init__(self):
        object.__setattr__(self, "vocab", tuple(int(i) for i in self.vocab))
        if self.role not in ROLES:
            raise ValueError(f"unknown LM tokenizer role {self.role!r}; expected one of {', '.join(ROLES)}")


def few_shot_source(text: str, examples: Sequence[tuple[str, str]], src_lang: str, tgt_lang: str) -> str:
    """A source text with translation `examples` (best first) before it, in the plain few-shot form the LM
    reads after its prompt "English:" ("ex src\\nGerman: ex tgt\\nEnglish: text"; the best example last, next
    to the source)."""
    src, tgt = language_name(src_lang), language_name(tgt_lang)
    shots = "".join(f"{s.strip()}\n{tgt}: {t.strip()}\n{src}: " for s, t in reversed(examples))
    return shots + text.strip()


@dataclass(frozen=True)
class SpecialIds:
    """The LM's own ids of its padding, end, start-of-text and unknown tokens, and of the start token (\\n)."""

    pad: int
    eos: int
    bos: int | None
    unk: int
    start: int


def _first(value) -> int | None:
    return value[0] if isinstance(value, (list, tuple)) and value else value if isinstance(value, int) else None


def read_special_ids(folder: Path, tok: HFTokenizer) -> SpecialIds:
    """Special ids from the LM folder's config.json (bos/eos/pad_token_id; eos may be a list: its first), the
    tokenizer's <unk> / <pad> where the config has none, and the single token of a line break."""
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    eos = _first(cfg.get("eos_token_id"))
    if eos is None:
        raise ValueError(f"{folder}: config.json names no eos_token_id")
    start = tok.encode(START_TEXT, add_special_tokens=False).ids
    if len(start) != 1:
        raise ValueError(f"{folder}: a line break is {len(start)} tokens in this tokenizer, not one")
    unk = tok.token_to_id("<unk>")
    pad = _first(cfg.get("pad_token_id"))
    pad = pad if pad is not None else tok.token_to_id("<pad>")
    return SpecialIds(
        pad=eos if pad is None else pad,
        eos=eos,
        bos=_first(cfg.get("bos_token_id")),
        unk=eos if unk is None else unk,
        start=start[0],
    )


class LMTokenizer:
    """Encodes text to (trimmed) LM ids and back; see the module docstring."""

    kind = "lm"
    blank_id = None  # no CTC blank: a CTC head uses a SentencePiece source vocabulary
    first_text_id = 0

    def __init__(self, tokenizer_json: str, folder: Path, config: LMTokenizerConfig):
        self.config, self._tok = config, HFTokenizer.from_str(tokenizer_json)
        self._json, self._folder = tokenizer_json, folder
        self.lm = read_special_ids(folder, self._tok)
        self._full_size = self._tok.get_vocab_size(with_added_tokens=True)
        if config.role == "target":
            if list(config.vocab[:4]) != [self.lm.pad, self.lm.eos, self.lm.start, self.lm.unk]:
                raise ValueError("a trimmed LM vocabulary starts with the LM's pad, eos, line break and unk ids")
            self._index = {lm_id: i for i, lm_id in enumerate(config.vocab)}
            self.pad_id, self.eos_id, self.bos_id, self.unk_id = 0, 1, 2, 3
        else:
            self.pad_id, self.eos_id, self.bos_id, self.unk_id = self.lm.pad, self.lm.eos, self.lm.start, self.lm.unk

    @classmethod
    def from_pretrained(cls, name_or_path: str, role: str = "target", vocab: Sequence[int] = ()) -> "LMTokenizer":
        """The tokenizer of an LM folder (or a name set-up converted under $SPEECHMT_HOME); FileNotFoundError
        (one line) when it has no tokenizer.json."""
        folder = Path(resolve_pretrained(name_or_path))
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{name_or_path}: no tokenizer.json in {folder} (run `make setup` for "
                "gemma-3-270m, or `speechmt import gguf`, or pass a local LM folder)"
            )
        text = path.read_text(encoding="utf-8")
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return cls(text, folder, LMTokenizerConfig(name_or_path, role, tuple(vocab), sha))

    @classmethod
    def trimmed(cls, name_or_path: str, texts: Iterable[str], tags: Iterable[str] = ()) -> "LMTokenizer":
        """A target-side tokenizer whose vocabulary holds the specials, the prefixes of `tags` and every token
        of `texts` (as targets encode them), in order of first appearance."""
        full = cls.from_pretrained(name_or_path, role="source")
        lm = full.lm
        vocab = dict.fromkeys([lm.pad, lm.eos, lm.start, lm.unk])
        for tag in tags:
            vocab.update(dict.fromkeys(full.text_ids(language_name(tag) + ":")))
        for text in texts:
            vocab.update(dict.fromkeys(full.text_ids(" " + text.strip())))
        return cls(full._json, full._folder, replace(full.config, role="target", vocab=tuple(vocab)))

    def __len__(self) -> int:
        return len(self.config.vocab) if self.config.role == "target" else self._full_size

    def text_ids(self, text: str) -> list[int]:
        """The LM's own ids of `text` as it is (no specials added, no trimming)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def text_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """`text_ids(text)` and each token's (start, end) character offsets in `text`."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, [tuple(o) for o in enc.offsets]

    def _map(self, lm_ids: Iterable[int]) -> list[int]:
        if self.config.role == "source":
            return list(lm_ids)
        return [self._index.get(i, self.unk_id) for i in lm_ids]

    def to_lm_ids(self, ids: Iterable[int]) -> list[int]:
        """Ids of this tokenizer -> the LM's own ids."""
        return [int(i) for i in ids] if self.config.role == "source" else [self.config.vocab[int(i)] for i in ids]

    def tag_id(self, tag: str) -> int:
        """The first id of a language tag's prefix (`<de>` -> "German:")."""
        return self.prefix_ids(tag)[0]

    def prefix_ids(self, tag: str | None) -> tuple[int, ...]:
        """The forced start of a target after the start token: the language's name and a colon."""
        return tuple(self._map(self.text_ids(language_name(tag) + ":"))) if tag else ()

    def prompt_ids(self, src_lang: str) -> tuple[int, ...]:
        """The LM's own ids of the prompt before the source: its start-of-text token and "English:" (the start
        token alone for `src_lang` "": a model of several sources names none)."""
        bos = () if self.lm.bos is None else (self.lm.bos,)
        return bos + (tuple(self.text_ids(language_name(src_lang) + ":")) if src_lang else ())

    def encode(self, text: str, add_eos: bool = True, lang_tag: str | None = None) -> list[int]:
        """Target: prefix of lang_tag + tokens of " " + text (+ eos). Source: the tokens of " " + text only."""
        ids = self._map(self.text_ids(" " + text.strip()))
        if self.config.role == "source":
            return ids
        return list(self.prefix_ids(lang_tag)) + ids + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: Sequence[str], add_eos: bool = True, lang_tag: str | None = None) -> list[list[int]]:
        return [self.encode(t, add_eos, lang_tag) for t in texts]

    def decode(self, ids: Iterable[int], strip_tags: bool = True) -> str:
        """Text of `ids` up to the first eos, special tokens left out, and with `strip_tags` a leading
        language prefix ("German:") too."""
        kept = []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            kept.append(i)
        text = self._tok.decode(self.to_lm_ids(kept), skip_special_tokens=True).strip()
        name, colon, rest = text.partition(":")
        return rest.strip() if strip_tags and colon and name in LANGUAGE_NAMES.values() else text

    @cached_property
    def suppress_ids(self) -> tuple[int, ...]:
        """Ids never generated besides pad and the start token: unk, and the LM's own start-of-text token."""
        extra = [self.unk_id] + ([] if self.lm.bos is None else self._map([self.lm.bos]))
        return tuple(sorted({i for i in extra if i not in (self.eos_id, self.pad_id)}))

    def pieces(self, text: str) -> list[str]:
        return self._tok.encode(" " + text.strip(), add_special_tokens=False).tokens

    def id_to_piece(self, i: int) -> str:
        return self._tok.id_to_token(self.to_lm_ids([i])[0])

    def state_dict(self) -> dict:
        """{"kind": "lm", "config": dict}: the LM's tokenizer.json itself stays in the LM's folder."""
        return {"kind": self.kind, "config": asdict(self.config)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "LMTokenizer":
        """Reads the named LM's tokenizer.json; ValueError (one line) when its sha256 is not the saved one."""
        c = LMTokenizerConfig(**state["config"])
        tok = cls.from_pretrained(c.source, c.role, c.vocab)
        if c.sha256 and tok.config.sha256 != c.sha256:
            raise ValueError(
                f"{c.source}: its tokenizer.json is not the one the model was trained with (sha256 "
                f"{tok.config.sha256[:12]}..., expected {c.sha256[:12]}...)"
            )
        return tok

    def save(self, path: str | Path) -> None:
        """Writes the state (JSON) to `path`."""
        Path(path).write_text(json.dumps(self.state_dict()) + "\n", encoding="utf-8")
