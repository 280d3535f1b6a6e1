"""Training objectives: small functions `(model, batch, enc, settings) -> (summed loss, stats)`, each with
a normaliser, the count its loss is summed over, taken from the batch alone. An objective reads the encoder
output `enc` and the parts of the model it trains, by their types (LUT's teacher head is a
LUTSemanticEncoder's, Chimera's temperature a ChimeraMemory's), never by looking for an attribute.

The trainer knows no objective by name: for each task of a stage it sums `weight * loss / normaliser`
over the objectives the config names, where the normaliser is summed over the whole update (every
accumulated batch and every rank) before any backward pass, so gradient accumulation and data parallelism
give the same update as one big batch. Stats are further sums (e.g. the nll under label smoothing) logged
divided by the same normaliser.

A new objective is one function and one entry in OBJECTIVES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from speechmt.data.dataset import Batch
from speechmt.models.encoders import EncoderOutput
from speechmt.models.semantic import ChimeraMemory, LUTSemanticEncoder
from speechmt.models.translator import Translator
from speechmt.tasks.align import AlignConfig, align_sentence, align_words, lm_hidden
from speechmt.tasks.fat_bridge import fat_bridge
from speechmt.tasks.losses import contrastive_loss, ctc_loss, distance_loss, label_smoothed_nll_loss, strip_specials
from speechmt.tokenizers.sentencepiece import SPECIAL_PIECES, Tokenizer


@dataclass(frozen=True)
class ObjectiveSettings:
    """What the objectives need to know of the tokenizers and losses. `first_text_id` is the transcript
    tokenizer's first non-special id (5 + its number of language tags), below which ids are left out of
    CTC targets; pad/bos are the decoder tokenizer's."""

    label_smoothing: float = 0.1
    first_text_id: int = len(SPECIAL_PIECES)
    blank_id: int = Tokenizer.blank_id
    pad_id: int = Tokenizer.pad_id
    bos_id: int = Tokenizer.bos_id
    align: AlignConfig = AlignConfig()  # the align objectives' options (train.align)


Stats = dict[str, torch.Tensor]
LossFn = Callable[[Translator, Batch, EncoderOutput, ObjectiveSettings], tuple[torch.Tensor, Stats]]


@dataclass(frozen=True)
class Objective:
    """A loss and its normaliser: `loss(model, batch, enc, settings)` -> (summed loss, stats) and
    `normaliser(batch)` -> the count it is summed over (known before the forward pass)."""

    loss: LossFn
    normaliser: Callable[[Batch], int]
    reads_transcript: bool = False  # audio examples must carry the transcript in batch.src
    needs_ctc_head: bool = False
    needs_teacher: bool = False  # examples must carry a text teacher's states (speechmt.data.teacher_cache)


def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Decoder input for teacher forcing: (B, U) targets -> (B, U) [bos, t_0, ..., t_{U-2}]."""
    return torch.cat([tgt.new_full((tgt.size(0), 1), bos_id), tgt[:, :-1]], dim=1)


def target_tokens(batch: Batch) -> int:
    """Decoder target tokens of a batch (tag and eos included), fairseq's `ntokens`."""
    return int(batch.tgt_lengths.sum())


def cross_entropy(
    model: Translator, batch: Batch, enc: EncoderOutput, s: ObjectiveSettings
) -> tuple[torch.Tensor, Stats]:
    """Label-smoothed cross entropy of the decoder on batch.tgt (teacher forcing), summed over tokens;
    stats: the plain nll."""
    logits = model.decode(shift_right(batch.tgt, s.bos_id), enc)  # (B, U, V)
    loss, nll = label_smoothed_nll_loss(logits, batch.tgt, s.label_smoothing, s.pad_id)
    return loss, {"nll": nll.detach()}


def ctc(model: Translator, batch: Batch, enc: EncoderOutput, s: ObjectiveSettings) -> tuple[torch.Tensor, Stats]:
    """CTC of the acoustic states (before any shrinking, which the CTC head guides) on the transcript
    (batch.src), summed over utterances. Normalised, as fairseq's CE+CTC criterion, by target tokens."""
    if enc.ctc_logits is None or batch.src is None:
        raise ValueError("the ctc objective needs a model with a CTC head and batches with transcripts")
    targets, target_lengths = strip_specials(batch.src, batch.src_lengths, s.first_text_id)
    targets = model.ctc_head.labels(targets)  # a head over an LM's tokens has labels of its own
    return ctc_loss(enc.ctc_logits, enc.ctc_lengths, targets, target_lengths, s.blank_id), {}


def teacher_tokens(batch: Batch) -> int:
    """The teacher's word pieces in a batch (a language-model teacher's: the transcript's tokens)."""
    lengths = batch.teacher_lengths if batch.teacher_lengths is not None else batch.src_lengths
    return int(lengths.sum()) if lengths is not None else 0


