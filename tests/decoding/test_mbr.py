"""MBR selection over the beam: the utility matrix is sacreBLEU's sentence scores, the chosen candidate is the
one with the highest mean utility (hand-built lists with a known answer), ties keep the beam's order, and the
decoding paths return the whole beam to choose from and the chosen `nbest` in MBR order."""

import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF

from speechmt.decoding import DecodeOptions, beam_search
from speechmt.decoding.mbr import mbr_order, utility_matrix
from speechmt.decoding.search import epsilon_samples, greedy_search, search
from speechmt.decoding.token_decoders import draw
from speechmt.decoding.translate import hypothesis_texts
from speechmt.models import build_model, preset

CANDIDATES = [
    "der Hund schläft im Garten",
    "der Hund schläft in dem Garten",
    "ein Hund schläft im Garten",
    "die Katze isst",
]


@pytest.mark.parametrize("utility, metric", [("chrf", CHRF()), ("bleu", BLEU(effective_order=True))])
def test_utility_matrix_is_sacrebleus_sentence_score_of_each_pair(utility, metric):
    u = utility_matrix(CANDIDATES, utility)
    assert u.shape == (4, 4)
    for i, hyp in enumerate(CANDIDATES):
        assert u[i, i] == 100.0
        for j, ref in enumerate(CANDIDATES):
            if i != j:
                assert u[i, j] == pytest.approx(metric.sentence_score(hyp, [ref]).score)


def test_the_candidate_closest_to_the_others_is_chosen():
    # the beam's best (the outlier) loses to the consensus; the first consensus sentence is nearest the rest
    beam = ["die Katze isst", *CANDIDATES[:3]]
    u = utility_matrix(beam, "chrf")
    expected = u.mean(axis=1)
    assert expected.argmax() == 1 and expected[0] == expected.min()
    ranked = mbr_order(beam, "chrf")
    assert ranked[0] == "der Hund schläft im Garten" and ranked[-1] == "die Katze isst"
    assert sorted(ranked) == sorted(beam)


def test_ties_and_single_candidates_keep_the_beams_order():
    assert mbr_order(["b", "a"], "chrf") == ["b", "a"]  # symmetric pair: equal expected utility
    assert mbr_order(["x y z"], "bleu") == ["x y z"]
    assert mbr_order(["same words", "same words", "other"], "chrf")[:2] == ["same words", "same words"]
    assert mbr_order([], "chrf") == []


def test_an_unknown_utility_is_refused():
    with pytest.raises(ValueError, match="mbr must be chrf, bleu or None"):
        DecodeOptions(mbr="ter")
    with pytest.raises(ValueError, match="MBR utility must be one of chrf, bleu"):
        utility_matrix(["a", "b"], "ter")


def test_search_returns_the_whole_beam_for_mbr():
    model = build_model(preset("tiny", tgt_vocab_size=12, tie_embeddings=False)).eval()
    torch.nn.init.normal_(model.decoder.output.weight, std=1.0)
    with torch.no_grad():
        enc = model.encode_speech(torch.randn(2, 30, 80), torch.tensor([30, 22]))
    plain = DecodeOptions(beam_size=4, nbest=1, max_len_b=6)
    mbr = DecodeOptions(beam_size=4, nbest=1, max_len_b=6, mbr="chrf")
    assert (plain.returned, mbr.returned) == (1, 4)
    full = search(model, enc, mbr)
    assert [len(n) for n in full] == [4, 4]
    assert full == [
        [h.tokens for h in hyps] for hyps in beam_search(model, enc, DecodeOptions(beam_size=4, nbest=4, max_len_b=6))
    ]
    assert [n[:1] for n in full] == search(model, enc, plain)


class _Words:
    """A tokenizer stand-in for hypothesis_texts: token id i is the i-th word."""

    WORDS = ["die", "Katze", "der", "Hund", "schläft", "im", "Garten", "ein"]

    def decode(self, ids):
        return " ".join(self.WORDS[i] for i in ids)


class _Loaded:
    tokenizer = _Words()


def test_hypothesis_texts_orders_by_mbr_and_keeps_nbest():
    beam = [[[0, 1]], [[2, 3, 4, 5, 6]], [[7, 3, 4, 5, 6]], [[2, 3, 4]]]  # one row: "die Katze" first
    rows = [[t[0] for t in beam]]
    plain = hypothesis_texts(_Loaded(), rows, DecodeOptions(beam_size=4, nbest=2))
    assert plain == [["die Katze", "der Hund schläft im Garten"]]
    chosen = hypothesis_texts(_Loaded(), rows, DecodeOptions(beam_size=4, nbest=2, mbr="chrf"))
    assert chosen == [
        mbr_order(
            ["die Katze", "der Hund schläft im Garten", "ein Hund schläft im Garten", "der Hund schläft"], "chrf"
        )[:2]
    ]
    assert chosen[0][0] == "der Hund schläft im Garten"


