"""Simultaneous translation: audio arrives in fixed decision steps, and a policy decides after each step how many
more target tokens to commit (greedy search on the input read so far); committed tokens are never revised.

- wait-k (Ma et al., ACL 2019; on speech with a fixed pre-decision step, Ma et al., AACL 2020): read k steps,
  then write one token per step read; once the input has ended, write to the end.
- What follows the end of the input can be searched with a beam (`tail_beam`, as STACL did for wait-k): once the
  input has ended nothing more is read, so the rest of the sentence is written at once, behind the committed
  prefix, by beam search instead of greedy steps; the latency of those tokens is the input's end either way.
- AlignAtt (Papi et al., Interspeech 2023): after each step, write tokens while the decoder's cross-attention
  for the next token is not on the last f = k encoder frames (Whisper: 20 ms each); a token that looks there
  waits for more input. Which attention: a Whisper decoder's alignment heads (the heads OpenAI found to follow
  the timing of words: `alignment_heads` in the base model's generation_config.json), other decoders' heads of
  the top half of the layers. Each head votes with the frame it attends to most, and the token waits when at
  least half of them vote for the last f frames (`attends_to_last`). Averaging the weights of all heads first,
  as this module did before, lets the many heads that rest on other frames outvote the few that track the
  input: on the bundled model's partial inputs it kept fewer of the tokens the whole input confirms for as
  many wrong ones (research/mustc/reports/simultaneous). A language-model decoder (speechmt.models.lm_decoder)
  has no cross-attention: it reads the source in its own sequence, after the prompt, so its self-attention from
  the next token's position over the source positions plays that part (every head of the top half of its
  layers), and f counts source positions: the bridge's frames, or a whisper_asr encoder's transcript tokens
  (`default_k`).

The encoder runs over the whole input of the current window at every step (re-encoding: Whisper's and the
other encoders' self-attention is bidirectional, so earlier states change as input grows). A window ends, its
translation finished as if the input had ended, when it is full (`max_seconds`) or, once it holds
`pause_after_seconds`, at the first step whose input ends in a pause (at least `min_pause_ms` after the last
voiced frame: speechmt.decoding.segment.voiced_span); a new window starts on the next step (its text joined
with a space). Memory and the cost of a step are thus bounded whatever the input's length, and cutting at
pauses keeps windows short (the re-encoding cheap) and sentences whole. An end of sentence (EOS) predicted
before the input has ended is not committed; the policy waits for more input.

Each commit records the source read (ms) and, for computation-aware latency, that plus the wall-clock time
spent computing so far (speechmt.evaluation.latency).

Several policy settings over one input (the k of a quality-latency table) can share an `EncoderMemo`: what a
step encodes depends on the audio read and the window, never on the policy, so a later run reuses the earlier
runs' encoder outputs and is charged the seconds they took, its computation-aware latency as if it ran alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from speechmt.audio import SAMPLE_RATE
from speechmt.decoding.alignatt import (  # noqa: F401 (SimultaneousError: imported from here too)
    PolicyAttention,
    SimultaneousError,
    attends_to_last,
    is_lm_decoder,
    policy_attention,
)
from speechmt.decoding.search import DecodeOptions, beam_search, constrain, max_lengths, start_tokens
from speechmt.decoding.segment import voiced_span
from speechmt.decoding.translate import LoadedModel, encode_audio
from speechmt.models.encoders import EncoderOutput

POLICIES = ("wait-k", "alignatt")
DEFAULT_K = {"wait-k": 3, "alignatt": 30}  # wait-k: steps; alignatt: encoder frames (Whisper: 600 ms)
DEFAULT_K_LM = 2  # alignatt on a language-model decoder: source positions (whisper_asr: transcript tokens)


@dataclass(frozen=True)
class SimultaneousConfig:
    """The policy, its k (wait-k: steps read before the first token; alignatt: encoder frames at the end of the
    input that a token may not attend to most), the decision step and the window (module docstring)."""

    policy: str = "wait-k"
    k: int = 3
    step_ms: float = 400.0
    max_seconds: float = 20.0
    pause_after_seconds: float = 6.0  # a window this long also ends at a pause; 0: only when full
    min_pause_ms: float = 300.0
    tail_beam: int = 1  # beam size for what is written after a window's input has ended (1: greedy)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise SimultaneousError(f"unknown policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if self.k < 1:
            raise SimultaneousError(f"k must be >= 1; got {self.k}")
        if self.step_ms < 25:
            raise SimultaneousError(f"step_ms must be at least 25 ms (one analysis window); got {self.step_ms:g}")
        if self.max_seconds * 1000 < self.step_ms:
            raise SimultaneousError(f"max_seconds ({self.max_seconds:g}) must hold at least one step")
        if self.tail_beam < 1:
            raise SimultaneousError(f"tail_beam must be >= 1; got {self.tail_beam}")
        if self.pause_after_seconds < 0 or self.min_pause_ms <= 0:
            raise SimultaneousError(
                f"pause_after_seconds must be >= 0 and min_pause_ms > 0; got "
                f"{self.pause_after_seconds:g}, {self.min_pause_ms:g}"
            )

    @property
    def step_samples(self) -> int:
        return round(self.step_ms * SAMPLE_RATE / 1000)


@dataclass
class Commit:
    """Tokens committed after one step: their text (to append), the source read (ms) and that plus the compute
    time so far (ms); `text` starts with a space where a new window's text follows earlier text."""

    text: str
    tokens: list[int]
    delay_ms: float
    elapsed_ms: float


