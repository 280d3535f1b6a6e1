import json

import pytest
import torch

from speechmt.checkpoint import CheckpointError, load_checkpoint
from speechmt.cli import main
from speechmt.models.build import build_model
from speechmt.training.run import average, init_encoder_from, run_training
from tests.helpers import tiny_config


def _params(path):
    return load_checkpoint(path)["model"]


def _cfg(data, save_dir, max_updates, max_tokens=700, **train):
    """max_tokens 700: a few batches per epoch, so runs cross epoch boundaries."""
    cfg = tiny_config(data, save_dir, max_updates=max_updates, **train)
    cfg.data.max_tokens = max_tokens
    return cfg


def test_interrupted_and_resumed_run_equals_uninterrupted(tiny_data, tmp_path):
    run_training(_cfg(tiny_data, tmp_path / "resumed", 5))
    resumed = run_training(_cfg(tiny_data, tmp_path / "resumed", 9))
    straight = run_training(_cfg(tiny_data, tmp_path / "straight", 9))
    assert resumed.step == straight.step == 9 and resumed.epoch == straight.epoch >= 2
    a, b = (_params(tmp_path / d / "checkpoint_last.safetensors") for d in ("resumed", "straight"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_lowers_the_loss_and_logs(tiny_data, tmp_path):
    state = run_training(
        tiny_config(tiny_data, tmp_path, max_updates=40, log_interval=10, validate_interval_updates=20)
    )
    lines = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["type"] == "train"]
    assert [x["step"] for x in train] == [10, 20, 30, 40]
    assert train[-1]["loss"] < 0.6 * train[0]["loss"]
    valid = [x for x in lines if x["type"] == "valid"]
    assert [x["step"] for x in valid] == [20, 40]
    assert 0.0 <= valid[-1]["valid_bleu"] <= 100.0 and 0.0 <= valid[-1]["valid_chrf"] <= 100.0
    assert state.best_loss < float("inf") and (tmp_path / "checkpoint_best.safetensors").exists()
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*.safetensors")) == [
        f"checkpoint_{n}.safetensors"
        for n in ("12", "16", "20", "24", "28", "32", "36", "4", "40", "8", "best", "last")
    ]
    ckpt = load_checkpoint(tmp_path / "checkpoint_last.safetensors")
    assert ckpt["features"]["cmvn"]["kind"] == "global" and ckpt["tokenizers"]["tgt"] is not None


def test_keep_last_and_average(tiny_data, tmp_path):
    run_training(tiny_config(tiny_data, tmp_path, max_updates=12, keep_last=2))
    assert sorted(p.name for p in tmp_path.glob("checkpoint_[0-9]*")) == [
        "checkpoint_12.safetensors",
        "checkpoint_8.safetensors",
    ]
    used = average([str(tmp_path)], 2, str(tmp_path / "avg.safetensors"))
    assert [p.name for p in used] == ["checkpoint_8.safetensors", "checkpoint_12.safetensors"]
    a, b, avg = (_params(tmp_path / f"{n}.safetensors") for n in ("checkpoint_8", "checkpoint_12", "avg"))
    for k in a:
        if a[k].is_floating_point():
            assert torch.allclose(avg[k], (a[k] + b[k]) / 2, atol=1e-6)
    assert "train_state" not in load_checkpoint(tmp_path / "avg.safetensors")


def test_nonfinite_loss_skips_the_update(tiny_data, tmp_path, monkeypatch):
    from speechmt.tasks import OBJECTIVES, Objective

    calls = {"n": 0}
    real = OBJECTIVES["ce"]

    def sometimes_nan(model, batch, enc, settings):
        calls["n"] += 1
        loss, stats = real.loss(model, batch, enc, settings)
        return (loss * float("nan"), stats) if calls["n"] == 2 else (loss, stats)

    monkeypatch.setitem(OBJECTIVES, "ce", Objective(sometimes_nan, real.normaliser))
    state = run_training(tiny_config(tiny_data, tmp_path, max_updates=3))
    assert state.nonfinite_skipped == 1 and state.step == 3 and calls["n"] == 4


