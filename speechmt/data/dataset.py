"""Datasets over prepared splits: speech (an input source + texts) and text-only pairs, and their batches.

A speech dataset reads its encoder input from one source, as lhotse's input strategies: the feature store
preparation wrote (fbank, normalised by the front end's CMVN), each record's audio through a front end
(waveform, Whisper's log-mel), or a frozen encoder's cached states."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from speechmt.audio import CMVNConfig, SpecAugmentConfig, spec_augment
from speechmt.checks import ConfigError
from speechmt.data.batching import collate_sequences, padded_shape
from speechmt.data.encoder_cache import cached_split
from speechmt.data.features import FeatureStore
from speechmt.data.manifest import (
    ManifestError,
    Record,
    RecordTable,
    direction,
    read_split,
    record_audio,
    record_column,
    record_directions,
)
from speechmt.frontend import FbankFrontend, Frontend
from speechmt.tokenizers.sentencepiece import Tokenizer

if TYPE_CHECKING:
    from speechmt.data.augment import Augmenter


def global_cmvn(data_dir: str | os.PathLike) -> CMVNConfig:
    """The global CMVN that preparation computed over the training split(s) of `data_dir`."""
    path = Path(data_dir) / "global_cmvn.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no global CMVN statistics (prepare a training split first)")
    with np.load(path) as d:
        return CMVNConfig("global", tuple(d["mean"].tolist()), tuple(d["std"].tolist()))


def load_split(data_dir: str | os.PathLike, split: str, num_mel_bins: int = 80) -> tuple[RecordTable, FeatureStore]:
    """A prepared split's manifest and feature store, checked to hold the same utterances in the same order."""
    data_dir = Path(data_dir)
    records = read_split(data_dir, split)
    prefix = data_dir / f"fbank{num_mel_bins}" / split
    store = FeatureStore(prefix)
    if store.ids != records.ids:
        raise ManifestError(
            f"{data_dir / f'{split}.jsonl'} and its feature store {prefix} hold different "
            "utterances; prepare the split again with --overwrite"
        )
    return records, store


@dataclass
class Example:
    """One item: features (T, F) and/or token ids (S,), (U,); absent parts are None."""

    index: int
    id: str
    feats: torch.Tensor | None = None
    src_ids: torch.Tensor | None = None
    tgt_ids: torch.Tensor | None = None
    precomputed: bool = False  # feats are cached encoder states (speechmt.data.encoder_cache)
    teacher: torch.Tensor | None = None  # (N, 2H) a text teacher's states of the transcript (data.teacher_cache)
    prefix: torch.Tensor | None = None  # (P,) source ids read before the speech (retrieved examples)


@dataclass
class Batch:
    """Padded examples: feats (B, T, F), src (B, S), tgt (B, U), teacher (B, N, 2H), prefix (B, P), each with
    lengths (B,); parts may be None."""

    ids: list[str]
    feats: torch.Tensor | None = None
    feat_lengths: torch.Tensor | None = None
    src: torch.Tensor | None = None
    src_lengths: torch.Tensor | None = None
    tgt: torch.Tensor | None = None
    tgt_lengths: torch.Tensor | None = None
    precomputed: bool = False  # feats are a frozen encoder's cached states, not its input
    teacher: torch.Tensor | None = None
    teacher_lengths: torch.Tensor | None = None
    prefix: torch.Tensor | None = None
    prefix_lengths: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> "Batch":
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in moved.items():
            if isinstance(v, torch.Tensor):
                moved[k] = v.to(device, non_blocking=True)
        return Batch(**moved)

    def __len__(self) -> int:
        return len(self.ids)

    def pin_memory(self) -> "Batch":
        """The batch with its tensors in page-locked memory (DataLoader(pin_memory=True) calls this)."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in pinned.items()})


Allocate = Callable[[list[tuple[tuple[int, ...], torch.dtype]]], list[torch.Tensor]]
"""Makes a batch's tensors at once: (shape, dtype) each -> uninitialised tensors of those shapes and dtypes."""


