"""The optimiser's parameter groups and the inverse square root schedule, with known values.

fairseq's inverse_sqrt (lr_scheduler/inverse_square_root_schedule.py) sets, after `num_updates` updates,
lr = peak * num_updates / warmup while num_updates < warmup, else peak * sqrt(warmup / num_updates).
`inverse_sqrt_factor(step)` is that formula at num_updates = step + 1: the update of 0-based index `step`
runs at the rate fairseq has set once that update is counted (fairseq's own first update runs at
warmup_init_lr, 0 by default; ours at peak / warmup).
"""

import math

import pytest
import torch

from speechmt.training.optim import build_optimizer, build_scheduler, inverse_sqrt_factor


def _fairseq_factor(num_updates: int, warmup: int, init: float = 0.0) -> float:
    """fairseq's InverseSquareRootSchedule.step_update, as a fraction of the peak lr."""
    if num_updates < warmup:
        return init + num_updates * (1.0 - init) / warmup
    return math.sqrt(warmup) * num_updates**-0.5


def test_inverse_sqrt_known_values():
    assert inverse_sqrt_factor(0, 4000) == 1 / 4000
    assert inverse_sqrt_factor(1999, 4000) == 0.5
    assert inverse_sqrt_factor(3998, 4000) == 3999 / 4000
    assert inverse_sqrt_factor(3999, 4000) == 1.0  # the warmup-th update runs at the peak
    assert inverse_sqrt_factor(15999, 4000) == 0.5  # the 16000th update: sqrt(4000 / 16000)
    assert inverse_sqrt_factor(35999, 4000) == pytest.approx(1 / 3, rel=1e-15)
    assert inverse_sqrt_factor(0, 4, init_factor=0.2) == pytest.approx(0.4)  # 0.2 + 0.8 / 4
    assert inverse_sqrt_factor(3, 4, init_factor=0.2) == 1.0
    # no warm-up: the peak at the first update, then 1 / sqrt(updates)
    assert [inverse_sqrt_factor(s, 0) for s in (0, 3, 99)] == [1.0, 0.5, 0.1]


@pytest.mark.parametrize("warmup,init", [(4000, 0.0), (10000, 0.0), (25, 0.1), (1, 0.0)])
def test_inverse_sqrt_is_fairseq_after_the_update(warmup, init):
    steps = list(range(0, 3 * warmup, max(1, warmup // 97))) + [warmup - 2, warmup - 1, warmup, 10 * warmup]
    for s in (s for s in steps if s >= 0):
        assert inverse_sqrt_factor(s, warmup, init) == pytest.approx(_fairseq_factor(s + 1, warmup, init), rel=1e-12)


def test_scheduler_sets_these_rates_on_adamw():
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model, lr=2e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = build_scheduler(opt, warmup=4)
    lrs = []
    for _ in range(16):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    lrs.append([g["lr"] for g in opt.param_groups])
    # after n scheduler steps: n + 1 updates counted, fairseq's factor at n + 1
    expected = [0.25, 0.5, 0.75, 1.0] + [math.sqrt(4 / n) for n in range(5, 18)]
    assert [a for a, b in lrs] == [b for a, b in lrs]  # both groups move together
    assert [a for a, _ in lrs] == pytest.approx([2e-3 * f for f in expected], rel=1e-12)
    assert lrs[15][0] == pytest.approx(1e-3, rel=1e-12)  # the 16th update: sqrt(4 / 16) of the peak
    assert sched.get_last_lr()[0] == lrs[-1][0]


def test_scheduler_resumes_from_its_state():
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model, lr=1.0, betas=(0.9, 0.98), weight_decay=0.0)
    sched = build_scheduler(opt, warmup=10)
    for _ in range(7):
        opt.step()
        sched.step()
    state = sched.state_dict()
    opt2 = build_optimizer(model, lr=1.0, betas=(0.9, 0.98), weight_decay=0.0)
    sched2 = build_scheduler(opt2, warmup=10)
    sched2.load_state_dict(state)
    opt2.step()
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.9)  # update index 8: 9 / 10


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 4)
        self.proj = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.conv = torch.nn.Conv1d(4, 4, 3)
        self.scale = torch.nn.Parameter(torch.tensor(2.0))  # 0-dim
        self.frozen = torch.nn.Linear(4, 4)
        self.frozen.requires_grad_(False)


def test_optimizer_groups_no_decay_on_biases_and_norms_and_skips_frozen():
    net = _Net()
    opt = build_optimizer(net, lr=0.1, betas=(0.8, 0.9), weight_decay=0.5)
    assert type(opt) is torch.optim.AdamW
    decay, no_decay = opt.param_groups
    ids = {id(p): n for n, p in net.named_parameters()}
    assert [ids[id(p)] for p in decay["params"]] == ["emb.weight", "proj.weight", "conv.weight"]
    assert [ids[id(p)] for p in no_decay["params"]] == ["scale", "proj.bias", "norm.weight", "norm.bias", "conv.bias"]
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.5, 0.0)
    assert all(g["lr"] == 0.1 and g["betas"] == (0.8, 0.9) and g["eps"] == 1e-8 for g in opt.param_groups)


