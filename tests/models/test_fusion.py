"""Layer fusion at the bridge (speechmt.models.fusion): the start equals the model without it, shapes and masks,
softmax weights summing to 1, and task partitions that only their task's loss updates."""

import pytest
import torch

from speechmt.data.dataset import Batch
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.fusion import FusionConfig
from speechmt.tasks.objectives import ObjectiveSettings
from speechmt.tasks.tasks import task_losses
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_fusion"), layers=3)


def model_with(whisper_dir, **fusion):
    torch.manual_seed(0)
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir)},
        d_model=48,
        n_heads=4,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=50,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        fusion=fusion,
    )
    return build_model(cfg).eval()


FEATS, LENGTHS = torch.randn(2, 40, 80, generator=torch.Generator().manual_seed(1)), torch.tensor([40, 26])
FEATS[1, 26:] = 0.0  # padding, as collate writes it


def test_the_start_equals_the_model_without_fusion(whisper_dir):
    plain, fused = model_with(whisper_dir), model_with(whisper_dir, layers=[1, 2, 3])
    fused.load_state_dict(plain.state_dict(), strict=False)
    a, b = plain.encode_speech(FEATS, LENGTHS), fused.encode_speech(FEATS, LENGTHS)
    torch.testing.assert_close(a.x, b.x)
    assert b.x.shape == (2, 20, 48) and b.lengths.tolist() == [20, 13]


def test_shapes_masks_and_weights(whisper_dir):
    model = model_with(whisper_dir, layers=[1, 3], gate=1.0)
    with torch.no_grad():
        model.fusion.weights["all"].copy_(torch.tensor([0.3, -1.0]))
    weights = model.fusion.mix_weights()
    assert weights.shape == (2,) and weights.sum().item() == pytest.approx(1.0)
    out = model.encode_speech(FEATS, LENGTHS)
    assert out.x.shape == (2, 20, 48) and out.x[1, 13:].abs().sum() == 0  # padded frames zero
    alone = model.encode_speech(FEATS[1:, :26], LENGTHS[1:])  # the padding changes nothing
    torch.testing.assert_close(out.x[1, :13], alone.x[0], atol=1e-5, rtol=1e-5)
    record: dict = {}
    model.speech_encoder(FEATS, LENGTHS, record)  # the mix by hand: gate 1, the two layers' normed states
    norm, proj = model.speech_encoder.model.layer_norm, model.speech_encoder.proj
    mix = weights[0] * norm(record["layer.0"][0]) + weights[1] * norm(record["layer.2"][0])
    torch.testing.assert_close(out.x[0], proj(mix)[0], atol=1e-5, rtol=1e-5)


def test_each_task_partition_is_updated_by_its_own_loss_alone(whisper_dir):
    model = model_with(whisper_dir, layers=[2, 3], tasks=["st", "asr"], gate=0.5).train()
    batch = Batch(
        ids=["a", "b"],
        feats=FEATS,
        feat_lengths=LENGTHS,
        tgt=torch.tensor([[5, 6, 2], [7, 2, 0]]),
        tgt_lengths=torch.tensor([3, 2]),
    )
    for task, other in (("st", "asr"), ("asr", "st")):
        model.zero_grad(set_to_none=True)
        loss, _ = task_losses(model, batch, task, {"ce": 1.0}, ObjectiveSettings())["ce"]
        loss.backward()
        assert model.fusion.weights[task].grad.abs().sum() > 0 and model.fusion.gates[task].grad is not None
        assert model.fusion.weights[other].grad is None and model.fusion.gates[other].grad is None
    assert model.fusion.partition("mt") == "st"  # a task without a partition (or decoding) reads the first


@pytest.mark.parametrize(
    "fusion, encoder, message",
    [
        (dict(layers=[4]), {}, r"fusion.layers \[4\]: the speech encoder has layers 1..3"),
        (
            dict(layers=[1, 3]),
            {"frozen_layers": 2, "finetune": "lora"},
            r"fusion.layers \[1\]: below encoder.frozen_layers 2",
        ),
        (dict(layers=[0]), {}, "fusion.layers item must be an integer >= 1"),
        (dict(layers=[1], gate=2.0), {}, "fusion.gate must be"),
    ],
)
def test_bad_options_are_one_line(whisper_dir, fusion, encoder, message):
    with pytest.raises(ValueError, match=message):
        cfg = ModelConfig(
            encoder={"kind": "whisper", "name_or_path": str(whisper_dir), **encoder},
            d_model=48,
            n_heads=4,
            ffn_dim=64,
            decoder={"layers": 1},
            tgt_vocab_size=50,
            fusion=fusion,
        )
        build_model(cfg)


def test_a_conv_encoder_is_refused():
    with pytest.raises(ValueError, match="reads a Whisper encoder's layers"):
        build_model(
            ModelConfig(
                d_model=32,
                n_heads=2,
                ffn_dim=64,
                tgt_vocab_size=20,
                encoder={"layers": 1},
                decoder={"layers": 1},
                fusion=FusionConfig(layers=(1,)),
            )
        )
