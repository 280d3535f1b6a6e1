"""Length shrinking of acoustic states, so that a speech sequence (~25-50 states a second) comes closer to
the length of its text before the decoder or a semantic layer reads it.

- `ConvShrink`: two stride-2 Conv1d (kernel 5) with GLU, 4x in time, as XSTNet (Ye et al., Interspeech
  2021) and Chimera (Han et al., Findings of ACL 2021) put on top of wav2vec2 (fairseq's Conv1dSubsampler).
- `CTCShrink`: CTC-guided merging, as COSTT (Dong et al., AAAI 2021, "Consecutive Decoding for Speech-to-text
  Translation") and LUT (Dong et al., AAAI 2021, "Listen, Understand and Translate"): the CTC argmax label of
  every frame; blank frames are dropped; each run of one non-blank label becomes one vector (its first frame,
  or the mean of its frames). An utterance with no non-blank frame keeps one vector (its first frame, or the
  mean of all its frames). Vectorised over batch and time; the CTC loss on the transcript trains the head.
  With `embed: lm` (a language-model decoder, whose tokens the CTC head writes) a segment is not the mean of
  its acoustic states but of its frames' soft token embeddings: the CTC posteriors over the text labels times
  the LM's own input embeddings of those labels, so that the LM reads speech as it reads the transcript's
  text (its MT) and the ST loss still reaches the head through the posteriors. This is the CTC compressor of
  decoder-only speech LMs (Wu et al. 2023, "On decoder-only architecture for speech-to-text and large language
  model integration") with the soft embeddings of the modality-gap work (e.g. Gaido et al. 2021's CTC
  compression, Liu et al. 2020's "Bridging the modality gap").

Both map an EncoderOutput to an EncoderOutput with new x and lengths, keeping the CTC logits and their
(acoustic) lengths for the CTC loss.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import BuildParts, KindOptions, ModelConfigT, kind_field
from speechmt.models.ctc_head import CTC_BLANK_ID, FIRST_LABEL, LabelEmbeddings
from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.subsampling import Conv1dSubsampler
from speechmt.sequence import lengths_to_padding_mask

SHRINK_MODES = ("mean", "first")
SHRINK_EMBEDS = ("states", "lm")


@dataclass
class ShrinkConfig(KindOptions):
    """What the rest of the package may ask of the shrinking of the acoustic states before the decoder, whatever
    its kind (speechmt.models.registry.SHRINKS: none, conv, ctc); each kind's options derive from this one."""

    kind: str = ""
    embed: ClassVar[str] = "states"  # what a segment becomes (a kind without the option: its states)
    needs_ctc_head: ClassVar[bool] = False
    """True when the states are merged by the CTC head's labels, which a CTC loss must train."""


@dataclass
class NoShrinkConfig(ShrinkConfig):
    """shrink kind "none": the acoustic states as they are."""

    kind: str = kind_field("none")


@dataclass
class ConvShrinkConfig(ShrinkConfig):
    """shrink kind "conv": `layers` stride-2 Conv1d + GLU with `channels` and `kernel`: 2 ** layers times shorter."""

    kind: str = kind_field("conv")
    channels: int = checked(1024, lo=1)
    kernel: int = checked(5, lo=1)
    layers: int = checked(
        2, lo=1
    )  # stride-2 layers (2: 4x, as XSTNet and Chimera; 3: 8x, e.g. 50 Hz Whisper states to 6.25 Hz)

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self, "shrink."))


@dataclass
class CTCShrinkConfig(ShrinkConfig):
    """shrink kind "ctc": merge runs of one CTC label (`mode` "mean" or "first"); needs the model's CTC head,
    trained by the CTC loss: train.ctc_weight > 0."""

    kind: str = kind_field("ctc")
    mode: str = "mean"
    # what a segment becomes: "states" (its acoustic states, merged by `mode`) or "lm" (the mean of its frames' soft
    # LM token embeddings: needs decoder 'lm', whose tokenizer the CTC head then writes)
    embed: str = "states"
    needs_ctc_head: ClassVar[bool] = True

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "shrink.")
            + [
                self.embed not in SHRINK_EMBEDS
                and f"unknown shrink.embed {self.embed!r}; expected one of {', '.join(SHRINK_EMBEDS)}",
                self.mode not in SHRINK_MODES
                and f"unknown shrink.mode {self.mode!r}; expected one of {', '.join(SHRINK_MODES)}",
            ],
        )


