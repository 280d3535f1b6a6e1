"""The tasks a batch can be trained on, by what goes into the encoder: st (audio -> translation), asr
(audio -> transcript) and mt (text -> translation). Every batch carries its decoder target in `tgt` (the
transcript for asr) and, when an objective reads it or the input is text, the transcript in `src`.

A task encodes its batch once; the objectives of the stage (speechmt.tasks.objectives) share that output.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import torch

from speechmt.data.dataset import Batch
from speechmt.models.encoders import EncoderOutput
from speechmt.models.translator import Translator
from speechmt.tasks.objectives import OBJECTIVES, ObjectiveSettings, Stats

TASK_INPUTS = {"st": "speech", "asr": "speech", "mt": "text", "audio": "none", "fat": "none", "fat_text": "none"}
"""What each task feeds the encoder; "audio" (unlabelled audio for self-supervised pretraining) and "fat" /
"fat_text" (FAT-MLM pretraining on speech with transcript and translation / on text pairs) leave the batch to
their objectives."""

FAT_PARTS = {"fat": ("speech", "src", "tgt"), "fat_text": ("src", "tgt")}
"""The parts a FAT-MLM stream's examples carry (audio, transcript, translation); a stream's TaskData.parts keeps
some of them, so that FAT-MLM pretrains on whatever data there is: ASR pairs (speech, src), untranscribed audio
(speech), monolingual text (src or tgt) beside the ST triples and MT pairs."""
_BATCH_FIELDS = {
    "speech": ("feats", "feat_lengths", "prefix", "prefix_lengths"),
    "src": ("src", "src_lengths"),
    "tgt": ("tgt", "tgt_lengths"),
}


def keep_parts(batch: Batch, parts: Sequence[str]) -> Batch:
    """The batch with the parts ("speech", "src", "tgt") not in `parts` left out (None); all of them when
    `parts` is empty."""
    if not parts:
        return batch
    return dataclasses.replace(
        batch, **{f: None for part, names in _BATCH_FIELDS.items() if part not in parts for f in names}
    )


def encode_batch(model: Translator, batch: Batch, task: str) -> EncoderOutput | None:
    """The encoder output of a batch: its source text (mt) or its audio (st, asr; or cached states); None for
    tasks whose objectives run the model themselves (audio)."""
    if TASK_INPUTS[task] == "none":
        return None
    if TASK_INPUTS[task] == "text":
        return model.encode_text(batch.src, batch.src_lengths)
    enc = model.encode_speech(batch.feats, batch.feat_lengths, batch.precomputed, task=task)
    if batch.prefix is not None:  # retrieved examples read before the speech (decoder.examples)
        enc = model.prefixed(enc, batch.prefix, batch.prefix_lengths)
    return enc


def task_losses(
    model: Translator,
    batch: Batch,
    task: str,
    objectives: Iterable[str],
    settings: ObjectiveSettings,
    parts: Sequence[str] = (),
) -> dict[str, tuple[torch.Tensor, Stats]]:
    """{objective: (summed loss, stats)} for one batch of `task` (only its `parts`, keep_parts), the encoder
    run once."""
    batch = keep_parts(batch, parts)
    enc = encode_batch(model, batch, task)
    return {name: OBJECTIVES[name].loss(model, batch, enc, settings) for name in objectives}
