"""CTC forced alignment: the Viterbi path against a brute-force search, known spans, transcripts too long for
their frames, and transcript word units of speech on a tiny model with a CTC head."""

import dataclasses
import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from speechmt.cli import main
from speechmt.data.manifest import read_manifest, write_manifest
from speechmt.decoding.translate import load_model
from speechmt.evaluation.alignment import AlignmentError, ctc_forced_align, min_frames
from speechmt.evaluation.representations import FORCED, forced_alignment, label_pieces, own_text_layers, speech_layers
from speechmt.models.ctc_head import CTCHead
from speechmt.models.encoders.base import EncoderOutput
from tests.evaluation.test_geometry import tiny_checkpoint


def _collapse(tokens, blank: int) -> list[int]:
    """A CTC path's labels: repeats merged, then blanks dropped."""
    return [int(k) for k, _ in itertools.groupby(tokens) if k != blank]


def _brute_force(lp: np.ndarray, labels: list[int], blank: int) -> float:
    """The best log-probability over every path of T frames (V ** T of them) that collapses to `labels`."""
    frames = np.arange(len(lp))
    return max(
        lp[frames, list(path)].sum()
        for path in itertools.product(range(lp.shape[1]), repeat=len(lp))
        if _collapse(path, blank) == labels
    )


LABELS = [[1], [2, 2], [1, 3], [3, 1, 3], [1, 1, 2], [2, 3, 3], [3, 3, 3]]


@pytest.mark.parametrize("blank", [0, 2])
@pytest.mark.parametrize("seed", range(4))
def test_viterbi_score_equals_the_best_of_all_alignments(seed, blank):
    rng = np.random.default_rng(seed)
    for labels in LABELS:
        labels = [blank + 1 if k == blank else k for k in labels]  # the labels never name the blank
        lp = torch.log_softmax(torch.tensor(2.0 * rng.standard_normal((6, 4))), -1).numpy()
        a = ctc_forced_align(lp, labels, blank)
        assert a.score == pytest.approx(_brute_force(lp, labels, blank), abs=1e-12)
        assert a.score == pytest.approx(lp[np.arange(6), a.tokens].sum(), abs=1e-12)  # the path's own score
        assert _collapse(a.tokens, blank) == labels
        emitting = a.pieces >= 0
        assert a.tokens[emitting].tolist() == [labels[p] for p in a.pieces[emitting]]
        assert (a.tokens[~emitting] == blank).all() and len(a.spans) == len(labels)
        assert all(a.pieces[s:e].tolist() == [i] * (e - s) and e > s for i, (s, e) in enumerate(a.spans))
        assert all(e <= s for (_, e), (s, _) in zip(a.spans, a.spans[1:]))  # in order, never overlapping


def test_a_peaked_matrix_gives_known_spans():
    """Frame argmax b 2 2 b b 2 b 5 5 b (b the blank 0): the path of [2, 2, 5] is the argmax; at frame 2 the
    transcript [2, 5] beats the argmax label 4, not in it, with its second-best label."""
    peaks = [0, 2, 2, 0, 0, 2, 0, 5, 5, 0]
    lp = torch.log_softmax(5.0 * torch.nn.functional.one_hot(torch.tensor(peaks), 6).double(), -1)
    a = ctc_forced_align(lp, [2, 2, 5], 0)
    assert a.spans == [(1, 3), (5, 6), (7, 9)] and a.tokens.tolist() == peaks
    assert a.pieces.tolist() == [-1, 0, 0, -1, -1, 1, -1, 2, 2, -1]
    assert a.score == pytest.approx(10 * float(lp[0, 0]))  # every frame takes its peak
    logits = torch.zeros(6, 6)
    logits[[0, 1, 2, 3, 4, 5], [0, 2, 4, 0, 5, 0]] = 5.0
    logits[2, 2] = 3.0
    a = ctc_forced_align(torch.log_softmax(logits, -1), [2, 5], 0, "utt")
    assert a.spans == [(1, 3), (4, 5)] and a.tokens.tolist() == [0, 2, 2, 0, 5, 0]


def test_a_long_transcript_has_known_spans():
    """100 labels (201 states, past any small index type): label k peaks at frame 4k + 1, the blank elsewhere;
    a torch Tensor and its array give the same path."""
    labels = [5 + k % 3 for k in range(100)]
    peaks = torch.zeros(400, dtype=torch.long)
    peaks[torch.arange(100) * 4 + 1] = torch.tensor(labels)
    lp = torch.log_softmax(5.0 * torch.nn.functional.one_hot(peaks, 8).float(), -1)
    a, b = ctc_forced_align(lp, torch.tensor(labels), 0), ctc_forced_align(lp.numpy(), labels, 0)
    assert a.spans == [(4 * k + 1, 4 * k + 2) for k in range(100)] and a.tokens.tolist() == peaks.tolist()
    assert a.spans == b.spans and a.score == pytest.approx(b.score, abs=1e-9)
    assert a.score == pytest.approx(400 * float(lp[0, 0]), rel=1e-6)


def test_a_transcript_that_does_not_fit_raises_naming_the_utterance():
    lp = np.log(np.full((4, 3), 1 / 3))
    assert min_frames([1, 1, 1]) == 5 and min_frames([1, 2, 1]) == 3 and min_frames([]) == 0
    with pytest.raises(AlignmentError) as e:
        ctc_forced_align(lp, [1, 1, 1], 0, "ted_1_0")
    assert str(e.value) == (
        "ted_1_0: its transcript of 3 pieces needs at least 5 CTC frames (a blank between "
        "repeated pieces), the audio has 4"
    )
    assert isinstance(e.value, ValueError)
    assert ctc_forced_align(lp, [1, 2, 1, 2], 0).spans == [(0, 1), (1, 2), (2, 3), (3, 4)]  # just fits
    assert ctc_forced_align(lp, [], 0).tokens.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="a label is the CTC blank"):
        ctc_forced_align(lp, [1, 0], 0)