def build_no_shrink(cfg: ModelConfigT, parts: BuildParts) -> tuple[None, ModelConfigT]:
    return None, cfg


def build_conv_shrink(cfg: ModelConfigT, parts: BuildParts) -> tuple[ConvShrink, ModelConfigT]:
    s = cfg.shrink
    return ConvShrink(cfg.d_model, s.channels, (s.kernel,) * s.layers), cfg


def build_ctc_shrink(cfg: ModelConfigT, parts: BuildParts) -> tuple[CTCShrink, ModelConfigT]:
    """CTC-guided merging over the CTC head's labels (parts.ctc_head); with embed lm, of the soft embeddings of the
    LM decoder's tokens that the head writes (its `vocab`: the bundle's resolved "ctc_vocab")."""
    if parts.ctc_head is None:
        raise ValueError("shrink 'ctc' needs the CTC head: ctc=True with src_vocab_size > 0 (train.ctc_weight > 0)")
    table = None
    if cfg.shrink.embed == "lm":
        if not parts.ctc_head.vocab.numel():
            raise ValueError(
                "shrink.embed lm needs a CTC head over the LM's tokens (resolved ctc_vocab, derived from "
                "the transcripts when a run starts; train a ctc objective)"
            )
        table = LabelEmbeddings(parts.ctc_head, parts.decoder)
    return CTCShrink(CTC_BLANK_ID, cfg.shrink.mode, table, FIRST_LABEL), cfg


class Shrink(Protocol):
    """EncoderOutput (x (B, T, D), lengths) -> EncoderOutput (x (B, T', D), lengths'), CTC fields kept."""

    def __call__(self, enc: EncoderOutput) -> EncoderOutput: ...


class ConvShrink(nn.Module):
    """Stride-2 Conv1d + GLU layers, one per kernel (default two of kernel 5: T' = ceil(T / 4))."""

    def __init__(self, dim: int, channels: int, kernels: tuple[int, ...] = (5, 5)):
        super().__init__()
        self.convs = Conv1dSubsampler(dim, channels, dim, kernels)

    def output_lengths(self, lengths: Tensor) -> Tensor:
        return self.convs.output_lengths(lengths)

    def forward(self, enc: EncoderOutput) -> EncoderOutput:
        """x (B, T, D), lengths (B,) -> x (B, T', D) (padded frames zero), lengths (B,)."""
        return _shrunk(enc, *self.convs(enc.x, enc.lengths))


def _shrunk(enc: EncoderOutput, x: Tensor, lengths: Tensor) -> EncoderOutput:
    """`enc` with shrunk states; CTC logits (if any) keep the acoustic lengths."""
    return replace(enc, x=x, lengths=lengths, ctc_lengths=enc.ctc_lengths)


def ctc_segments(ctc_logits: Tensor, lengths: Tensor, blank_id: int) -> tuple[Tensor, Tensor]:
    """The CTC segment of every frame: runs of one non-blank argmax label, numbered from 0 per utterance.

    ctc_logits (B, T, V), lengths (B,) -> segment ids (B, T) int64 (-1 for blank and padded frames) and the
    number of segments per utterance (B,) (0 for an utterance whose frames are all blank).
    """
    labels = ctc_logits.argmax(-1)  # (B, T)
    keep = (labels != blank_id) & ~lengths_to_padding_mask(lengths, labels.size(1))
    starts = keep & (labels != _shift_right(labels, blank_id))  # a new label, or a label after a blank
    ids = starts.long().cumsum(1) - 1  # (B, T): the segment each frame belongs to
    return ids.masked_fill(~keep, -1), starts.sum(1)


def _shift_right(t: Tensor, fill: int) -> Tensor:
    """(B, T) -> (B, T) holding t[:, i - 1] at i, and `fill` at 0."""
    return F.pad(t[:, :-1], (1, 0), value=fill)


