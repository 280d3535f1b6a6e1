"""A model's states of a split's utterances, layer by layer, for `speechmt research analyze` (speechmt.evaluation.
analyze): the speech path (every stage Translator.states names, from the audio through the model's own front
end) and the text path (the model's own text encoder, or an external Hugging Face text encoder's hidden
states, its special tokens left out). Per layer: mean-pooled utterance vectors, a few single states of each
utterance (anisotropy), and word units where the layer's positions can be grouped into words.

Word units, the mean of a word's states:
- text: a SentencePiece piece starting with "▁" begins a word; a Hugging Face tokenizer's word_ids group its
  tokens (fast tokenizers only).
- speech, for a model with a CTC head (and source tokenizer), at the acoustic frame rate: the transcript's
  words, from a CTC forced alignment (speechmt.evaluation.alignment) of its pieces (the same pieces as the
  model's own text path reads, eos left out) through the CTC log-probabilities. A word's frames run from the
  first frame of its first piece to the last of its last piece (blank frames inside the word included), so
  every transcript word gets a unit, with the label of the text's word: `word_pairs` pairs speech word i with
  transcript word i. An utterance whose transcript needs more frames than it has (a frame per piece and a
  blank between repeated pieces) gets no word units; `Layers.skipped` lists it and `Layers.note` counts them.
- speech, in a layer with one state per CTC segment (the ctc shrink's output, and semantic layers that keep
  its length): the CTC argmax segments (runs of one non-blank argmax label, as the shrink merges them), grouped
  into words by their labels' pieces, as before. The forced alignment gives them no clean mapping (an argmax
  segment may straddle two transcript words, or a word have no segment), so these are the words the argmax
  spells; `word_pairs` matches them to the transcript's words of the same label.
- speech, for a whisper_asr encoder (one state per token of Whisper's own transcript): the transcript's words, a
  byte-level piece starting with a space beginning a word, over the layers of one state per token (Whisper's
  decoder states, the prompt's last state first, so that position k holds the state that predicted token k; the
  projection; what the decoder reads); `word_pairs` matches them to the gold transcript's
  words of the same label (Whisper's misheard words find none).
Labels are lower-cased.
"""

from __future__ import annotations

import difflib
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import Record, record_audio
from speechmt.decoding.translate import LoadedModel
from speechmt.evaluation.alignment import AlignmentError, ctc_forced_align
from speechmt.evaluation.geometry import mean_pool
from speechmt.models.ctc_head import CTC_BLANK_ID, FIRST_LABEL, CTCHead
from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.shrink import ctc_segments
from speechmt.progress import batch_starts

States = dict[str, tuple[Tensor, Tensor]]  # {layer name: (x (B, T, D), lengths (B,))}, as Translator.states
Spans = list[list[tuple[str, list[int]]]]  # per utterance: (word label, the positions of its states)
Alignment = tuple[Tensor, Spans, str]  # the lengths (B,) of the layers the spans index, the spans, how cut
FORCED, ARGMAX = "CTC forced alignment", "CTC argmax segments"  # how speech word units are cut
TRANSCRIPT = "Whisper's transcript"


@dataclass
class Layers:
    """One path's states of N utterances, per layer in the model's order: `pooled` (N, D) mean-pooled
    utterance vectors; `sample` ((M, D) single states, (M,) the utterance of each), a few per utterance;
    `words` per utterance its (word, vector (D,)) units, for the layers whose positions the word spans index
    in every batch, and `units` how they were cut; `note` says why a path has no word units, or which
    utterances have none (their ids in `skipped`)."""

    names: list[str]
    pooled: dict[str, np.ndarray]
    sample: dict[str, tuple[np.ndarray, np.ndarray]]
    words: dict[str, list[list[tuple[str, np.ndarray]]]]
    note: str = ""
    units: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


