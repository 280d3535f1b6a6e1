from dataclasses import asdict

import pytest
import torch

from speechmt.models import ModelConfig, build_model, count_parameters, preset


def test_s2t_s_parameter_count_matches_fairseq():
    model = build_model(preset("s2t_s", tgt_vocab_size=8000))
    n = count_parameters(model)
    print(f"s2t_s parameters at tgt vocab 8000: {n:,}")
    assert n == 31_072_256  # conv 1.72M + encoder 15.78M + decoder 9.47M + 2 x 8000 x 256 embeddings
    assert abs(n - 31e6) / 31e6 < 0.05
    tied = build_model(preset("s2t_s", tgt_vocab_size=8000, tie_embeddings=True))
    assert count_parameters(tied) == n - 8000 * 256


def test_tied_embeddings_share_storage_and_count_once():
    model = build_model(preset("tiny", tgt_vocab_size=50))
    dec = model.decoder
    assert dec.output.weight is dec.embed.weight
    assert dec.output.weight.data_ptr() == dec.embed.weight.data_ptr()
    untied = build_model(preset("tiny", tgt_vocab_size=50, tie_embeddings=False))
    assert count_parameters(untied) - count_parameters(model) == 50 * 64


def test_preset_overrides_and_unknown_name():
    cfg = preset("tiny", d_model=32, tgt_vocab_size=10)
    assert (cfg.d_model, cfg.tgt_vocab_size, cfg.encoder.layers, cfg.decoder.layers) == (32, 10, 2, 2)
    s = preset("s2t_s")
    assert (s.encoder.layers, s.decoder.layers, s.d_model, s.n_heads, s.ffn_dim, s.encoder.conv_channels) == (
        12,
        6,
        256,
        4,
        2048,
        1024,
    )
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")


def test_config_round_trip_from_dict():
    cfg = preset("tiny", src_vocab_size=20, ctc=True)
    d = asdict(cfg)
    d["encoder"]["conv_kernels"] = list(d["encoder"]["conv_kernels"])  # as after YAML / JSON
    again = ModelConfig(**d)
    assert again == cfg and again.encoder.conv_kernels == (5, 5)
    a, b = build_model(cfg), build_model(again)
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}
    b.load_state_dict(a.state_dict())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(subsampler="conv3d"), r"unknown encoder\.subsampler 'conv3d'"),
        (dict(d_model=30, n_heads=4), "not divisible"),
        (dict(src_vocab_size=9, text_encoder_layers=1, share_text_encoder=True), r"text_encoder\.shared needs"),
        (dict(encoder={"conv_kernels": ()}), r"encoder\.conv_kernels is empty"),
    ],
)
def test_config_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        preset("tiny", **overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(ctc=True), "ctc=True needs src_vocab_size"),
        (
            dict(text_encoder={"layers": 2}),
            r"a text encoder \(text_encoder\.layers > 0 or embed_only\) needs src_vocab_size",
        ),
        (
            dict(text_encoder={"embed_only": True}),
            r"a text encoder \(text_encoder\.layers > 0 or embed_only\) needs src_vo",
        ),
        (dict(tgt_vocab_size=0), "tgt_vocab_size must be > 0"),
    ],
)
def test_vocabulary_sizes_are_checked_when_building(overrides, message):
    cfg = preset("tiny", **overrides)  # a config file's template: sizes come from the tokenizers later
    with pytest.raises(ValueError, match=message):
        build_model(cfg)


def test_ctc_head_and_decode_through_translator():
    model = build_model(preset("tiny", src_vocab_size=12, ctc=True, tgt_vocab_size=20)).eval()
    enc = model.encode_speech(torch.randn(2, 30, 80), torch.tensor([30, 17]))
    assert enc.ctc_logits.shape == (2, 8, 12)
    assert model.decode(torch.ones(2, 3, dtype=torch.long), enc).shape == (2, 3, 20)
    assert model.config.ctc
