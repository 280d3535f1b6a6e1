"""An encoder kind registered from this file alone (docs/extending.md): an options dataclass, a builder and one
`ENCODERS.register` line, and a config naming it trains, saves, reloads and translates with no other change."""

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.config import load_config, save_config
from speechmt.decoding.translate import load_model, translate
from speechmt.models.components import BuildParts, kind_field
from speechmt.models.config import ModelConfig
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput
from speechmt.models.registry import ENCODERS
from speechmt.sequence import lengths_to_padding_mask
from speechmt.training.run import run_training
from tests.helpers import tiny_config


@dataclass
class PoolConfig(EncoderConfig):
    """encoder kind "pool": fbank frames averaged `stride` at a time, then one Linear to the model's width."""

    kind: str = kind_field("pool")
    stride: int = checked(4, lo=1)
    input_dim: int = checked(80, lo=1)
    reads_stored_features: ClassVar[bool] = True

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self, "encoder."))


class PoolEncoder(nn.Module):
    """feats (B, T, F), lengths (B,) -> EncoderOutput x (B, ceil(T / stride), D), lengths ceil(lengths / stride)."""

    def __init__(self, stride: int, input_dim: int, dim: int):
        super().__init__()
        self.stride, self.proj = stride, nn.Linear(input_dim, dim)

    def forward(self, feats: Tensor, lengths: Tensor, record=None) -> EncoderOutput:
        feats = feats.masked_fill(lengths_to_padding_mask(lengths, feats.size(1))[..., None], 0.0)
        pooled = nn.functional.avg_pool1d(feats.transpose(1, 2), self.stride, ceil_mode=True).transpose(1, 2)
        out_lengths = torch.div(lengths + self.stride - 1, self.stride, rounding_mode="floor")
        x = self.proj(pooled).masked_fill(lengths_to_padding_mask(out_lengths, pooled.size(1))[..., None], 0.0)
        return EncoderOutput(x, out_lengths)

    def states_frozen(self) -> bool:
        return False


def build_pool(cfg: ModelConfig, parts: BuildParts) -> tuple[PoolEncoder, ModelConfig]:
    return PoolEncoder(cfg.encoder.stride, cfg.encoder.input_dim, cfg.d_model), cfg


@pytest.fixture
def registered():
    ENCODERS.register("pool", PoolConfig, build_pool)
    yield
    ENCODERS.unregister("pool")


def test_the_kind_reads_its_own_options_and_names_a_stranger(registered):
    assert ModelConfig(encoder={"kind": "pool", "stride": 2}).encoder == PoolConfig(stride=2)
    with pytest.raises(
        ValueError,
        match=r"^bad ModelConfig: encoder.layers: not an option of encoder 'pool' \(its "
        r"options: stride, input_dim\)$",
    ):
        ModelConfig(encoder={"kind": "pool", "layers": 2})
    with pytest.raises(ValueError, match=r"^bad ModelConfig: encoder.stride must be an integer >= 1, got 0$"):
        ModelConfig(encoder={"kind": "pool", "stride": 0})


def test_an_encoder_registered_from_a_test_trains_saves_and_translates(registered, tiny_data, tmp_path):
    cfg = tiny_config(
        tiny_data, tmp_path, max_updates=3, save_interval_updates=3, validate_interval_updates=0, valid_decode=False
    )
    save_config(cfg, tmp_path / "base.yaml")
    cfg = load_config(tmp_path / "base.yaml", ["model.encoder.kind=pool", "model.encoder.stride=2"])
    assert cfg.model.encoder == PoolConfig(stride=2)  # the conv encoder's options went with its kind
    run_training(cfg)
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    assert isinstance(lm.model.speech_encoder, PoolEncoder) and lm.model.config.encoder == PoolConfig(stride=2)
    wave = torch.zeros(16000).numpy()
    (result,) = translate(lm, [wave], beam=2)
    assert isinstance(result.text, str)
    feats = torch.randn(1, 7, 80)
    out = lm.model.speech_encoder(feats, torch.tensor([7]))
    assert out.x.shape == (1, 4, cfg.model.d_model) and out.lengths.tolist() == [4]
