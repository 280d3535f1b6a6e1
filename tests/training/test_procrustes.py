"""Procrustes initialisation of the speech encoder's projection (speechmt.training.procrustes): a known rotation
recovered after iterative normalisation, the Linear's affine form, and the hook changing the projection alone."""

import numpy as np
import pytest
import torch

from speechmt.config import ExperimentConfig
from speechmt.data.dataset import Example
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.tasks.objectives import ObjectiveSettings
from speechmt.training.procrustes import first_batches, fit_map, init_projection, set_linear
from speechmt.training.run import procrustes_at_start
from tests.whisper_helpers import tiny_whisper_dir


def random_rotation(d: int, rng) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def test_a_known_rotation_is_recovered_after_normalisation():
    rng = np.random.default_rng(0)
    w = random_rotation(16, rng)
    x = rng.standard_normal((2000, 16)) + 3.0  # off centre: the normalisation centres it
    y = x @ w + 1e-5 * rng.standard_normal((2000, 16))
    m = fit_map(x, y)
    assert np.abs(m.w - w).max() < 1e-3
    assert np.abs(m(x) - y).max() < 1e-3


def test_the_linear_takes_the_affine_form_of_the_map():
    rng = np.random.default_rng(1)
    w = np.linalg.qr(rng.standard_normal((12, 8)))[0].T  # (8, 12): orthonormal rows
    x = rng.standard_normal((500, 8)) * 0.5 + 2.0
    y = 2.5 * (x - x.mean(0)) @ w + 7.0  # a scaled isometry into a wider space, shifted
    linear = torch.nn.Linear(8, 12).double()
    set_linear(linear, fit_map(x, y))
    np.testing.assert_allclose(linear(torch.from_numpy(x)).detach().numpy(), y, atol=1e-6)
    with pytest.raises(ValueError, match="does not fit Linear"):
        set_linear(torch.nn.Linear(12, 8), fit_map(x, y))


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_procrustes"))


def tiny_model(whisper_dir):
    torch.manual_seed(0)
    cfg = ModelConfig(encoder={"kind": "whisper", "name_or_path": str(whisper_dir)}, d_model=48, n_heads=4, ffn_dim=64,
                      decoder={"layers": 1}, tgt_vocab_size=50, src_vocab_size=20, ctc=True,
                      text_encoder={"layers": 1}, dropout=0.0)
    return build_model(cfg)


def examples(n: int = 6) -> list[Example]:
    g = torch.Generator().manual_seed(2)
    return [Example(i, f"u{i}", feats=torch.randn(40 + 4 * i, 80, generator=g),
                    src_ids=torch.randint(5, 20, (4 + i % 3,), generator=g), tgt_ids=torch.tensor([5, 6, 3]))
            for i in range(n)]


@pytest.mark.parametrize("units", ["ctc", "uniform"])
def test_the_hook_changes_the_projection_alone(whisper_dir, units):
    model = tiny_model(whisper_dir).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = init_projection(model, first_batches(examples(), 6, 0, torch.device("cpu"), size=4), 5, 4, units=units)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"speech_encoder.proj.weight", "speech_encoder.proj.bias"}
    assert stats["pairs"] == sum(4 + i % 3 for i in range(6))
    assert stats["cosine_after"] > stats["cosine_before"] and model.training


def test_the_run_hook_reads_the_first_speech_stream(whisper_dir):
    model = tiny_model(whisper_dir)
    cfg = ExperimentConfig.from_dict({"train": {"init_procrustes": 3, "stages": [
        {"tasks": [{"task": "mt"}, {"task": "st", "objectives": {"ce": 1.0, "ctc": 0.3}}]}]}})
    seen = []

    def data(spec, train):
        seen.append((spec.task, sorted(spec.objectives), train))
        return examples()

    stats = procrustes_at_start(cfg, model, data, ObjectiveSettings(), 0, torch.device("cpu"))
    assert seen == [("st", ["align", "ce", "ctc"], True)] and stats["pairs"] == 4 + 5 + 6


def test_a_model_without_a_projection_is_one_clear_error(whisper_dir):
    cfg = ModelConfig(encoder={"kind": "whisper", "name_or_path": str(whisper_dir)}, d_model=32, n_heads=4,
                      ffn_dim=64, decoder={"layers": 1}, tgt_vocab_size=50, src_vocab_size=20, ctc=True,
                      text_encoder={"layers": 1})
    with pytest.raises(ValueError, match="needs a speech encoder with a projection"):
        init_projection(build_model(cfg), [], 5, 4)