def test_forced_alignment_word_spans_of_a_batch():
    """Row 0 spells "▁the ▁ca t" (argmax b the the b ca t b, frame 7 padding); row 1 (6 frames) cannot hold
    four equal pieces, which need 7, and is skipped."""
    pieces = {5: "▁the", 6: "▁ca", 7: "t"}
    labels = torch.tensor([[4, 5, 5, 4, 6, 7, 4, 7], [4, 4, 4, 4, 4, 4, 0, 0]])  # 4: the blank
    enc = EncoderOutput(torch.zeros(2, 8, 3), torch.tensor([7, 6]), 10.0 * torch.nn.functional.one_hot(labels, 8))
    (lengths, spans, how), skipped = forced_alignment(enc, [[5, 6, 7], [5, 5, 5, 5]], pieces.__getitem__, ["u0", "u1"])
    assert lengths.tolist() == [7, 6] and how == FORCED and skipped == ["u1"]
    assert spans == [[("the", [1, 2]), ("cat", [4, 5])], []]


def test_a_head_over_lm_tokens_aligns_and_spells_by_its_own_labels():
    """A CTC head over LM ids (900, 30, 77) has labels 5, 6, 7: the transcript's LM ids are aligned as those labels
    (they would index past the logits as they are) and its argmax labels spell the LM ids' pieces."""
    head = CTCHead(3, 8, vocab=(900, 30, 77))
    pieces = {900: "▁the", 30: "▁ca", 77: "t"}
    labels = torch.tensor([[4, 5, 5, 4, 6, 7, 4, 7]])
    enc = EncoderOutput(torch.zeros(1, 8, 3), torch.tensor([7]), 10.0 * torch.nn.functional.one_hot(labels, 8))
    (_, spans, _), skipped = forced_alignment(enc, [[900, 30, 77]], pieces.__getitem__, ["u0"], head)
    assert skipped == [] and spans == [[("the", [1, 2]), ("cat", [4, 5])]]
    spell = label_pieces(head, SimpleNamespace(id_to_piece=pieces.__getitem__))
    assert [spell(i) for i in (5, 6, 7, 1)] == ["▁the", "▁ca", "t", ""]


def _words(layers, name):
    return [[w for w, _ in sentence] for sentence in layers.words[name]]


def test_every_transcript_word_has_speech_units_on_a_tiny_ctc_model(tiny_data, tmp_path):
    """A random tiny model with a CTC head and no shrinking: every speech layer has the transcript's words,
    one unit per word of the own text path's, and word retrieval pairs them one to one."""
    path = tiny_checkpoint(tiny_data, tmp_path / "m.safetensors", ctc=True, text_encoder={"layers": 2})
    lm = load_model(path)
    records = read_manifest(tiny_data / "train.jsonl")
    speech = speech_layers(lm, records, tiny_data, batch_size=4)
    text = own_text_layers(lm, [r.src_text for r in records], batch_size=4)
    expected = _words(text, "text.out")
    assert sum(map(len, expected)) == 36 and speech.skipped == [] and speech.note == ""
    assert list(speech.words) == speech.names and set(speech.units.values()) == {FORCED}
    for name in speech.names:
        assert _words(speech, name) == expected
        assert [len(s) for s in speech.words[name]] == [len(s) for s in text.words["text.out"]]
    out = tmp_path / "an"
    assert (
        main(
            [
                "research",
                "analyze",
                "--model",
                str(path),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads((out / "analysis.json").read_text())
    assert r["speech"]["words"]["n_words"] == r["text"]["words"]["n_words"] == 36
    assert r["speech"]["words"]["units"] == [FORCED] * 5 and r["speech"]["words"]["skipped"] == []
    w = r["word_retrieval"]
    assert (w["speech"], w["text"], w["units"], w["n"]) == ("speech.out", "text.out", FORCED, 36)
    assert (w["procrustes"]["n_fit"], w["procrustes"]["n_test"]) == (18, 18)


def test_utterances_whose_transcript_does_not_fit_are_skipped_and_counted(tiny_data, tmp_path, capsys):
    records = [dataclasses.replace(r, audio=str(tiny_data / r.audio)) for r in read_manifest(tiny_data / "train.jsonl")]
    own = records[1].src_text
    records[1] = dataclasses.replace(records[1], src_text=" ".join([own] * 20))
    data = tmp_path / "data"
    data.mkdir()
    write_manifest(data / "train.jsonl", records)
    path = tiny_checkpoint(tiny_data, tmp_path / "m.safetensors", ctc=True, text_encoder={"layers": 2})
    out = tmp_path / "an"
    assert (
        main(["research", "analyze", "--model", str(path), "--data", str(data), "--split", "train", "--out", str(out)])
        == 0
    )
    r = json.loads((out / "analysis.json").read_text())
    words = r["speech"]["words"]
    assert words["skipped"] == [records[1].id] and words["units"] == [FORCED] * 5
    note = (
        f"1 of 6 utterances have no CTC forced alignment word units: their transcript needs more CTC frames "
        f"than the audio has ({records[1].id})"
    )
    assert words["note"] == note and f"speech words: {note}." in (out / "summary.md").read_text()
    assert f"speech words: {note}\n" in capsys.readouterr().out
    assert words["n_words"] == 36 - len(own.split())  # the other 5 utterances' words
    assert r["word_retrieval"]["n"] == words["n_words"]
