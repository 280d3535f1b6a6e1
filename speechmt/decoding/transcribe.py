"""The ASR's search of the whisper_asr cascade (ASR -> bridge -> LM; speechmt.models.encoders.whisper_asr): Whisper's
transcript of each utterance, greedy or by beam search, and its decoder's states at the transcript's tokens, which the
bridge hands to the LM.

The model holds the parts (Whisper's encoder and decoder, the prompt, <|endoftext|>, the room for tokens); this
module searches them, with the shared logit filters (speechmt.decoding.filters): every id above <|endoftext|> is
suppressed (timestamps, tags), and at the first step <|endoftext|> and a lone space too (whisper's SuppressBlank), so
that every row has at least one token. The filters edit the logits before the log-softmax, so a beam's scores are
normalised over the tokens it may write. The loops are their own, not speechmt.decoding.search's: the greedy one
keeps the state after each token as it searches, and the beam ends as Whisper's recorded transcripts were found
(an <|endoftext|> anywhere among a row's 2K candidates before its K-th live one finishes a hypothesis; a hypothesis
scores its summed log-probability, <|endoftext|>'s included, over its length with it; at `max_tokens` the live ones
finish as they are). A model of several source languages searches each row from its own prompt (its language's
token in the prompt's second place); where a row's language is not given, Whisper detects it as openai/whisper's
detect_language does: one decoder step from <|startoftranscript|>, the argmax over the language tokens it may hear
(`detect_language`). The model receives the search when it is built (`SEARCH`: speechmt.decoding.translate.load_model
and training pass it to speechmt.models.build), as a model cannot call up to decoding/.
"""

from __future__ import annotations

import torch
from torch import Tensor

from speechmt.decoding.base import Hypothesis, LogitFilter
from speechmt.decoding.filters import SuppressAtBegin, SuppressTokens
from speechmt.models.decoder import DecoderCache
from speechmt.models.encoders.whisper_asr import WhisperAsrEncoder
from speechmt.models.encoders.whisper_transcript import Transcript, begin_suppressed
from speechmt.sequence import lengths_to_padding_mask

__all__ = [
    "SEARCH",
    "WhisperSearch",
    "beam_tokens",
    "beam_transcript",
    "detect_language",
    "greedy_transcript",
    "language_logits",
    "logit_filters",
]


class WhisperSearch:
    """The whisper_asr encoder's search (its TranscriptionSearch): greedy at `asr.beam` 1, else a beam of that many."""

    def transcript(
        self, asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
    ) -> Transcript:
        """memory (B, S, H), memory_lengths (B,) -> the transcripts and their states (Transcript); `prompts` (B, P):
        each row's own prompt (None: `asr.prompt` for every row)."""
        if asr.beam == 1:
            return greedy_transcript(asr, memory, memory_lengths, prompts)
        return beam_transcript(asr, memory, memory_lengths, prompts)

    def tokens(
        self, asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
    ) -> list[list[int]]:
        """memory (B, S, H), memory_lengths (B,) -> each row's transcript ids (no states computed for a beam)."""
        if asr.beam == 1:
            return greedy_transcript(asr, memory, memory_lengths, prompts).ids
        return beam_tokens(asr, memory, memory_lengths, prompts)

    def detect(self, asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, languages: Tensor) -> Tensor:
        """memory (B, S, H), memory_lengths (B,), the language tokens to choose among (L,) -> each row's choice,
        an index into `languages` (B,) (`detect_language`)."""
        return detect_language(asr, memory, memory_lengths, languages)


SEARCH = WhisperSearch()
"""The search every whisper_asr model built to run is given (speechmt.models.build.build_model's `transcription`)."""


def logit_filters(asr: WhisperAsrEncoder, vocab: int) -> list[LogitFilter]:
    """What the search never writes, over a vocabulary of `vocab`: ids above <|endoftext|>; first, its
    `begin_suppressed` ids (<|endoftext|> and a lone space)."""
    return [SuppressTokens(range(asr.eos_id + 1, vocab)), SuppressAtBegin(begin_suppressed(asr, vocab))]


