"""Translator.states: every stage's named (x, lengths), and the semantic slot."""

import pytest
import torch
from torch import nn

from speechmt.models import build_model, preset
from speechmt.models.config import ModelConfig
from speechmt.models.encoders.base import note
from speechmt.models.semantic import SEMANTICS
from speechmt.models.translator import Translator
from tests.helpers import tiny_wav2vec2_fields
from tests.whisper_helpers import tiny_whisper_dir

FEATS, LENGTHS = torch.randn(2, 64, 80), torch.tensor([64, 36])
TOKENS, TOKEN_LENGTHS = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]]), torch.tensor([5, 3])


def _conv_model(text_encoder=None, **overrides) -> Translator:
    fields = dict(
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        tgt_vocab_size=20,
        src_vocab_size=12,
        ctc=True,
        shrink="ctc",
        text_encoder=text_encoder or {"layers": 2},
    )
    return build_model(preset("tiny", **{**fields, **overrides})).eval()


def test_speech_and_text_states_in_order_with_their_lengths():
    model = _conv_model()
    with torch.no_grad():
        speech = model.states(FEATS, LENGTHS)
        text = model.states(TOKENS, TOKEN_LENGTHS, "text")
        enc, tenc = model.encode_speech(FEATS, LENGTHS), model.encode_text(TOKENS, TOKEN_LENGTHS)
        acoustic = model.speech_encoder(FEATS, LENGTHS)
    assert list(speech) == [
        "speech.encoder.subsampled",
        "speech.encoder.layer.0",
        "speech.encoder.layer.1",
        "speech.encoder.out",
        "speech.shrink",
        "speech.out",
    ]
    assert list(text) == [
        "text.encoder.embedded",
        "text.encoder.layer.0",
        "text.encoder.layer.1",
        "text.encoder.out",
        "text.out",
    ]
    for name in ("speech.encoder.subsampled", "speech.encoder.layer.1", "speech.encoder.out"):
        x, lengths = speech[name]
        assert x.shape == (2, 16, 64) and lengths.tolist() == [16, 9]  # 4x subsampling
    assert torch.equal(speech["speech.encoder.out"][0], acoustic.x)
    shrunk, shrunk_lengths = speech["speech.shrink"]
    assert (
        torch.equal(shrunk, enc.x)
        and torch.equal(shrunk_lengths, enc.lengths)
        and torch.equal(speech["speech.out"][0], enc.x)
    )
    assert text["text.encoder.embedded"][0].shape == (2, 5, 64) and text["text.out"][1].tolist() == [5, 3]
    assert torch.equal(text["text.out"][0], tenc.x)
    with pytest.raises(ValueError, match="unknown modality 'image'"):
        model.states(FEATS, LENGTHS, "image")


def test_intermediate_layers_are_the_residual_stream_of_the_stack():
    model = _conv_model(shrink="none")
    with torch.no_grad():
        states = model.states(FEATS, LENGTHS)
        x, lengths = states["speech.encoder.layer.0"]
        again, _ = model.speech_encoder.encoder.layers[1](x, lengths)
    assert torch.allclose(again, states["speech.encoder.layer.1"][0])
    assert torch.allclose(
        model.speech_encoder.encoder.norm(again)[0, :16], states["speech.encoder.out"][0][0, :16], atol=1e-6
    )


def test_whisper_encoder_states_and_the_cached_path(tmp_path):
    folder = tiny_whisper_dir(tmp_path / "w")
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(folder)},
        d_model=48,
        n_heads=4,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=30,
        dropout=0.0,
    )
    model = build_model(cfg).eval()
    mels, lengths = torch.randn(2, 40, 80), torch.tensor([40, 22])
    with torch.no_grad():
        live = model.states(mels, lengths)
        cached, cached_lengths = model.speech_encoder.states(mels, lengths)
        from_cache = model.states(cached, cached_lengths, precomputed=True)
    assert list(live) == [
        "speech.encoder.conv",
        "speech.encoder.layer.0",
        "speech.encoder.layer.1",
        "speech.encoder.out",
        "speech.encoder.projected",
        "speech.out",
    ]
    assert live["speech.encoder.layer.0"][0].shape == (2, 20, 32) and live["speech.encoder.out"][1].tolist() == [20, 11]
    assert live["speech.encoder.projected"][0].shape == (2, 20, 48)
    assert list(from_cache) == ["speech.encoder.out", "speech.encoder.projected", "speech.out"]
    assert torch.equal(from_cache["speech.encoder.out"][0], live["speech.encoder.out"][0])
    assert torch.allclose(from_cache["speech.out"][0], live["speech.out"][0], atol=1e-6)


