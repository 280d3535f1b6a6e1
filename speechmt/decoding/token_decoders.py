"""Token decoders that choose one token per row and step (whisper's GreedyDecoder, and sampling): the most
probable token, or one drawn at a temperature, truncated to the top k, the top p of the mass, or the tokens of
probability at least epsilon (Hewitt et al. 2022). A row is done at its EOS and gets EOS after it.

A new one-token-per-row strategy is a subclass that overrides `choose`; the builders
`(DecodeOptions, torch.Generator | None) -> decoder` are registered in speechmt.decoding.options.TOKEN_DECODERS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from speechmt.decoding.base import Hypothesis, Rows

if TYPE_CHECKING:
    from speechmt.decoding.options import DecodeOptions


class GreedyDecoder:
    """The most probable token of each row at each step; one decoder per search (it holds the rows' state)."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id

    def choose(self, lprobs: Tensor) -> Tensor:
        """(R, V) filtered log-probs -> (R,) each row's next token."""
        return lprobs.argmax(dim=-1)

    def start(self, rows: Rows) -> Rows:
        """One row per utterance, none done, each scoring 0."""
        n, device = rows.inputs.size(0), rows.inputs.device
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.scores = torch.zeros(n, device=device)
        self.tokens = rows.tokens
        return rows

    def update(self, rows: Rows, lprobs: Tensor) -> Rows | None:
        """Appends each row's chosen token (EOS once done) and adds its log-prob; None when all rows are done."""
        tokens = self.choose(lprobs).masked_fill(self.done, self.eos_id)  # (R,)
        chosen = lprobs.gather(1, tokens[:, None])[:, 0]
        self.scores += chosen.masked_fill(self.done, 0.0)
        self.tokens = torch.cat([self.tokens, tokens[:, None]], dim=1)  # (R, t + 1)
        self.done |= tokens == self.eos_id
        if self.done.all():
            return None
        return Rows(tokens[:, None], self.tokens, rows.max_lens, rows.enc, rows.cache)

    def finalize(self) -> list[list[Hypothesis]]:
        """One hypothesis per row: its tokens up to EOS, and their sum log-prob (EOS included)."""
        return [
            [Hypothesis(_until_eos(tokens, self.eos_id), score)]
            for tokens, score in zip(self.tokens.tolist(), self.scores.tolist())
        ]


class SamplingDecoder(GreedyDecoder):
    """Each row's next token drawn by `draw` from `generator` (None: one seeded with `seed` on the rows' device
    when the search starts); temperature 0 is greedy."""

    def __init__(
        self,
        eos_id: int,
        generator: torch.Generator | None = None,
        seed: int = 0,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        epsilon: float = 0.0,
    ):
        super().__init__(eos_id)
        self.generator, self.seed = generator, seed
        self.temperature, self.top_k, self.top_p, self.epsilon = temperature, top_k, top_p, epsilon

    def start(self, rows: Rows) -> Rows:
        if self.generator is None:
            self.generator = torch.Generator(device=rows.inputs.device).manual_seed(self.seed)
        return super().start(rows)

    def choose(self, lprobs: Tensor) -> Tensor:
        """(R, V) filtered log-probs -> (R,) drawn tokens."""
        return draw(lprobs, self.generator, self.temperature, self.top_k, self.top_p, self.epsilon)


def draw(
    lprobs: Tensor,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    epsilon: float = 0.0,
) -> Tensor:
    """(R, V) log-probs -> (R,) tokens drawn from softmax(lprobs / temperature) within the truncations
    (`kept`); temperature 0: the most probable tokens."""
    if temperature == 0:
        return lprobs.argmax(dim=-1)
    # at temperature 1 the probabilities as they are (banned tokens' mass left out: multinomial renormalises)
    probs = lprobs.exp() if temperature == 1.0 else (lprobs / temperature).softmax(dim=-1)
    keep = kept(probs, top_k, top_p, epsilon)
    return torch.multinomial(probs if keep is None else probs * keep, 1, generator=generator)[:, 0]


def kept(probs: Tensor, top_k: int = 0, top_p: float = 1.0, epsilon: float = 0.0) -> Tensor | None:
    """(R, V) probabilities -> (R, V) bool: the tokens among the `top_k` most probable (0: all), within the
    smallest set holding `top_p` of the row's mass, and of probability at least `epsilon`; the most probable
    token always stays. None when nothing is truncated."""
    if not (top_k or top_p < 1.0 or epsilon):
        return None
    keep = torch.ones_like(probs, dtype=torch.bool)
    if epsilon:
        keep &= probs >= epsilon
    if top_k:
        keep &= probs >= probs.topk(min(top_k, probs.size(-1)), dim=-1).values[:, -1:]
    if top_p < 1.0:
        keep &= _nucleus(probs, top_p)
    return keep | (probs == probs.max(dim=-1, keepdim=True).values)


def _nucleus(probs: Tensor, top_p: float) -> Tensor:
    """(R, V) -> (R, V) bool: the most probable tokens while the mass before each is below top_p of the row's."""
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # (R, V): mass of the more probable tokens
    inside = before < top_p * probs.sum(dim=-1, keepdim=True)
    return torch.zeros_like(inside).scatter(-1, order, inside)


def _until_eos(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


def greedy(options: DecodeOptions, generator: torch.Generator | None = None) -> GreedyDecoder:
    """Strategy "greedy" (beam_size 1)."""
    return GreedyDecoder(options.eos_id)


def sampling(options: DecodeOptions, generator: torch.Generator | None = None) -> SamplingDecoder:
    """Strategy "sample": one draw per utterance at `temperature`, within `top_k` and `top_p`, seeded by
    `generator`, or `seed` without one."""
    return SamplingDecoder(options.eos_id, generator, options.seed, options.temperature, options.top_k, options.top_p)
