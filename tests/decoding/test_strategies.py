"""Decoding's extension points: logit filters, token decoders (greedy, beam, sampling) and rankers (length penalty,
MBR), each chosen by name in DecodeOptions; greedy and beam give the tokens the search gave before it was split
into these parts; and a toy strategy registered here decodes a trained tiny model through translate."""

from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch

from speechmt.decoding.base import Hypothesis
from speechmt.decoding.filters import MaxLength, MinLength, SuppressAtBegin, SuppressTokens
from speechmt.decoding.mbr import MBRRanker, mbr_order
from speechmt.decoding.rankers import LengthPenaltyRanker
from speechmt.decoding.search import (
    LOGIT_FILTERS,
    RANKERS,
    TOKEN_DECODERS,
    DecodeOptions,
    beam_search,
    constrain,
    decode,
    greedy_search,
    max_lengths,
    search,
    start_tokens,
)
from speechmt.decoding.token_decoders import GreedyDecoder, draw, kept
from speechmt.decoding.translate import encode_audio, hypothesis_texts, load_model, translate
from speechmt.models import build_model, preset
from tests.conftest import ASSETS
from tests.helpers import two_update_st

TAG, INF = 5, float("-inf")
WORDS = ["pad", "null", "bos", "eos", "Katze", "tag", "der", "Hund", "schläft", "im", "Garten", "ein"]


