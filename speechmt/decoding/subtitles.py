"""Subtitles from timed translations: cues within the usual conventions, written as SRT or WebVTT.

The input is what `translate` gives for a file: each chunk of the long-audio segmentation (its voiced span:
the chunk less its leading and trailing silence) with its text. Each chunk's text becomes one or more cues:

1. Lines: at most `max_chars` characters, at most `max_lines` lines per cue (a word longer than a line is cut
   into line-long pieces). Two lines are balanced: the break that makes the longer line shortest, where a
   break after a sentence or clause counts 4 characters less.
2. Cues per chunk: n = max(fewest cues that hold the text, ceil(span / max_seconds)), at most one per word. The
   words are parted into n groups that fit, each as close as can be to the mean length in characters, and
   preferring to end a cue at the end of a sentence (. ! ?) or a clause (, ; :).
3. Times: the span is shared among the cues in proportion to their characters, each kept within
   [min_seconds, max_seconds] where the span allows (a span longer than n * max_seconds leaves gaps: each
   cue starts its share and lasts max_seconds).
4. Across the file, a cue shorter than `min_seconds` is lengthened into the silence after it (or before it)
   as far as the next (previous) cue and the end of the audio allow. Cues never overlap: times are whole
   milliseconds, and each cue ends at or before the next one starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_SENTENCE_END = (".", "!", "?", "…", '."', '?"', '!"')
_CLAUSE_END = (",", ";", ":", "—", "–")


@dataclass(frozen=True)
class SubtitleConfig:
    """Cue limits: characters per line, lines per cue, and seconds on screen."""

    max_chars: int = 42
    max_lines: int = 2
    min_seconds: float = 1.0
    max_seconds: float = 7.0

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_lines < 1:
            raise ValueError(f"need max_chars >= 1 and max_lines >= 1; got {self.max_chars}, {self.max_lines}")
        if not 0 < self.min_seconds <= self.max_seconds:
            raise ValueError(f"need 0 < min_seconds <= max_seconds; got {self.min_seconds}, {self.max_seconds}")


@dataclass(frozen=True)
class Cue:
    """One subtitle: from `start` to `end` seconds, its lines."""

    start: float
    end: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.lines)


def _words(text: str, max_chars: int) -> list[str]:
    """The text's words, each longer than a line cut into line-long pieces."""
    return [w[i : i + max_chars] for w in text.split() for i in range(0, len(w), max_chars)]


def wrap(words: Sequence[str], cfg: SubtitleConfig = SubtitleConfig()) -> list[str]:
    """Words -> lines of at most `max_chars` (greedy), two lines balanced (preferring a break after a
    sentence or clause). More than `max_lines` lines means the words do not fit one cue."""
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + 1 + len(w) <= cfg.max_chars:
            lines[-1] = f"{lines[-1]} {w}"
        else:
            lines.append(w)
    if len(lines) == 2:
        best = min(range(1, len(words)), key=lambda i: _line_break_cost(words, i, cfg.max_chars))
        lines = [" ".join(words[:best]), " ".join(words[best:])]
    return lines


def _line_break_cost(words: Sequence[str], i: int, max_chars: int) -> float:
    """The cost of breaking two lines before words[i]: the longer line's length, plus 4 characters' worth
    unless the first line ends a sentence or clause; lines over max_chars are out."""
    first, second = " ".join(words[:i]), " ".join(words[i:])
    if max(len(first), len(second)) > max_chars:
        return float("inf")
    return max(len(first), len(second)) + (0 if first.endswith(_SENTENCE_END + _CLAUSE_END) else 4)


def _fits(words: Sequence[str], cfg: SubtitleConfig) -> bool:
    return len(" ".join(words)) <= cfg.max_chars * cfg.max_lines and len(wrap(words, cfg)) <= cfg.max_lines


def _fewest_cues(words: list[str], cfg: SubtitleConfig) -> int:
    """The fewest cues that hold the words in order (greedy filling is optimal: a group that fits still
    fits less a word at its end)."""
    n, i = 0, 0
    while i < len(words):
        j = i + 1
        while j < len(words) and _fits(words[i : j + 1], cfg):
            j += 1
        n, i = n + 1, j
    return n


def _break_cost(word: str) -> float:
    return 0.0 if word.endswith(_SENTENCE_END) else 0.15 if word.endswith(_CLAUSE_END) else 0.4