@dataclass
class SimultaneousResult:
    """One input's translation and its commits in order; `source_ms` of audio read, `compute_ms` spent."""

    text: str = ""
    commits: list[Commit] = field(default_factory=list)
    source_ms: float = 0.0
    compute_ms: float = 0.0

    def events(self) -> list[tuple[str, float, float]]:
        """(text committed so far, delay ms, elapsed ms) per commit: speechmt.evaluation.latency.word_delays."""
        out, text = [], ""
        for c in self.commits:
            text += c.text
            out.append((text, c.delay_ms, c.elapsed_ms))
        return out


def default_k(policy: str, lm: LoadedModel) -> int:
    """The policy's k when none is given: wait-k 3 steps; alignatt 30 encoder frames (Whisper: 600 ms), or on a
    language-model decoder 2 source positions."""
    if policy == "alignatt" and is_lm_decoder(lm.model.decoder):
        return DEFAULT_K_LM
    return DEFAULT_K[policy]


class _Greedy:
    """Greedy next tokens after the committed ones, on one encoder output; tokens pushed extend the prefix."""

    def __init__(
        self,
        lm: LoadedModel,
        enc: EncoderOutput,
        options: DecodeOptions,
        committed: list[int],
        attention: PolicyAttention | None,
    ):
        self.lm, self.enc, self.options, self.attention = lm, enc, options, attention
        self.max_len = max_lengths(lm.model, enc, options)
        self.cache = lm.model.new_cache()
        device = enc.x.device
        self.step, self.generated = len(committed), list(committed)  # the tokens the named filters read
        inputs = torch.cat(
            [start_tokens(options, 1, device), torch.tensor([committed], device=device, dtype=torch.long)], dim=1
        )
        self._advance(inputs)

    def _advance(self, inputs: Tensor) -> None:
        with self.attention.recording() if self.attention else contextlib.nullcontext():
            logits = self.lm.model.decode(inputs, self.enc, self.cache)
        lprobs = logits[:, -1].float().log_softmax(-1)
        tokens = torch.tensor([self.generated], dtype=torch.long, device=lprobs.device).view(1, len(self.generated))
        lprobs = constrain(lprobs, self.step, self.max_len, self.options, tokens)
        self.token = int(lprobs.argmax(-1))
        self.attention_weights = self.attention.take() if self.attention else None  # (N, S)

    def push(self) -> None:
        """Commits the proposed token and proposes the next."""
        self.step += 1
        self.generated.append(self.token)
        self._advance(torch.tensor([[self.token]], device=self.enc.x.device))

    @property
    def at_max(self) -> bool:
        return self.step >= int(self.max_len[0])


