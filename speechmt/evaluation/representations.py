"""A model's states of a split's utterances, layer by layer, for `speechmt analyze` (speechmt.evaluation.
analyze): the speech path (every stage Translator.states names, from the audio through the model's own front
end) and the text path (the model's own text encoder, or an external Hugging Face text encoder's hidden
states, its special tokens left out). Per layer: mean-pooled utterance vectors, a few single states of each
utterance (anisotropy), and word units where the layer's positions can be grouped into words.

Word units, the mean of a word's states:
- text: a SentencePiece piece starting with "▁" begins a word; a Hugging Face tokenizer's word_ids group its
  tokens (fast tokenizers only).
- speech, for a model with a CTC head: its CTC segments (runs of one non-blank argmax label, as the ctc shrink
  merges them), grouped into words by their labels' pieces. A layer at the acoustic frame rate averages the
  frames of a word's segments; a layer with one state per segment (the ctc shrink's output, and semantic
  layers that keep its length) its segments' states. These are the words of the CTC argmax, not of a forced
  alignment against the transcript; `word_pairs` pairs them with the transcript's words they spell.
Labels are lower-cased.
"""

from __future__ import annotations

import difflib
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import Record
from speechmt.data.waveform import record_audio
from speechmt.decoding.translate import LoadedModel, frontend
from speechmt.evaluation.analysis import mean_pool
from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.shrink import ctc_segments
from speechmt.models.translator import CTC_BLANK_ID

States = dict[str, tuple[Tensor, Tensor]]  # {layer name: (x (B, T, D), lengths (B,))}, as Translator.states
Spans = list[list[tuple[str, list[int]]]]  # per utterance: (word label, the positions of its states)
Alignment = tuple[Tensor, Spans]  # the lengths (B,) of the layers the spans index, and the spans


@dataclass
class Layers:
    """One path's states of N utterances, per layer in the model's order: `pooled` (N, D) mean-pooled
    utterance vectors; `sample` ((M, D) single states, (M,) the utterance of each), a few per utterance;
    `words` per utterance its (word, vector (D,)) units, for the layers whose positions the word spans index
    in every batch; `note` says why a path has no word units."""

    names: list[str]
    pooled: dict[str, np.ndarray]
    sample: dict[str, tuple[np.ndarray, np.ndarray]]
    words: dict[str, list[list[tuple[str, np.ndarray]]]]
    note: str = ""


class _Collector:
    """Accumulates batches of named states into a Layers."""

    def __init__(self, per_utterance: int, seed: int):
        self.names: list[str] = []
        self.pooled, self.sample, self.words = defaultdict(list), defaultdict(list), defaultdict(list)
        self.unaligned: set[str] = set()
        self.per_utterance, self.rng, self.n = per_utterance, np.random.default_rng(seed), 0

    def add(self, states: States, alignments: Sequence[Alignment]) -> None:
        """One batch: every layer's states, and the word spans of the layers whose lengths they match."""
        for name, (x, lengths) in states.items():
            if name not in self.names:
                self.names.append(name)
            x, lengths = x.detach().float().cpu(), lengths.cpu()
            self.pooled[name].append(mean_pool(x, lengths).numpy())
            self._sample(name, x, lengths)
            spans = next((s for ref, s in alignments if torch.equal(ref.cpu(), lengths)), None)
            if spans is None:
                self.unaligned.add(name)
            else:
                self.words[name] += [[(label, x[b, pos].mean(0).numpy()) for label, pos in words]
                                     for b, words in enumerate(spans)]
        self.n += len(lengths) if states else 0

    def _sample(self, name: str, x: Tensor, lengths: Tensor) -> None:
        for b, length in enumerate(lengths.tolist()):
            pick = self.rng.choice(length, size=min(self.per_utterance, length), replace=False)
            self.sample[name].append((x[b, np.sort(pick)].numpy(), np.full(len(pick), self.n + b)))

    def layers(self, note: str = "") -> Layers:
        words = {n: self.words[n] for n in self.names if n in self.words and n not in self.unaligned}
        if not words and not note:
            note = "no layer's positions line up with the word units"
        sample = {n: (np.concatenate([s for s, _ in self.sample[n]]), np.concatenate([u for _, u in self.sample[n]]))
                  for n in self.names}
        return Layers(list(self.names), {n: np.concatenate(self.pooled[n]) for n in self.names}, sample, words, note)