def _model():
    """A seeded tiny untied model (12 tokens) whose outputs vary and, for some inputs, end early."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", tgt_vocab_size=12, tie_embeddings=False)).eval()
    torch.nn.init.normal_(model.decoder.output.weight, std=1.0)
    return model


def _encode(model):
    with torch.no_grad():
        return model.encode_speech(torch.randn(4, 40, 80), torch.tensor([40, 31, 12, 25]))


def _words(ids: list[int]) -> str:
    return " ".join(WORDS[i] for i in ids)


# recorded with the search as it was before the split (speechmt/decoding/search.py of commit c0fde1f)
GREEDY = [[9, 11, 10, 7, 7, 7, 7, 7], [9, 11, 7, 7, 7, 7, 7, 7], [11, 11], [9, 11]]
BEAM = [
    [([9, 11], -2.0113), ([9, 9, 9, 6, 6, 6, 6, 11], -6.7338)],
    [([9, 11], -2.2421), ([9, 11, 11, 7, 7, 7, 7, 7], -16.8302)],
    [([11, 11], -1.892), ([11], -2.388)],
    [([9, 9, 6, 6, 6, 6, 6, 11], -4.598), ([9, 11], -1.775)],
]


def test_greedy_and_beam_give_the_tokens_recorded_before_the_split():
    model = _model()
    enc = _encode(model)
    assert greedy_search(model, enc, DecodeOptions(beam_size=1, max_len_b=8, prefix=(TAG,))) == GREEDY
    assert search(model, enc, DecodeOptions(beam_size=1, max_len_b=8, prefix=(TAG,))) == [[g] for g in GREEDY]
    beams = beam_search(model, enc, DecodeOptions(beam_size=4, nbest=2, max_len_b=8, prefix=(TAG,)))
    assert [[(h.tokens, round(h.score, 4)) for h in hyps] for hyps in beams] == BEAM
    assert all(h.normalized_score == pytest.approx(h.score / (len(h.tokens) + 1)) for hyps in beams for h in hyps)


def test_the_strategy_is_named_or_follows_the_beam_size():
    assert (DecodeOptions(beam_size=1).token_decoder, DecodeOptions(beam_size=5).token_decoder) == ("greedy", "beam")
    assert DecodeOptions(beam_size=5, strategy="sample").token_decoder == "sample"
    with pytest.raises(ValueError, match="^strategy: unknown 'nucleus'; expected one of greedy, beam, sample$"):
        DecodeOptions(strategy="nucleus")
    with pytest.raises(ValueError, match="^filters: unknown 'no_repeat'; expected one of suppress_tokens"):
        DecodeOptions(filters=["no_repeat"])
    with pytest.raises(ValueError, match="^ranker: unknown 'shortest'; expected one of length_penalty, mbr$"):
        DecodeOptions(ranker="shortest")
    with pytest.raises(ValueError, match="need temperature >= 0, top_k >= 0 and 0 < top_p <= 1"):
        DecodeOptions(top_p=0.0)
    assert DecodeOptions(filters=[]).filters == () and DecodeOptions(suppress_begin=[4]).suppress_begin == (4,)


def test_filters_ban_ids_the_first_token_eos_before_min_len_and_all_but_eos_at_max_len():
    lprobs, max_lens = torch.zeros(2, 6), torch.tensor([1, 3])
    t0, t1 = torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)
    assert SuppressTokens([1, 4]).apply(lprobs.clone(), t0, max_lens)[0].tolist() == [0, INF, 0, 0, INF, 0]
    assert SuppressAtBegin([2]).apply(lprobs.clone(), t0, max_lens)[1].tolist() == [0, 0, INF, 0, 0, 0]
    assert SuppressAtBegin([2]).apply(lprobs.clone(), t1, max_lens).eq(0).all()
    assert MinLength(3, 2).apply(lprobs.clone(), t1, max_lens)[:, 3].tolist() == [INF, INF]
    assert MinLength(3, 1).apply(lprobs.clone(), t1, max_lens).eq(0).all()
    forced = MaxLength(3).apply(torch.full((2, 6), -2.0), t1, max_lens)
    assert forced.tolist() == [[INF, INF, INF, -2.0, INF, INF], [-2.0] * 6]


def test_suppress_begin_bans_the_first_token_only():
    model = _model()
    enc = _encode(model)
    opts = DecodeOptions(beam_size=1, max_len_b=8, prefix=(TAG,), suppress_begin=(9,))
    first = constrain(
        model.decode(start_tokens(opts, 4, enc.x.device), enc)[:, -1].log_softmax(-1),
        0,
        max_lengths(model, enc, opts),
        opts,
    )
    assert first[:, 9].eq(INF).all()
    found = greedy_search(model, enc, opts)
    assert [f[0] for f in found] == first.argmax(-1).tolist() == [11, 11, 11, 11]
    assert found[2] == GREEDY[2]  # greedy began it with 11, not 9: nothing changes


def test_sampling_is_seeded_and_at_temperature_zero_or_top_k_one_greedy():
    model = _model()
    enc = _encode(model)
    sample = DecodeOptions(beam_size=1, max_len_b=8, prefix=(TAG,), strategy="sample", seed=7)
    drawn = search(model, enc, sample)
    assert drawn == search(model, enc, sample) and drawn != [[g] for g in GREEDY]
    assert search(model, enc, replace(sample, seed=8)) != drawn
    mine = decode(model, enc, sample, generator=torch.Generator().manual_seed(7))
    assert [[h.tokens for h in hyps] for hyps in mine] == drawn  # the caller's generator, seeded as options.seed
    for cold in ({"temperature": 0.0}, {"temperature": 1e-3}, {"top_k": 1}, {"top_p": 1e-3}):
        assert greedy_search(model, enc, sample) == [t[0] for t in search(model, enc, replace(sample, **cold))]


def test_draw_follows_the_temperature_and_keeps_the_truncated_set():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert kept(probs) is None
    assert kept(probs, top_k=2)[0].tolist() == [True, True, False, False]
    assert kept(probs, top_p=0.8)[0].tolist() == [True, True, False, False]
    assert kept(probs, top_p=0.81)[0].tolist() == [True, True, True, False]
    assert kept(probs, epsilon=0.1)[0].tolist() == [True, True, True, False]
    assert kept(probs, top_k=3, epsilon=0.2)[0].tolist() == [True, True, False, False]
    assert kept(probs, epsilon=0.9)[0].tolist() == [True, False, False, False]  # the most probable stays
    lprobs = torch.tensor([[0.64, 0.36]]).log().repeat(4000, 1)
    tokens = draw(lprobs, torch.Generator().manual_seed(0), temperature=2.0)
    assert (tokens == 0).float().mean() == pytest.approx(0.8 / 1.4, abs=0.03)  # sqrt(0.64) : sqrt(0.36)


def test_length_penalty_ranker_orders_by_normalised_score_and_keeps_ties_in_order():
    hyps = [Hypothesis([1], -2.0), Hypothesis([1, 2, 3], -3.0), Hypothesis([], -1.5), Hypothesis([4], -2.0)]
    by_length = LengthPenaltyRanker(1.0).rank(hyps, [])
    assert [h.tokens for h in by_length] == [[1, 2, 3], [1], [4], []]
    assert [h.normalized_score for h in by_length] == [-0.75, -1.0, -1.0, -1.5]
    assert [h.tokens for h in LengthPenaltyRanker(0.0).rank(hyps, [])] == [[], [1], [4], [1, 2, 3]]


def test_mbr_ranker_reads_texts_and_decode_chooses_as_the_translate_path():
    hyps = [Hypothesis(t, 0.0) for t in ([4], [6, 7, 8, 9, 10], [11, 7, 8, 9, 10], [6, 7, 8])]
    ranked = MBRRanker("chrf", _words).rank(hyps, [])
    assert [_words(h.tokens) for h in ranked] == mbr_order([_words(h.tokens) for h in hyps], "chrf")
    assert _words(ranked[0].tokens) == "der Hund schläft im Garten"
    model = _model()
    enc = _encode(model)
    opts = DecodeOptions(beam_size=4, nbest=2, max_len_b=6, prefix=(TAG,), mbr="chrf", samples=3)
    chosen = [[_words(h.tokens) for h in hyps] for hyps in decode(model, enc, opts, detokenize=_words)]

    class Loaded:
        class tokenizer:
            decode = staticmethod(_words)

    assert chosen == hypothesis_texts(Loaded(), search(model, enc, opts), opts)
    assert [len(c) for c in chosen] == [2, 2, 2, 2]


class _NoRepeat:
    """A toy filter: never the token just generated."""

    def apply(self, lprobs, tokens, max_lens):
        if tokens.size(1):
            lprobs.scatter_(1, tokens[:, -1:], INF)
        return lprobs


def test_a_filter_and_a_ranker_registered_here_are_chosen_by_name(monkeypatch):
    monkeypatch.setitem(LOGIT_FILTERS, "no_repeat", lambda options: _NoRepeat())
    monkeypatch.setitem(RANKERS, "shortest", lambda options, detokenize: _Shortest())
    model = _model()
    enc = _encode(model)
    found = greedy_search(model, enc, DecodeOptions(beam_size=1, max_len_b=8, prefix=(TAG,), filters=["no_repeat"]))
    assert found == [[9, 11, 10, 7, 6, 9, 6, 9], [9, 11, 7, 8, 11, 7, 1, 7], [11, 10, 7, 6], [9, 11]]
    for f, g in zip(found, GREEDY):
        assert all(a != b for a, b in zip(f, f[1:]))
        first_repeat = next((i for i in range(1, len(g)) if g[i] == g[i - 1]), len(g))
        assert f[:first_repeat] == g[:first_repeat]  # greedy's tokens until greedy repeats one
    opts = DecodeOptions(beam_size=4, nbest=4, max_len_b=8, prefix=(TAG,))
    plain = beam_search(model, enc, opts)
    shortest = beam_search(model, enc, replace(opts, ranker="shortest"))
    for a, b in zip(plain, shortest):
        assert sorted(map(tuple, (h.tokens for h in a))) == sorted(map(tuple, (h.tokens for h in b)))
        assert [len(h.tokens) for h in b] == sorted(len(h.tokens) for h in b)


class _Shortest:
    """A toy ranker: fewest tokens first."""

    def rank(self, candidates, references):
        return sorted(candidates, key=lambda h: len(h.tokens))


class SecondBest(GreedyDecoder):
    """A toy strategy: each row's second most probable token (the most probable where only it is allowed)."""

    def choose(self, lprobs):
        return _second_best(lprobs)


