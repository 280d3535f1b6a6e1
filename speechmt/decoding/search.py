"""Greedy and beam search on the decoder cache, batched over utterances (and beams).

Decomposed as whisper's decoding.py: frozen `DecodeOptions`, the model's `DecoderCache`, a `BeamSearch`
with small methods and a short main loop. The beam search is fairseq's SequenceGenerator algorithm:
2K candidates per utterance and step; an EOS among the top K ends a hypothesis, which is set aside; the
first K non-EOS candidates go on; an utterance is done when it has K finished hypotheses or reaches its
maximum length (where EOS is forced). Scores are sums of log-probabilities; the normalised score divides
by length ** len_penalty, the length counting the generated tokens and the EOS.

Decoder input starts with bos_id (or start_id, for models trained to start elsewhere: fairseq's start with
EOS) then the forced `prefix` (e.g. the target language tag); returned tokens leave out the start, prefix
and EOS; pad and bos are never generated. The model should be in eval mode (dropout off).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from speechmt.decoding.mbr import UTILITIES
from speechmt.models.decoder import DecoderCache
from speechmt.models.encoders import EncoderOutput
from speechmt.models.translator import Translator


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
    epsilon: float = 0.02  # the samples' truncation: tokens below this probability are never drawn
    seed: int = 0  # the samples' random generator

    def __post_init__(self):
        object.__setattr__(self, "prefix", tuple(self.prefix))
        object.__setattr__(self, "suppress", tuple(self.suppress))
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

    @property
    def returned(self) -> int:
        """Hypotheses the search returns per utterance: nbest, or the whole beam for MBR selection."""
        return self.beam_size if self.mbr else self.nbest

    def max_lengths(self, source_lengths: Tensor) -> Tensor:
        """(B,) source lengths -> (B,) int64 maximum numbers of generated tokens."""
        lengths = torch.floor(self.max_len_a * source_lengths.double() + self.max_len_b).long()
        return lengths.clamp(min=self.min_len)


@dataclass
class Hypothesis:
    """A finished hypothesis: tokens (no bos, prefix or EOS), sum of log-probs (EOS included), and that
    sum / (len(tokens) + 1) ** len_penalty."""

    tokens: list[int]
    score: float
    normalized_score: float


def start_tokens(options: DecodeOptions, n: int, device: torch.device) -> Tensor:
    """(n, 1 + len(prefix)) first decoder input: the start token (bos unless start_id is set), then the prefix."""
    start = options.bos_id if options.start_id is None else options.start_id
    return torch.tensor([start, *options.prefix], device=device).expand(n, -1)


def next_log_probs(model: Translator, inputs: Tensor, enc: EncoderOutput, cache: DecoderCache) -> Tensor:
    """Log-probabilities (R, V) of the token after `inputs` (R, U): the positions new to the cache."""
    return model.decode(inputs, enc, cache)[:, -1].float().log_softmax(dim=-1)


def constrain(lprobs: Tensor, step: int, max_lens: Tensor, options: DecodeOptions) -> Tensor:
    """Bans pad, bos and the suppressed ids, EOS before min_len, everything but EOS at a row's max length;
    lprobs (R, V), max_lens (R,); `step` tokens have been generated. Modifies and returns lprobs."""
    lprobs[:, [options.pad_id, options.bos_id, *options.suppress]] = float("-inf")
    if step < options.min_len:
        lprobs[:, options.eos_id] = float("-inf")
    at_max = step >= max_lens  # (R,)
    if at_max.any():
        eos = lprobs[:, options.eos_id].clone()
        lprobs[at_max] = float("-inf")
        lprobs[:, options.eos_id] = torch.where(at_max, eos, lprobs[:, options.eos_id])
    return lprobs


def max_lengths(model: Translator, enc: EncoderOutput, options: DecodeOptions) -> Tensor:
    """(B,) maximum generated tokens: the options', within a decoder's learned positions (Whisper: 448),
    which also hold the start token and the prefix."""
    lengths = options.max_lengths(enc.lengths)
    table = getattr(getattr(model.decoder, "positions", None), "weight", None)  # an LM decoder has none
    if table is not None:
        lengths = lengths.clamp(max=table.size(0) - 1 - len(options.prefix))
    return lengths


def _until_eos(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


@torch.no_grad()
def greedy_search(model: Translator, enc: EncoderOutput, options: DecodeOptions = DecodeOptions()) -> list[list[int]]:
    """Most probable token at each step, for B utterances at once -> B token lists (beam_size unused)."""
    return _token_by_token(model, enc, options, lambda lprobs: lprobs.argmax(dim=-1))


@torch.no_grad()
def epsilon_samples(model: Translator, enc: EncoderOutput, options: DecodeOptions) -> list[list[list[int]]]:
    """`options.samples` ancestral samples per utterance, each token drawn among those of probability at least
    `options.epsilon` (epsilon sampling: Hewitt et al. 2022; as MBR's pseudo-references, Freitag et al. 2023)
    -> B lists of token lists. Seeded by `options.seed`: the same batch gives the same samples."""
    b, k = enc.lengths.size(0), options.samples
    rows = torch.arange(b, device=enc.x.device).repeat_interleave(k)
    generator = torch.Generator(device=enc.x.device).manual_seed(options.seed)
    drawn = _token_by_token(model, enc.select(rows), options, lambda lp: _epsilon_draw(lp, options.epsilon, generator))
    return [drawn[i * k:(i + 1) * k] for i in range(b)]


def _epsilon_draw(lprobs: Tensor, epsilon: float, generator: torch.Generator) -> Tensor:
    """(R, V) log-probs -> (R,) tokens drawn from each row's distribution less the tokens below `epsilon`
    (renormalised; the most probable token always stays)."""
    probs = lprobs.exp()
    keep = (probs >= epsilon) | (probs == probs.max(dim=-1, keepdim=True).values)
    return torch.multinomial(probs * keep, 1, generator=generator)[:, 0]


def _token_by_token(model: Translator, enc: EncoderOutput, options: DecodeOptions, choose) -> list[list[int]]:
    """One token per step for each of the B rows, chosen by `choose` ((B, V) constrained log-probs -> (B,)),
    until EOS or the row's maximum length -> B token lists."""
    n = enc.lengths.size(0)
    if n == 0:
        return []
    max_lens = max_lengths(model, enc, options)
    cache, inputs = model.new_cache(), start_tokens(options, n, enc.x.device)
    done = torch.zeros(n, dtype=torch.bool, device=enc.x.device)
    steps = []
    for step in range(int(max_lens.max()) + 1):
        lprobs = constrain(next_log_probs(model, inputs, enc, cache), step, max_lens, options)
        tokens = choose(lprobs).masked_fill(done, options.eos_id)  # (B,)
        steps.append(tokens)
        done |= tokens == options.eos_id
        if done.all():
            break
        inputs = tokens[:, None]
    return [_until_eos(row, options.eos_id) for row in torch.stack(steps, dim=1).tolist()]


@dataclass
class _Beams:
    """Search state of the N utterances still searched: `width` rows each (1 at first, the empty
    hypothesis; K after), row n * width + k. Scores are kept for K beams; those beyond the width are -inf."""

    alive: Tensor  # (N,) indices of the utterances
    scores: Tensor  # (N, K) sum log-prob of each beam
    history: Tensor  # (N * width, t) tokens generated so far
    enc: EncoderOutput  # (N, ...): one row per utterance, shared by its beams
    cache: DecoderCache  # group = width
    width: int


class BeamSearch:
    """Batched beam search; `search(enc)` gives each utterance's n-best, best first."""

    def __init__(self, model: Translator, options: DecodeOptions = DecodeOptions()):
        self.model, self.options, self.k = model, options, options.beam_size

    @torch.no_grad()
    def search(self, enc: EncoderOutput) -> list[list[Hypothesis]]:
        """enc: EncoderOutput of B utterances -> B lists of `nbest` hypotheses, by normalised score."""
        max_lens = max_lengths(self.model, enc, self.options)
        finished: list[list[Hypothesis]] = [[] for _ in range(enc.lengths.size(0))]
        if not finished:
            return []
        beams = self._start(enc)
        inputs = start_tokens(self.options, len(finished), enc.x.device)
        for step in range(int(max_lens.max()) + 1):
            lprobs = self._log_probs(beams, inputs, step, max_lens[beams.alive])  # (N, width, V)
            cand_scores, cand_beams, cand_tokens = self._candidates(beams.scores, lprobs)  # each (N, 2K)
            self._finish(finished, beams, cand_scores, cand_beams, cand_tokens, step)
            searching = self._searching(finished, beams.alive, step, max_lens)  # (N,)
            if not searching.any():
                break
            beams = self._advance(beams, searching, cand_scores, cand_beams, cand_tokens)
            inputs = beams.history[:, -1:]
        n = self.options.returned
        return [sorted(hyps, key=lambda h: h.normalized_score, reverse=True)[:n] for hyps in finished]

    def _start(self, enc: EncoderOutput) -> _Beams:
        """One row per utterance (the empty hypothesis: beam 0; the other K - 1 score -inf)."""
        b, device = enc.lengths.size(0), enc.x.device
        scores = torch.full((b, self.k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        history = torch.empty(b, 0, dtype=torch.long, device=device)
        memory = EncoderOutput(enc.x, enc.lengths)  # CTC logits are not needed here
        return _Beams(torch.arange(b, device=device), scores, history, memory, self.model.new_cache(), 1)

    def _log_probs(self, beams: _Beams, inputs: Tensor, step: int, max_lens: Tensor) -> Tensor:
        """(N * width, U) new inputs -> constrained next-token log-probs (N, width, V); max_lens (N,)."""
        lprobs = next_log_probs(self.model, inputs, beams.enc, beams.cache)
        lprobs = constrain(lprobs, step, max_lens.repeat_interleave(beams.width), self.options)
        return lprobs.view(-1, beams.width, lprobs.size(-1))

    def _candidates(self, scores: Tensor, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The 2K best (score, beam, token) extensions per utterance, best first; each (N, 2K). lprobs
        (N, width, V) with width 1 (the first step) stands for all K beams (those beyond 0 score -inf)."""
        vocab = lprobs.size(-1)
        total = (scores[:, :, None] + lprobs).view(scores.size(0), -1)  # (N, K, V) -> (N, K * V)
        cand_scores, flat = total.topk(2 * self.k, dim=1)
        return cand_scores, flat // vocab, flat % vocab

    def _finish(self, finished: list[list[Hypothesis]], beams: _Beams, cand_scores: Tensor,
                cand_beams: Tensor, cand_tokens: Tensor, step: int) -> None:
        """Sets aside the EOS candidates among each utterance's top K, up to K hypotheses per utterance.
        A finite score comes from a beam within the width."""
        top = slice(0, self.k)
        ends = (cand_tokens[:, top] == self.options.eos_id) & cand_scores[:, top].isfinite()  # (N, K)
        for n, j in ends.nonzero().tolist():
            utt = int(beams.alive[n])
            if len(finished[utt]) < self.k:
                score = float(cand_scores[n, j])
                tokens = beams.history[n * beams.width + int(cand_beams[n, j])].tolist()
                finished[utt].append(Hypothesis(tokens, score, score / (step + 1) ** self.options.len_penalty))

    def _searching(self, finished: list[list[Hypothesis]], alive: Tensor, step: int, max_lens: Tensor) -> Tensor:
        """(N,) bool: utterances with fewer than K finished hypotheses and below their maximum length."""
        counts = torch.tensor([len(finished[u]) for u in alive.tolist()], device=alive.device)
        return (counts < self.k) & (step < max_lens[alive])

    def _advance(self, beams: _Beams, searching: Tensor, cand_scores: Tensor, cand_beams: Tensor,
                 cand_tokens: Tensor) -> _Beams:
        """Keeps the first K non-EOS candidates of the utterances still searched; reorders the cache (its
        cross-attention rows only when utterances leave)."""
        kept = searching.nonzero()[:, 0]  # (N',)
        is_eos = (cand_tokens[kept] == self.options.eos_id).long()
        order = (is_eos * cand_tokens.size(1) + torch.arange(cand_tokens.size(1), device=kept.device))
        pick = order.argsort(dim=1)[:, : self.k]  # (N', K): first K non-EOS candidates, in rank order
        # a candidate of a beam beyond the width scores -inf (dead): any row of its utterance serves
        beam = cand_beams[kept].gather(1, pick).clamp(max=beams.width - 1)
        rows = (kept[:, None] * beams.width + beam).flatten()  # (N' * K,)
        tokens = cand_tokens[kept].gather(1, pick).flatten()
        shrink = kept.numel() < searching.numel()
        beams.cache.regroup(rows, kept if shrink else None, self.k)
        enc = beams.enc.select(kept) if shrink else beams.enc
        history = torch.cat([beams.history[rows], tokens[:, None]], dim=1)
        return _Beams(beams.alive[kept], cand_scores[kept].gather(1, pick), history, enc, beams.cache, self.k)


def beam_search(model: Translator, enc: EncoderOutput,
                options: DecodeOptions = DecodeOptions()) -> list[list[Hypothesis]]:
    """Beam search for B utterances -> per utterance the `nbest` hypotheses, best normalised score first."""
    return BeamSearch(model, options).search(enc)


def search(model: Translator, enc: EncoderOutput, options: DecodeOptions = DecodeOptions()) -> list[list[list[int]]]:
    """The one dispatch every caller uses: greedy search when beam_size is 1 (nbest is then 1), beam search
    otherwise -> per utterance its n-best token ids (the whole beam with `mbr`; eos stripped), best first,
    then with `samples` that many epsilon samples."""
    if options.beam_size == 1:
        found = [[tokens] for tokens in greedy_search(model, enc, options)]
    else:
        found = [[h.tokens for h in hyps] for hyps in beam_search(model, enc, options)]
    if options.samples:
        return [f + drawn for f, drawn in zip(found, epsilon_samples(model, enc, options))]
    return found
