import math

import pytest
import torch
import torch.nn.functional as F

from speechmt.decoding import DecodeOptions, Hypothesis, beam_search, greedy_search
from speechmt.decoding.search import start_tokens
from speechmt.models import EncoderOutput, build_model, preset

V, TAG = 16, 5


def _random_model():
    """A seeded tiny untied model (12 tokens), whose outputs vary and, for some inputs, end early."""
    model = build_model(preset("tiny", tgt_vocab_size=12, tie_embeddings=False)).eval()
    torch.nn.init.normal_(model.decoder.output.weight, std=1.0)
    return model


def _encode(model, lengths):
    lengths = torch.tensor(lengths)
    with torch.no_grad():
        return model.encode_speech(torch.randn(len(lengths), int(lengths.max()), 80), lengths)


def _rescore(model, enc, i, tokens, options):
    """Sum log-prob of prefix-forced `tokens` + EOS for utterance i, by full teacher-forced recomputation."""
    start = [options.bos_id, *options.prefix]
    inputs = torch.tensor([start + tokens])
    with torch.no_grad():
        lprobs = model.decode(inputs, enc.select(torch.tensor([i]))).log_softmax(-1)[0, len(start) - 1 :]
    targets = tokens + [options.eos_id]
    return sum(lprobs[t, y].item() for t, y in enumerate(targets))


def test_options_lengths_and_validation():
    opts = DecodeOptions(max_len_a=0.5, max_len_b=3, min_len=4)
    assert opts.max_lengths(torch.tensor([0, 1, 2, 10])).tolist() == [4, 4, 4, 8]
    assert DecodeOptions(prefix=[5]).prefix == (5,)
    with pytest.raises(ValueError):
        DecodeOptions(beam_size=2, nbest=3)


def test_beam_one_equals_greedy():
    model = _random_model()
    enc = _encode(model, [40, 31, 12, 25, 8, 33])
    opts = DecodeOptions(beam_size=1, max_len_b=12, prefix=(TAG,))
    greedy = greedy_search(model, enc, opts)
    beam = beam_search(model, enc, opts)
    assert [h[0].tokens for h in beam] == greedy
    lengths = [len(g) for g in greedy]
    assert min(lengths) < 12 and max(lengths) == 12  # both stopping rules (EOS, max length) are exercised


def test_batched_beam_equals_each_alone():
    model = _random_model()
    enc = _encode(model, [40, 31, 12, 25, 8])
    opts = DecodeOptions(beam_size=4, nbest=4, max_len_a=0.5, max_len_b=6, prefix=(TAG,))
    batched = beam_search(model, enc, opts)
    for i in range(5):
        alone = beam_search(model, _alone(enc, i), opts)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(alone, batched[i]))


def _alone(enc, i):
    """Utterance i as a batch of one, without padding."""
    sel = enc.select(torch.tensor([i]))
    return EncoderOutput(sel.x[:, : int(sel.lengths)], sel.lengths)


def test_nbest_sorted_scored_and_within_limits():
    model = _random_model()
    enc = _encode(model, [40, 20, 9])
    opts = DecodeOptions(beam_size=5, nbest=5, max_len_a=0.5, max_len_b=2, min_len=2, len_penalty=1.0, prefix=(TAG,))
    results = beam_search(model, enc, opts)
    for i, hyps in enumerate(results):
        assert len(hyps) == 5 and all(isinstance(h, Hypothesis) for h in hyps)
        assert len({tuple(h.tokens) for h in hyps}) == 5
        norm = [h.normalized_score for h in hyps]
        assert norm == sorted(norm, reverse=True)
        max_len = math.floor(0.5 * int(enc.lengths[i]) + 2)
        for h in hyps:
            assert 2 <= len(h.tokens) <= max_len
            assert opts.eos_id not in h.tokens and opts.bos_id not in h.tokens and opts.pad_id not in h.tokens
            assert math.isclose(h.normalized_score, h.score / (len(h.tokens) + 1), rel_tol=1e-6)
            assert abs(h.score - _rescore(model, enc, i, h.tokens, opts)) < 1e-4


def test_greedy_scores_no_better_than_beam():
    model = _random_model()
    enc = _encode(model, [30, 22])
    opts = DecodeOptions(beam_size=8, max_len_b=8, len_penalty=0.0)
    best = beam_search(model, enc, opts)
    for i, tokens in enumerate(greedy_search(model, enc, opts)):
        assert best[i][0].score >= _rescore(model, enc, i, tokens, opts) - 1e-5


def test_tiny_model_learns_and_decodes_targets():
    torch.manual_seed(0)
    model = build_model(preset("tiny", tgt_vocab_size=V, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))
    lengths = torch.tensor([36, 28, 44, 20])
    feats = torch.randn(4, 44, 80)
    targets = [[TAG, 7, 8, 9, 3], [TAG, 10, 11, 3], [TAG, 12, 7, 13, 14, 15, 3], [TAG, 9, 9, 6, 3]]
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in targets], batch_first=True)  # pad 0
    inputs = torch.cat([torch.full((4, 1), 2), tgt[:, :-1]], dim=1)  # bos, then the target shifted right
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(200):
        logits = model.decode(inputs, model.encode_speech(feats, lengths))
        loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    with torch.no_grad():
        enc = model.encode_speech(feats, lengths)
    expected = [t[1:-1] for t in targets]
    assert greedy_search(model, enc, DecodeOptions(max_len_b=10, prefix=(TAG,))) == expected
    beams = beam_search(model, enc, DecodeOptions(beam_size=4, max_len_b=10, prefix=(TAG,)))
    assert [h[0].tokens for h in beams] == expected


def test_start_id_replaces_bos_as_the_first_input():
    cpu = torch.device("cpu")
    assert start_tokens(DecodeOptions(prefix=(TAG,)), 2, cpu).tolist() == [[2, TAG], [2, TAG]]
    assert start_tokens(DecodeOptions(prefix=(TAG,), start_id=3), 1, cpu).tolist() == [[3, TAG]]
