"""Greedy, beam and sampling search on the decoder cache, batched over utterances (and beams).

Decomposed as whisper's decoding.py: frozen `DecodeOptions`, the model's `DecoderCache`, and three kinds of
part, each a registry from a name to a builder, kept beside DecodeOptions (speechmt.decoding.options, which
checks the names it is given against them) and filled with the built-in parts here: a token decoder
(TOKEN_DECODERS: greedy, beam, sample; speechmt.decoding.token_decoders, .beam) chooses each step's tokens,
logit filters (LOGIT_FILTERS; .filters) edit the log-probabilities before it, and rankers (RANKERS: length
penalty, MBR; .rankers, .mbr) order each utterance's finished hypotheses. `decode_with` is the main loop; a new
part is one entry in its registry and is chosen by name in DecodeOptions (docs/extending.md).

Decoder input starts with bos_id (or start_id, for models trained to start elsewhere: fairseq's start with
EOS) then the forced `prefix` (e.g. the target language tag); returned tokens leave out the start, prefix
and EOS; pad and bos are never generated. The normalised score divides a hypothesis' sum of log-probs by
length ** len_penalty, the length counting the generated tokens and the EOS. The model should be in eval mode.
"""

from __future__ import annotations

import torch
from torch import Tensor

from speechmt.decoding.base import Hypothesis, LogitFilter, Ranker, Rows, TokenDecoder
from speechmt.decoding.beam import beam
from speechmt.decoding.filters import max_length, min_length, suppress_at_begin, suppress_tokens
from speechmt.decoding.mbr import mbr_ranker
from speechmt.decoding.options import LOGIT_FILTERS, RANKERS, TOKEN_DECODERS, DecodeOptions, Detokenize
from speechmt.decoding.rankers import length_penalty
from speechmt.decoding.token_decoders import GreedyDecoder, SamplingDecoder, greedy, sampling
from speechmt.models.decoder import DecoderCache
from speechmt.models.encoders import EncoderOutput
from speechmt.models.translator import Translator

__all__ = [
    "BeamSearch",
    "DecodeOptions",
    "Hypothesis",
    "LOGIT_FILTERS",
    "RANKERS",
    "TOKEN_DECODERS",
    "beam_search",
    "constrain",
    "decode",
    "decode_with",
    "epsilon_samples",
    "greedy_search",
    "logit_filters",
    "max_lengths",
    "next_log_probs",
    "ranking",
    "search",
    "start_tokens",
]


TOKEN_DECODERS.update(greedy=greedy, beam=beam, sample=sampling)
LOGIT_FILTERS.update(
    suppress_tokens=suppress_tokens, suppress_at_begin=suppress_at_begin, min_length=min_length, max_length=max_length
)
BUILT_IN_FILTERS = ("suppress_tokens", "suppress_at_begin", "min_length")
"""The logit filters every search runs first, in order (then DecodeOptions.filters, then max_length)."""
RANKERS.update(length_penalty=length_penalty, mbr=mbr_ranker)


def logit_filters(options: DecodeOptions) -> list[LogitFilter]:
    """The filters a search runs, in order: the built-in ones, the options' `filters`, max_length."""
    return [LOGIT_FILTERS[name](options) for name in (*BUILT_IN_FILTERS, *options.filters, "max_length")]


def start_tokens(options: DecodeOptions, n: int, device: torch.device) -> Tensor:
    """(n, 1 + len(prefix)) first decoder input: the start token (bos unless start_id is set), then the prefix."""
    start = options.bos_id if options.start_id is None else options.start_id
    return torch.tensor([start, *options.prefix], device=device).expand(n, -1)


def next_log_probs(model: Translator, inputs: Tensor, enc: EncoderOutput, cache: DecoderCache) -> Tensor:
    """Log-probabilities (R, V) of the token after `inputs` (R, U): the positions new to the cache."""
    return model.decode(inputs, enc, cache)[:, -1].float().log_softmax(dim=-1)


def max_lengths(model: Translator, enc: EncoderOutput, options: DecodeOptions) -> Tensor:
    """(B,) maximum generated tokens: the options', within a decoder's learned positions (Whisper: 448),
    which also hold the start token and the prefix."""
    lengths = options.max_lengths(enc.lengths)
    table = getattr(getattr(model.decoder, "positions", None), "weight", None)  # an LM decoder has none
    if table is not None:
        lengths = lengths.clamp(max=table.size(0) - 1 - len(options.prefix))
    return lengths


def constrain(
    lprobs: Tensor, step: int, max_lens: Tensor, options: DecodeOptions, tokens: Tensor | None = None
) -> Tensor:
    """Runs the options' logit filters on lprobs (R, V) after `step` generated tokens, tokens (R, step); max_lens
    (R,). Without `tokens` only the built-in filters may run (they read the step alone). Modifies and returns
    lprobs."""
    if tokens is None:
        if options.filters:
            raise ValueError(f"filters {', '.join(options.filters)} need the tokens generated so far")
        tokens = torch.zeros(lprobs.size(0), step, dtype=torch.long, device=lprobs.device)
    for f in logit_filters(options):
        lprobs = f.apply(lprobs, tokens, max_lens)
    return lprobs