class _Collector:
    """Accumulates batches of named states into a Layers."""

    def __init__(self, per_utterance: int, seed: int):
        self.names: list[str] = []
        self.pooled, self.sample, self.words = defaultdict(list), defaultdict(list), defaultdict(list)
        self.units: dict[str, str] = {}
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
            matching = [(s, h) for ref, s, h in alignments if torch.equal(ref.cpu(), lengths)]
            # the first that matches, of the kind of the layer's earlier batches
            spans, how = next(((s, h) for s, h in matching if h == self.units.get(name, h)), (None, ""))
            if spans is None:
                self.unaligned.add(name)
            else:
                self.units.setdefault(name, how)
                self.words[name] += [
                    [(label, x[b, pos].mean(0).numpy()) for label, pos in words] for b, words in enumerate(spans)
                ]
        self.n += len(lengths) if states else 0

    def _sample(self, name: str, x: Tensor, lengths: Tensor) -> None:
        for b, length in enumerate(lengths.tolist()):
            pick = self.rng.choice(length, size=min(self.per_utterance, length), replace=False)
            self.sample[name].append((x[b, np.sort(pick)].numpy(), np.full(len(pick), self.n + b)))

    def layers(self, note: str = "", skipped: Sequence[str] = ()) -> Layers:
        words = {n: self.words[n] for n in self.names if n in self.words and n not in self.unaligned}
        if not words and not note:
            note = "no layer's positions line up with the word units"
        sample = {
            n: (np.concatenate([s for s, _ in self.sample[n]]), np.concatenate([u for _, u in self.sample[n]]))
            for n in self.names
        }
        return Layers(
            list(self.names),
            {n: np.concatenate(self.pooled[n]) for n in self.names},
            sample,
            words,
            note,
            {n: self.units[n] for n in words},
            list(skipped),
        )


def transcript_words(pieces: Sequence[bytes]) -> list[tuple[str, list[int]]]:
    """Byte-level BPE pieces of one transcript (b" Gr", b"\xc3\xb6", ...) -> words as (label, piece positions): a
    piece starting with a space begins a word; labels are the words' text (their bytes decoded), lower-cased."""
    groups = _word_positions([piece.startswith(b" ") for piece in pieces])
    return [
        (text.lower(), g)
        for g in groups
        if (text := b"".join(pieces[i] for i in g).decode("utf-8", errors="replace").strip())
    ]


def _word_positions(begins: Sequence[bool]) -> list[list[int]]:
    """Positions grouped into words: a new word at each True (and at the first position)."""
    groups: list[list[int]] = []
    for i, begin in enumerate(begins):
        if begin or not groups:
            groups.append([])
        groups[-1].append(i)
    return groups


@torch.no_grad()
def transcript_states(
    model: torch.nn.Module, x: Tensor, lengths: Tensor, states: States, pieces: Sequence[bytes]
) -> Alignment:
    """A whisper_asr model's states of one batch (mels (B, T, n_mels), lengths (B,)) into `states`, as
    Translator.states names them ("speech.encoder.whisper.out", "speech.encoder.asr", "speech.encoder.projected",
    "speech.out"), from one search; returns the word spans of its transcripts (`pieces`: Whisper's text pieces'
    bytes by id) over the layers of one state per transcript token."""
    found: States = {}
    searched, searched_lengths, ids = model.speech_encoder.search(x, lengths, found)
    states["speech.encoder.whisper.out"] = found["whisper.out"]
    model.encode_speech(searched, searched_lengths, precomputed=True, record=states)
    spans = [transcript_words([pieces[i] for i in row]) for row in ids]
    return torch.tensor([len(row) for row in ids]), spans, TRANSCRIPT


def piece_words(pieces: Sequence[str]) -> list[tuple[str, list[int]]]:
    """SentencePiece pieces -> words as (label, piece positions): a piece starting with "▁" begins a word.
    ["▁the", "▁ca", "t", "▁", ","] -> [("the", [0]), ("cat", [1, 2]), (",", [3, 4])]."""
    groups = _word_positions([piece.startswith("▁") for piece in pieces])
    return [(label.lower(), g) for g in groups if (label := "".join(pieces[i] for i in g).replace("▁", ""))]


def ctc_alignments(enc: EncoderOutput, id_to_piece: Callable[[int], str]) -> list[Alignment]:
    """A speech batch's word spans of the CTC argmax: over the acoustic frames (lengths enc.ctc_lengths) and
    over the CTC segments (one state per segment; an all-blank utterance has one state there and no words)."""
    segments, counts = ctc_segments(enc.ctc_logits, enc.ctc_lengths, CTC_BLANK_ID)
    labels = enc.ctc_logits.argmax(-1)
    frame_spans, segment_spans = [], []
    for b in range(len(counts)):
        seg = segments[b]
        frames = [torch.nonzero(seg == s).flatten().tolist() for s in range(int(counts[b]))]  # per segment
        words = piece_words([id_to_piece(int(labels[b, f[0]])) for f in frames])
        segment_spans.append(words)
        frame_spans.append([(label, [i for s in pos for i in frames[s]]) for label, pos in words])
    return [(enc.ctc_lengths, frame_spans, ARGMAX), (torch.where(counts == 0, 1, counts), segment_spans, ARGMAX)]