def piece_words(pieces: Sequence[str]) -> list[tuple[str, list[int]]]:
    """SentencePiece pieces -> words as (label, piece positions): a piece starting with "▁" begins a word.
    ["▁the", "▁ca", "t", "▁", ","] -> [("the", [0]), ("cat", [1, 2]), (",", [3, 4])]."""
    words: list[tuple[str, list[int]]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith("▁") or not words:
            words.append(("", []))
        label, positions = words[-1]
        words[-1] = (label + piece.replace("▁", ""), positions + [i])
    return [(label.lower(), positions) for label, positions in words if label]


def ctc_alignments(enc: EncoderOutput, id_to_piece: Callable[[int], str]) -> list[Alignment]:
    """A speech batch's CTC word spans: over the acoustic frames (lengths enc.ctc_lengths) and over the CTC
    segments (one state per segment; an all-blank utterance has one state there and no words)."""
    segments, counts = ctc_segments(enc.ctc_logits, enc.ctc_lengths, CTC_BLANK_ID)
    labels = enc.ctc_logits.argmax(-1)
    frame_spans, segment_spans = [], []
    for b in range(len(counts)):
        seg = segments[b]
        frames = [torch.nonzero(seg == s).flatten().tolist() for s in range(int(counts[b]))]  # per segment
        words = piece_words([id_to_piece(int(labels[b, f[0]])) for f in frames])
        segment_spans.append(words)
        frame_spans.append([(label, [i for s in pos for i in frames[s]]) for label, pos in words])
    return [(enc.ctc_lengths, frame_spans), (torch.where(counts == 0, 1, counts), segment_spans)]


@torch.no_grad()
def speech_layers(lm: LoadedModel, records: Sequence[Record], data_dir: str | os.PathLike, batch_size: int = 8,
                  per_utterance: int = 16, seed: int = 0) -> Layers:
    """Every speech stage's states of the records' audio (through the model's front end), with CTC word
    units when the model has a CTC head and a source tokenizer."""
    collector = _Collector(per_utterance, seed)
    tok = lm.source_tokenizer
    ctc = lm.model.ctc_head is not None and tok is not None
    for start in range(0, len(records), batch_size):
        x, lengths = collate_sequences([frontend(lm, record_audio(r, data_dir))
                                        for r in records[start:start + batch_size]])
        states: States = {}
        enc = lm.model.encode_speech(x.to(lm.device), lengths.to(lm.device), record=states)  # Translator.states
        collector.add(states, ctc_alignments(enc, tok.id_to_piece) if ctc else [])
    return collector.layers("" if ctc else "the model has no CTC head (and source tokenizer) to cut speech "
                            "into words")


@torch.no_grad()
def own_text_layers(lm: LoadedModel, texts: Sequence[str], batch_size: int = 8, per_utterance: int = 16,
                    seed: int = 0) -> Layers:
    """Every text stage's states of the model's own text encoder (sources end with </s>, as in training),
    with word units of the SentencePiece pieces (</s> in no word)."""
    collector, tok = _Collector(per_utterance, seed), lm.source_tokenizer
    for start in range(0, len(texts), batch_size):
        ids = [tok.encode(t) for t in texts[start:start + batch_size]]
        x, lengths = collate_sequences([torch.tensor(i) for i in ids], tok.pad_id)
        states = lm.model.states(x.to(lm.device), lengths.to(lm.device), "text")
        spans = [piece_words([tok.id_to_piece(i) for i in seq[:-1]]) for seq in ids]
        collector.add(states, [(lengths, spans)])
    return collector.layers()


def _compact(x: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """x (B, S, H), keep (B, S) bool -> the kept positions moved to the front, x (B, S', H), lengths (B,)."""
    lengths = keep.sum(1)
    order = torch.argsort((~keep).int(), dim=1, stable=True)  # kept positions first, in order
    x = torch.gather(x, 1, order[..., None].expand_as(x))[:, :max(int(lengths.max()), 1)]
    return x, lengths


def _hf_spans(enc, keep: Tensor, texts: Sequence[str]) -> Spans:
    """Word spans over the kept (non-special) tokens of a fast tokenizer's batch `enc` (with offsets)."""
    spans = []
    for b, text in enumerate(texts):
        kept, word_ids = torch.nonzero(keep[b]).flatten().tolist(), enc.word_ids(b)
        words: dict[int, list[int]] = defaultdict(list)
        for p, token in enumerate(kept):
            if (w := word_ids[token]) is not None:
                words[w].append(p)
        offsets = enc["offset_mapping"][b]
        spans.append([(text[int(offsets[kept[pos[0]]][0]):int(offsets[kept[pos[-1]]][1])].lower(), pos)
                      for pos in words.values()])
    return spans


@torch.no_grad()
def hf_text_layers(model: torch.nn.Module, tokenizer, texts: Sequence[str], device: torch.device,
                   batch_size: int = 8, per_utterance: int = 16, seed: int = 0) -> Layers:
    """A Hugging Face text encoder's hidden states ("text.hf.embeddings", "text.hf.layer.<i>") of the
    texts' tokens, special tokens left out; word units from a fast tokenizer's word_ids."""
    collector, fast = _Collector(per_utterance, seed), bool(getattr(tokenizer, "is_fast", False))
    model = model.to(device).eval()
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start:start + batch_size])
        enc = tokenizer(chunk, padding=True, truncation=True, return_tensors="pt", return_special_tokens_mask=True,
                        return_offsets_mapping=fast)
        keep = enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()
        inputs = {k: v.to(device) for k, v in enc.items() if k not in ("special_tokens_mask", "offset_mapping")}
        hidden = model(**inputs, output_hidden_states=True).hidden_states
        names = ["text.hf.embeddings"] + [f"text.hf.layer.{i}" for i in range(len(hidden) - 1)]
        states = {n: _compact(h.cpu(), keep) for n, h in zip(names, hidden)}
        collector.add(states, [(keep.sum(1), _hf_spans(enc, keep, chunk))] if fast else [])
    return collector.layers("" if fast else "a slow tokenizer has no word_ids")


def word_pairs(speech: Sequence[Sequence[tuple[str, np.ndarray]]], text: Sequence[Sequence[tuple[str, np.ndarray]]]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per utterance, the speech words matched to the transcript's words of the same label, in order
    (difflib's longest matching blocks) -> their vectors, speech (P, D1) and text (P, D2)."""
    pairs = []
    for s_words, t_words in zip(speech, text):
        matcher = difflib.SequenceMatcher(None, [w for w, _ in s_words], [w for w, _ in t_words], autojunk=False)
        pairs += [(s_words[a + k][1], t_words[b + k][1]) for a, b, size in matcher.get_matching_blocks()
                  for k in range(size)]
    if not pairs:
        return np.zeros((0, 1)), np.zeros((0, 1))
    return np.stack([s for s, _ in pairs]), np.stack([t for _, t in pairs])
