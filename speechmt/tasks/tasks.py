"""The tasks a batch can be trained on: st (audio -> translation), asr (audio -> transcript), mt (text ->
translation), each optionally with the CTC auxiliary on the transcript. Losses are sums over target
tokens (CTC: over utterances); the trainer divides by the tokens of the whole update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from speechmt.data.dataset import Batch
from speechmt.models.translator import EncoderOutput, Translator
from speechmt.tasks.losses import ctc_loss, label_smoothed_nll_loss, strip_specials


@dataclass(frozen=True)
class TaskConfig:
    """Loss settings shared by the tasks. `first_text_id` is the source tokenizer's first non-special id
    (5 + its number of language tags), below which ids are left out of CTC targets."""

    label_smoothing: float = 0.1
    ctc_weight: float = 0.0
    first_text_id: int = 5
    blank_id: int = 4
    pad_id: int = 0
    bos_id: int = 2


Stats = dict[str, "float | torch.Tensor"]  # losses stay tensors (no device sync per step)
Task = Callable[[Translator, Batch, TaskConfig], tuple[torch.Tensor, Stats]]


def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Decoder input for teacher forcing: (B, U) targets -> (B, U) [bos, t_0, ..., t_{U-2}]."""
    return torch.cat([tgt.new_full((tgt.size(0), 1), bos_id), tgt[:, :-1]], dim=1)


def _decoder_loss(model: Translator, enc: EncoderOutput, tgt: torch.Tensor, tgt_lengths: torch.Tensor,
                  cfg: TaskConfig) -> tuple[torch.Tensor, Stats]:
    logits = model.decode(shift_right(tgt, cfg.bos_id), enc)  # (B, U, V)
    loss, nll = label_smoothed_nll_loss(logits, tgt, cfg.label_smoothing, cfg.pad_id)
    ntokens = int(tgt_lengths.sum())
    return loss, {"ce_loss": loss.detach(), "nll_loss": nll.detach(), "ntokens": ntokens, "nsentences": tgt.size(0)}


def _with_ctc(model: Translator, enc: EncoderOutput, batch: Batch, loss: torch.Tensor, stats: Stats,
              cfg: TaskConfig) -> tuple[torch.Tensor, Stats]:
    """Mixes in CTC on the transcript (batch.src) when the config asks for it: (1 - w) * CE + w * CTC. The CTC
    logits are those of the acoustic states, before any shrinking (which the CTC head guides)."""
    if cfg.ctc_weight <= 0:
        return loss, stats
    if enc.ctc_logits is None or batch.src is None:
        raise ValueError("ctc_weight > 0 needs a model with a CTC head and batches with transcripts")
    targets, target_lengths = strip_specials(batch.src, batch.src_lengths, cfg.first_text_id)
    ctc = ctc_loss(enc.ctc_logits, enc.ctc_logit_lengths, targets, target_lengths, cfg.blank_id)
    stats["ctc_loss"] = ctc.detach()
    return (1 - cfg.ctc_weight) * loss + cfg.ctc_weight * ctc, stats


def st_task(model: Translator, batch: Batch, cfg: TaskConfig) -> tuple[torch.Tensor, Stats]:
    """Speech translation: features (or waveforms) -> batch.tgt (+ CTC on batch.src)."""
    enc = model.encode_speech(batch.feats, batch.feat_lengths, batch.precomputed)
    loss, stats = _decoder_loss(model, enc, batch.tgt, batch.tgt_lengths, cfg)
    return _with_ctc(model, enc, batch, loss, stats, cfg)


def asr_task(model: Translator, batch: Batch, cfg: TaskConfig) -> tuple[torch.Tensor, Stats]:
    """Speech recognition: features -> batch.src, the transcript (+ CTC on it)."""
    enc = model.encode_speech(batch.feats, batch.feat_lengths, batch.precomputed)
    loss, stats = _decoder_loss(model, enc, batch.src, batch.src_lengths, cfg)
    return _with_ctc(model, enc, batch, loss, stats, cfg)


def mt_task(model: Translator, batch: Batch, cfg: TaskConfig) -> tuple[torch.Tensor, Stats]:
    """Text translation: batch.src tokens -> batch.tgt."""
    enc = model.encode_text(batch.src, batch.src_lengths)
    return _decoder_loss(model, enc, batch.tgt, batch.tgt_lengths, cfg)


TASKS: dict[str, Task] = {"st": st_task, "asr": asr_task, "mt": mt_task}
