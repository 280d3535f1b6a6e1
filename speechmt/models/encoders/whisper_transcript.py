"""Whisper's transcript in the whisper_asr cascade (ASR -> bridge -> LM; speechmt.models.encoders.whisper_asr): what
the ASR's search returns (`Transcript`) and the interface the encoder receives the search by (`TranscriptionSearch`),
the tokens the search never writes (`allowed`, `begin_suppressed`), and the transcript's tokens read back off the
encoder's states (`token_logits`, `read_tokens`) with the LM's input embeddings of their text: the align objective's
text side (`set_targets`, `unit_targets`) and the pairs train.init_procrustes fits (`token_pairs`). Each function
takes the encoder (`asr`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor, nn

from speechmt.sequence import lengths_to_padding_mask

WhisperAsr = nn.Module
"""The `asr` these functions read: a speechmt.models.encoders.whisper_asr.WhisperAsrEncoder (that module imports this
one, so it is not named here)."""

PieceTable = Callable[[Tensor], Tensor]
"""Whisper token ids (...,) -> the LM's embeddings of their text (..., D): whisper_handover.PieceEmbeddings."""


@dataclass
class Transcript:
    """One batch's transcripts, as the ASR's search finds them: `ids` each row's text token ids (below eos_id, at
    least one), `states` (B, U, H) Whisper's decoder state after each token, padded positions zero, `lengths` (B,)
    and `first` (B, H) the prompt's last state (the one that predicted the first token)."""

    ids: list[list[int]]
    states: Tensor
    lengths: Tensor
    first: Tensor


class TranscriptionSearch(Protocol):
    """The ASR's search (speechmt.decoding.transcribe.SEARCH), which the encoder receives when it is built: Whisper's
    encoder states memory (B, S, H) and their lengths (B,) -> what the encoder's parts transcribe."""

    def transcript(
        self, asr: WhisperAsr, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
    ) -> Transcript:
        """The transcripts and their states, by the encoder's configured search (greedy, or a beam of `asr.beam`),
        each row from its own prompt `prompts` (B, P) (None: `asr.prompt`)."""

    def tokens(
        self, asr: WhisperAsr, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
    ) -> list[list[int]]:
        """The transcripts' ids alone (a beam's states are not computed)."""

    def detect(self, asr: WhisperAsr, memory: Tensor, memory_lengths: Tensor, languages: Tensor) -> Tensor:
        """The language each row is heard in: an index (B,) into the language tokens `languages` (L,)."""


@torch.no_grad()
def token_pairs(asr: WhisperAsr, states: Tensor, lengths: Tensor, table: PieceTable) -> tuple[Tensor, Tensor]:
    """Pairs for fitting the projection (train.init_procrustes; embed "states" only): `asr.states`' output (B, 1 + U,
    H), cached or live, lengths (B,), `table` the LM's embeddings of Whisper's pieces -> each transcript token's
    projection input (its normalised state, `asr.state`'s choice, as `asr.project` reads it) (P, H or 2H) and the LM's
    input embedding of the token's text (P, D), P the transcripts' tokens in all, in order. The token is the
    search's own (`read_tokens`)."""
    if asr.embed != "states":
        raise ValueError(
            f"train.init_procrustes fits a whisper_asr projection with asr_embed states only (with "
            f"{asr.embed} the LM reads the transcript's embeddings already; the projection "
            f"starts at zero)"
        )
    inputs, _ = asr.projected_states(states, lengths)
    tokens, pad = read_tokens(asr, states, lengths)
    return inputs[~pad], table(tokens[~pad])


def read_tokens(asr: WhisperAsr, states: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """`asr.states`' output (B, 1 + U, H) (embed "states"), lengths (B,) -> each transcript token's id (B, U), the
    one Whisper's output layer picks at the state before it: the greedy search's own token (ties that a cache's
    float16 rounding breaks the other way aside), padded positions 0; and the padding mask (B, U)."""
    if asr.beam > 1:
        raise ValueError(
            f"a whisper_asr encoder's tokens are read off the state before each, which is the greedy "
            f"search's token; encoder.asr_beam is {asr.beam}: set it to 1"
        )
    logits = token_logits(asr, states[:, :-1])
    pad = lengths_to_padding_mask(lengths - 1, logits.size(1))
    return logits.argmax(-1).masked_fill(pad, 0), pad


def set_targets(asr: WhisperAsr, table: PieceTable) -> None:
    """Gives embed "states" the LM's embeddings of Whisper's pieces (`table`), which `unit_targets` reads: built
    only for the align objective (4 s of tokenizing), so not when a model is built."""
    if asr.embed != "states":
        raise ValueError(
            f"train.align pulls a whisper_asr encoder's projected states (asr_embed states) to "
            f"the LM's embeddings of their tokens; with asr_embed {asr.embed} the LM reads those "
            f"embeddings already"
        )
    asr._targets = (table,)


@torch.no_grad()
def unit_targets(asr: WhisperAsr, states: Tensor, lengths: Tensor) -> Tensor:
    """`asr.states`' output (B, 1 + U, H) (embed "states"), lengths (B,) -> the LM's input embedding of each
    transcript token's text (B, U, D), padded positions zero: the align objective's text side. The token is the
    one Whisper's output layer picks at the state before it: the greedy search's own token (ties that the
    cache's float16 rounding breaks the other way aside)."""
    if not asr._targets:
        raise ValueError("the whisper_asr encoder has no table of the LM's embeddings (set_targets)")
    tokens, pad = read_tokens(asr, states, lengths)
    return asr._targets[0](tokens).masked_fill(pad[..., None], 0.0)


def begin_suppressed(asr: WhisperAsr, vocab: int) -> list[int]:
    """What Whisper never writes first, over a vocabulary of `vocab`: <|endoftext|> and a lone space (whisper's
    SuppressBlank; every id above <|endoftext|> is never written at all)."""
    return [asr.eos_id, *_space_ids(vocab, asr.eos_id)]


def allowed(asr: WhisperAsr, logits: Tensor, first: Tensor | bool) -> Tensor:
    """logits (..., V) with what the search never writes banned (speechmt.decoding.transcribe.logit_filters):
    ids above <|endoftext|>, and at a first step (`first`: bool, or (...,) bool) `begin_suppressed`."""
    logits = logits.clone()
    logits[..., asr.eos_id + 1 :] = float("-inf")
    banned = begin_suppressed(asr, logits.size(-1))
    first = torch.as_tensor(first, device=logits.device)
    logits[..., banned] = logits[..., banned].masked_fill(first[..., None], float("-inf"))
    return logits


def token_logits(asr: WhisperAsr, before: Tensor) -> Tensor:
    """The states before each transcript token (B, U, H) -> Whisper's logits for that token (B, U, V) in float32,
    what the search never writes and <|endoftext|> banned (a transcript token is never it)."""
    first = torch.zeros(before.shape[:2], dtype=torch.bool, device=before.device)
    first[:, 0] = True
    # contiguous: a sliced 3-D input makes nn.Linear expand the (V, H) weight to every row instead of folding
    logits = allowed(asr, asr.decoder.output(before.contiguous()).float(), first)
    logits[..., asr.eos_id] = float("-inf")
    return logits


def _space_ids(vocab: int, eos_id: int) -> list[int]:
    """Whisper's lone-space token (220 in its GPT-2 byte-level vocabulary), where the vocabulary has it."""
    return [220] if 220 < min(vocab, eos_id) else []