def _logits(asr: WhisperAsrEncoder, h: Tensor, tokens: Tensor) -> Tensor:
    """Whisper's decoder states (R, H) and the tokens written so far (R, t) -> its float32 logits for the next
    token (R, V), through `logit_filters`."""
    logits = asr.decoder.output(h).float()
    max_lens = torch.full((h.size(0),), asr.max_tokens, device=h.device)
    for f in logit_filters(asr, logits.size(-1)):
        logits = f.apply(logits, tokens, max_lens)
    return logits


def _prompt_rows(asr: WhisperAsrEncoder, memory: Tensor, prompts: Tensor | None) -> Tensor:
    """Each row's prompt (B, P): `prompts`, or `asr.prompt` for every row."""
    if prompts is not None:
        return prompts.to(memory.device)
    return torch.tensor(asr.prompt, device=memory.device).expand(memory.size(0), -1)


def _prompted(
    asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
) -> tuple[DecoderCache, Tensor]:
    """A fresh decoder cache after reading the prompt (each row's own `prompts` (B, P), or `asr.prompt`), and the
    prompt's last state (B, H)."""
    cache = asr.decoder.new_cache()
    inputs = _prompt_rows(asr, memory, prompts)
    return cache, asr.decoder.hidden(inputs, memory, memory_lengths, cache)[:, -1]


@torch.no_grad()
def language_logits(asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, languages: Tensor) -> Tensor:
    """Whisper's float32 logits of the language tokens `languages` (L,) after <|startoftranscript|> alone (B, L):
    the one decoder step openai/whisper's detect_language takes."""
    start = torch.full((memory.size(0), 1), asr.prompt[0], dtype=torch.long, device=memory.device)
    h = asr.decoder.hidden(start, memory, memory_lengths)[:, -1]
    return asr.decoder.output(h).float()[:, languages.to(memory.device)]


@torch.no_grad()
def detect_language(asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, languages: Tensor) -> Tensor:
    """The language Whisper hears in each row, as openai/whisper's detect_language finds it: one decoder step from
    <|startoftranscript|>, the argmax over the language tokens `languages` (L,) (all of Whisper's, or the ones a
    model may hear): memory (B, S, H), memory_lengths (B,) -> an index into `languages` per row (B,)."""
    return language_logits(asr, memory, memory_lengths, languages).argmax(-1)


@torch.no_grad()
def greedy_transcript(
    asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
) -> Transcript:
    """Greedy search over Whisper's text tokens: memory (B, S, H), memory_lengths (B,) -> Transcript: ids per row,
    the state after each token (B, U, H), lengths (B,), the prompt's last state (B, H). A row stops at
    <|endoftext|> or after `asr.max_tokens` tokens. `prompts` (B, P): each row's prompt (None: `asr.prompt`)."""
    rows = memory.size(0)
    cache, h = _prompted(asr, memory, memory_lengths, prompts)
    first = h
    done = torch.zeros(rows, dtype=torch.bool, device=memory.device)
    tokens = torch.zeros(rows, 0, dtype=torch.long, device=memory.device)  # (B, t)
    states = []
    for _ in range(asr.max_tokens):
        token = _logits(asr, h, tokens).argmax(-1).masked_fill(done, asr.eos_id)  # (B,)
        done |= token == asr.eos_id
        if done.all():
            break
        h = asr.decoder.hidden(token[:, None], memory, memory_lengths, cache)[:, -1]
        tokens = torch.cat([tokens, token[:, None]], 1)
        states.append(h.masked_fill(done[:, None], 0.0))
    lengths = (tokens != asr.eos_id).sum(1)
    ids = [row[: int(n)] for row, n in zip(tokens.tolist(), lengths)]
    return Transcript(ids, torch.stack(states, 1), lengths, first)


@torch.no_grad()
def beam_transcript(
    asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
) -> Transcript:
    """As `greedy_transcript`, the transcript found by beam search (`beam_tokens`); its states from one
    teacher-forced pass of Whisper's decoder over the prompt and the transcript."""
    ids = beam_tokens(asr, memory, memory_lengths, prompts)
    lengths = torch.tensor([len(i) for i in ids], device=memory.device)
    tokens = torch.full((len(ids), int(lengths.max())), asr.eos_id, dtype=torch.long, device=memory.device)
    for row, i in enumerate(ids):
        tokens[row, : len(i)] = torch.tensor(i, dtype=torch.long)
    prompt = _prompt_rows(asr, memory, prompts)
    h = asr.decoder.hidden(torch.cat([prompt, tokens], 1), memory, memory_lengths)  # (B, P + U, H)
    p = prompt.size(1)
    states = h[:, p:].masked_fill(lengths_to_padding_mask(lengths, tokens.size(1))[..., None], 0.0)
    return Transcript(ids, states, lengths, h[:, p - 1])


