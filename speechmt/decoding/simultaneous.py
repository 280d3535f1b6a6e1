"""Simultaneous translation: audio arrives in fixed decision steps, and a policy decides after each step how many
more target tokens to commit (greedy search on the input read so far); committed tokens are never revised.

- wait-k (Ma et al., ACL 2019; on speech with a fixed pre-decision step, Ma et al., AACL 2020): read k steps,
  then write one token per step read; once the input has ended, write to the end.
- AlignAtt (Papi et al., Interspeech 2023): after each step, write tokens while the decoder's cross-attention
  for the next token (averaged over the heads of the top half of the layers) peaks outside the last k encoder
  frames; a token that looks at the last k frames waits for more input. Needs a decoder with cross-attention.
  With the bundled Whisper model the averaged attention often peaks on early "sink" frames, so AlignAtt
  commits early there; wait-k is the dependable policy.

The encoder runs over the whole input of the current window at every step (re-encoding: Whisper's and the
other encoders' self-attention is bidirectional, so earlier states change as input grows). Memory is bounded by
a window of `max_seconds`: when it is full, the window's translation is finished as if the input had ended,
and a new window starts on the next step (its text joined with a space). An end of sentence (EOS) predicted
before the input has ended is not committed; the policy waits for more input.

Each commit records the source read (ms) and, for computation-aware latency, that plus the wall-clock time
spent computing so far (speechmt.evaluation.latency).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from speechmt.audio import SAMPLE_RATE
from speechmt.decoding.search import DecodeOptions, constrain, max_lengths, start_tokens
from speechmt.decoding.translate import LoadedModel, encode_audio
from speechmt.models.encoders import EncoderOutput

POLICIES = ("wait-k", "alignatt")


class SimultaneousError(ValueError):
    """A model or setting simultaneous translation cannot use; one line."""


@dataclass(frozen=True)
class SimultaneousConfig:
    """The policy, its k (wait-k: steps read before the first token; alignatt: encoder frames at the end of the
    input that a token may not attend to most), the decision step and the window (both of audio)."""

    policy: str = "wait-k"
    k: int = 3
    step_ms: float = 400.0
    max_seconds: float = 20.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise SimultaneousError(f"unknown policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if self.k < 1:
            raise SimultaneousError(f"k must be >= 1; got {self.k}")
        if self.step_ms < 25:
            raise SimultaneousError(f"step_ms must be at least 25 ms (one analysis window); got {self.step_ms:g}")
        if self.max_seconds * 1000 < self.step_ms:
            raise SimultaneousError(f"max_seconds ({self.max_seconds:g}) must hold at least one step")

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


class _CrossAttention:
    """Records, while active, the cross-attention weights of the last query position of the top half of the
    decoder's layers (each (B, H, S)); wraps each such layer's `cross_attn.attend` on the instance and restores
    it after."""

    def __init__(self, decoder: torch.nn.Module):
        layers = getattr(decoder, "layers", None)
        if layers is None or not all(hasattr(layer, "cross_attn") for layer in layers):
            raise SimultaneousError("alignatt needs a decoder with cross-attention; this model's decoder "
                                    f"({type(decoder).__name__}) has none: use --simultaneous wait-k")
        self.modules = [layer.cross_attn for layer in layers][len(layers) // 2:]  # the top half
        self.weights: list[Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator["_CrossAttention"]:
        for m in self.modules:
            m.attend = self._recorder(m)
        try:
            yield self
        finally:
            for m in self.modules:
                del m.attend  # back to the class's method

    def _recorder(self, module):
        original = type(module).attend.__get__(module)

        def attend(x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int = 1) -> Tensor:
            q = module._heads(module.q_proj(x[:, -1:]))  # (B, H, 1, D/H): the last position's query
            scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, 1, S)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            self.weights.append(scores.softmax(-1)[:, :, 0])
            return original(x, k, v, mask, group)

        return attend

    def peak(self) -> int:
        """The encoder frame the last step attended to most (heads and layers averaged); clears the record."""
        mean = torch.stack([w[0] for w in self.weights]).mean(dim=(0, 1))  # (S,)
        self.weights.clear()
        return int(mean.argmax())


class _Greedy:
    """Greedy next tokens after the committed ones, on one encoder output; tokens pushed extend the prefix."""

    def __init__(self, lm: LoadedModel, enc: EncoderOutput, options: DecodeOptions, committed: list[int],
                 attention: _CrossAttention | None):
        self.lm, self.enc, self.options, self.attention = lm, enc, options, attention
        self.max_len = max_lengths(lm.model, enc, options)
        self.cache = lm.model.new_cache()
        device = enc.x.device
        self.step = len(committed)
        inputs = torch.cat([start_tokens(options, 1, device), torch.tensor([committed], device=device,
                                                                           dtype=torch.long)], dim=1)
        self._advance(inputs)

    def _advance(self, inputs: Tensor) -> None:
        with self.attention.recording() if self.attention else contextlib.nullcontext():
            logits = self.lm.model.decode(inputs, self.enc, self.cache)
        lprobs = logits[:, -1].float().log_softmax(-1)
        lprobs = constrain(lprobs, self.step, self.max_len, self.options)
        self.token = int(lprobs.argmax(-1))
        self.peak = self.attention.peak() if self.attention else None

    def push(self) -> None:
        """Commits the proposed token and proposes the next."""
        self.step += 1
        self._advance(torch.tensor([[self.token]], device=self.enc.x.device))

    @property
    def at_max(self) -> bool:
        return self.step >= int(self.max_len[0])


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


def _write(lm: LoadedModel, window: _Window, cfg: SimultaneousConfig, options: DecodeOptions, ended: bool,
           attention: _CrossAttention | None) -> list[int]:
    """The tokens the policy commits after this step (greedy on the window's input so far)."""
    if window.done or window.samples < lm.min_input_samples:
        return []
    allowed = None if ended else window.steps - cfg.k + 1 if cfg.policy == "wait-k" else None
    if allowed is not None and allowed <= len(window.tokens):
        return []
    with torch.no_grad():
        enc = encode_audio(lm, [window.wave()])
        greedy = _Greedy(lm, enc, options, window.tokens, attention)
        frames = int(enc.lengths[0])
        new: list[int] = []
        while not greedy.at_max:
            if greedy.token == options.eos_id:
                window.done = ended
                break
            if not ended and attention is not None and greedy.peak >= frames - cfg.k:
                break
            new.append(greedy.token)
            if allowed is not None and len(window.tokens) + len(new) >= allowed:
                break
            greedy.push()
        else:
            window.done = True
    window.tokens += new
    return new


def simultaneous_translate(lm: LoadedModel, blocks: Iterable[np.ndarray],
                           cfg: SimultaneousConfig = SimultaneousConfig(),
                           options: DecodeOptions | None = None) -> Iterator[Commit]:
    """Translates 16 kHz mono audio arriving as blocks (any sizes: re-blocked into `cfg.step_ms` steps), yielding
    each commit as it is made (module docstring)."""
    if lm.task == "mt":
        raise SimultaneousError(f"{lm.path}: simultaneous translation needs a speech model, not a text (mt) one")
    limit = lm.max_input_seconds
    if limit is not None and cfg.max_seconds > limit:
        raise SimultaneousError(f"{lm.path} takes at most {limit:g} s of audio at once; the window is "
                                f"{cfg.max_seconds:g} s")
    options = options or lm.decode_options(1)
    attention = _CrossAttention(lm.model.decoder) if cfg.policy == "alignatt" else None
    window, read, spent, written = _Window(), 0, 0.0, False
    window_samples = round(cfg.max_seconds * SAMPLE_RATE)
    for block, last in _blocks_of(blocks, cfg.step_samples):
        start = time.perf_counter()
        window.add(block)
        read += len(block)
        full = window.samples + cfg.step_samples > window_samples
        tokens = _write(lm, window, cfg, options, last or full, attention)
        spent += time.perf_counter() - start
        if tokens:
            text = lm.tokenizer.decode(window.tokens)
            before = lm.tokenizer.decode(window.tokens[:-len(tokens)])
            piece = text[len(before):] if text.startswith(before) else text  # pieces that merge on decoding
            piece = (" " + piece.lstrip()) if written and len(window.tokens) == len(tokens) else piece
            written = True
            delay = read * 1000 / SAMPLE_RATE
            yield Commit(piece, tokens, delay, delay + spent * 1000)
        if full and not last:
            window = _Window()


def translate_stream(lm: LoadedModel, blocks: Iterable[np.ndarray], cfg: SimultaneousConfig = SimultaneousConfig(),
                     options: DecodeOptions | None = None, on_commit=None) -> SimultaneousResult:
    """Runs `simultaneous_translate` to the end of the input; `on_commit(commit)` is called at each commit."""
    result = SimultaneousResult()
    blocks = [blocks] if isinstance(blocks, np.ndarray) else blocks
    counted = _Counted(blocks)
    start = time.perf_counter()
    for commit in simultaneous_translate(lm, counted, cfg, options):
        result.commits.append(commit)
        result.text += commit.text
        if on_commit is not None:
            on_commit(commit)
    result.compute_ms = (time.perf_counter() - start) * 1000
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