def merge_segments(x: Tensor, segments: Tensor, counts: Tensor, lengths: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    """One vector per segment: the mean of its frames ("mean") or its first frame ("first").

    x (B, T, D), segments (B, T) from `ctc_segments`, counts (B,) segments per row, lengths (B,) frames per
    row. A row with no segment becomes one vector from all its frames. Returns x (B, S, D) with S the largest
    count (at least 1; padded vectors zero) and the new lengths (B,).
    """
    if mode not in SHRINK_MODES:
        raise ValueError(f"unknown shrink mode {mode!r}; expected one of {', '.join(SHRINK_MODES)}")
    empty = counts == 0
    valid = ~lengths_to_padding_mask(lengths, x.size(1))
    segments = torch.where(empty[:, None] & valid, 0, segments)  # an all-blank row is one segment
    new_lengths = torch.where(empty, 1, counts)
    batch, _, dim = x.shape
    width = max(int(new_lengths.max()), 1) if batch else 1
    slots = torch.arange(batch, device=x.device)[:, None] * width + segments  # (B, T) flat output index
    kept = segments >= 0
    if mode == "mean":
        index = slots[kept]  # (N,) for the N kept frames
        sums = x.new_zeros(batch * width, dim).index_add(0, index, x[kept])
        sizes = x.new_zeros(batch * width).index_add(0, index, x.new_ones(index.shape))
        merged = sums / sizes.clamp(min=1)[:, None]
    else:
        first = kept & (segments != _shift_right(segments, -1))
        merged = x.new_zeros(batch * width, dim).index_put((slots[first],), x[first])
    return merged.view(batch, width, dim), new_lengths


class CTCShrink(nn.Module):
    """CTC-guided merging of acoustic states (COSTT / LUT); needs the model's CTC logits. No parameters.

    `table` (optional, not a registered module): () -> (V - first_label, D) the input embeddings of the CTC
    labels first_label.. (a language model's, already scaled as it scales its input); given, each kept
    frame becomes softmax(its logits) over those labels (renormalised) @ table, and segments the mean of
    their frames' vectors, whatever `mode`."""

    def __init__(self, blank_id: int = 4, mode: str = "mean", table=None, first_label: int = 5):
        super().__init__()
        if mode not in SHRINK_MODES:
            raise ValueError(f"unknown shrink mode {mode!r}; expected one of {', '.join(SHRINK_MODES)}")
        self.blank_id, self.mode, self.first_label = blank_id, mode, first_label
        self._table = (table,) if table is not None else None  # a tuple: the LM's table is not our submodule

    def forward(self, enc: EncoderOutput) -> EncoderOutput:
        """x (B, T, D), lengths, ctc_logits (B, T, V) -> x (B, S, D) one vector per CTC segment, lengths (B,)."""
        if enc.ctc_logits is None:
            raise ValueError("the ctc shrink needs CTC logits: build the model with ctc=True")
        segments, counts = ctc_segments(enc.ctc_logits, enc.lengths, self.blank_id)
        if self._table is None:
            return _shrunk(enc, *merge_segments(enc.x, segments, counts, enc.lengths, self.mode))
        x = soft_embeddings(enc.ctc_logits, segments >= 0, self._table[0](), self.first_label)
        return _shrunk(enc, *merge_segments(x, segments, counts, enc.lengths, "mean"))


def soft_embeddings(ctc_logits: Tensor, kept: Tensor, table: Tensor, first_label: int) -> Tensor:
    """Each kept frame's expected label embedding: ctc_logits (B, T, V), kept (B, T) bool, table (V - first_label,
    D) -> (B, T, D): softmax over labels first_label.. (blank and specials left out) @ table at the kept frames,
    the plain mean of the table's rows elsewhere (what an all-blank utterance's single segment reads)."""
    out = table.mean(0).to(ctc_logits.dtype).expand(*kept.shape, table.size(1)).clone()
    if kept.any():
        probs = torch.softmax(ctc_logits[kept][:, first_label:].float(), dim=-1)  # (N, V')
        out[kept] = (probs @ table.float()).to(out.dtype)
    return out
