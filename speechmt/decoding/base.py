"""What the parts of a search share: the rows being decoded, a finished hypothesis, and the three kinds of
extension point (as in whisper's decoding.py), each a Protocol with one or three small methods:

- a `TokenDecoder` (greedy, beam, sampling) chooses each step's tokens from the filtered log-probabilities
  and says which hypotheses are finished;
- a `LogitFilter` (suppressed ids, minimum and maximum length) edits the log-probabilities before that;
- a `Ranker` (length penalty, MBR) orders each utterance's finished hypotheses, best first.

speechmt.decoding.search names them in its registries and runs them in one short loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from speechmt.models.decoder import DecoderCache
from speechmt.models.encoders import EncoderOutput


@dataclass
class Hypothesis:
    """A finished hypothesis: tokens (no bos, prefix or EOS), sum of log-probs (EOS included), and the score
    a ranker orders by (the length penalty's: that sum / (len(tokens) + 1) ** len_penalty; nan before)."""

    tokens: list[int]
    score: float
    normalized_score: float = float("nan")


@dataclass
class Rows:
    """The R decoder rows of one step: `group` rows for each of the N encoder rows (R = N * group).

    inputs (R, U): decoder inputs not yet in the cache (the start tokens and prefix first, then one token);
    tokens (R, t): the tokens generated so far (no start or prefix), t = the step; max_lens (R,): each row's
    maximum number of generated tokens; enc (N, ...): what the rows attend to; cache: the decoder's cache.
    """

    inputs: Tensor
    tokens: Tensor
    max_lens: Tensor
    enc: EncoderOutput
    cache: DecoderCache

    @property
    def step(self) -> int:
        """Tokens generated so far."""
        return self.tokens.size(1)


class TokenDecoder(Protocol):
    """Chooses tokens step by step for B utterances (speechmt.decoding.search.decode_with runs it)."""

    def start(self, rows: Rows) -> Rows:
        """The B utterances' first rows (one each, step 0) -> the rows the first step decodes."""

    def update(self, rows: Rows, lprobs: Tensor) -> Rows | None:
        """Filtered log-probs (R, V) of each row's next token -> the next step's rows, None when all are done."""

    def finalize(self) -> list[list[Hypothesis]]:
        """B lists of finished hypotheses, in any order (a Ranker orders them)."""


class LogitFilter(Protocol):
    """Edits the next-token log-probs before a TokenDecoder chooses (whisper's LogitFilter)."""

    def apply(self, lprobs: Tensor, tokens: Tensor, max_lens: Tensor) -> Tensor:
        """lprobs (R, V), modified in place and returned; tokens (R, t) generated so far; max_lens (R,)."""


class Ranker(Protocol):
    """Orders one utterance's hypotheses, best first (whisper's SequenceRanker)."""

    def rank(self, candidates: list[Hypothesis], references: list[Hypothesis]) -> list[Hypothesis]:
        """The candidates reordered (each perhaps with its `normalized_score` set); `references`: other
        hypotheses of the same utterance (e.g. samples of the model) a ranker may score them against."""