@torch.no_grad()
def decode_with(
    model: Translator, enc: EncoderOutput, options: DecodeOptions, decoder: TokenDecoder
) -> list[list[Hypothesis]]:
    """The main loop: B utterances' next-token log-probs, filtered, to `decoder` until it is done or every row is
    at its maximum length -> B lists of finished hypotheses, unranked."""
    n, device = enc.lengths.size(0), enc.x.device
    if n == 0:
        return []
    filters = logit_filters(options)
    max_lens = max_lengths(model, enc, options)
    generated = torch.empty(n, 0, dtype=torch.long, device=device)
    rows = decoder.start(Rows(start_tokens(options, n, device), generated, max_lens, enc, model.new_cache()))
    for _ in range(int(max_lens.max()) + 1):
        lprobs = next_log_probs(model, rows.inputs, rows.enc, rows.cache)
        for f in filters:
            lprobs = f.apply(lprobs, rows.tokens, rows.max_lens)
        rows = decoder.update(rows, lprobs)
        if rows is None:
            break
    return decoder.finalize()


def decode(
    model: Translator,
    enc: EncoderOutput,
    options: DecodeOptions = DecodeOptions(),
    detokenize: Detokenize | None = None,
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """B utterances -> each one's `nbest` hypotheses, best first: found by the options' token decoder and filters,
    ordered by its ranker, then with `mbr` by expected utility against the `samples` (none: each other), the
    texts by `detokenize` (None: the token ids). `generator`: the draws' (None: seeded from options.seed)."""
    found, samples = _found(model, enc, options, generator)
    rankers = [RANKERS[name](options, detokenize) for name in ranking(options)]
    return [_ranked(hyps, refs, rankers)[: options.nbest] for hyps, refs in zip(found, samples)]


def ranking(options: DecodeOptions) -> tuple[str, ...]:
    """The rankers `decode` runs, in order: the options' ranker, then "mbr" when `mbr` names a utility (its ties
    keep the first ranker's order)."""
    return (options.ranker, "mbr") if options.mbr else (options.ranker,)


def search(model: Translator, enc: EncoderOutput, options: DecodeOptions = DecodeOptions()) -> list[list[list[int]]]:
    """The dispatch translate, evaluate and the cascade use: per utterance its `returned` token lists (nbest, the
    whole beam with `mbr`; eos stripped) by the options' token decoder and ranker, best first, then with `samples`
    that many epsilon samples: the caller, who has the texts, chooses among them by MBR (decoding.translate)."""
    found, samples = _found(model, enc, options, None)
    ranker = RANKERS[options.ranker](options, None)
    return [
        [h.tokens for h in ranker.rank(hyps, refs)[: options.returned] + refs] for hyps, refs in zip(found, samples)
    ]


def _found(
    model: Translator, enc: EncoderOutput, options: DecodeOptions, generator: torch.Generator | None
) -> tuple[list[list[Hypothesis]], list[list[Hypothesis]]]:
    """B lists of the token decoder's hypotheses, and B lists of `options.samples` epsilon samples (may be empty)."""
    found = decode_with(model, enc, options, TOKEN_DECODERS[options.token_decoder](options, generator))
    return found, _epsilon_samples(model, enc, options, generator)


def _ranked(candidates: list[Hypothesis], references: list[Hypothesis], rankers: list[Ranker]) -> list[Hypothesis]:
    for ranker in rankers:
        candidates = ranker.rank(candidates, references)
    return candidates


def greedy_search(model: Translator, enc: EncoderOutput, options: DecodeOptions = DecodeOptions()) -> list[list[int]]:
    """Most probable token at each step, for B utterances at once -> B token lists (beam_size unused)."""
    return [hyps[0].tokens for hyps in decode_with(model, enc, options, GreedyDecoder(options.eos_id))]


def beam_search(
    model: Translator, enc: EncoderOutput, options: DecodeOptions = DecodeOptions()
) -> list[list[Hypothesis]]:
    """Beam search for B utterances -> per utterance the `returned` hypotheses (nbest; the beam with `mbr`),
    ordered by the options' ranker (the length penalty: best normalised score first)."""
    ranker = RANKERS[options.ranker](options, None)
    found = decode_with(model, enc, options, beam(options))
    return [ranker.rank(hyps, [])[: options.returned] for hyps in found]


class BeamSearch:
    """Batched beam search of one model; `search(enc)` gives each utterance's n-best, best first (beam_search)."""

    def __init__(self, model: Translator, options: DecodeOptions = DecodeOptions()):
        self.model, self.options = model, options

    def search(self, enc: EncoderOutput) -> list[list[Hypothesis]]:
        """enc: EncoderOutput of B utterances -> B lists of `nbest` hypotheses, by normalised score."""
        return beam_search(self.model, enc, self.options)


def epsilon_samples(model: Translator, enc: EncoderOutput, options: DecodeOptions) -> list[list[list[int]]]:
    """`options.samples` ancestral samples per utterance, each token drawn among those of probability at least
    `options.epsilon` (epsilon sampling: Hewitt et al. 2022; as MBR's pseudo-references, Freitag et al. 2023)
    -> B lists of token lists. Seeded by `options.seed`: the same batch gives the same samples."""
    return [[h.tokens for h in drawn] for drawn in _epsilon_samples(model, enc, options, None)]


def _epsilon_samples(
    model: Translator, enc: EncoderOutput, options: DecodeOptions, generator: torch.Generator | None
) -> list[list[Hypothesis]]:
    """epsilon_samples as hypotheses, drawn with `generator` (None: one seeded by options.seed)."""
    b, k = enc.lengths.size(0), options.samples
    rows = torch.arange(b, device=enc.x.device).repeat_interleave(k)
    sampler = SamplingDecoder(options.eos_id, generator, options.seed, epsilon=options.epsilon)
    drawn = decode_with(model, enc.select(rows), options, sampler)
    return [[hyps[0] for hyps in drawn[i * k : (i + 1) * k]] for i in range(b)]
