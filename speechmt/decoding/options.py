"""The search's settings: the frozen `DecodeOptions`, and the registries of the parts it chooses by name, against
which it checks those names: token decoders (TOKEN_DECODERS), logit filters (LOGIT_FILTERS) and rankers
(RANKERS), each from a name to a builder `(options, ...) -> part`. The parts' modules (token_decoders, beam,
filters, rankers, mbr) read the options; speechmt.decoding.search registers them as the built-in parts and runs
the search. A new part is one entry in its registry (docs/extending.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from speechmt.decoding.base import LogitFilter, Ranker, TokenDecoder

__all__ = ["DecodeOptions", "Detokenize", "LOGIT_FILTERS", "RANKERS", "TOKEN_DECODERS", "UTILITIES"]

UTILITIES = ("chrf", "bleu")
"""The utilities MBR selection may score by (DecodeOptions.mbr; speechmt.decoding.mbr)."""


@dataclass(frozen=True)
class DecodeOptions:
    """Search settings (fairseq's defaults). Length limits count generated tokens, EOS excluded.

    The maximum length of an utterance is floor(max_len_a * source_length + max_len_b), at least
    min_len, where source_length is the encoder output length (enc.lengths: subsampled frames for
    speech, 4 input frames each with the conv subsamplers; tokens for text).
    """

    beam_size: int = 5
    max_len_a: float = 0.0
    max_len_b: int = 200
    min_len: int = 1
    len_penalty: float = 1.0
    nbest: int = 1
    prefix: tuple[int, ...] = ()
    bos_id: int = 2
    eos_id: int = 3
    pad_id: int = 0
    start_id: int | None = None  # the decoder's first input; None: bos_id
    suppress: tuple[int, ...] = ()  # ids never generated besides pad and bos (Whisper: special tokens)
    mbr: str | None = None  # "chrf" or "bleu": the beam's K hypotheses come back, for MBR selection (mbr.py)
    samples: int = 0  # with mbr: this many epsilon samples per utterance, the MBR pseudo-references
    epsilon: float = 0.02  # the MBR samples' truncation: tokens below this probability are never drawn
    seed: int = 0  # the random generator of the samples and of strategy "sample"
    strategy: str | None = None  # the token decoder, by name (TOKEN_DECODERS); None: greedy at beam_size 1, else beam
    temperature: float = 1.0  # strategy "sample": draws from softmax(log-probs / temperature); 0 is greedy
    top_k: int = 0  # strategy "sample": only among the k most probable tokens (0: all)
    top_p: float = 1.0  # strategy "sample": only among the most probable tokens holding this much of the mass
    suppress_begin: tuple[int, ...] = ()  # ids never generated first (whisper's SuppressBlank)
    filters: tuple[str, ...] = ()  # more logit filters, by name (LOGIT_FILTERS), after the built-in ones
    ranker: str = "length_penalty"  # how the hypotheses are ordered, by name (RANKERS); MBR follows with `mbr`

    def __post_init__(self):
        for name in ("prefix", "suppress", "suppress_begin", "filters"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.beam_size < 1 or not 1 <= self.nbest <= self.beam_size:
            raise ValueError(f"need beam_size >= 1 and 1 <= nbest <= beam_size; got {self.beam_size}, {self.nbest}")
        if self.min_len < 0:
            raise ValueError(f"min_len must be >= 0; got {self.min_len}")
        if self.mbr is not None and self.mbr not in UTILITIES:
            raise ValueError(f"mbr must be chrf, bleu or None; got {self.mbr!r}")
        if self.samples < 0 or (self.samples and not self.mbr):
            raise ValueError(f"samples must be >= 0, and only with mbr; got {self.samples} (mbr {self.mbr!r})")
        if not 0.0 <= self.epsilon < 1.0:
            raise ValueError(f"epsilon must be in [0, 1); got {self.epsilon}")
        self._check_sampling()
        self._check_names()

    def _check_sampling(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(
                f"need temperature >= 0, top_k >= 0 and 0 < top_p <= 1; got {self.temperature}, "
                f"{self.top_k}, {self.top_p}"
            )

    def _check_names(self) -> None:
        for what, names, known in (
            ("strategy", [self.token_decoder], TOKEN_DECODERS),
            ("filters", self.filters, LOGIT_FILTERS),
            ("ranker", [self.ranker], RANKERS),
        ):
            if unknown := [n for n in names if n not in known]:
                raise ValueError(f"{what}: unknown {', '.join(map(repr, unknown))}; expected one of {', '.join(known)}")

    @property
    def token_decoder(self) -> str:
        """The token decoder's name: `strategy`, or greedy at beam_size 1 and beam otherwise."""
        return self.strategy or ("greedy" if self.beam_size == 1 else "beam")

    @property
    def returned(self) -> int:
        """Hypotheses the search returns per utterance: nbest, or the whole beam for MBR selection."""
        return self.beam_size if self.mbr else self.nbest

    def max_lengths(self, source_lengths: Tensor) -> Tensor:
        """(B,) source lengths -> (B,) int64 maximum numbers of generated tokens."""
        lengths = torch.floor(self.max_len_a * source_lengths.double() + self.max_len_b).long()
        return lengths.clamp(min=self.min_len)


Detokenize = Callable[[list[int]], str]

TOKEN_DECODERS: dict[str, Callable[[DecodeOptions, torch.Generator | None], TokenDecoder]] = {}
"""Token decoders by name (DecodeOptions.strategy): a builder `(options, generator) -> TokenDecoder`, called
once per search; `generator` is the caller's (None: the decoder seeds its own from options.seed if it draws).
Built in (speechmt.decoding.search): greedy, beam, sample."""
LOGIT_FILTERS: dict[str, Callable[[DecodeOptions], LogitFilter]] = {}
"""Logit filters by name: a builder `(options) -> LogitFilter`. Every search runs the built-in ones
(speechmt.decoding.search.BUILT_IN_FILTERS), then DecodeOptions.filters, then max_length (which forces EOS at a
row's maximum length)."""
RANKERS: dict[str, Callable[[DecodeOptions, Detokenize | None], Ranker]] = {}
"""Rankers by name (DecodeOptions.ranker, and "mbr" after it when DecodeOptions.mbr is set): a builder
`(options, detokenize) -> Ranker`; `detokenize` (token ids -> text: the tokenizer's) is None where the caller
has no tokenizer. Built in (speechmt.decoding.search): length_penalty, mbr."""