def label_pieces(head: CTCHead, tok) -> Callable[[int], str]:
    """A CTC head's label -> its piece: the source tokenizer's id itself, or for a head over an LM's tokens the
    LM id of a text label ("" for its specials)."""
    if not head.vocab.numel():
        return tok.id_to_piece
    return lambda label: tok.id_to_piece(int(head.lm_ids(torch.tensor(label)))) if label >= FIRST_LABEL else ""


def forced_alignment(
    enc: EncoderOutput,
    transcripts: Sequence[Sequence[int]],
    id_to_piece: Callable[[int], str],
    names: Sequence[str],
    head: CTCHead | None = None,
) -> tuple[Alignment, list[str]]:
    """A speech batch's transcript word spans over the acoustic frames (lengths enc.ctc_lengths), from the CTC
    forced alignment of each transcript's piece ids (as the CTC `head`'s labels: an LM-token head has its own);
    (the alignment, the names of the utterances whose transcript does not fit in their frames: no words there)."""
    log_probs = enc.ctc_logits.detach().float().log_softmax(-1).cpu()
    spans, skipped = [], []
    for b, (ids, name) in enumerate(zip(transcripts, names)):
        try:
            labels = ids if head is None else head.labels(torch.tensor(ids, dtype=torch.long)).tolist()
            aligned = ctc_forced_align(log_probs[b, : int(enc.ctc_lengths[b])], labels, CTC_BLANK_ID, name)
        except AlignmentError:
            spans.append([])
            skipped.append(name)
            continue
        words = piece_words([id_to_piece(int(i)) for i in ids])
        spans.append(
            [(label, list(range(aligned.spans[pos[0]][0], aligned.spans[pos[-1]][1]))) for label, pos in words]
        )
    return (enc.ctc_lengths, spans, FORCED), skipped


@torch.no_grad()
def speech_layers(
    lm: LoadedModel,
    records: Sequence[Record],
    data_dir: str | os.PathLike,
    batch_size: int = 8,
    per_utterance: int = 16,
    seed: int = 0,
) -> Layers:
    """Every speech stage's states of the records' audio (through the model's front end), with word units
    when the model has a CTC head and a source tokenizer: the transcripts' words (CTC forced alignment) at the
    frame rate, the CTC argmax's words in layers of one state per CTC segment (the module docstring)."""
    collector, skipped = _Collector(per_utterance, seed), []
    tok, head = lm.source_tokenizer, lm.model.ctc_head
    ctc = head is not None and tok is not None
    pieces = None
    if not ctc and hasattr(lm.model.speech_encoder, "search"):  # whisper_asr: words of its own transcript
        from speechmt.models.hf_whisper import whisper_pieces

        pieces = whisper_pieces(lm.model.config.encoder.name_or_path)
    for start in batch_starts(len(records), batch_size, "analyze: speech path", "utt"):
        chunk = records[start : start + batch_size]
        x, lengths = collate_sequences([lm.frontend(record_audio(r, data_dir)) for r in chunk])
        states: States = {}
        if pieces is not None:
            collector.add(states, [transcript_states(lm.model, x.to(lm.device), lengths.to(lm.device), states, pieces)])
            continue
        enc = lm.model.encode_speech(x.to(lm.device), lengths.to(lm.device), record=states)  # Translator.states
        alignments = []
        if ctc:
            forced, unfit = forced_alignment(
                enc,
                [tok.encode(r.src_text, add_eos=False) for r in chunk],
                tok.id_to_piece,
                [r.id for r in chunk],
                head,
            )
            alignments, skipped = [forced, ctc_alignments(enc, label_pieces(head, tok))[1]], skipped + unfit
        collector.add(states, alignments)
    if pieces is not None:
        return collector.layers()
    if not ctc:
        return collector.layers("the model has no CTC head (and source tokenizer) to cut speech into words")
    note = (
        f"{len(skipped)} of {len(records)} utterances have no {FORCED} word units: their transcript needs "
        f"more CTC frames than the audio has ({', '.join(skipped[:3])}{', ...' if len(skipped) > 3 else ''})"
        if skipped
        else ""
    )
    return collector.layers(note, skipped)


