"""StreamLAAL: the latency of one long unsegmented stream's translation (Papi et al., ACL 2024, "StreamAtt";
the IWSLT simultaneous track's metric), scored against the reference segments the stream is made of.

The stream's output words, each with its delay (source ms read since the stream's start) and its elapsed ms
(computation-aware), are re-segmented to the reference segments by a minimal word edit distance alignment
(`resegment`); each segment then gets the LAAL of speechmt.evaluation.latency with its words' delays counted
from the segment's start (d - start_ms), its duration as the source length and its reference's word count as
|Y|. StreamLAAL is the mean over the segments that received at least one word; the others are counted as
skipped, as SimulEval's StreamLAAL skips them (and as `corpus_latency` skips empty outputs).

Alignment (`resegment`), the choices made here:

- words are compared after normalisation: lower-cased and stripped of punctuation (any Unicode punctuation
  character, so German quotes too); a token made only of punctuation is kept as it is (lower-cased). The scores
  use the words as given: normalisation only steers the alignment, it never changes a word count;
- a hypothesis word matched or substituted to a reference word goes to that word's segment;
- an inserted hypothesis word (aligned to no reference word) goes to the segment of the nearest preceding
  reference word in the alignment, and to the first reference word's segment when none precedes it. In a
  minimal alignment an insertion never directly follows a deletion (one substitution would be cheaper), so
  that preceding reference word is an aligned one: inserted words join the segment of the word before them,
  and words inserted between two segments go to the earlier one;
- among equally short alignments, the one traced back from the end preferring a match or substitution, then
  an insertion, then a deletion, is taken: deterministic, and ties resolve towards later reference words.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np

from speechmt.evaluation.latency import Delays, corpus_latency

_DIAG, _UP, _LEFT = 1, 2, 4  # the moves that reach a cell at its minimal cost: match/substitute, insert, delete


def normalise(word: str) -> str:
    """The form a word is aligned by: lower-cased, punctuation removed (all of it punctuation: kept)."""
    low = word.lower()
    bare = "".join(c for c in low if not unicodedata.category(c).startswith("P"))
    return bare or low


def _moves(hyp: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(H + 1, R + 1) uint8 of the minimal moves (bit flags) into each cell of the word edit distance table of
    `hyp` (H word ids, rows) against `ref` (R word ids, columns); the costs live one row at a time."""
    cols = np.arange(len(ref) + 1)
    moves = np.zeros((len(hyp) + 1, len(ref) + 1), np.uint8)
    moves[0, 1:] = _LEFT
    moves[1:, 0] = _UP
    prev = cols.copy()  # row 0: deleting j reference words costs j
    for i, word in enumerate(hyp, start=1):
        diag = prev[:-1] + (ref != word)
        best = np.empty_like(prev)
        best[0] = i
        best[1:] = np.minimum(prev[1:] + 1, diag)
        # deletions run along the row: cur[j] = min over k <= j of best[k] + (j - k)
        cur = np.minimum.accumulate(best - cols) + cols
        moves[i, 1:] |= np.where(diag == cur[1:], _DIAG, 0).astype(np.uint8)
        moves[i, 1:] |= np.where(prev[1:] + 1 == cur[1:], _UP, 0).astype(np.uint8)
        moves[i, 1:] |= np.where(cur[:-1] + 1 == cur[1:], _LEFT, 0).astype(np.uint8)
        prev = cur
    return moves


def _aligned_reference(hyp: np.ndarray, ref: np.ndarray) -> list[int | None]:
    """Per hypothesis word, the index of the reference word a minimal alignment pairs it with (None: inserted);
    ties as the module docstring says."""
    moves = _moves(hyp, ref)
    out: list[int | None] = [None] * len(hyp)
    i, j = len(hyp), len(ref)
    while i > 0:
        m = moves[i, j]
        if m & _DIAG:
            i, j = i - 1, j - 1
            out[i] = j
        elif m & _UP:
            i -= 1
        else:
            j -= 1
    return out


def resegment(hyp_words: Sequence[str], ref_segments: Sequence[str]) -> list[list[int]]:
    """The indices of `hyp_words` (H words) that go to each of `ref_segments` (texts, split on whitespace), in
    order: every hypothesis word exactly once, by a minimal word edit distance alignment of the hypothesis to
    the concatenated references (module docstring). Time O(H * R) and one byte per (H + 1) * (R + 1) cell."""
    if not ref_segments:
        raise ValueError("no reference segments to re-segment to")
    ref_words = [w for text in ref_segments for w in text.split()]
    segment_of = [k for k, text in enumerate(ref_segments) for _ in text.split()]
    ids: dict[str, int] = {}
    ref = np.array([ids.setdefault(normalise(w), len(ids)) for w in ref_words], np.int64)
    hyp = np.array([ids.setdefault(normalise(w), len(ids)) for w in hyp_words], np.int64)
    out: list[list[int]] = [[] for _ in ref_segments]
    current = segment_of[0] if segment_of else 0
    for n, j in enumerate(_aligned_reference(hyp, ref)):
        if j is not None:
            current = segment_of[j]
        out[current].append(n)
    return out


def stream_laal(
    words: Sequence[str],
    delays: Sequence[float],
    elapsed: Sequence[float],
    segments: Sequence[tuple[float, float, str]],
) -> dict[str, float | int | None]:
    """StreamLAAL of one stream's output: `words` with their `delays` and `elapsed` (ms from the stream's start,
    computation-unaware and -aware) against `segments`, (start ms in the stream, duration ms, reference text)
    each. {"StreamLAAL": ms, "StreamLAAL_CA": ms, "n": segments scored, "skipped": segments without output
    words}; both means are None when every segment was skipped."""
    if not len(words) == len(delays) == len(elapsed):
        raise ValueError(f"{len(words)} words, {len(delays)} delays, {len(elapsed)} elapsed: one each per word")
    items = []
    for (start, duration, text), idx in zip(segments, resegment(words, [s[2] for s in segments])):
        items.append(
            Delays(
                tuple(delays[i] - start for i in idx),
                tuple(elapsed[i] - start for i in idx),
                duration,
                len(text.split()),
            )
        )
    scores = corpus_latency(items)
    return {
        "StreamLAAL": scores["LAAL"],
        "StreamLAAL_CA": scores["LAAL_CA"],
        "n": scores["n"],
        "skipped": scores["skipped"],
    }