def _second_best(lprobs: torch.Tensor) -> torch.Tensor:
    """(R, V) -> (R,) the second most probable token of each row, or the first where the second is banned."""
    top = lprobs.topk(2, dim=-1)
    return torch.where(top.values[:, 1].isfinite(), top.indices[:, 1], top.indices[:, 0])


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory) -> str:
    """A tiny ST model after 2 updates."""
    return two_update_st(tiny_data, tmp_path_factory.mktemp("strategy_exp"))


def test_a_strategy_registered_here_translates_through_translate(checkpoint, monkeypatch):
    monkeypatch.setitem(TOKEN_DECODERS, "second_best", lambda options, generator: SecondBest(options.eos_id))
    lm = load_model(checkpoint)
    wave, rate = sf.read(ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav", dtype="float32")
    assert rate == 16000
    (toy,) = translate(lm, [wave], beam=1, max_len_b=8, strategy="second_best")
    (plain,) = translate(lm, [wave], beam=1, max_len_b=8)
    expected = _second_best_by_hand(lm, wave, lm.decode_options(1, max_len_b=8))
    assert toy.text == lm.tokenizer.decode(expected) and toy.text != plain.text and len(expected) == 8


def _second_best_by_hand(lm, wave: np.ndarray, options: DecodeOptions) -> list[int]:
    """The toy strategy's tokens by full recomputation at every step, without the decoder cache or the search."""
    enc = encode_audio(lm, [wave])
    start, max_len = start_tokens(options, 1, enc.x.device), max_lengths(lm.model, enc, options)
    tokens: list[int] = []
    for step in range(int(max_len) + 1):
        inputs = torch.cat([start, torch.tensor([tokens], dtype=torch.long)], dim=1)
        with torch.no_grad():
            lprobs = lm.model.decode(inputs, enc)[:, -1].float().log_softmax(-1)
        token = int(_second_best(constrain(lprobs, step, max_len, options))[0])
        if token == options.eos_id:
            break
        tokens.append(token)
    return tokens
