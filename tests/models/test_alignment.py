"""The speech model learns to align, not just to memorise: trained on random token sequences rendered as
noisy feature segments, it transcribes sequences it has never seen."""

import pytest
import torch

from speechmt.decoding.search import DecodeOptions, greedy_search
from speechmt.models.build import build_model
from speechmt.models.config import preset
from speechmt.tasks.losses import label_smoothed_nll_loss
from speechmt.tasks.objectives import shift_right

V, EOS = 20, 3  # ids 5..19 are the "words"


def _sequence(gen: torch.Generator) -> torch.Tensor:
    """3-7 word ids with no id repeated back to back (repeats would be indistinguishable segments)."""
    n = int(torch.randint(3, 8, (1,), generator=gen))
    seq = [int(torch.randint(5, V, (1,), generator=gen))]
    while len(seq) < n:
        t = int(torch.randint(5, V, (1,), generator=gen))
        if t != seq[-1]:
            seq.append(t)
    return torch.tensor(seq)


def _batch(protos: torch.Tensor, gen: torch.Generator, size: int):
    """Features (B, T, 80): each word is 8-15 frames of its prototype plus noise; targets end with EOS."""
    feats, targets = [], []
    for _ in range(size):
        seq = _sequence(gen)
        frames = torch.cat([protos[t].expand(int(torch.randint(8, 16, (1,), generator=gen)), 80) for t in seq])
        feats.append(frames + 0.5 * torch.randn(frames.shape, generator=gen))
        targets.append(torch.cat([seq, torch.tensor([EOS])]))
    x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    y = torch.nn.utils.rnn.pad_sequence(targets, batch_first=True)
    return x, torch.tensor([len(f) for f in feats]), y, torch.tensor([len(t) for t in targets])


@pytest.mark.slow
def test_model_transcribes_unseen_sequences():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn(V, 80, generator=gen) * 2
    model = build_model(preset("tiny", tgt_vocab_size=V, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    for _ in range(500):
        x, xl, y, yl = _batch(protos, gen, 16)
        loss, _ = label_smoothed_nll_loss(model.decode(shift_right(y, 2), model.encode_speech(x, xl)), y, 0.0, 0)
        (loss / yl.sum()).backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    x, xl, y, yl = _batch(protos, torch.Generator().manual_seed(123), 64)
    with torch.no_grad():
        hyps = greedy_search(model, model.encode_speech(x, xl), DecodeOptions(max_len_b=12))
    exact = sum(h == y[i, : yl[i] - 1].tolist() for i, h in enumerate(hyps)) / len(hyps)
    # chance is ~15^-5 per sequence; memorising is impossible (every sequence is new)
    assert exact >= 0.6, f"only {exact:.2f} of unseen sequences transcribed exactly"
