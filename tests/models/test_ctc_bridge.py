"""The CTC bridge into a language-model decoder (shrink.embed lm): a CTC head over the LM's own tokens, and
segments that become the mean of their frames' soft token embeddings. Checked against the text path: when
the CTC is certain of the transcript, the LM reads the speech exactly as it reads the transcript's text."""

import pytest
import torch

from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig, preset
from speechmt.models.ctc_head import FIRST_LABEL, CTCHead
from speechmt.models.encoders import EncoderOutput
from speechmt.models.shrink import CTCShrinkConfig, soft_embeddings
from tests.lm_helpers import CTC_TRANSCRIPTS, certain_ctc, spelled_logits


@pytest.fixture(scope="module")
def model(bridge):
    return bridge[0]


@pytest.fixture(scope="module")
def src(bridge):
    return bridge[1]


def test_the_head_maps_lm_ids_to_its_labels_and_back():
    head = CTCHead(8, FIRST_LABEL + 3, vocab=(40, 7, 300))
    ids = torch.tensor([[7, 300, 40, 12, 5000]])
    assert head.labels(ids).tolist() == [[6, 7, 5, 1, 1]]  # 12 and 5000 are outside: unk (1)
    assert head.lm_ids(torch.tensor([5, 6, 7])).tolist() == [40, 7, 300]
    plain = CTCHead(8, 20)
    assert torch.equal(plain.labels(ids[:, :3]), ids[:, :3]) and plain.weight.shape == (20, 8)
    with pytest.raises(ValueError, match="has 8 labels, not 9"):
        CTCHead(8, 9, vocab=(1, 2, 3))


def test_a_certain_ctc_makes_the_speech_path_equal_the_text_path(model, src):
    """The shrunk speech vectors are the LM's embeddings of the transcript's tokens, and the LM's logits
    over a target are the ones it gives the transcript's text (MT)."""
    ids = [src.encode(t) for t in CTC_TRANSCRIPTS]
    speech = model.shrink(certain_ctc(model, ids))
    assert speech.lengths.tolist() == [len(x) for x in ids]
    tokens = torch.nn.utils.rnn.pad_sequence([torch.tensor(x) for x in ids], batch_first=True)
    text = model.encode_text(tokens, torch.tensor([len(x) for x in ids]))
    for b, n in enumerate(speech.lengths.tolist()):
        torch.testing.assert_close(speech.x[b, :n], text.x[b, :n], atol=1e-4, rtol=1e-4)
    target = torch.tensor([[2, 5, 6, 7], [2, 6, 5, 4]])
    torch.testing.assert_close(model.decode(target, speech), model.decode(target, text), atol=1e-3, rtol=1e-3)


def test_soft_embeddings_mix_rows_by_the_posteriors_and_pass_gradients():
    table = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])  # labels 5, 6, 7
    logits = torch.full((1, 3, 8), -1e4)
    logits[0, 0, 4] = 0.0  # blank frame
    logits[0, 1, 5] = logits[0, 1, 6] = 1.0  # half label 5, half label 6 (blank far below)
    logits[0, 2, 7] = 0.0
    logits.requires_grad_(True)
    kept = torch.tensor([[False, True, True]])
    out = soft_embeddings(logits, kept, table, FIRST_LABEL)
    torch.testing.assert_close(out[0, 1], torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(out[0, 2], torch.tensor([3.0, 3.0]))
    torch.testing.assert_close(
        out[0, 0], table.mean(0)
    )  # a blank frame: the table's mean (read only by all-blank rows)
    out[0, 1, 0].backward()
    assert logits.grad[0, 1, 5] > 0 > logits.grad[0, 1, 6] and logits.grad[0, 0].abs().sum() == 0


def test_an_all_blank_utterance_reads_one_vector(model):
    size = model.config.src_vocab_size
    logits = spelled_logits([], size).expand(1, -1, -1)
    enc = EncoderOutput(torch.zeros(1, logits.size(1), model.config.d_model), torch.tensor([logits.size(1)]), logits)
    out = model.shrink(enc)
    assert out.lengths.tolist() == [1] and out.x.shape == (1, 1, model.config.d_model)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(shrink=dict(kind="conv", embed="lm")), "shrink.embed: not an option of shrink 'conv'"),
        (dict(shrink=dict(kind="ctc", embed="text")), "unknown shrink.embed 'text'"),
        (dict(ctc=True, src_vocab_size=10, shrink=dict(kind="ctc", embed="lm")), "shrink.embed lm needs decoder 'lm'"),
    ],
)
def test_config_errors_name_the_option(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**overrides)


def test_building_without_the_lm_token_list_is_one_clear_error(lm_dir):
    cfg = preset(
        "tiny",
        n_heads=2,
        ctc=True,
        src_vocab_size=10,
        shrink=CTCShrinkConfig(embed="lm"),
        decoder=dict(kind="lm", name_or_path=str(lm_dir)),
    )
    with pytest.raises(ValueError, match="needs a CTC head over the LM's tokens"):
        build_model(cfg, resolved={"decoder.vocab": [0, 1, 2, 3], "decoder.prompt": [2]})