def test_init_encoder_from_copies_the_speech_encoder(tiny_data, tmp_path):
    run_training(tiny_config(tiny_data, tmp_path / "asr", max_updates=2, task="asr"))
    st_cfg = tiny_config(tiny_data, tmp_path / "st", max_updates=1)
    from speechmt.training.builders import load_tokenizers, model_config_for

    model = build_model(model_config_for(st_cfg, load_tokenizers(st_cfg.data)))
    n = init_encoder_from(model, str(tmp_path / "asr/checkpoint_last.safetensors"))
    source = _params(tmp_path / "asr/checkpoint_last.safetensors")
    own = model.state_dict()
    enc = [k for k in source if k.startswith("speech_encoder.")]
    assert n >= len(enc) > 0 and all(torch.equal(own[k], source[k]) for k in enc)
    assert not torch.equal(own["decoder.layers.0.ffn.fc1.weight"], source["decoder.layers.0.ffn.fc1.weight"])
    n = init_encoder_from(model, str(tmp_path / "asr/checkpoint_last.safetensors"), ("decoder.",))  # one joint vocab
    dec = [k for k in source if k.startswith("decoder.")]
    assert n == len(dec) > 0 and all(torch.equal(model.state_dict()[k], source[k]) for k in dec)
    with pytest.raises(CheckpointError, match="no text_encoder weights of matching shapes"):
        init_encoder_from(model, str(tmp_path / "asr/checkpoint_last.safetensors"), ("text_encoder.",))


def test_cli_train_and_bad_config(tiny_data, tmp_path, capsys):
    from speechmt.config import save_config

    save_config(tiny_config(tiny_data, tmp_path / "exp", max_updates=2), tmp_path / "conf.yaml")
    assert main(["train", "--config", str(tmp_path / "conf.yaml"), "train.max_updates=3"]) == 0
    assert "finished at update 3" in capsys.readouterr().out
    assert main(["train", "--config", str(tmp_path / "conf.yaml"), "train.no_such=1"]) == 2
    assert "unknown train option(s): no_such" in capsys.readouterr().err