def collate(examples: list[Example], pad_id: int = 0, allocate: Allocate | None = None) -> Batch:
    """Pads a list of examples into one Batch (features padded with 0, decoder ids with `pad_id`, source ids
    with the SentencePiece pad id: source tokenizers are speechmt's even when the decoder is Whisper's).

    `allocate` makes all the batch's tensors in one call (a DataLoader worker's, in its reused shared memory:
    speechmt.data.loader); by default each is a new tensor."""
    batch = Batch(ids=[e.id for e in examples], precomputed=examples[0].precomputed)
    pads = {"feats": 0.0, "src_ids": Tokenizer.pad_id, "tgt_ids": pad_id, "teacher": 0.0, "prefix": 0.0}
    parts = [
        (name, lengths, [getattr(e, part) for e in examples], pads[part])
        for name, lengths, part in BATCH_PARTS
        if getattr(examples[0], part) is not None
    ]
    outs: list = [None] * len(parts)
    if allocate is not None:
        made = iter(
            allocate(
                [
                    spec
                    for _, _, seqs, _ in parts
                    for spec in ((padded_shape(seqs), seqs[0].dtype), ((len(seqs),), torch.int64))
                ]
            )
        )
        outs = list(zip(made, made))
    for (name, lengths, seqs, pad), out in zip(parts, outs):
        x, n = collate_sequences(seqs, pad, out)
        setattr(batch, name, x)
        setattr(batch, lengths, n)
    return batch


BATCH_PARTS = (
    ("feats", "feat_lengths", "feats"),
    ("src", "src_lengths", "src_ids"),
    ("tgt", "tgt_lengths", "tgt_ids"),
    ("teacher", "teacher_lengths", "teacher"),
    ("prefix", "prefix_lengths", "prefix"),
)
"""A Batch's padded tensors: (its field, its lengths' field, the Example field it is made of)."""


@dataclass(frozen=True)
class DirectionTags:
    """The tag that starts a decoder target in each direction of a multilingual run ("en-fr" -> "<fr>", Whisper's
    "<|fr|>", an LM's "<fr>" read as "French:"), picked by each record's languages; a record without languages
    (text from elsewhere) counts as direction `default`."""

    tags: dict[str, str | None]
    default: str

    def __call__(self, src_lang: str, tgt_lang: str) -> str | None:
        key = direction(src_lang, tgt_lang) if src_lang and tgt_lang else self.default
        if key not in self.tags:
            raise ConfigError(f"a record in direction {key}, which data.directions ({', '.join(self.tags)}) lacks")
        return self.tags[key]


Tags = str | DirectionTags | None  # one tag for every target, one per direction, or none


def record_tag(tags: Tags, src_lang: str, tgt_lang: str) -> str | None:
    """The tag of a target in (src_lang, tgt_lang): `tags` itself, or its direction's."""
    return tags(src_lang, tgt_lang) if isinstance(tags, DirectionTags) else tags


def encode_ids(tok: Tokenizer | None, text: str, tag: str | None) -> torch.Tensor | None:
    """`text` as a LongTensor of ids (tag first, eos last), or None without a tokenizer."""
    return None if tok is None else torch.tensor(tok.encode(text, lang_tag=tag), dtype=torch.long)


def encode_texts(ds, rec: Record) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """An audio dataset's (src, tgt) ids of a record: the transcript by `ds.src_tokenizer` and the decoder
    target, the record's `ds.tgt_field` (tgt_text, or src_text for ASR), by `ds.tgt_tokenizer`."""
    return (
        encode_ids(ds.src_tokenizer, rec.src_text, ds.src_tag),
        encode_ids(ds.tgt_tokenizer, getattr(rec, ds.tgt_field), record_tag(ds.tgt_tag, rec.src_lang, rec.tgt_lang)),
    )


class StoredFeatures:
    """Input from a feature store that preparation wrote (fbank), normalised by the front end (CMVN)."""

    precomputed = False

    def __init__(self, store: FeatureStore, frontend: FbankFrontend):
        self.store, self.frontend = store, frontend

    draws = False

    def __call__(self, i: int, record: Record, rng: np.random.Generator | None = None) -> torch.Tensor:
        return self.frontend.normalise(self.store.get(i))


