"""The `align` and `align_sentence` objectives: the speech path's vectors of a transcript's tokens pulled to the
text path's contextual vectors of the same tokens, in the same model (Cao, Kitaev and Klein, ICLR 2020,
"Multilingual Alignment of Contextual Word Representations": aligned word pairs, a squared distance between their
contextual vectors, and a regulariser keeping the side that is already good near its start).

Here the pairs come from one utterance read twice: its audio (the speech path, enc) and its transcript (the
text path, model.encode_text of batch.src). `AlignConfig.layer` says where they meet: 0 at what the decoder
reads (the bridge's output against the text path's output: for a language-model decoder with the CTC bridge,
the segment vectors against the LM's own embeddings of the transcript), k > 0 at a language-model decoder's
hidden states after its layer k, the LM reading [prompt | speech] and [prompt | transcript].

Units are the transcript's tokens (the CTC head's labels: a word of several pieces gives one pair per piece).
A token's speech vector is the mean of the states its frames reach: its frames from a CTC forced alignment of
the transcript through the CTC head (speechmt.evaluation.alignment; `units: uniform`, or a model without a CTC
head: the frames shared out evenly), each frame standing for the state it became (itself at the frame rate,
its CTC segment after the ctc shrink, its share of the sequence after a conv shrink). A token none of whose
frames reaches a state (all blank under the ctc shrink) or an utterance whose transcript does not fit its
frames gives no pair. A whisper_asr encoder (asr_embed states) has a vector per token of Whisper's own
transcript already: each is paired with the LM's input embedding of that token's text, the pairs that
train.init_procrustes fits once (speechmt.training.procrustes), here at every batch. The sentence level
compares the mean of the speech states with the mean of the transcript's token states.

The regulariser (`text`): "detach" (the text side is a fixed target: the gradient reaches the speech path
only), or "anchor": the text side trains too, and anchor_weight x the squared distance of its states to the
same states under the weights the objective first saw (the trainable tensors copied at its first call: of the
run, or of a resume) keeps it near its start, Cao et al.'s regulariser on the source language.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.evaluation.alignment import AlignmentError, ctc_forced_align
from speechmt.models.encoders.whisper_asr import WhisperAsrEncoder
from speechmt.models.encoders.whisper_transcript import unit_targets
from speechmt.models.shrink import CTCShrink, ctc_segments
from speechmt.sequence import lengths_to_padding_mask
from speechmt.tasks.losses import strip_specials

ALIGN_TEXT = ("detach", "anchor")
ALIGN_UNITS = ("ctc", "uniform")
ALIGN_DISTANCES = ("mse", "cosine", "scaled")


@dataclass(frozen=True)
class AlignConfig:
    """Options of the align objectives (train.align): `layer` (0: what the decoder reads; k > 0: an LM decoder's
    hidden states after its layer k), `text` (detach or anchor) with `anchor_weight`, `units` (ctc: forced
    alignment through the CTC head; uniform: frames shared out evenly), `distance` between a pair (mse: Cao et
    al.'s squared distance averaged over channels; cosine: 1 - cosine; scaled: the squared distance with each
    channel divided by its root mean square over the batch's text vectors. A language model's middle layers
    carry a few channels of huge magnitude (Gemma 3 270M after its layer 6: 3 of 640 channels hold 95 % of the
    squared norm) that dominate mse and cosine; scaled weighs every channel alike)."""

    layer: int = checked(0, lo=0)
    text: str = checked("detach", choices=ALIGN_TEXT)
    anchor_weight: float = checked(1.0, lo=0)
    units: str = checked("ctc", choices=ALIGN_UNITS)
    distance: str = checked("mse", choices=ALIGN_DISTANCES)

    def __post_init__(self):
        raise_problems("train.align", field_problems(self))


# --- token spans and pooling (shared with speechmt.models.procrustes) ---


def transcript_units(src: Tensor, src_lengths: Tensor, first_text_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """The transcript tokens that are units: src (B, S), lengths (B,) -> keep (B, S) bool (text ids, not
    padding), their ids (B, W) left-aligned (padded with 0) and their counts (B,)."""
    positions = torch.arange(src.size(1), device=src.device)[None, :]
    keep = (src >= first_text_id) & (positions < src_lengths[:, None])
    ids, counts = strip_specials(src, src_lengths, first_text_id)
    rows = torch.zeros(src.size(0), max(int(counts.max()), 1) if len(counts) else 1, dtype=src.dtype, device=src.device)
    rows[~lengths_to_padding_mask(counts, rows.size(1))] = ids
    return keep, rows, counts


def compact(x: Tensor, keep: Tensor, width: int) -> Tensor:
    """x (B, S, D), keep (B, S) bool -> the kept positions moved to the front, in order, (B, width, D), zeros after."""
    out = x.new_zeros(x.size(0), width, x.size(-1))
    counts = keep.sum(1)
    out[~lengths_to_padding_mask(counts, width)] = x[keep]
    return out


def token_spans(
    log_probs: Tensor | None, lengths: Tensor, labels: Tensor, counts: Tensor, blank: int, units: str = "ctc"
) -> list[list[tuple[int, int]] | None]:
    """Per utterance, each unit's frames [start, end): from the CTC forced alignment of its labels (B, W) (the first
    counts[b] of row b) through log_probs (B, T, V) over its lengths[b] frames, or (`units` uniform, or no
    log_probs) frames shared out evenly (every token at least one frame); None for an utterance whose
    transcript does not fit its frames."""
    spans: list[list[tuple[int, int]] | None] = []
    for b in range(len(counts)):
        n, frames = int(counts[b]), int(lengths[b])
        if units == "ctc" and log_probs is not None:
            try:
                spans.append(ctc_forced_align(log_probs[b, :frames], labels[b, :n].cpu(), blank).spans)
            except AlignmentError:
                spans.append(None)
        elif n > frames:
            spans.append(None)
        else:
            edges = np.linspace(0, frames, n + 1).round().astype(int).tolist()
            spans.append([(edges[i], max(edges[i + 1], edges[i] + 1)) for i in range(n)])
    return spans


def span_weights(spans: list[list[tuple[int, int]] | None], frame_positions: Tensor, width: int, size: int) -> Tensor:
    """The pooling matrix (B, W, N) of `spans` (per utterance, W' <= width frame spans) through frame_positions
    (B, T) (the state index each frame became, -1 for none) onto N = `size` states: row w holds the share of
    the span's frames that reach each state (each row sums to 1, or is zero where no frame reaches a state)."""
    out = torch.zeros(len(spans), width, size, device=frame_positions.device)
    for b, row in enumerate(spans):
        for w, (start, end) in enumerate(row or []):
            reached = frame_positions[b, start:end]
            reached = reached[reached >= 0]
            if reached.numel():
                out[b, w] = torch.bincount(reached, minlength=size)[:size].float() / reached.numel()
    return out


def frame_positions(shrink: nn.Module | None, ctc_logits: Tensor, ctc_lengths: Tensor, lengths: Tensor) -> Tensor:
    """The state each CTC frame became (B, T_ctc), -1 for none: itself (no shrink), its CTC segment (ctc shrink:
    blank frames none; an all-blank utterance's frames its one state), or its share of the sequence (conv)."""
    frames = torch.arange(ctc_logits.size(1), device=ctc_logits.device)[None, :]
    valid = frames < ctc_lengths[:, None]
    if shrink is None:
        return torch.where(valid, frames, -1)
    if isinstance(shrink, CTCShrink):
        segments, counts = ctc_segments(ctc_logits, ctc_lengths, shrink.blank_id)
        return torch.where((counts == 0)[:, None] & valid, 0, segments)
    share = frames * lengths[:, None] // ctc_lengths.clamp(min=1)[:, None]
    return torch.where(valid, share.clamp(max=(lengths - 1).clamp(min=0)[:, None]), -1)


def pair_loss(speech: Tensor, text: Tensor, mask: Tensor, distance: str = "mse") -> Tensor:
    """The distance of paired vectors summed over the pairs `mask` keeps: speech, text (B, W, D), mask (B, W)
    bool; `distance` mse (squared, averaged over channels), cosine (1 - cosine) or scaled (mse with each channel
    divided by its root mean square over the kept text vectors, a constant: no gradient). Computed in float32."""
    speech, text = speech.float(), text.float()
    if distance == "cosine":
        return (1 - torch.nn.functional.cosine_similarity(speech, text, dim=-1, eps=1e-6))[mask].sum()
    if distance == "scaled":
        rms = text.detach()[mask].pow(2).mean(0).sqrt().clamp(min=1e-6)  # (D,)
        speech, text = speech / rms, text / rms
    return (speech - text).pow(2).mean(-1)[mask].sum()


# --- the two sides' states ---


def lm_hidden(decoder: nn.Module, x: Tensor, lengths: Tensor, layer: int) -> Tensor:
    """A language-model decoder's hidden states after its layer `layer` (transformers' hidden_states[layer]) over
    [its prompt | x]: x (B, S, D), lengths (B,) -> (B, S, D) at x's positions (padding at the end, unread)."""
    prompt = decoder.embed(decoder.prompt)[None].expand(x.size(0), -1, -1).to(x.dtype)
    keep = ~lengths_to_padding_mask(lengths, x.size(1))
    mask = torch.cat([keep.new_ones(prompt.shape[:2]), keep], dim=1).long()
    out = decoder.lm.model(inputs_embeds=torch.cat([prompt, x], dim=1), attention_mask=mask, output_hidden_states=True)
    hidden = out.hidden_states
    if not 0 <= layer < len(hidden):
        raise ValueError(f"train.align.layer {layer}: the language model has hidden states 0..{len(hidden) - 1}")
    return hidden[layer][:, prompt.size(1) :]


def side_states(model: nn.Module, x: Tensor, lengths: Tensor, layer: int) -> Tensor:
    """What a side is compared by: x itself (layer 0) or the LM decoder's hidden states of it."""
    if layer == 0:
        return x
    if not hasattr(model.decoder, "lm"):
        raise ValueError(
            "train.align.layer > 0 reads a language-model decoder's hidden states (decoder 'lm'); "
            "other decoders: layer 0"
        )
    return lm_hidden(model.decoder, x, lengths, layer)


_STARTS: "weakref.WeakKeyDictionary[nn.Module, dict[str, Tensor]]" = weakref.WeakKeyDictionary()


def start_values(model: nn.Module) -> dict[str, Tensor]:
    """{name: value} of every trainable tensor of `model` at the first call that saw it trainable (copied then)."""
    start = _STARTS.setdefault(model, {})
    for name, p in model.named_parameters():
        if p.requires_grad and name not in start:
            start[name] = p.detach().clone()
    return start


class _TextPath(nn.Module):
    """The text side as a module (for torch.func.functional_call): transcript -> its states at `layer`."""

    def __init__(self, model: nn.Module, layer: int):
        super().__init__()
        self.model, self.layer = model, layer

    def forward(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        enc = self.model.encode_text(src, src_lengths)
        return side_states(self.model, enc.x, enc.lengths, self.layer)


def text_side(model: nn.Module, src: Tensor, src_lengths: Tensor, cfg: AlignConfig) -> tuple[Tensor, Tensor]:
    """The transcript's states at the aligned layer (B, S, D), and the anchor regulariser's sum (0 unless
    `text` is anchor): under detach computed without gradients; the start's states with the start's values
    put in place of the trainable tensors (torch.func.functional_call: the model's own are left untouched)."""
    path = _TextPath(model, cfg.layer)
    if cfg.text == "detach":
        with torch.no_grad():
            return path(src, src_lengths).detach(), src.new_zeros((), dtype=torch.float32)
    now = path(src, src_lengths)
    with torch.no_grad():
        start = torch.func.functional_call(
            path, {f"model.{n}": v for n, v in start_values(model).items()}, (src, src_lengths), strict=False
        )
    keep = ~lengths_to_padding_mask(src_lengths, now.size(1))
    return now, cfg.anchor_weight * pair_loss(now, start, keep)


def _check(model: nn.Module, batch, enc) -> None:
    if enc is None or batch.feats is None or batch.src is None or model.text_encoder is None:
        raise ValueError(
            "the align objectives need audio batches (st or asr) with their transcripts and a model "
            "with a text path (text_encoder.layers > 0 or embed_only)"
        )


def batch_states(encoder: WhisperAsrEncoder, batch) -> tuple[Tensor, Tensor]:
    """A batch's whisper_asr states (B, 1 + U, H) and lengths (B,): its cached ones (`batch.precomputed`), else
    `encoder.states` of its audio (a live search)."""
    if batch.precomputed:
        return batch.feats, batch.feat_lengths
    return encoder.states(batch.feats, batch.feat_lengths)


def asr_token_pairs(encoder: WhisperAsrEncoder, batch, enc, cfg: AlignConfig) -> tuple[Tensor, Tensor, Tensor]:
    """A whisper_asr encoder's pairs (asr_embed states): each of Whisper's transcript tokens' projected vector
    (enc.x (B, U, D)) and the LM's input embedding of its text (B, U, D), and the mask of the pairs (B, U): the
    pairs train.init_procrustes fits, here at every batch. The states are the batch's cached ones (a live batch
    is searched again)."""
    if cfg.layer != 0:
        raise ValueError(
            f"train.align.layer {cfg.layer}: a whisper_asr encoder's tokens are Whisper's pieces, which "
            f"meet the LM's embeddings of their text at layer 0 only"
        )
    text = unit_targets(encoder, *batch_states(encoder, batch))
    if text.shape != enc.x.shape:
        raise ValueError(
            "train.align on a whisper_asr encoder pairs the projection's vectors, one per transcript "
            "token: a semantic layer or shrink after it is not supported"
        )
    return enc.x, text, ~lengths_to_padding_mask(enc.lengths, enc.x.size(1))


def align_words(model: nn.Module, batch, enc, s) -> tuple[Tensor, dict[str, Tensor]]:
    """Cao et al.'s alignment of the transcript's tokens (module docstring), summed over pairs, plus the anchor
    regulariser; stats: the pairs (`pairs`) and the regulariser's part (`anchor`). A whisper_asr encoder's tokens
    are its own transcript's (`asr_token_pairs`), their text side the LM's frozen embeddings (no anchor)."""
    _check(model, batch, enc)
    cfg = s.align
    if isinstance(model.speech_encoder, WhisperAsrEncoder):
        speech, text, mask = asr_token_pairs(model.speech_encoder, batch, enc, cfg)
        return pair_loss(speech, text, mask, cfg.distance), {
            "pairs": mask.sum().float(),
            "anchor": speech.new_zeros((), dtype=torch.float32),
        }
    keep, labels, counts = transcript_units(batch.src, batch.src_lengths, s.first_text_id)
    width = labels.size(1)
    text, anchor = text_side(model, batch.src, batch.src_lengths, cfg)
    text = compact(text, keep, width)
    speech = side_states(model, enc.x, enc.lengths, cfg.layer)  # (B, N, D)
    if enc.ctc_logits is not None and model.ctc_head is not None:
        log_probs = enc.ctc_logits.detach().float().log_softmax(-1).cpu()
        spans = token_spans(
            log_probs, enc.ctc_lengths.cpu(), model.ctc_head.labels(labels).cpu(), counts.cpu(), s.blank_id, cfg.units
        )
        positions = frame_positions(model.shrink, enc.ctc_logits, enc.ctc_lengths, enc.lengths)
    else:
        spans = token_spans(None, enc.lengths.cpu(), labels.cpu(), counts.cpu(), s.blank_id, "uniform")
        positions = torch.where(
            ~lengths_to_padding_mask(enc.lengths, enc.x.size(1)),
            torch.arange(enc.x.size(1), device=enc.x.device)[None, :],
            -1,
        )
    weights = span_weights(spans, positions, width, speech.size(1)).to(speech.dtype)
    mask = weights.sum(-1) > 0  # (B, W)
    loss = pair_loss(weights @ speech, text, mask, cfg.distance)
    return loss + anchor, {"pairs": mask.sum().float(), "anchor": anchor.detach()}


def mean_states(x: Tensor, keep: Tensor) -> Tensor:
    """x (B, S, D), keep (B, S) bool -> (B, D) the mean of each row's kept states."""
    k = keep.to(x.dtype)[..., None]
    return (x * k).sum(1) / k.sum(1).clamp(min=1)


def align_sentence(model: nn.Module, batch, enc, s) -> tuple[Tensor, dict[str, Tensor]]:
    """The sentence level: each utterance's mean speech state against the mean of its transcript's token states
    (the same layer), summed over utterances, plus the anchor regulariser."""
    _check(model, batch, enc)
    cfg = s.align
    keep, _, _ = transcript_units(batch.src, batch.src_lengths, s.first_text_id)
    text, anchor = text_side(model, batch.src, batch.src_lengths, cfg)
    speech = side_states(model, enc.x, enc.lengths, cfg.layer)
    speech = mean_states(speech, ~lengths_to_padding_mask(enc.lengths, speech.size(1)))
    mask = keep.any(1)
    loss = pair_loss(speech[:, None], mean_states(text, keep)[:, None], mask[:, None], cfg.distance)
    return loss + anchor, {"anchor": anchor.detach()}