@pytest.fixture(scope="module")
def straight_12(tiny_data, tmp_path_factory):
    """Final weights of an uninterrupted 12-update run (checkpoints every 4 updates)."""
    save_dir, threads = tmp_path_factory.mktemp("straight"), torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests (conftest's _one_thread is set up after module fixtures)
    try:
        run_training(tiny_config(tiny_data, save_dir, max_updates=12))
    finally:
        torch.set_num_threads(threads)
    return _params(save_dir / "checkpoint_last.safetensors")


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_exception_mid_run_then_resume_equals_uninterrupted(tiny_data, tmp_path, monkeypatch, straight_12):
    from speechmt.tasks import OBJECTIVES, Objective

    real, calls = OBJECTIVES["ce"], {"n": 0}

    def fails_at_update_7(model, batch, enc, settings):
        calls["n"] += model.training
        if calls["n"] == 7:
            raise RuntimeError("power cut")
        return real.loss(model, batch, enc, settings)

    monkeypatch.setitem(OBJECTIVES, "ce", Objective(fails_at_update_7, real.normaliser))
    with pytest.raises(RuntimeError, match="power cut"):
        run_training(tiny_config(tiny_data, tmp_path, max_updates=12))
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "checkpoint_last.safetensors")["train_state"]["state"]["step"] == 4
    assert run_training(tiny_config(tiny_data, tmp_path, max_updates=12)).step == 12
    assert _same(_params(tmp_path / "checkpoint_last.safetensors"), straight_12)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_equals_uninterrupted(tiny_data, tmp_path, straight_12):
    import os
    import signal
    import subprocess
    import sys
    import time

    from speechmt.config import save_config

    save_config(tiny_config(tiny_data, tmp_path / "exp", max_updates=12), tmp_path / "conf.yaml")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "speechmt", "train", "--config", str(tmp_path / "conf.yaml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300  # generous: the machine may be busy
        while (
            not (tmp_path / "exp/checkpoint_4.safetensors").exists()
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # wherever it is: training, or writing a checkpoint
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert run_training(tiny_config(tiny_data, tmp_path / "exp", max_updates=12)).step == 12
    assert _same(_params(tmp_path / "exp/checkpoint_last.safetensors"), straight_12)


def test_unreadable_checkpoint_last_resumes_from_the_newest_readable_one(tiny_data, tmp_path, capsys, straight_12):
    run_training(tiny_config(tiny_data, tmp_path, max_updates=8))  # checkpoint_4, checkpoint_8, checkpoint_last (8)
    last, eight = tmp_path / "checkpoint_last.safetensors", tmp_path / "checkpoint_8.safetensors"
    cut = last.read_bytes()[:1000]
    last.write_bytes(cut)
    eight.write_bytes(eight.read_bytes()[:-1])  # unreadable too: the run goes back to checkpoint_4
    with pytest.warns(UserWarning) as caught:
        assert run_training(tiny_config(tiny_data, tmp_path, max_updates=12)).step == 12
    (warning,) = [str(w.message) for w in caught if "resuming" in str(w.message)]
    assert warning.startswith(f"{last}: not a readable checkpoint, truncated or corrupt (")
    assert warning.endswith(
        "; resuming from checkpoint_4.safetensors, the newest readable checkpoint beside it; "
        "checkpoint_last.safetensors is kept as checkpoint_last.safetensors.unreadable"
    )
    assert f"resumed from {tmp_path / 'checkpoint_4.safetensors'} at update 4" in capsys.readouterr().out
    assert (tmp_path / "checkpoint_last.safetensors.unreadable").read_bytes() == cut
    assert _same(_params(last), straight_12)


def test_no_readable_checkpoint_stops_with_one_line(tiny_data, tmp_path, capsys):
    from speechmt.config import save_config

    run_training(tiny_config(tiny_data, tmp_path / "exp", max_updates=4))
    for p in (tmp_path / "exp").glob("checkpoint_*.safetensors"):
        p.write_bytes(p.read_bytes()[:100])
    save_config(tiny_config(tiny_data, tmp_path / "exp", max_updates=8), tmp_path / "conf.yaml")
    assert main(["train", "--config", str(tmp_path / "conf.yaml")]) == 2
    err = capsys.readouterr().err
    last = tmp_path / "exp/checkpoint_last.safetensors"
    assert err.count("\n") == 1 and err.startswith(f"speechmt: error: {last}: not a readable checkpoint")
    assert err.rstrip().endswith(
        "; no readable checkpoint_<step>.safetensors beside it either; pass --no-resume to start afresh"
    )
    assert last.exists() and not (tmp_path / "exp/checkpoint_last.safetensors.unreadable").exists()
    assert main(["train", "--config", str(tmp_path / "conf.yaml"), "--no-resume"]) == 0
    assert load_checkpoint(last)["train_state"]["state"]["step"] == 8


def test_train_threads_sets_torchs_cpu_threads(tiny_data, tmp_path, capsys):
    """Jobs that share cores each take one thread (two at torch's default ran ~10x slower on 2 cores)."""
    before = torch.get_num_threads()
    try:
        run_training(tiny_config(tiny_data, tmp_path, max_updates=1, threads=2, valid_decode=False))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert main(["train", "--config", str(tmp_path / "config.yaml"), "train.threads=-1"]) == 2
    assert "invalid value '-1' for train.threads: expected an integer >= 0" in capsys.readouterr().err


def test_init_from_takes_parts_from_several_checkpoints_in_order(tiny_data, tmp_path):
    """train.init_from (ESPnet's --init_param): each PATH:prefixes item copies its tensors, later items last."""
    run_training(tiny_config(tiny_data, tmp_path / "a", max_updates=2, task="asr"))
    run_training(tiny_config(tiny_data, tmp_path / "b", max_updates=2, task="asr", seed=7))
    a, b = (_params(tmp_path / f"{x}/checkpoint_last.safetensors") for x in "ab")
    items = [
        f"{tmp_path}/a/checkpoint_last.safetensors:speech_encoder.,decoder.",
        f"{tmp_path}/b/checkpoint_last.safetensors:decoder.",
    ]
    cfg = tiny_config(tiny_data, tmp_path / "c", max_updates=1, task="asr", init_from=items, lr=1e-12)
    assert cfg.train.init_from == tuple(items)
    run_training(cfg)
    c = _params(tmp_path / "c/checkpoint_last.safetensors")
    enc = [k for k in a if k.startswith("speech_encoder.") and "weight" in k]
    dec = [k for k in a if k.startswith("decoder.") and "weight" in k]
    assert all(torch.allclose(c[k], a[k], atol=1e-6) for k in enc)  # lr 1e-12: one update moves nothing visible
    assert all(torch.allclose(c[k], b[k], atol=1e-6) for k in dec) and not all(torch.equal(a[k], b[k]) for k in dec)


@pytest.mark.parametrize("item", ["exp/a.safetensors", "exp/a.safetensors:decoder", ":decoder."])
def test_a_malformed_init_from_item_is_one_config_error(item):
    from speechmt.config import ConfigError, TrainConfig

    with pytest.raises(ConfigError, match="train.init_from item .*expected CHECKPOINT:prefix"):
        TrainConfig(init_from=[item])


def test_max_updates_0_writes_the_initialised_model_untrained(tiny_data, tmp_path):
    """train.max_updates 0 saves the model as built and initialised (e.g. parts composed by init_from)."""
    run_training(tiny_config(tiny_data, tmp_path / "a", max_updates=2))
    source = f"{tmp_path}/a/checkpoint_last.safetensors"
    state = run_training(
        tiny_config(tiny_data, tmp_path / "b", max_updates=0, init_from=[f"{source}:speech_encoder.,decoder."])
    )
    assert state.step == 0
    a, b = _params(tmp_path / "a/checkpoint_last.safetensors"), _params(tmp_path / "b/checkpoint_last.safetensors")
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("speech_encoder.", "decoder.")))