def part_words(words: list[str], n: int, cfg: SubtitleConfig = SubtitleConfig()) -> list[list[str]]:
    """Words -> n consecutive groups that each fit a cue, of even lengths, ending at sentence or clause ends
    where that costs little (dynamic programming over the break points). n must be at least the fewest cues
    that hold the words and at most their number."""
    total = len(" ".join(words))
    target = total / n
    inf = float("inf")
    cost = [[inf] * (len(words) + 1) for _ in range(n + 1)]  # cost[k][j]: words[:j] in k groups
    back = [[0] * (len(words) + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    for k in range(1, n + 1):
        for j in range(k, len(words) + 1):
            for i in range(j - 1, k - 2, -1):
                group = words[i:j]
                if not _fits(group, cfg):
                    break
                if cost[k - 1][i] == inf:
                    continue
                c = cost[k - 1][i] + ((len(" ".join(group)) - target) / target) ** 2
                c += _break_cost(group[-1]) if j < len(words) else 0.0
                if c < cost[k][j]:
                    cost[k][j], back[k][j] = c, i
    if cost[n][len(words)] == inf:
        raise ValueError(f"{len(words)} words do not part into {n} cues")
    groups, j = [], len(words)
    for k in range(n, 0, -1):
        i = back[k][j]
        groups.append(words[i:j])
        j = i
    return groups[::-1]


def fit_durations(weights: Sequence[float], total: float, lo: float, hi: float) -> list[float]:
    """Durations proportional to `weights` (all > 0), each clamped to [lo, hi], summing to `total`:
    clamp(s * w_i, lo, hi) with the scale s found by bisection. Needs n * lo <= total <= n * hi."""

    def summed(s: float) -> float:
        return sum(min(max(s * w, lo), hi) for w in weights)

    a, b = 0.0, hi / min(weights)
    for _ in range(100):
        mid = (a + b) / 2
        a, b = (mid, b) if summed(mid) < total else (a, mid)
    durations = [min(max(b * w, lo), hi) for w in weights]
    scale = total / sum(durations)  # the bisection's last bit of error, spread evenly
    return [d * scale for d in durations]


def chunk_cues(start: float, end: float, text: str, cfg: SubtitleConfig = SubtitleConfig()) -> list[Cue]:
    """The cues of one chunk: its text shown over [start, end] seconds (rules 1-3 of the module)."""
    words = _words(text, cfg.max_chars)
    if not words:
        return []
    span = max(end - start, 0.0)
    n = min(max(_fewest_cues(words, cfg), math.ceil(span / cfg.max_seconds)), len(words))
    groups = part_words(words, n, cfg)
    weights = [len(" ".join(g)) for g in groups]
    if n * cfg.min_seconds <= span <= n * cfg.max_seconds:
        durations = fit_durations(weights, span, cfg.min_seconds, cfg.max_seconds)
        shares = durations
    else:  # too short for n cues of min_seconds (lengthened later), or too long for n cues of max_seconds
        shares = [span * w / sum(weights) for w in weights]
        durations = [min(s, cfg.max_seconds) for s in shares]
    cues, t = [], start
    for group, share, duration in zip(groups, shares, durations):
        cues.append(Cue(t, t + duration, tuple(wrap(group, cfg))))
        t += share
    return cues


def _lengthen(cues: list[Cue], min_seconds: float, audio_end: float) -> list[Cue]:
    """Rule 4: each cue shorter than min_seconds grows into the gap after it, then the gap before it."""
    out = list(cues)
    for i, c in enumerate(out):
        short = min_seconds - (c.end - c.start)
        if short <= 0:
            continue
        limit = out[i + 1].start if i + 1 < len(out) else max(audio_end, c.end)
        end = min(c.end + short, limit)
        floor = out[i - 1].end if i > 0 else 0.0
        start = max(min(c.start, end - min_seconds), floor)
        out[i] = Cue(start, end, c.lines)
    return out


def _whole_ms(cues: list[Cue]) -> list[Cue]:
    """Times rounded to whole milliseconds, each cue ending at or before the next one starts; cues left
    without time are dropped."""
    out: list[Cue] = []
    for i, c in enumerate(cues):
        start = round(c.start * 1000)
        end = round(c.end * 1000)
        if i + 1 < len(cues):
            end = min(end, round(cues[i + 1].start * 1000))
        if out:
            start = max(start, round(out[-1].end * 1000))
        if end > start:
            out.append(Cue(start / 1000, end / 1000, c.lines))
    return out


def make_cues(
    chunks: Sequence[tuple[float, float, str]], audio_seconds: float, cfg: SubtitleConfig = SubtitleConfig()
) -> list[Cue]:
    """(start s, end s, text) per chunk, in order and not overlapping -> the file's cues (module rules)."""
    cues = [cue for start, end, text in chunks for cue in chunk_cues(start, end, text, cfg)]
    return _whole_ms(_lengthen(cues, cfg.min_seconds, audio_seconds))


def timestamp(seconds: float, separator: str = ",") -> str:
    """Seconds -> "HH:MM:SS,mmm" (SRT) or, with separator ".", "HH:MM:SS.mmm" (WebVTT)."""
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip text: numbered cues, "start --> end" with comma milliseconds, lines, a blank line after each."""
    return "".join(
        f"{i}\n{timestamp(c.start)} --> {timestamp(c.end)}\n" + "\n".join(c.lines) + "\n\n"
        for i, c in enumerate(cues, 1)
    )


def to_vtt(cues: Sequence[Cue]) -> str:
    """WebVTT text: the WEBVTT header, then cues with dot milliseconds ("-->" never appears in a line)."""
    body = "".join(
        f"\n{timestamp(c.start, '.')} --> {timestamp(c.end, '.')}\n"
        + "\n".join(line.replace("-->", "->") for line in c.lines)
        + "\n"
        for c in cues
    )
    return "WEBVTT\n" + body
