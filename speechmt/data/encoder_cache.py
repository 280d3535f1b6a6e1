"""Cached encoder states: the outputs of a frozen pretrained acoustic encoder (or of its frozen bottom layers,
`encoder.frozen_layers`), computed once per split into a memory-mapped float16 feature store beside the fbank
store, so that an epoch costs only the trained parts.

Layout: `<data_dir>/encoder_cache/<key>/<split>.bin|.index.npz` and `meta.json`. The key is a hash of
everything the states depend on: the encoder's weights (a checksum of its tensors), its class and HF
config (less the generation settings, which do not touch the states), and the front end's settings. A
changed encoder or front end gives another key, so a stale cache is never read. The cache is exact up to float16 rounding as long as the encoder's input is not augmented
(speechmt applies no SpecAugment to Whisper features) and the encoder runs in eval mode (no dropout or
layer drop), which is how it is computed.

A transcribing encoder of several source languages (whisper_asr) searches each utterance in its record's own
src_lang: its states then depend on that language as well, which the records fix (the key holds the languages it
may transcribe: WhisperAsrEncoder.states_part); an utterance whose record names none is searched in the language
Whisper detects, a function of its audio alone.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from speechmt.checkpoint import state_checksum
from speechmt.data.batching import BucketBatchSampler, collate_sequences
from speechmt.data.features import FeatureStore, FeatureStoreWriter
from speechmt.data.manifest import Record, RecordTable, read_manifest
from speechmt.ranks import build_once

GENERATION_FIELDS = frozenset(
    {
        "suppress_tokens",
        "begin_suppress_tokens",
        "forced_decoder_ids",
        "max_length",
        "decoder_start_token_id",
        "transformers_version",
        "_name_or_path",
    }
)
"""HF config fields that only steer generation or name the file: left out of the cache key (a model folder
saved with or without a generation config computes the same states)."""


def cache_key(encoder: nn.Module, frontend_settings) -> tuple[str, dict]:
    """(key, description) of the states `encoder` computes from inputs made with `frontend_settings`."""
    config = getattr(getattr(encoder, "model", None), "config", None)
    hf_config = (
        None if config is None else {k: v for k, v in config.to_diff_dict().items() if k not in GENERATION_FIELDS}
    )
    states_part = getattr(encoder, "states_part", None)  # the weights its `states` computes with
    weights = states_part() if states_part else getattr(encoder, "model", encoder).state_dict()
    description = {
        "encoder": type(encoder).__name__,
        "weights_sha256": state_checksum(weights),
        "hf_config": hf_config,
        "frontend": asdict(frontend_settings) if is_dataclass(frontend_settings) else frontend_settings,
    }
    if getattr(encoder, "splits_inside", False):  # the states after layer `split`, not the final ones
        description["layers"] = encoder.split
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], description


@torch.no_grad()
def build_encoder_cache(
    states_fn: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    inputs: Callable[[int], torch.Tensor],
    sizes: list[int],
    ids: list[str],
    prefix: Path,
    dim: int,
    max_frames: int = 6000,
    progress: bool = True,
    device: torch.device | str = "cpu",
    languages: list[str] | None = None,
) -> FeatureStore:
    """Writes states_fn's output for every utterance (in batch order; read them by id) to the store `prefix`
    and opens it.

    `inputs(i)` gives utterance i's encoder input (T, F); `sizes` their lengths for batching (by length,
    `max_frames` padded frames per batch); states_fn (B, T, F), (B,) -> (B, T', dim), (B,), run on `device`
    (the encoder's: a model on a GPU gets its inputs there). `languages`: each utterance's source language, given
    to states_fn as `languages` (a batch's, in order) where the states depend on it."""
    from speechmt.progress import Progress

    with (
        FeatureStoreWriter(prefix, dim, "float16") as writer,
        Progress(len(ids), f"encoder cache {prefix.name}", "utt", enabled=progress) as bar,
    ):
        for batch in BucketBatchSampler(sizes, max_frames, shuffle=False):
            x, lengths = collate_sequences([inputs(i) for i in batch])
            spoken = {} if languages is None else {"languages": [languages[i] for i in batch]}
            states, out_lengths = states_fn(x.to(device), lengths.to(device), **spoken)
            states, out_lengths = states.float().cpu(), out_lengths.cpu()
            for row, i in enumerate(batch):
                writer.add(ids[i], states[row, : int(out_lengths[row])].numpy())
            bar.update(len(batch))
    return FeatureStore(prefix)


def cached_split(
    data_dir: str | os.PathLike,
    split: str,
    encoder: nn.Module,
    frontend_settings,
    inputs: Callable[[int], torch.Tensor],
    records: list[Record] | None = None,
) -> FeatureStore:
    """The cached states of a split for this encoder and front end: read when present, else computed."""
    data_dir = Path(data_dir)
    records = records if records is not None else read_manifest(data_dir / f"{split}.jsonl")
    key, description = cache_key(encoder, frontend_settings)  # `encoder.states` is what is cached

    def build(prefix: Path) -> FeatureStore:
        was_training = encoder.training
        encoder.eval()
        try:
            return build_encoder_cache(
                encoder.states,
                inputs,
                [r.n_frames for r in records],
                [r.id for r in records],
                prefix,
                encoder.hidden_size,
                device=next(encoder.parameters()).device,
                languages=record_languages(encoder, records),
            )
        finally:
            encoder.train(was_training)

    return cached_store(data_dir / "encoder_cache" / key, split, description, records, build)


def record_languages(encoder: nn.Module, records) -> list[str] | None:
    """Each record's src_lang where `encoder`'s states depend on the utterance's language (a transcribing encoder
    of several sources, `languages`), else None."""
    if not getattr(encoder, "languages", None):
        return None
    if isinstance(records, RecordTable):
        return list(records.column("src_lang"))
    return [r.src_lang for r in records]


def cached_store(
    folder: Path, split: str, description: dict, records: list[Record], build: Callable[[Path], FeatureStore]
) -> FeatureStore:
    """The store folder/split when it holds exactly the records' ids, else `build(prefix)`'s, with the
    description of what the states depend on in folder/meta.json (the encoder and teacher caches' shared
    layout). In a distributed run rank 0 builds it while the other ranks wait, then all read it (speechmt.ranks)."""
    prefix = folder / split
    ids = sorted(r.id for r in records)

    def ready() -> bool:
        if not Path(f"{prefix}.index.npz").exists():
            return False
        return store_ids(prefix) == ids

    def make() -> FeatureStore:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").write_text(json.dumps(description, indent=1, default=str) + "\n", encoding="utf-8")
        return build(prefix)

    return build_once(ready, make, lambda: FeatureStore(prefix), f"the cache {prefix} (rank 0 builds it)")


def store_ids(prefix: Path) -> list[str]:
    """The ids a store's index holds (in any order: a cache is written in batch order), sorted."""
    with np.load(f"{prefix}.index.npz") as index:
        return sorted(str(i) for i in index["ids"])
