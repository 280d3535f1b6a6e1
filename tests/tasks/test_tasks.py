import pytest
import torch

from speechmt.data.dataset import Batch
from speechmt.models import build_model, preset
from speechmt.tasks import ObjectiveSettings, task_losses
from speechmt.tasks.losses import ctc_loss, strip_specials
from speechmt.tasks.tasks import keep_parts


@pytest.mark.parametrize("shrink", ["none", "conv", "ctc"])
def test_ctc_loss_is_on_the_acoustic_states_whatever_the_shrink(shrink):
    model = build_model(
        preset(
            "tiny",
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            tgt_vocab_size=20,
            src_vocab_size=12,
            ctc=True,
            shrink={"kind": shrink, **({"channels": 32} if shrink == "conv" else {})},
        )
    ).eval()
    feats, lengths = torch.randn(2, 64, 80), torch.tensor([64, 36])
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    batch = Batch(
        ids=["a", "b"],
        feats=feats,
        feat_lengths=lengths,
        src=src,
        src_lengths=torch.tensor([5, 3]),
        tgt=torch.randint(5, 20, (2, 4)),
        tgt_lengths=torch.tensor([4, 4]),
    )
    with torch.no_grad():
        losses = task_losses(model, batch, "st", ["ce", "ctc"], ObjectiveSettings())
        acoustic = model.speech_encoder(feats, lengths)  # (2, 16, D) with lengths 16 and 9
        targets, target_lengths = strip_specials(src, batch.src_lengths, 5)
        expected = ctc_loss(model.ctc_head(acoustic.x), acoustic.lengths, targets, target_lengths, 4)
    assert acoustic.lengths.tolist() == [16, 9]
    assert torch.allclose(losses["ctc"][0], expected)


def test_keep_parts_leaves_out_the_parts_not_named():
    batch = Batch(
        ids=["a", "b"],
        feats=torch.zeros(2, 7, 3),
        feat_lengths=torch.tensor([7, 5]),
        src=torch.ones(2, 4, dtype=torch.long),
        src_lengths=torch.tensor([4, 3]),
        tgt=torch.ones(2, 6, dtype=torch.long),
        tgt_lengths=torch.tensor([6, 2]),
    )
    assert keep_parts(batch, []) is batch
    asr = keep_parts(batch, ["speech", "src"])
    assert (asr.tgt, asr.tgt_lengths) == (None, None) and asr.feats is batch.feats and asr.src is batch.src
    audio = keep_parts(batch, ["speech"])
    assert audio.src is audio.tgt is audio.src_lengths is None and audio.feat_lengths.tolist() == [7, 5]
    mono = keep_parts(batch, ["tgt"])
    assert mono.feats is mono.feat_lengths is mono.src is None and mono.tgt is batch.tgt and mono.ids == ["a", "b"]