@torch.no_grad()
def own_text_layers(
    lm: LoadedModel, texts: Sequence[str], batch_size: int = 8, per_utterance: int = 16, seed: int = 0
) -> Layers:
    """Every text stage's states of the model's own text encoder (sources end with </s>, as in training),
    with word units of the SentencePiece pieces (</s> in no word)."""
    collector, tok = _Collector(per_utterance, seed), lm.source_tokenizer
    for start in batch_starts(len(texts), batch_size, "analyze: text path", "utt"):
        ids = [tok.encode(t) for t in texts[start : start + batch_size]]
        x, lengths = collate_sequences([torch.tensor(i) for i in ids], tok.pad_id)
        states = lm.model.states(x.to(lm.device), lengths.to(lm.device), "text")
        spans = [piece_words([tok.id_to_piece(i) for i in seq[:-1]]) for seq in ids]
        collector.add(states, [(lengths, spans, "SentencePiece words")])
    return collector.layers()


def _compact(x: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """x (B, S, H), keep (B, S) bool -> the kept positions moved to the front, x (B, S', H), lengths (B,)."""
    lengths = keep.sum(1)
    order = torch.argsort((~keep).int(), dim=1, stable=True)  # kept positions first, in order
    x = torch.gather(x, 1, order[..., None].expand_as(x))[:, : max(int(lengths.max()), 1)]
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
        spans.append(
            [
                (text[int(offsets[kept[pos[0]]][0]) : int(offsets[kept[pos[-1]]][1])].lower(), pos)
                for pos in words.values()
            ]
        )
    return spans


@torch.no_grad()
def hf_text_layers(
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    device: torch.device,
    batch_size: int = 8,
    per_utterance: int = 16,
    seed: int = 0,
) -> Layers:
    """A Hugging Face text encoder's hidden states ("text.hf.embeddings", "text.hf.layer.<i>") of the
    texts' tokens, special tokens left out; word units from a fast tokenizer's word_ids."""
    collector, fast = _Collector(per_utterance, seed), bool(getattr(tokenizer, "is_fast", False))
    model = model.to(device).eval()
    for start in batch_starts(len(texts), batch_size, "analyze: text path", "utt"):
        chunk = list(texts[start : start + batch_size])
        enc = tokenizer(
            chunk,
            padding=True,
            truncation=True,
            return_tensors="pt",
            return_special_tokens_mask=True,
            return_offsets_mapping=fast,
        )
        keep = enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()
        inputs = {k: v.to(device) for k, v in enc.items() if k not in ("special_tokens_mask", "offset_mapping")}
        hidden = model(**inputs, output_hidden_states=True).hidden_states
        names = ["text.hf.embeddings"] + [f"text.hf.layer.{i}" for i in range(len(hidden) - 1)]
        states = {n: _compact(h.cpu(), keep) for n, h in zip(names, hidden)}
        collector.add(states, [(keep.sum(1), _hf_spans(enc, keep, chunk), "tokenizer word_ids")] if fast else [])
    return collector.layers("" if fast else "a slow tokenizer has no word_ids")


def word_pairs(
    speech: Sequence[Sequence[tuple[str, np.ndarray]]], text: Sequence[Sequence[tuple[str, np.ndarray]]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per utterance, the speech words matched to the transcript's words of the same label, in order
    -> their vectors, speech (P, D1) and text (P, D2). Word i with word i where the two label sequences are
    the same (forced-alignment words against the model's own text path), else difflib's longest matching
    blocks (the CTC argmax's words, or another tokenizer's)."""
    pairs = []
    for s_words, t_words in zip(speech, text):
        s_labels, t_labels = [w for w, _ in s_words], [w for w, _ in t_words]
        if s_labels == t_labels:
            pairs += [(s, t) for (_, s), (_, t) in zip(s_words, t_words)]
            continue
        matcher = difflib.SequenceMatcher(None, s_labels, t_labels, autojunk=False)
        pairs += [
            (s_words[a + k][1], t_words[b + k][1]) for a, b, size in matcher.get_matching_blocks() for k in range(size)
        ]
    if not pairs:
        return np.zeros((0, 1)), np.zeros((0, 1))
    return np.stack([s for s, _ in pairs]), np.stack([t for _, t in pairs])
