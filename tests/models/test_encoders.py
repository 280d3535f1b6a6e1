import pytest
import torch

from speechmt.models import EncoderOutput, build_model, count_parameters, preset


def _model(**overrides):
    return build_model(preset("tiny", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, **overrides)).eval()


@pytest.mark.parametrize("kind", ["conv1d", "conv2d"])
def test_speech_encoder_shapes_and_padding_invariance(kind):
    model = _model(subsampler=kind, src_vocab_size=30, ctc=True)
    lengths = torch.tensor([41, 25, 8])
    feats = torch.randn(3, 41, 80) * 3  # padded frames hold random values on purpose
    with torch.no_grad():
        enc = model.encode_speech(feats, lengths)
        assert isinstance(enc, EncoderOutput)
        assert enc.x.shape == (3, 11, 64) and enc.lengths.tolist() == [11, 7, 2]
        assert enc.lengths.dtype == torch.int64
        assert enc.ctc_logits.shape == (3, 11, 30)
        assert torch.all(enc.x[1, 7:] == 0) and torch.all(enc.x[2, 2:] == 0)
        for i, n in enumerate(lengths.tolist()):
            alone = model.encode_speech(feats[i : i + 1, :n], lengths[i : i + 1])
            m = int(alone.lengths)
            assert m == enc.lengths[i]
            assert (alone.x[0] - enc.x[i, :m]).abs().max() < 1e-5
            assert (alone.ctc_logits[0] - enc.ctc_logits[i, :m]).abs().max() < 1e-5


def test_no_ctc_head_by_default():
    model = _model()
    enc = model.encode_speech(torch.randn(1, 20, 80), torch.tensor([20]))
    assert enc.ctc_logits is None and model.ctc_head is None


def test_encoder_output_select():
    enc = EncoderOutput(torch.arange(6.0).view(3, 2, 1), torch.tensor([2, 1, 2]))
    sel = enc.select(torch.tensor([2, 2, 0]))
    assert sel.lengths.tolist() == [2, 2, 2] and sel.x[:, 0, 0].tolist() == [4.0, 4.0, 0.0]
    assert sel.ctc_logits is None


@pytest.mark.parametrize("shared", [False, True])
def test_text_encoder(shared):
    model = _model(src_vocab_size=30, text_encoder_layers=2, share_text_encoder=shared)
    tokens = torch.randint(5, 30, (3, 9))
    lengths = torch.tensor([9, 4, 1])
    tokens[1, 4:] = 0
    tokens[2, 1:] = 0
    with torch.no_grad():
        enc = model.encode_text(tokens, lengths)
        assert enc.x.shape == (3, 9, 64) and torch.equal(enc.lengths, lengths) and enc.ctc_logits is None
        assert torch.all(enc.x[1, 4:] == 0)
        for i, n in enumerate(lengths.tolist()):
            alone = model.encode_text(tokens[i : i + 1, :n], lengths[i : i + 1])
            assert (alone.x[0] - enc.x[i, :n]).abs().max() < 1e-5
    assert (model.text_encoder.encoder is model.speech_encoder.encoder) == shared


def test_shared_text_encoder_adds_only_embeddings():
    base = count_parameters(_model(src_vocab_size=30))
    shared = count_parameters(_model(src_vocab_size=30, text_encoder_layers=2, share_text_encoder=True))
    separate = count_parameters(_model(src_vocab_size=30, text_encoder_layers=2))
    assert shared - base == 30 * 64
    layer = 4 * (64 * 64 + 64) + (64 * 128 + 128 + 128 * 64 + 64) + 4 * 64
    assert separate - shared == 2 * layer + 2 * 64


def test_encode_text_without_text_encoder_raises():
    model = _model()
    with pytest.raises(ValueError, match="no text encoder"):
        model.encode_text(torch.ones(1, 3, dtype=torch.long), torch.tensor([3]))