class AudioInput:
    """Input made from each record's audio by a front end (the waveform, Whisper's log-mel); with an `augment`
    (speechmt.data.augment.Augmenter, for a training split) each 16 kHz wave is altered before the front end,
    drawing from the generator the dataset seeds by (seed, epoch, index), so a resumed run hears the same audio."""

    precomputed = False

    def __init__(
        self,
        base_dir: str | os.PathLike,
        frontend: Callable[[np.ndarray], torch.Tensor],
        augment: "Augmenter | None" = None,
    ):
        self.base_dir, self.frontend, self.augment = Path(base_dir), frontend, augment

    @property
    def draws(self) -> bool:
        return self.augment is not None

    def __call__(self, i: int, record: Record, rng: np.random.Generator | None = None) -> torch.Tensor:
        wave = record_audio(record, self.base_dir)
        if self.augment is not None:
            wave = self.augment(wave, rng)
        return self.frontend(wave)


class CachedStates:
    """A frozen encoder's states of each record, cached in a store (speechmt.data.encoder_cache): batches of
    them are `precomputed`, so the model skips that encoder."""

    precomputed = True

    def __init__(self, store: FeatureStore):
        self.store = store

    draws = False

    def __call__(self, i: int, record: Record, rng: np.random.Generator | None = None) -> torch.Tensor:
        return torch.from_numpy(self.store[record.id])


InputSource = StoredFeatures | AudioInput | CachedStates


def speech_source(
    data_dir: str | os.PathLike,
    split: str,
    frontend: Frontend,
    encoder: nn.Module | None = None,
    augment: "Augmenter | None" = None,
) -> tuple[RecordTable, InputSource]:
    """A split's records and where their encoder input comes from: the feature store preparation wrote (a
    front end whose features are `prepared`: fbank), else the audio through the front end, or, when
    `encoder`'s states are frozen (a frozen Whisper encoder, or its frozen bottom layers), its states of that
    input, computed once per split and cached (speechmt.data.encoder_cache). `augment` alters the audio a front
    end reads (a training split's); ConfigError where the input is cached states of clean audio."""
    if frontend.prepared:
        records, store = load_split(data_dir, split)
        return records, StoredFeatures(store, frontend)
    records = read_split(data_dir, split)
    audio = AudioInput(data_dir, frontend, augment)
    if encoder is None or not encoder.states_frozen():
        return records, audio
    if augment is not None:  # frozen by a stage: its states are cached from clean audio
        raise ConfigError(
            "data.augment_*: this stage's frozen Whisper encoder reads cached states of clean audio "
            "(data.cache_encoder); set data.cache_encoder false to augment"
        )
    audio = AudioInput(data_dir, frontend)
    return records, CachedStates(
        cached_split(data_dir, split, encoder, frontend.settings, lambda i: audio(i, records[i]), records)
    )


