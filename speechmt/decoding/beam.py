"""Batched beam search as a token decoder (whisper's BeamSearchDecoder), fairseq's SequenceGenerator algorithm:
2K candidates per utterance and step; an EOS among the top K ends a hypothesis, which is set aside; the first K
non-EOS candidates go on; an utterance is done when it has K finished hypotheses or reaches its maximum length
(where the MaxLength filter forces EOS). Scores are sums of log-probabilities. Utterances that are done leave
the rows (and the decoder cache) as they finish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from speechmt.decoding.base import Hypothesis, Rows
from speechmt.models.encoders import EncoderOutput

if TYPE_CHECKING:
    from speechmt.decoding.options import DecodeOptions


class BeamSearchDecoder:
    """Beam search over the rows of the utterances still searched: `width` rows each (1 at first, the empty
    hypothesis; K after), row n * width + k. One decoder per search (it holds the state)."""

    def __init__(self, beam_size: int, eos_id: int):
        self.k, self.eos_id = beam_size, eos_id

    def start(self, rows: Rows) -> Rows:
        """B utterances, one row each (beam 0; the other K - 1 score -inf)."""
        b, device = rows.inputs.size(0), rows.inputs.device
        self.finished: list[list[Hypothesis]] = [[] for _ in range(b)]
        self.alive = torch.arange(b, device=device)  # (N,) the utterances still searched
        self.scores = torch.full((b, self.k), float("-inf"), device=device)  # (N, K) sum log-prob of each beam
        self.scores[:, 0] = 0.0
        self.max_lens = rows.max_lens  # (B,)
        memory = EncoderOutput(rows.enc.x, rows.enc.lengths)  # CTC logits are not needed here
        return Rows(rows.inputs, rows.tokens, rows.max_lens, memory, rows.cache)

    def update(self, rows: Rows, lprobs: Tensor) -> Rows | None:
        """Filtered log-probs (N * width, V) -> the K best non-EOS extensions of each utterance still searched."""
        width = rows.inputs.size(0) // self.alive.numel()
        cand_scores, cand_beams, cand_tokens = self._candidates(lprobs.view(-1, width, lprobs.size(-1)))
        self._finish(rows.tokens, width, cand_scores, cand_beams, cand_tokens)
        searching = self._searching(rows.step)  # (N,)
        if not searching.any():
            return None
        return self._advance(rows, width, searching, cand_scores, cand_beams, cand_tokens)

    def finalize(self) -> list[list[Hypothesis]]:
        """Each utterance's finished hypotheses (at most K), in the order they finished."""
        return self.finished

    def _candidates(self, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The 2K best (score, beam, token) extensions per utterance, best first; each (N, 2K). lprobs
        (N, width, V) with width 1 (the first step) stands for all K beams (those beyond 0 score -inf)."""
        vocab = lprobs.size(-1)
        total = (self.scores[:, :, None] + lprobs).view(self.scores.size(0), -1)  # (N, K, V) -> (N, K * V)
        cand_scores, flat = total.topk(2 * self.k, dim=1)
        return cand_scores, flat // vocab, flat % vocab

    def _finish(
        self, history: Tensor, width: int, cand_scores: Tensor, cand_beams: Tensor, cand_tokens: Tensor
    ) -> None:
        """Sets aside the EOS candidates among each utterance's top K, up to K hypotheses per utterance;
        history (N * width, t). A finite score comes from a beam within the width."""
        top = slice(0, self.k)
        ends = (cand_tokens[:, top] == self.eos_id) & cand_scores[:, top].isfinite()  # (N, K)
        for n, j in ends.nonzero().tolist():
            utt = int(self.alive[n])
            if len(self.finished[utt]) < self.k:
                tokens = history[n * width + int(cand_beams[n, j])].tolist()
                self.finished[utt].append(Hypothesis(tokens, float(cand_scores[n, j])))

    def _searching(self, step: int) -> Tensor:
        """(N,) bool: utterances with fewer than K finished hypotheses and below their maximum length."""
        counts = torch.tensor([len(self.finished[u]) for u in self.alive.tolist()], device=self.alive.device)
        return (counts < self.k) & (step < self.max_lens[self.alive])

    def _advance(
        self, rows: Rows, width: int, searching: Tensor, cand_scores: Tensor, cand_beams: Tensor, cand_tokens: Tensor
    ) -> Rows:
        """Keeps the first K non-EOS candidates of the utterances still searched; reorders the cache (its
        cross-attention rows only when utterances leave)."""
        kept = searching.nonzero()[:, 0]  # (N',)
        is_eos = (cand_tokens[kept] == self.eos_id).long()
        order = is_eos * cand_tokens.size(1) + torch.arange(cand_tokens.size(1), device=kept.device)
        pick = order.argsort(dim=1)[:, : self.k]  # (N', K): first K non-EOS candidates, in rank order
        # a candidate of a beam beyond the width scores -inf (dead): any row of its utterance serves
        beam = cand_beams[kept].gather(1, pick).clamp(max=width - 1)
        index = (kept[:, None] * width + beam).flatten()  # (N' * K,)
        tokens = cand_tokens[kept].gather(1, pick).flatten()
        shrink = kept.numel() < searching.numel()
        rows.cache.regroup(index, kept if shrink else None, self.k)
        enc = rows.enc.select(kept) if shrink else rows.enc
        history = torch.cat([rows.tokens[index], tokens[:, None]], dim=1)  # (N' * K, t + 1)
        self.alive, self.scores = self.alive[kept], cand_scores[kept].gather(1, pick)
        max_lens = self.max_lens[self.alive].repeat_interleave(self.k)
        return Rows(history[:, -1:], history, max_lens, enc, rows.cache)


def beam(options: DecodeOptions, generator: torch.Generator | None = None) -> BeamSearchDecoder:
    """Strategy "beam" (beam_size 2 or more)."""
    return BeamSearchDecoder(options.beam_size, options.eos_id)