def distance(model: Translator, batch: Batch, enc: EncoderOutput, s: ObjectiveSettings) -> tuple[torch.Tensor, Stats]:
    """LUT's semantic supervision: the teacher's last-layer states of the transcript as read from the
    semantic states (the teacher's input embeddings attend over enc), their distance to the real ones
    (the LUT layer's distance: mse or cosine), summed over word pieces. The teacher's states come with the
    batch (a BERT's, cached), or from the model's LM decoder (LUT's `teacher: lm`): lm_teacher_states."""
    semantic = model.semantic
    lm = isinstance(semantic, LUTSemanticEncoder) and semantic.lm_teacher_layer is not None
    if not isinstance(semantic, LUTSemanticEncoder) or (batch.teacher is None and not (lm and batch.src is not None)):
        raise ValueError(
            "the distance objective needs a semantic layer that reads teacher states (semantic 'lut') "
            "and batches with teacher states (or with transcripts, for teacher lm)"
        )
    if lm:
        queries, target, lengths = lm_teacher_states(model, batch.src, batch.src_lengths, semantic.lm_teacher_layer)
    else:
        h = batch.teacher.size(-1) // 2
        queries, target, lengths = batch.teacher[..., :h], batch.teacher[..., h:], batch.teacher_lengths
    pred = semantic.predict_teacher(enc.x, enc.lengths, queries)  # (B, N, H)
    return distance_loss(pred, target, lengths, semantic.distance), {}


@torch.no_grad()
def lm_teacher_states(
    model: Translator, src: torch.Tensor, src_lengths: torch.Tensor, layer: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A language-model decoder as LUT's teacher: the transcript src (B, S) in its ids -> its input embeddings
    (B, S, D) (the queries), its hidden states after `layer` reading [prompt | transcript] (B, S, D) (the
    targets) and the lengths (B,); no gradients."""
    emb = model.text_encoder(src, src_lengths, None)  # the LM's own table (text_encoder.embeddings lm)
    return emb.x, lm_hidden(model.decoder, emb.x, emb.lengths, layer), emb.lengths


def contrastive(
    model: Translator, batch: Batch, enc: EncoderOutput, s: ObjectiveSettings
) -> tuple[torch.Tensor, Stats]:
    """Chimera's contrastive loss between an utterance's speech memory (enc) and its transcript's memory
    (batch.src through the text embedder and the same semantic layer), slot i matched to slot i, at the
    semantic layer's temperature; summed over examples and slots. Normalised, as Chimera's own criterion,
    by target tokens, like the CE it is trained with."""
    if (
        not isinstance(model.semantic, ChimeraMemory)
        or model.text_encoder is None
        or batch.src is None
        or batch.feats is None
    ):
        raise ValueError(
            "the contrastive objective needs a memory semantic layer (semantic 'chimera') with a text "
            "path (text_encoder.embed_only), audio batches (st or asr) and their transcripts"
        )
    text = model.encode_text(batch.src, batch.src_lengths)
    return contrastive_loss(enc.x, text.x, model.semantic.temperature), {}


def batches(batch: Batch) -> int:
    """1 per batch: for losses that are means already (their unit is not known before the forward pass)."""
    return 1


def wav2vec2_pretraining(model, batch: Batch, enc: None, s: ObjectiveSettings) -> tuple[torch.Tensor, Stats]:
    """wav2vec 2.0's contrastive + diversity loss per masked frame of unlabelled audio (batch.feats waves),
    for a speechmt.models.wav2vec2_pretraining.Wav2Vec2Pretraining model; stats: both parts, the codebook
    perplexity and the masked frames."""
    return model.loss(batch.feats, batch.feat_lengths)


def fat_mlm(model, batch: Batch, enc: None, s: ObjectiveSettings) -> tuple[torch.Tensor, Stats]:
    """FAT-MLM's masked speech reconstruction + masked token cross entropy over whatever parts the batch
    carries (speechmt.models.fat_mlm.fat_mlm_loss; ids below s.first_text_id are never masked, nor Whisper's
    special tokens on a Whisper target side; a frozen Whisper encoder's cached states come as `precomputed`
    feats)."""
    from speechmt.models.fat_mlm import fat_mlm_loss

    return fat_mlm_loss(
        model,
        batch.feats,
        batch.feat_lengths,
        batch.src,
        batch.src_lengths,
        batch.tgt,
        batch.tgt_lengths,
        s.first_text_id,
        precomputed=batch.precomputed,
    )


def transcript_tokens(batch: Batch) -> int:
    """Transcript tokens of a batch (batch.src, specials included): the align objective's pairs at most."""
    return int(batch.src_lengths.sum()) if batch.src_lengths is not None else 0


def utterances(batch: Batch) -> int:
    return len(batch)


OBJECTIVES: dict[str, Objective] = {
    "ce": Objective(cross_entropy, target_tokens),
    "ctc": Objective(ctc, target_tokens, reads_transcript=True, needs_ctc_head=True),
    "distance": Objective(distance, teacher_tokens, reads_transcript=True, needs_teacher=True),
    "contrastive": Objective(contrastive, target_tokens, reads_transcript=True),
    "wav2vec2": Objective(wav2vec2_pretraining, batches),
    "fat_mlm": Objective(fat_mlm, batches, reads_transcript=True),
    "align": Objective(align_words, transcript_tokens, reads_transcript=True),
    "align_sentence": Objective(align_sentence, utterances, reads_transcript=True),
    "fat_bridge": Objective(fat_bridge, batches, reads_transcript=True, needs_ctc_head=True),
}