def test_references_other_than_the_candidates():
    refs = ["der Hund schläft", "der Hund schläft im Garten"]
    u = utility_matrix(CANDIDATES, "chrf", refs)
    assert u.shape == (4, 2) and u[0, 1] == 100.0
    assert u[3, 0] == pytest.approx(CHRF().sentence_score(CANDIDATES[3], [refs[0]]).score)
    assert mbr_order(CANDIDATES, "chrf", refs)[0] == "der Hund schläft im Garten"
    assert mbr_order(CANDIDATES, "chrf", ["die Katze isst"])[0] == "die Katze isst"


def _sharp_model():
    model = build_model(preset("tiny", tgt_vocab_size=12, tie_embeddings=False)).eval()
    torch.nn.init.normal_(model.decoder.output.weight, std=1.0)
    return model


def test_epsilon_samples_are_seeded_and_draw_only_tokens_above_epsilon():
    model = _sharp_model()
    with torch.no_grad():
        enc = model.encode_speech(torch.randn(2, 30, 80), torch.tensor([30, 22]))
    opts = DecodeOptions(beam_size=1, max_len_b=6, mbr="chrf", samples=8, seed=3)
    first, again = epsilon_samples(model, enc, opts), epsilon_samples(model, enc, opts)
    assert first == again and [len(s) for s in first] == [8, 8]
    assert len({tuple(t) for t in first[0]}) > 1  # a draw, not the greedy path eight times
    other = epsilon_samples(model, enc, DecodeOptions(beam_size=1, max_len_b=6, mbr="chrf", samples=8, seed=4))
    assert other != first
    # epsilon near 1 keeps only the most probable token: every sample is the greedy path
    greedy = greedy_search(model, enc, DecodeOptions(beam_size=1, max_len_b=6))
    sharp = epsilon_samples(model, enc, DecodeOptions(beam_size=1, max_len_b=6, mbr="chrf", samples=3, epsilon=0.999))
    assert sharp == [[g] * 3 for g in greedy]


def test_epsilon_draw_never_picks_a_token_below_epsilon():
    lprobs = torch.tensor([[0.6, 0.3, 0.05, 0.05], [0.01, 0.01, 0.01, 0.97]]).log().repeat(500, 1)
    tokens = draw(lprobs, torch.Generator().manual_seed(0), epsilon=0.1)
    first, second = tokens[0::2], tokens[1::2]
    assert set(first.tolist()) == {0, 1} and set(second.tolist()) == {3}
    assert 0.6 < (first == 0).float().mean() < 0.74  # renormalised: 0.6 / 0.9 = 0.67


def test_search_with_samples_returns_the_beam_then_the_samples():
    model = _sharp_model()
    with torch.no_grad():
        enc = model.encode_speech(torch.randn(2, 30, 80), torch.tensor([30, 22]))
    opts = DecodeOptions(beam_size=3, max_len_b=6, mbr="chrf", samples=4)
    found = search(model, enc, opts)
    beams = search(model, enc, DecodeOptions(beam_size=3, nbest=3, max_len_b=6))
    assert [f[:3] for f in found] == beams and [f[3:] for f in found] == epsilon_samples(model, enc, opts)
    with pytest.raises(ValueError, match="only with mbr"):
        DecodeOptions(samples=4)


def test_hypothesis_texts_with_samples_chooses_a_beam_hypothesis_by_the_samples():
    beam = [[0, 1], [2, 3, 4]]  # "die Katze", "der Hund schläft"
    samples = [[2, 3, 4, 5, 6], [7, 3, 4, 5, 6], [2, 3, 4, 5, 6]]
    opts = DecodeOptions(beam_size=2, nbest=1, mbr="chrf", samples=3)
    texts = [
        "die Katze",
        "der Hund schläft",
        "der Hund schläft im Garten",
        "ein Hund schläft im Garten",
        "der Hund schläft im Garten",
    ]
    assert hypothesis_texts(_Loaded(), [beam + samples], opts) == [mbr_order(texts[:2], "chrf", texts[2:])[:1]]
    assert hypothesis_texts(_Loaded(), [beam + samples], opts) == [["der Hund schläft"]]  # a sample never wins
