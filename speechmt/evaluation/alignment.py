"""CTC forced alignment: the best path (Viterbi) of a transcript's labels through a CTC head's frame
log-probabilities, giving every label its frames. speechmt.evaluation.representations cuts speech into the
transcript's words with it. (torchaudio.functional.forced_align does the same, but needs torchaudio's compiled
alignment extension, which not every install has.)

Standard CTC topology: the labels l_1..l_L interleaved with blanks, b l_1 b l_2 ... l_L b (2L + 1 states); a
path starts in the first blank or l_1, ends in l_L or the last blank, and at every frame stays, moves one state
on, or skips a blank between two different labels (between two equal labels the blank is required). A
transcript fits in T frames when T >= L + (number of adjacent equal labels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


class AlignmentError(ValueError):
    """A transcript that cannot be aligned to its frames (more labels and required blanks than frames); one line."""


@dataclass(frozen=True)
class CTCAlignment:
    """The best path of L labels through T frames: `score` its log-probability (the sum over frames of the
    chosen label's log-probability); `tokens` (T,) the label of every frame (the blank included); `pieces` (T,)
    the position in the transcript (0..L-1) that each frame emits, -1 for blank frames; `spans` per label
    its frames [start, end) (a label's frames are consecutive and never empty)."""

    score: float
    tokens: np.ndarray
    pieces: np.ndarray
    spans: list[tuple[int, int]]


def min_frames(labels) -> int:
    """The fewest frames a CTC path of `labels` needs: one per label, and a blank between equal neighbours."""
    labels = np.asarray(labels)
    return len(labels) + int((labels[1:] == labels[:-1]).sum())


def ctc_forced_align(log_probs, labels, blank: int, name: str = "") -> CTCAlignment:
    """The Viterbi path of `labels` (L,) through `log_probs` (T, V) (log-softmax of the CTC head; a torch
    Tensor or array, computed in float64) with blank id `blank`. One vectorised step over the 2L + 1 states
    per frame, then a backtrack; O(T L) time, T x (2L + 1) bytes of back-pointers. Ties go to staying in a
    state, then to the nearer predecessor.

    Raises AlignmentError naming the utterance `name` when the labels cannot fit in T frames (or no path has
    a finite log-probability), ValueError when a label is the blank.
    """
    labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64).reshape(-1)
    n_frames, n_labels = log_probs.shape[0], len(labels)
    if (labels == blank).any():
        raise ValueError(f"{name or 'transcript'}: a label is the CTC blank ({blank})")
    need = min_frames(labels)
    if need > n_frames:
        raise AlignmentError(
            f"{name or 'utterance'}: its transcript of {n_labels} pieces needs at least {need} CTC "
            f"frames (a blank between repeated pieces), the audio has {n_frames}"
        )
    if n_frames == 0:
        return CTCAlignment(0.0, np.zeros(0, np.int64), np.zeros(0, np.int64), [])
    states = np.full(2 * n_labels + 1, blank, dtype=np.int64)
    states[1::2] = labels
    n_states = len(states)
    skip = np.zeros(n_states, dtype=bool)  # state s may follow s - 2: a label after a different label
    skip[3::2] = labels[1:] != labels[:-1]
    if isinstance(log_probs, torch.Tensor):  # only the S columns of the labels, in float64
        emit = log_probs.detach()[:, torch.from_numpy(states).to(log_probs.device)].cpu().double().numpy()
    else:
        emit = np.asarray(log_probs)[:, states].astype(np.float64)  # (T, S)
    delta = np.full(n_states, -np.inf)
    delta[:2] = emit[0, :2]
    back = np.zeros((n_frames, n_states), dtype=np.int8)  # how many states each best path moved at frame t
    candidates = np.full((3, n_states), -np.inf)
    for t in range(1, n_frames):
        candidates[0] = delta
        candidates[1, 1:] = delta[:-1]
        candidates[2, 2:] = np.where(skip[2:], delta[:-2], -np.inf)
        back[t] = candidates.argmax(0)
        delta = candidates[back[t], np.arange(n_states)] + emit[t]
    end = n_states - 1 if n_states == 1 or delta[-1] >= delta[-2] else n_states - 2
    if not np.isfinite(delta[end]):
        raise AlignmentError(f"{name or 'utterance'}: no CTC path of its transcript has a finite log-probability")
    path = np.empty(n_frames, dtype=np.int64)
    s = end
    for t in range(n_frames - 1, -1, -1):
        path[t] = s
        s -= int(back[t, s])
    pieces = np.where(path % 2 == 1, (path - 1) // 2, -1)
    frames = np.flatnonzero(pieces >= 0)
    order = np.arange(n_labels)
    starts = frames[np.searchsorted(pieces[frames], order, side="left")]
    ends = frames[np.searchsorted(pieces[frames], order, side="right") - 1] + 1
    return CTCAlignment(float(delta[end]), states[path], pieces, list(zip(starts.tolist(), ends.tolist())))