def test_decoupled_decay_applies_to_the_decay_group_only():
    # with zero gradients Adam's step is 0 / (0 + eps) = 0: what remains is AdamW's p *= 1 - lr * wd
    net = _Net()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    opt = build_optimizer(net, lr=0.1, betas=(0.9, 0.98), weight_decay=0.5)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in net.named_parameters():
        factor = 0.95 if n in ("emb.weight", "proj.weight", "conv.weight") else 1.0
        assert torch.allclose(p.detach(), before[n] * factor, rtol=1e-6, atol=0), n


def test_lr_scale_puts_matched_parameters_in_their_own_groups_with_a_factor_of_lr():
    net = _Net()
    opt = build_optimizer(net, lr=0.1, betas=(0.9, 0.98), weight_decay=0.5, lr_scale={"proj.*": 10, "sc*": 50})
    ids = {id(p): n for n, p in net.named_parameters()}
    got = [([ids[id(p)] for p in g["params"]], g["lr"], g["weight_decay"]) for g in opt.param_groups]
    assert got == [
        (["emb.weight", "conv.weight"], 0.1, 0.5),
        (["norm.weight", "norm.bias", "conv.bias"], 0.1, 0.0),
        (["scale"], pytest.approx(5.0), 0.0),
        (["proj.weight"], pytest.approx(1.0), 0.5),
        (["proj.bias"], pytest.approx(1.0), 0.0),
    ]


def test_lr_scale_moves_a_scalar_by_the_scaled_rate_and_the_schedule_scales_every_group():
    # Adam's first step moves each parameter by lr * sign(grad): 50x for the scaled scalar
    net = _Net()
    opt = build_optimizer(net, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.0, lr_scale={"scale": 50})
    sched = build_scheduler(opt, warmup=4)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    sched.step()
    moved = {n: (before[n] - p.detach()).abs().max().item() for n, p in net.named_parameters() if p.requires_grad}
    assert moved["scale"] == pytest.approx(50 * 0.25e-3, rel=1e-3)  # the first warm-up factor, 1 / 4
    assert moved["emb.weight"] == pytest.approx(0.25e-3, rel=1e-3)  # float32 weights near 1
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.5e-3, 0.5e-3, 25e-3])


def test_lr_scale_errors_name_the_pattern():
    from speechmt.checks import ConfigError
    from speechmt.config import lr_scale_checked

    with pytest.raises(ConfigError, match=r"'\*fusion\*' scales no trainable parameter"):
        build_optimizer(_Net(), 0.1, (0.9, 0.98), 0.0, lr_scale={"*fusion*": 50})
    with pytest.raises(ConfigError, match=r"'frozen\.\*' scales no trainable"):  # matches only frozen ones
        build_optimizer(_Net(), 0.1, (0.9, 0.98), 0.0, lr_scale={"frozen.*": 2})
    with pytest.raises(ConfigError, match=r"'proj\.bias' scales no trainable.*earlier pattern"):
        build_optimizer(_Net(), 0.1, (0.9, 0.98), 0.0, lr_scale={"proj.*": 2, "proj.bias": 3})
    for bad in ({"x": 0}, {"x": -1}, {"x": "fast"}, {"x": float("nan")}, {"": 2}, {"x": True}):
        with pytest.raises(ConfigError, match="train.lr_scale entry"):
            lr_scale_checked(bad)
    assert lr_scale_checked({"a*": 2}) == {"a*": 2.0}


def test_training_with_lr_scale_saves_and_resumes_its_groups(tiny_data, tmp_path):
    # a run's optimiser groups carry the scaled rates; a resume rebuilds the same groups and continues
    from speechmt.checkpoint import load_checkpoint
    from speechmt.training.run import run_training
    from tests.helpers import tiny_config

    cfg = tiny_config(
        tiny_data, tmp_path, max_updates=2, save_interval_updates=2, valid_decode=False, lr_scale={"decoder.*": 0.5}
    )
    run_training(cfg)
    groups = load_checkpoint(tmp_path / "checkpoint_last.safetensors")["train_state"]["optimizer"]["param_groups"]
    assert [g["initial_lr"] for g in groups] == pytest.approx([2e-3, 2e-3, 1e-3, 1e-3])
    assert all(len(g["params"]) > 0 for g in groups)
    cfg.train.max_updates = 3
    assert run_training(cfg).step == 3