class SpeechDataset(Dataset):
    """Utterances of a prepared split: the encoder's input from `source` (stored features, audio through a
    front end, or cached encoder states), augmented with SpecAugment when `spec_augment` is set, with the
    transcript (src) and/or decoder target (tgt: the translation, or with tgt_field "src_text" the
    transcript) encoded by the given tokenizers. Sizes are the records' 10 ms frame counts, so that
    `max_tokens` means the same amount of audio whatever the input.

    Augmentation (SpecAugment of stored features, or the audio source's waveform augmentation) is a function of
    (seed, epoch, index), so a resumed run sees the same masks and hears the same audio. `prefixes`: per record
    the source ids read before its speech (retrieved examples), or None.
    """

    def __init__(
        self,
        records: Sequence[Record],
        source: InputSource,
        src_tokenizer: Tokenizer | None = None,
        tgt_tokenizer: Tokenizer | None = None,
        src_tag: str | None = None,
        tgt_tag: Tags = None,
        spec_augment: SpecAugmentConfig | None = None,
        seed: int = 0,
        tgt_field: str = "tgt_text",
        prefixes: list[torch.Tensor] | None = None,
    ):
        if prefixes is not None and len(prefixes) != len(records):
            raise ValueError(f"{len(prefixes)} prefixes for {len(records)} records")
        self.records, self.source, self.prefixes = records, source, prefixes
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.src_tag, self.tgt_tag, self.tgt_field = src_tag, tgt_tag, tgt_field
        self.spec_augment, self.seed, self.epoch = spec_augment, seed, 0

    @classmethod
    def from_audio(
        cls, data_dir: str | os.PathLike, split: str, frontend: Callable[[np.ndarray], torch.Tensor], **kwargs
    ) -> "SpeechDataset":
        """The utterances of data_dir/<split>.jsonl through `frontend` (no feature store needed)."""
        return cls(read_split(data_dir, split), AudioInput(data_dir, frontend), **kwargs)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def sizes(self) -> np.ndarray:
        """Frames per utterance (N,) int64, for batching."""
        return record_column(self.records, "n_frames")

    def __len__(self) -> int:
        return len(self.records)

    def directions(self, default: tuple[str, str] = ("", "")) -> tuple[np.ndarray, list[str]]:
        """Each record's direction as an index (N,) int64 into the names ("en-fr", ...; `default` for a record
        without languages): for sampling by direction and for keeping some."""
        return record_directions(self.records, default)

    def __getitem__(self, i: int) -> Example:
        rec = self.records[i]
        feats = self.source(i, rec, np.random.default_rng([self.seed, self.epoch, i]) if self.source.draws else None)
        if self.spec_augment is not None:
            gen = torch.Generator().manual_seed(((self.seed * 1_000_003 + self.epoch) * 1_000_003 + i) % 2**63)
            feats = spec_augment(feats, self.spec_augment, gen)
        return Example(
            i,
            rec.id,
            feats,
            *encode_texts(self, rec),
            precomputed=self.source.precomputed,
            prefix=None if self.prefixes is None else self.prefixes[i],
        )


class TextDataset(Dataset):
    """Text pairs (MT): source ids (S,) and target ids (U,); sizes are source lengths in tokens."""

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        src_tag: str | None = None,
        tgt_tag: Tags = None,
        ids: list[str] | None = None,
        langs: list[tuple[str, str]] | None = None,
    ):
        self.pairs, self.src_tokenizer, self.tgt_tokenizer = pairs, src_tokenizer, tgt_tokenizer
        self.src_tag, self.tgt_tag = src_tag, tgt_tag
        self.ids = ids or [str(i) for i in range(len(pairs))]
        self.langs = langs or [("", "")] * len(pairs)  # each pair's (src_lang, tgt_lang), for per-direction tags
        self._src = [encode_ids(src_tokenizer, s, src_tag) for s, _ in pairs]

    @classmethod
    def from_records(
        cls,
        records: list[Record],
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        src_tag: str | None = None,
        tgt_tag: Tags = None,
    ) -> "TextDataset":
        return cls(
            [(r.src_text, r.tgt_text) for r in records],
            src_tokenizer,
            tgt_tokenizer,
            src_tag,
            tgt_tag,
            [r.id for r in records],
            [(r.src_lang, r.tgt_lang) for r in records],
        )

    @property
    def sizes(self) -> list[int]:
        return [len(s) for s in self._src]

    def directions(self, default: tuple[str, str] = ("", "")) -> tuple[np.ndarray, list[str]]:
        """Each pair's direction as an index (N,) int64 into the names, as SpeechDataset.directions."""
        names: dict[str, int] = {}
        index = [names.setdefault(direction(s or default[0], t or default[1]), len(names)) for s, t in self.langs]
        return np.asarray(index, dtype=np.int64), list(names)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Example:
        tag = record_tag(self.tgt_tag, *self.langs[i])
        return Example(i, self.ids[i], None, self._src[i], encode_ids(self.tgt_tokenizer, self.pairs[i][1], tag))


class Subset(Dataset):
    """Items `keep` (K,) of a dataset, with their sizes and directions (a run's data.directions of a folder that
    holds more); epochs pass through."""

    def __init__(self, dataset: Dataset, keep: np.ndarray):
        self.dataset, self.keep = dataset, np.asarray(keep, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keep)

    @property
    def sizes(self) -> np.ndarray:
        return np.asarray(self.dataset.sizes)[self.keep]

    def directions(self, default: tuple[str, str] = ("", "")) -> tuple[np.ndarray, list[str]]:
        index, names = self.dataset.directions(default)
        return index[self.keep], names

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __getitem__(self, j: int) -> Example:
        return self.dataset[int(self.keep[j])]