class EncoderMemo:
    """Encoder outputs of one input's windows, keyed by (samples read, samples in the window), with the seconds
    each took to compute; `saved` sums the seconds that hits did not spend. Use one memo per input (`clear`
    between inputs): the key names a window only within one input."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], tuple[EncoderOutput, float]] = {}
        self.saved = 0.0

    def encode(self, lm: LoadedModel, wave: np.ndarray, read: int) -> tuple[EncoderOutput, float]:
        """The encoder output of the window `wave` after `read` samples of the input, and the seconds to charge
        for it beyond the wall clock (its recorded cost on a hit, 0 when computed now)."""
        key = (read, len(wave))
        if key in self.entries:
            enc, seconds = self.entries[key]
            self.saved += seconds
            return enc, seconds
        start = time.perf_counter()
        enc = encode_audio(lm, [wave])
        self.entries[key] = (enc, time.perf_counter() - start)
        return enc, 0.0

    def clear(self) -> None:
        self.entries.clear()


def _encode(lm: LoadedModel, wave: np.ndarray, read: int, memo: EncoderMemo | None) -> tuple[EncoderOutput, float]:
    return memo.encode(lm, wave, read) if memo is not None else (encode_audio(lm, [wave]), 0.0)


def _blocks_of(blocks: Iterable[np.ndarray], size: int) -> Iterator[tuple[np.ndarray, bool]]:
    """Re-blocks a stream of 1-D 16 kHz arrays into steps of `size` samples (the last may be shorter), each with
    whether it is the last."""
    pending = np.empty(0, dtype=np.float32)
    held: np.ndarray | None = None
    for block in blocks:
        pending = np.concatenate([pending, np.asarray(block, dtype=np.float32)])
        while len(pending) >= size:
            if held is not None:
                yield held, False
            held, pending = pending[:size], pending[size:]
    if len(pending):
        if held is not None:
            yield held, False
        held = pending
    if held is not None:
        yield held, True


class _Window:
    """The input and committed tokens since the last window started."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.samples = 0
        self.steps = 0
        self.tokens: list[int] = []
        self.done = False  # EOS written: the rest of the window is only read

    def add(self, block: np.ndarray) -> None:
        self.parts.append(block)
        self.samples += len(block)
        self.steps += 1

    def wave(self) -> np.ndarray:
        if len(self.parts) > 1:
            self.parts = [np.concatenate(self.parts)]
        return self.parts[0]


def _write(
    lm: LoadedModel,
    window: _Window,
    cfg: SimultaneousConfig,
    options: DecodeOptions,
    ended: bool,
    attention: PolicyAttention | None,
    read: int,
    memo: EncoderMemo | None,
) -> tuple[list[int], float]:
    """The tokens the policy commits after this step (greedy on the window's input so far; once it has ended, a
    beam of `cfg.tail_beam` for the rest), and the encoder seconds a memo hit saved (charged to this step)."""
    if window.done or window.samples < lm.min_input_samples:
        return [], 0.0
    allowed = None if ended else window.steps - cfg.k + 1 if cfg.policy == "wait-k" else None
    if allowed is not None and allowed <= len(window.tokens):
        return [], 0.0
    with torch.no_grad():
        enc, saved = _encode(lm, window.wave(), read, memo)
        if ended and cfg.tail_beam > 1:
            new = _tail(lm, enc, options, window.tokens, cfg.tail_beam)
            window.done = True
        else:
            new = _greedy_tokens(lm, enc, window, cfg, options, ended, attention, allowed)
    window.tokens += new
    return new, saved


def _greedy_tokens(
    lm: LoadedModel,
    enc: EncoderOutput,
    window: _Window,
    cfg: SimultaneousConfig,
    options: DecodeOptions,
    ended: bool,
    attention: PolicyAttention | None,
    allowed: int | None,
) -> list[int]:
    """Greedy tokens after the window's committed ones until the policy stops (EOS, AlignAtt's attention on the
    last k frames, wait-k's allowance, the length limit); sets `window.done` when the window's sentence ends."""
    greedy = _Greedy(lm, enc, options, window.tokens, attention)
    frames = int(enc.lengths[0])
    new: list[int] = []
    while not greedy.at_max:
        if greedy.token == options.eos_id:
            window.done = ended
            break
        if not ended and attention is not None and attends_to_last(greedy.attention_weights, frames, cfg.k):
            break
        new.append(greedy.token)
        if allowed is not None and len(window.tokens) + len(new) >= allowed:
            break
        greedy.push()
    else:
        window.done = True
    return new


def _tail(lm: LoadedModel, enc: EncoderOutput, options: DecodeOptions, committed: list[int], beam: int) -> list[int]:
    """The best continuation of the committed tokens to the end of the sentence, by beam search (EOS excluded);
    the length limits count the committed tokens too."""
    tail = replace(
        options,
        beam_size=beam,
        nbest=1,
        prefix=(*options.prefix, *committed),
        max_len_b=options.max_len_b - len(committed),
        min_len=max(0, options.min_len - len(committed)),
    )
    hyps = beam_search(lm.model, enc, tail)[0]
    return hyps[0].tokens if hyps else []


