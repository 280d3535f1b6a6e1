"""SentencePiece tokenizer with fixed special ids and language tags that are never split.

Every tokenizer has the same layout: pad 0, unk 1, bos 2, eos 3, the CTC blank `<blank>` 4, then the
language tags of its config in order (5, 6, ...), then the learned pieces. Blank and tags are
SentencePiece user-defined symbols: each is one id, and a tag written inside a text encodes as that id.
A tag written at the very start of a text follows a lone "▁" piece (SentencePiece's dummy prefix);
`encode(text, lang_tag=...)` is the way to put a tag first.
"""

from __future__ import annotations

import io
import json
import os
import struct
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

PAD, UNK, BOS, EOS, BLANK = "<pad>", "<unk>", "<s>", "</s>", "<blank>"
SPECIAL_PIECES = (PAD, UNK, BOS, EOS, BLANK)
_MAGIC = b"SMTTOK1\n"


MODEL_TYPES = ("unigram", "bpe", "char")


@dataclass(frozen=True)
class TokenizerConfig:
    """How a tokenizer is trained; saved with it and rebuilt with `TokenizerConfig(**d)`."""

    model_type: str = "unigram"  # "unigram", "bpe" or "char" (every character a piece: CoVoST 2's X->En recipe)
    vocab_size: int = 8000
    character_coverage: float = 1.0
    lang_tags: tuple[str, ...] = ()  # e.g. ("<en>", "<de>", "<audio>")
    normalization_rule_name: str = "nmt_nfkc"  # SentencePiece's; "nmt_nfkc_cf" also lowercases
    input_sentence_size: int = 0  # 0: train on every sentence; else a seeded sample of that many
    max_sentence_length: int = 16384  # bytes; longer sentences are left out of training, with a warning
    seed: int = 0
    num_threads: int = 4

    def __post_init__(self):
        object.__setattr__(self, "lang_tags", tuple(self.lang_tags))
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"unknown model_type {self.model_type!r}; expected {', '.join(MODEL_TYPES)}")
        if len(set(self.lang_tags)) != len(self.lang_tags):
            raise ValueError(f"language tags repeat: {self.lang_tags}")
        for tag in self.lang_tags:
            if not tag or tag in SPECIAL_PIECES or any(c.isspace() for c in tag):
                raise ValueError(f"bad language tag {tag!r}: empty, reserved or containing whitespace")
        if 0 < self.input_sentence_size <= 100:
            raise ValueError(f"input_sentence_size must be 0 (all) or above 100; got {self.input_sentence_size}")


class UnknownTagError(KeyError):
    """A language tag that the tokenizer does not have; the message names it and the known tags."""

    def __str__(self) -> str:
        return str(self.args[0])