def test_wav2vec2_states_are_hfs_hidden_states():
    cfg = ModelConfig(
        encoder={"kind": "wav2vec2", "hf_config": tiny_wav2vec2_fields()},
        d_model=48,
        n_heads=2,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=60,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    model = build_model(cfg, pretrained=False).eval()
    waves, lengths = torch.randn(2, 9000), torch.tensor([9000, 6000])
    with torch.no_grad():
        states = model.states(waves, lengths)
        hf = model.speech_encoder.model(
            waves, attention_mask=(torch.arange(9000)[None] < lengths[:, None]).long(), output_hidden_states=True
        )
    names = [n for n in states if ".layer." in n]
    assert names == ["speech.encoder.layer.0", "speech.encoder.layer.1", "speech.encoder.layer.2"]
    assert all(torch.equal(states[n][0], h) for n, h in zip(names, hf.hidden_states))
    assert states["speech.encoder.layer.2"][1].tolist() == [27, 18]  # 20 ms frames (400-sample window, 320 hop)
    assert states["speech.out"][0].shape == (2, 27, 48)


def test_no_record_leaves_outputs_unchanged():
    model = _conv_model()
    with torch.no_grad():
        a, b = model.encode_speech(FEATS, LENGTHS), model.encode_speech(FEATS, LENGTHS, record={})
    assert torch.equal(a.x, b.x) and torch.equal(a.lengths, b.lengths)


class Doubling(nn.Module):
    """A test variant: doubles both paths, notes itself and leaves an auxiliary output."""

    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.scale = scale

    def speech(self, enc, record=None):
        return self._both(enc, record)

    def text(self, enc, record=None):
        return self._both(enc, record)

    def _both(self, enc, record):
        x = enc.x * self.scale
        note(record, "doubled", x, enc.lengths)
        return type(enc)(x, enc.lengths, enc.ctc_logits, enc.ctc_lengths)


def test_a_semantic_variant_is_one_builder_in_one_dict(monkeypatch):
    monkeypatch.setitem(SEMANTICS, "doubling", lambda cfg, **options: Doubling(**options))
    plain, doubled = _conv_model(), _conv_model(semantic="doubling", semantic_options={"scale": 3.0})
    doubled.load_state_dict(plain.state_dict())
    with torch.no_grad():
        states = doubled.states(FEATS, LENGTHS)
        enc, base = doubled.encode_speech(FEATS, LENGTHS), plain.encode_speech(FEATS, LENGTHS)
        text = doubled.encode_text(TOKENS, TOKEN_LENGTHS)
    assert torch.allclose(enc.x, 3 * base.x) and torch.allclose(text.x, 3 * plain.encode_text(TOKENS, TOKEN_LENGTHS).x)
    assert list(states)[-2:] == ["speech.semantic.doubled", "speech.out"]


def test_unknown_semantic_and_options():
    with pytest.raises(ValueError, match="unknown semantic 'perceiver'; expected one of identity"):
        ModelConfig(semantic={"kind": "perceiver"})
    with pytest.raises(ValueError, match="semantic 'identity' takes no options, got layers"):
        build_model(preset("tiny", tgt_vocab_size=20, semantic_options={"layers": 2}))


def test_a_plain_text_embedder_feeds_the_semantic_slot(monkeypatch):
    """text_encoder.embed_only: embeddings * sqrt(D) + positions, padded positions zero, then the semantic layer
    (XSTNet's shape: the semantic layer is the shared encoder)."""
    import math

    monkeypatch.setitem(SEMANTICS, "doubling", lambda cfg, **options: Doubling(**options))
    model = _conv_model(text_encoder={"embed_only": True}, semantic={"kind": "doubling"})
    assert not any(n.startswith("text_encoder.encoder") for n, _ in model.named_parameters())
    with torch.no_grad():
        states = model.states(TOKENS, TOKEN_LENGTHS, "text")
        emb = model.text_encoder.embedding(TOKENS)
        expected = model.text_encoder.positions(emb * math.sqrt(64))
    assert list(states) == ["text.encoder.embedded", "text.encoder.out", "text.semantic.doubled", "text.out"]
    x = states["text.encoder.out"][0]
    assert torch.allclose(x[0], expected[0]) and torch.allclose(x[1, :3], expected[1, :3]) and not x[1, 3:].any()
    assert torch.allclose(states["text.out"][0], 2 * x)
    with pytest.raises(ValueError, match="text_encoder.embed_only excludes text_encoder.layers and .shared"):
        _conv_model(text_encoder={"embed_only": True, "layers": 2})