def _at_pause(window: _Window, cfg: SimultaneousConfig) -> bool:
    """Whether the window holds `pause_after_seconds` and its input ends in a pause of `min_pause_ms`."""
    if not cfg.pause_after_seconds or window.samples < cfg.pause_after_seconds * SAMPLE_RATE:
        return False
    wave = window.wave()
    span = voiced_span(wave, SAMPLE_RATE)
    return span is not None and len(wave) - span[1] >= cfg.min_pause_ms * SAMPLE_RATE / 1000


def simultaneous_translate(
    lm: LoadedModel,
    blocks: Iterable[np.ndarray],
    cfg: SimultaneousConfig = SimultaneousConfig(),
    options: DecodeOptions | None = None,
    memo: EncoderMemo | None = None,
) -> Iterator[Commit]:
    """Translates 16 kHz mono audio arriving as blocks (any sizes: re-blocked into `cfg.step_ms` steps), yielding
    each commit as it is made (module docstring); `memo`: encoder outputs shared with other runs over the same
    input."""
    if lm.task == "mt":
        raise SimultaneousError(f"{lm.path}: simultaneous translation needs a speech model, not a text (mt) one")
    if lm.whisper_transcript:
        raise SimultaneousError(
            f"{lm.path}: task asr of a whisper_asr model is Whisper's transcript of the whole input; it is not streamed"
        )
    limit = lm.max_input_seconds
    if limit is not None and cfg.max_seconds > limit:
        raise SimultaneousError(
            f"{lm.path} takes at most {limit:g} s of audio at once; the window is {cfg.max_seconds:g} s"
        )
    options = options or lm.decode_options(1)
    attention = policy_attention(lm) if cfg.policy == "alignatt" else None
    window, read, spent, written = _Window(), 0, 0.0, False
    window_samples = round(cfg.max_seconds * SAMPLE_RATE)
    for block, last in _blocks_of(blocks, cfg.step_samples):
        start = time.perf_counter()
        window.add(block)
        read += len(block)
        ends = window.samples + cfg.step_samples > window_samples or _at_pause(window, cfg)
        tokens, saved = _write(lm, window, cfg, options, last or ends, attention, read, memo)
        spent += time.perf_counter() - start + saved
        if tokens:
            text = lm.tokenizer.decode(window.tokens)
            before = lm.tokenizer.decode(window.tokens[: -len(tokens)])
            piece = text[len(before) :] if text.startswith(before) else text  # pieces that merge on decoding
            piece = (" " + piece.lstrip()) if written and len(window.tokens) == len(tokens) else piece
            written = True
            delay = read * 1000 / SAMPLE_RATE
            yield Commit(piece, tokens, delay, delay + spent * 1000)
        if ends and not last:
            window = _Window()


def translate_stream(
    lm: LoadedModel,
    blocks: Iterable[np.ndarray],
    cfg: SimultaneousConfig = SimultaneousConfig(),
    options: DecodeOptions | None = None,
    on_commit=None,
    memo: EncoderMemo | None = None,
) -> SimultaneousResult:
    """Runs `simultaneous_translate` to the end of the input; `on_commit(commit)` is called at each commit.
    `compute_ms` includes the encoder seconds a shared `memo` saved (the run's cost as if alone)."""
    result = SimultaneousResult()
    blocks = [blocks] if isinstance(blocks, np.ndarray) else blocks
    counted = _Counted(blocks)
    saved = memo.saved if memo is not None else 0.0
    start = time.perf_counter()
    for commit in simultaneous_translate(lm, counted, cfg, options, memo):
        result.commits.append(commit)
        result.text += commit.text
        if on_commit is not None:
            on_commit(commit)
    saved = memo.saved - saved if memo is not None else 0.0
    result.compute_ms = (time.perf_counter() - start + saved) * 1000
    result.text = result.text.strip()
    result.source_ms = counted.samples * 1000 / SAMPLE_RATE
    return result


class _Counted:
    """An iterable of blocks that counts the samples it gave."""

    def __init__(self, blocks: Iterable[np.ndarray]):
        self.blocks, self.samples = blocks, 0

    def __iter__(self) -> Iterator[np.ndarray]:
        for b in self.blocks:
            self.samples += len(b)
            yield b
