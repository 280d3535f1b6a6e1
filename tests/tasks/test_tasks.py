import pytest
import torch

from speechmt.data.dataset import Batch
from speechmt.models import build_model, preset
from speechmt.tasks import ObjectiveSettings, task_losses
from speechmt.tasks.losses import ctc_loss, strip_specials


@pytest.mark.parametrize("shrink", ["none", "conv", "ctc"])
def test_ctc_loss_is_on_the_acoustic_states_whatever_the_shrink(shrink):
    model = build_model(preset("tiny", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                               tgt_vocab_size=20, src_vocab_size=12, ctc=True, shrink=shrink,
                               shrink_channels=32)).eval()
    feats, lengths = torch.randn(2, 64, 80), torch.tensor([64, 36])
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    batch = Batch(ids=["a", "b"], feats=feats, feat_lengths=lengths, src=src, src_lengths=torch.tensor([5, 3]),
                  tgt=torch.randint(5, 20, (2, 4)), tgt_lengths=torch.tensor([4, 4]))
    with torch.no_grad():
        losses = task_losses(model, batch, "st", ["ce", "ctc"], ObjectiveSettings())
        acoustic = model.speech_encoder(feats, lengths)  # (2, 16, D) with lengths 16 and 9
        targets, target_lengths = strip_specials(src, batch.src_lengths, 5)
        expected = ctc_loss(model.ctc_head(acoustic.x), acoustic.lengths, targets, target_lengths, 4)
    assert acoustic.lengths.tolist() == [16, 9]
    assert torch.allclose(losses["ctc"][0], expected)