@torch.no_grad()
def beam_tokens(
    asr: WhisperAsrEncoder, memory: Tensor, memory_lengths: Tensor, prompts: Tensor | None = None
) -> list[list[int]]:
    """Whisper's transcript of each row by beam search (`asr.beam` hypotheses; the module docstring's rules): memory
    (B, S, H), memory_lengths (B,) -> the best finished hypothesis' ids per row (`prompts` as greedy_transcript's)."""
    rows, k = memory.size(0), asr.beam
    cache, h = _prompted(asr, memory, memory_lengths, prompts)
    h = h.repeat_interleave(k, 0)  # (B K, H)
    # the beams of a row share its memory and its cross-attention keys/values: only self-attention is reordered
    cache.regroup(torch.arange(rows, device=memory.device).repeat_interleave(k), None, k)
    scores = torch.full((rows, k), float("-inf"), device=memory.device)
    scores[:, 0] = 0.0  # one live hypothesis per row at first
    hyps: list[list[int]] = [[] for _ in range(rows * k)]
    finished: list[list[Hypothesis]] = [[] for _ in range(rows)]
    for step in range(asr.max_tokens + 1):
        if step == asr.max_tokens:  # the live hypotheses end here (a done row has none: its scores are -inf)
            for r, j in (scores > float("-inf")).nonzero().tolist():
                finished[r].append(Hypothesis(hyps[r * k + j], float(scores[r, j]), float(scores[r, j]) / step))
            break
        written = torch.tensor(hyps, dtype=torch.long, device=memory.device).view(rows * k, step)
        logp = _logits(asr, h, written).log_softmax(-1)  # (B K, V)
        top, index = (scores.view(-1, 1) + logp).view(rows, -1).topk(2 * k, dim=-1)  # (B, 2K)
        keep, token, scores = _extend(top, index, logp.size(-1), k, asr.eos_id, step, finished, hyps)
        if all(len(f) >= k for f in finished):
            break
        hyps = [hyps[i] + [t] for i, t in zip(keep.view(-1).tolist(), token.view(-1).tolist())]
        cache.reorder(keep.view(-1), cross=False)
        h = asr.decoder.hidden(token.view(-1, 1), memory, memory_lengths, cache)[:, -1]
    return [max(f, key=lambda hyp: hyp.normalized_score).tokens for f in finished]


def _extend(
    top: Tensor,
    index: Tensor,
    vocab: int,
    k: int,
    eos_id: int,
    step: int,
    finished: list[list[Hypothesis]],
    hyps: list[list[int]],
) -> tuple[Tensor, Tensor, Tensor]:
    """One beam step: each row's 2K best candidates, top scores (B, 2K) and flat indices (B, 2K) over (K, vocab),
    in order -> the source beam (B, K), token (B, K) and score (B, K) of each of the K live hypotheses (a done row
    keeps its own rows at -inf); an <|endoftext|> candidate before the K-th live one finishes its hypothesis into
    `finished` (while the row has fewer than K), its score over step + 1."""
    rows = top.size(0)
    keep = (torch.arange(rows, device=top.device) * k)[:, None].repeat(1, k)
    token = torch.full((rows, k), eos_id, dtype=torch.long, device=top.device)
    new = torch.full((rows, k), float("-inf"), device=top.device)
    for r in range(rows):
        slot = 0
        for score, i in zip(top[r].tolist(), index[r].tolist()):
            if slot == k or len(finished[r]) >= k or score == float("-inf"):
                break
            source, t = r * k + i // vocab, i % vocab
            if t == eos_id:
                finished[r].append(Hypothesis(hyps[source], score, score / (step + 1)))
                continue
            keep[r, slot], token[r, slot], new[r, slot] = source, t, score
            slot += 1
    return keep, token, new
