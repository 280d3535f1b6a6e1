"""The cascade baseline: an ASR model's transcripts translated by a text MT model.

Every paper in the field compares end-to-end ST with this pipeline. Each chunk of a long file is
transcribed and translated on its own (chunks are cut at pauses, close to sentence units); the chunk
translations are joined with spaces, as `translate` joins end-to-end ones.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Sequence

import numpy as np
import torch

from speechmt.checkpoint import CheckpointError
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.segment import SegmentConfig
from speechmt.decoding.translate import LoadedModel, Translation, decode_encoded, encode_texts, load_model, translate


def load_cascade(
    asr_path: str | os.PathLike, mt_path: str | os.PathLike, device: str | torch.device = "cpu", dtype: str = "float32"
) -> tuple[LoadedModel, LoadedModel]:
    """The cascade's two models (weights as `dtype`, load_model's), the first asked to transcribe and the second
    to translate text: one multi-task checkpoint (XSTNet's) can be both. CheckpointError (one line) for a model
    not trained so."""
    asr, mt = _load_for(asr_path, device, "asr", "first", dtype), _load_for(mt_path, device, "mt", "second", dtype)
    check_cascade(asr, mt)
    return asr, mt


def _load_for(
    path: str | os.PathLike, device: str | torch.device, task: str, which: str, dtype: str = "float32"
) -> LoadedModel:
    try:
        return load_model(path, device, task, dtype)
    except CheckpointError as e:
        if "not trained for task" not in str(e):
            raise
        kind = "an ASR model" if task == "asr" else "a text MT model"
        reason = str(e).split(": ", 1)[1]
        raise CheckpointError(f"{path}: the cascade's {which} model must be {kind} ({reason})") from None


def check_cascade(asr: LoadedModel, mt: LoadedModel) -> None:
    """Raises CheckpointError (one line naming the file) unless `asr` transcribes and `mt` translates text."""
    if asr.task != "asr":
        raise CheckpointError(f"{asr.path}: the cascade's first model must be an ASR model, got task {asr.task!r}")
    if mt.task != "mt" or mt.source_tokenizer is None:
        raise CheckpointError(f"{mt.path}: the cascade's second model must be a text MT model, got task {mt.task!r}")


@torch.no_grad()
def translate_texts(mt: LoadedModel, texts: Sequence[str], options: DecodeOptions, batch_size: int = 64) -> list[str]:
    """Translates texts with a text MT model, `batch_size` at a time (sorted by length), in input order.
    CheckpointError for a model that reads retrieved examples (decoder.examples): plain texts have none."""
    if mt.examples:
        raise CheckpointError(
            f"{mt.path}: the model reads {mt.examples} retrieved examples before each source "
            "(decoder.examples), which plain texts lack; score it with `speechmt evaluate --task mt` "
            "on a split that `speechmt data retrieve` prepared"
        )
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = [""] * len(texts)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        enc = encode_texts(mt, [texts[i] for i in idx])
        for i, nbest in zip(idx, decode_encoded(mt, enc, options)[0]):
            out[i] = nbest[0]
    return out


def asr_stage_options(options: dict) -> dict:
    """A cascade's decoding options for its ASR stage: MBR (a translation utility) applies to the MT stage only."""
    return {k: v for k, v in options.items() if k not in ("mbr", "samples")}


def cascade_translate(
    asr: LoadedModel,
    mt: LoadedModel,
    inputs: Sequence[str | os.PathLike | np.ndarray],
    beam: int = 5,
    batch_size: int = 16,
    segment: SegmentConfig = SegmentConfig(),
    errors: str = "raise",
    **options,
) -> list[Translation]:
    """Transcribes audio files or 16 kHz arrays with `asr`, then translates each chunk's transcript with `mt`.

    Returns one Translation per input: `text` the joined chunk translations, `transcript` the joined
    transcripts, `chunks` the chunk boundaries (seconds), `chunk_texts` their translations. An `mbr` option
    chooses the MT stage's outputs only. `errors` as in `translate`: "keep" gives an
    unreadable file an empty Translation with its `error`.
    """
    check_cascade(asr, mt)
    heard = translate(
        asr, inputs, beam=beam, batch_size=batch_size, segment=segment, errors=errors, **asr_stage_options(options)
    )
    pieces = [t for r in heard for t in r.chunk_texts]
    translated = iter(translate_texts(mt, pieces, mt.decode_options(beam, **options)))
    out = []
    for r in heard:
        texts = [next(translated) for _ in r.chunk_texts]  # each chunk's translation, as for an end-to-end model
        out.append(replace(r, text=" ".join(texts).strip(), chunk_texts=texts, transcript=r.text, nbest=[]))
    return out