class Tokenizer:
    """Encodes text to ids and back; wraps one SentencePiece model proto and its config."""

    pad_id, unk_id, bos_id, eos_id, blank_id = range(5)
    kind = "sentencepiece"
    suppress_ids: tuple[int, ...] = ()  # ids banned in decoding beyond pad and bos: none

    def __init__(self, model_proto: bytes, config: TokenizerConfig):
        self.config = config
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        expected = SPECIAL_PIECES + config.lang_tags
        found = tuple(self._sp.id_to_piece(i) for i in range(min(len(expected), len(self))))
        if found != expected:
            raise ValueError(f"model pieces {found} do not match the fixed layout {expected}")
        self._tags = {tag: len(SPECIAL_PIECES) + i for i, tag in enumerate(config.lang_tags)}

    def __len__(self) -> int:
        return self._sp.get_piece_size()

    def tag_id(self, tag: str) -> int:
        """The id of a language tag such as "<de>"."""
        if tag not in self._tags:
            raise UnknownTagError(f"unknown language tag {tag!r}; known tags: {', '.join(self._tags) or 'none'}")
        return self._tags[tag]

    @property
    def first_text_id(self) -> int:
        """The first id that is neither special nor a language tag (CTC targets start there)."""
        return len(SPECIAL_PIECES) + len(self.config.lang_tags)

    def prefix_ids(self, tag: str | None) -> tuple[int, ...]:
        """The forced decoder prefix after bos: the language tag, if any."""
        return (self.tag_id(tag),) if tag else ()

    def encode(self, text: str, add_eos: bool = True, lang_tag: str | None = None) -> list[int]:
        """Ids of `text`: [tag] + pieces + [eos], each part as asked."""
        prefix = [self.tag_id(lang_tag)] if lang_tag is not None else []
        return prefix + self._sp.encode(text) + ([self.eos_id] if add_eos else [])

    def encode_batch(self, texts: Sequence[str], add_eos: bool = True, lang_tag: str | None = None) -> list[list[int]]:
        """`encode` for many texts at once (SentencePiece encodes them in parallel)."""
        prefix = [self.tag_id(lang_tag)] if lang_tag is not None else []
        suffix = [self.eos_id] if add_eos else []
        return [prefix + ids + suffix for ids in self._sp.encode(list(texts))]

    def decode(self, ids: Iterable[int], strip_tags: bool = False) -> str:
        """Text of `ids` up to the first eos, leaving out pad, bos, blank (and tags if `strip_tags`)."""
        drop = {self.pad_id, self.bos_id, self.blank_id}
        if strip_tags:
            drop.update(self._tags.values())
        kept = []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            if i not in drop:
                kept.append(i)
        return self._sp.decode(kept)

    def pieces(self, text: str) -> list[str]:
        """The pieces `text` is split into, e.g. ["▁the", "▁cat"]."""
        return self._sp.encode(text, out_type=str)

    def id_to_piece(self, i: int) -> str:
        """The piece of id `i`, e.g. "<de>" or "▁the"."""
        return self._sp.id_to_piece(i)

    def state_dict(self) -> dict:
        """{"config": dict, "model": SentencePiece model proto bytes}, for checkpoints."""
        return {"config": asdict(self.config), "model": self._proto}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Tokenizer":
        return cls(state["model"], TokenizerConfig(**state["config"]))

    def to_bytes(self) -> bytes:
        """Magic line, 4-byte little-endian length of the config JSON, the JSON, then the model proto."""
        cfg = json.dumps(asdict(self.config), sort_keys=True).encode()
        return _MAGIC + struct.pack("<I", len(cfg)) + cfg + self._proto

    @classmethod
    def from_bytes(cls, b: bytes) -> "Tokenizer":
        if not b.startswith(_MAGIC):
            raise ValueError("not a speechmt tokenizer: the bytes do not start with the tokenizer magic line")
        start = len(_MAGIC) + 4
        (n,) = struct.unpack("<I", b[len(_MAGIC) : start])
        return cls(b[start + n :], TokenizerConfig(**json.loads(b[start : start + n])))

    def save(self, path: str | os.PathLike) -> None:
        """Writes the plain SentencePiece model to `path` (usable by SentencePiece tools) and the config
        next to it, as `path` with suffix ".json"."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._proto)
        config_path(path).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Reads what `save` wrote: the model at `path` and its config beside it."""
        path = Path(path)
        if not config_path(path).exists():
            raise FileNotFoundError(f"{path}: its tokenizer config {config_path(path)} is missing")
        config = TokenizerConfig(**json.loads(config_path(path).read_text(encoding="utf-8")))
        return cls(path.read_bytes(), config)


def config_path(model_path: str | os.PathLike) -> Path:
    """Where `Tokenizer.save` puts the config of the model at `model_path`."""
    return Path(model_path).with_suffix(".json")


def _train_proto(texts: list[str], config: TokenizerConfig, hard_vocab_limit: bool) -> bytes:
    """One in-memory SentencePiece training run; returns the model proto."""
    model = io.BytesIO()
    spm.set_random_generator_seed(config.seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type=config.model_type,
        vocab_size=config.vocab_size,
        character_coverage=config.character_coverage,
        normalization_rule_name=config.normalization_rule_name,
        input_sentence_size=config.input_sentence_size,
        shuffle_input_sentence=True,
        max_sentence_length=config.max_sentence_length,
        num_threads=config.num_threads,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        user_defined_symbols=[BLANK, *config.lang_tags],
        hard_vocab_limit=hard_vocab_limit,
        minloglevel=2,
    )
    return model.getvalue()


def train_tokenizer(texts: Iterable[str], config: TokenizerConfig) -> Tokenizer:
    """Trains a tokenizer in memory on `texts` (empty ones are skipped); the same input gives the same model.

    When the corpus cannot fill `config.vocab_size`, training is repeated without the hard limit and a
    warning says so; the returned tokenizer's config then holds the size it got.
    """
    corpus = [t for t in texts if t.strip()]
    long = sum(len(t.encode("utf-8")) > config.max_sentence_length for t in corpus)
    if long:
        warnings.warn(
            f"{long} sentences are longer than {config.max_sentence_length} bytes and are left "
            "out of tokenizer training",
            stacklevel=2,
        )
    if not corpus:
        raise ValueError("cannot train a tokenizer: no non-empty sentences")
    if config.model_type == "char":  # every character of the corpus (up to vocab_size): the size is what it got
        proto = _train_proto(corpus, config, hard_vocab_limit=False)
        size = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
        return Tokenizer(proto, replace(config, vocab_size=size))
    try:
        return Tokenizer(_train_proto(corpus, config, hard_vocab_limit=True), config)
    except RuntimeError as e:
        if "Vocabulary size too high" not in str(e):
            detail = str(e).split("] ", 1)[-1].strip() or str(e)
            raise ValueError(
                f"tokenizer training failed on {len(corpus)} sentences with vocab_size {config.vocab_size}: {detail}"
            ) from None
    proto = _train_proto(corpus, config, hard_vocab_limit=False)
    size = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
    warnings.warn(
        f"{len(corpus)} sentences cannot fill vocab_size {config.vocab_size}; the tokenizer has {size} pieces",
        stacklevel=2,
    )
    return Tokenizer(proto, replace(config, vocab_size=size))
