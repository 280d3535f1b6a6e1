"""A semantic layer registered from this file alone (docs/extending.md): one entry in SEMANTICS, and a config naming
it trains, saves, reloads and translates with no other change."""

from dataclasses import replace

import pytest
import torch
from torch import nn

from speechmt.decoding.translate import load_model, translate
from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.semantic import SEMANTICS
from speechmt.models.semantic.identity import Identity
from speechmt.training.run import run_training
from tests.helpers import tiny_config


class Gain(nn.Module):
    """A toy layer: both paths scaled by one learned gain (B, T, D) -> (B, T, D), lengths unchanged."""

    def __init__(self, start: float):
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(float(start)))

    def speech(self, enc: EncoderOutput, record=None) -> EncoderOutput:
        return replace(enc, x=enc.x * self.gain)

    def text(self, enc: EncoderOutput, record=None) -> EncoderOutput:
        return replace(enc, x=enc.x * self.gain)


def gain(cfg, start: float = 1.0) -> Gain:
    return Gain(start)


@pytest.fixture
def registered():
    SEMANTICS["gain"] = gain
    yield
    del SEMANTICS["gain"]


def test_a_semantic_layer_registered_from_a_test_trains_saves_and_translates(registered, tiny_data, tmp_path):
    cfg = tiny_config(
        tiny_data, tmp_path, max_updates=3, save_interval_updates=3, validate_interval_updates=0, valid_decode=False
    )
    cfg.model.semantic.kind, cfg.model.semantic.options = "gain", {"start": 0.5}
    run_training(cfg)
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    layer = lm.model.semantic
    assert isinstance(layer, Gain) and not isinstance(layer, Identity)
    assert layer.gain.item() != 0.5  # it trained (Adam moved it from its start)
    wave = torch.zeros(16000).numpy()
    (result,) = translate(lm, [wave], beam=2)
    assert isinstance(result.text, str)
