"""Progressive multi-task training: stages of streams, freezing, mixing, and exact resume across stages."""

import json
from collections import Counter

import pytest
import torch

from speechmt.checkpoint import load_checkpoint
from speechmt.config import ConfigError
from speechmt.models.build import build_model
from speechmt.tasks import Stage, TaskData
from speechmt.training.builders import build_dataset, frontend_for, load_tokenizers, model_config_for
from speechmt.training.run import run_training, seed_everything
from speechmt.training.trainer import Trainer, draw_streams
from tests.helpers import tiny_config


def _params(path):
    return load_checkpoint(path)["model"]


def _same(a, b, prefix=""):
    keys = [k for k in a if k.startswith(prefix)]
    return keys and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in keys)


def _multi(data, save_dir, max_updates, mix="together", **train):
    """MT (decoder frozen) for 3 updates, then ST + ASR + MT; one joint vocabulary, so one decoder serves all."""
    cfg = tiny_config(
        data,
        save_dir,
        max_updates=max_updates,
        save_interval_updates=2,
        validate_interval_updates=3,
        valid_decode=False,
        **train,
    )
    cfg.model.text_encoder.layers = cfg.model.encoder.layers
    cfg.data.max_tokens = 700  # several batches per epoch
    cfg.train.stages = [
        Stage("mt", [TaskData("mt")], updates=3, freeze=["decoder."]),
        Stage("all", [TaskData("st", {"ce": 0.7, "ctc": 0.3}), TaskData("asr"), TaskData("mt")], mix=mix),
    ]
    return cfg


def test_an_explicit_one_stage_schedule_equals_the_plain_config(tiny_data, tmp_path):
    plain = tiny_config(tiny_data, tmp_path / "plain", max_updates=5, ctc_weight=0.3, update_freq=2)
    plain.data.max_tokens = 700
    staged = tiny_config(tiny_data, tmp_path / "staged", max_updates=5, update_freq=2)
    staged.data.max_tokens = 700
    staged.train.stages = [Stage("st", [TaskData("st", {"ce": 0.7, "ctc": 0.3})])]
    run_training(plain), run_training(staged)
    assert _same(
        _params(tmp_path / "plain/checkpoint_last.safetensors"),
        _params(tmp_path / "staged/checkpoint_last.safetensors"),
    )


@pytest.fixture(scope="module")
def straight_7(tiny_data, tmp_path_factory):
    out, threads = tmp_path_factory.mktemp("straight"), torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests (conftest's _one_thread is set up after module fixtures)
    try:
        state = run_training(_multi(tiny_data, out, 7))
    finally:
        torch.set_num_threads(threads)
    return out, state


def test_stages_run_in_order_with_their_streams_and_freezing(tiny_data, straight_7):
    out, state = straight_7
    assert state.step == 7 and state.stage == 1 and state.stage_start == 3
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert [(r["step"], r["name"]) for r in log if r["type"] == "stage"] == [(3, "all")]
    train = [r for r in log if r["type"] == "train"]
    assert {"ce", "ce_nll"} <= set(train[0]) and "st_ctc" not in train[0]  # stage mt: one stream
    assert {"st_ce", "st_ctc", "st_ce_nll", "asr_ce", "mt_ce"} <= set(train[-1])  # stage all: prefixed by stream
    valid = [r for r in log if r["type"] == "valid"]
    assert {"valid_st_ce", "valid_asr_ce", "valid_mt_ce", "valid_st_ctc"} <= set(valid[-1])
    expected = (
        0.7 * valid[-1]["valid_st_ce"]
        + 0.3 * valid[-1]["valid_st_ctc"]
        + valid[-1]["valid_asr_ce"]
        + valid[-1]["valid_mt_ce"]
    )
    assert valid[-1]["valid_loss"] == pytest.approx(expected)
    # the decoder was frozen through stage mt: at update 2 it is the freshly built one, the text encoder is not
    cfg = _multi(tiny_data, out, 7)
    seed_everything(cfg.train.seed)
    fresh = build_model(model_config_for(cfg, load_tokenizers(cfg.data))).state_dict()
    at_2 = _params(out / "checkpoint_2.safetensors")
    assert _same(at_2, fresh, "decoder.") and not _same(at_2, fresh, "text_encoder.")
    assert not _same(_params(out / "checkpoint_6.safetensors"), fresh, "decoder.")


@pytest.mark.parametrize("stop", [3, 5])  # at the stage boundary, and mid-way through the three-stream stage
def test_resume_across_and_within_stages_equals_uninterrupted(tiny_data, tmp_path, straight_7, stop):
    run_training(_multi(tiny_data, tmp_path, stop))
    resumed = run_training(_multi(tiny_data, tmp_path, 7))
    assert resumed.step == 7 and resumed.positions == straight_7[1].positions != {}
    assert _same(
        _params(tmp_path / "checkpoint_last.safetensors"), _params(straight_7[0] / "checkpoint_last.safetensors")
    )


def test_mix_sample_draws_by_ratio_and_resumes_exactly(tiny_data, tmp_path):
    picks = [i for step in range(3000) for i in draw_streams(1, step, [1.0, 3.0], 2)]
    counts = Counter(picks)
    assert abs(counts[1] / len(picks) - 0.75) < 0.02 and draw_streams(1, 17, [1, 3], 4) == draw_streams(
        1, 17, [1, 3], 4
    )
    run_training(_multi(tiny_data, tmp_path / "a", 5, mix="sample"))
    run_training(_multi(tiny_data, tmp_path / "a", 8, mix="sample"))
    run_training(_multi(tiny_data, tmp_path / "b", 8, mix="sample"))
    assert _same(
        _params(tmp_path / "a/checkpoint_last.safetensors"), _params(tmp_path / "b/checkpoint_last.safetensors")
    )


def test_asr_with_st_needs_one_vocabulary(tiny_data, tmp_path):
    cfg = _multi(tiny_data, tmp_path, 7)
    cfg.data.tgt_vocab = str(tmp_path / "other.model")
    with pytest.raises(ConfigError, match="asr together with st or mt shares one decoder"):
        run_training(cfg)


def test_resume_right_after_an_epochs_last_batch_goes_on_to_the_next_epoch(tiny_data, tmp_path):
    """The sampler restarts an epoch it has finished; the trainer must roll over to the next one instead."""
    from speechmt.data.batching import BucketBatchSampler
    from speechmt.training.builders import build_dataset, frontend_for

    def cfg(out, n):
        c = tiny_config(tiny_data, out, max_updates=n, valid_decode=False)
        c.data.max_tokens = 700
        return c

    c = cfg(tmp_path, 1)
    data = build_dataset(c, "train", load_tokenizers(c.data), frontend_for(c), train=True)
    n = len(BucketBatchSampler(data.sizes, 700, shuffle=True, seed=c.train.seed))  # batches in epoch 0
    run_training(cfg(tmp_path / "a", n))
    resumed = run_training(cfg(tmp_path / "a", n + 2))
    straight = run_training(cfg(tmp_path / "b", n + 2))
    assert (resumed.epoch, resumed.batches_in_epoch) == (straight.epoch, straight.batches_in_epoch) == (1, 2)
    assert _same(
        _params(tmp_path / "a/checkpoint_last.safetensors"), _params(tmp_path / "b/checkpoint_last.safetensors")
    )


def test_a_missing_vocabulary_is_a_one_line_error(tiny_data, tmp_path, capsys):
    from speechmt.cli import main
    from speechmt.config import save_config

    cfg = tiny_config(tiny_data, tmp_path / "run", max_updates=1)
    cfg.data.tgt_vocab = ""
    save_config(cfg, tmp_path / "c.yaml")
    assert main(["train", "--config", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "speechmt: error: the decoder needs data.tgt_vocab (a SentencePiece model from `speechmt data vocab`)"
    )


def test_each_stream_batches_by_its_own_size(tiny_data, tmp_path):
    """Text streams count tokens where audio streams count frames: a stream's max_tokens/max_sentences
    replace data's for its batches."""
    cfg = _multi(tiny_data, tmp_path, 7)
    cfg.train.stages = [Stage("all", [TaskData("st"), TaskData("mt", max_tokens=30, max_sentences=2)])]
    toks = load_tokenizers(cfg.data)
    frontend = frontend_for(cfg)
    model = build_model(model_config_for(cfg, toks))
    trainer = Trainer(
        cfg,
        model,
        None,
        lambda spec, train: build_dataset(cfg, "train", toks, frontend, train, spec=spec),
        {},
        torch.device("cpu"),
        0,
    )
    trainer._enter_stage()
    st, mt = (s.sampler for s in trainer.streams)
    assert st.max_tokens == cfg.data.max_tokens and st.max_sentences is None
    assert (mt.max_tokens, mt.max_sentences) == (30, 2)
    sizes = trainer.streams[1].train.sizes
    assert all(len(b) <= 2 and len(b) * max(sizes[i] for i in b) <= 30 for b in mt)
    with pytest.raises(ValueError, match="task mt: max_tokens must be an integer >= 0"):
        TaskData("mt", max_tokens=-1)


def test_a_relative_stream_folder_is_inside_data_dir(tiny_data, tmp_path):
    """Extra text written by `speechmt synth-mt --out DATA/mt-text` is named `data_dir: mt-text` in a config."""
    from speechmt.training.builders import stream_dir

    cfg = _multi(tiny_data, tmp_path, 7)
    assert stream_dir(cfg, TaskData("mt")) == cfg.data.dir
    assert stream_dir(cfg, TaskData("mt", data_dir="mt-text")) == str(tiny_data / "mt-text")
    assert stream_dir(cfg, TaskData("mt", data_dir=str(tmp_path))) == str(tmp_path)
    extra = tiny_data / "mt-text"
    extra.mkdir(exist_ok=True)
    lines = [
        json.dumps({**json.loads(x), "audio": "", "n_frames": 0, "duration": 0.0})
        for x in (tiny_data / "train.jsonl").read_text().splitlines()[:5]
    ]
    (extra / "train.jsonl").write_text("\n".join(lines) + "\n")
    toks = load_tokenizers(cfg.data)
    frontend = frontend_for(cfg)
    ds = build_dataset(cfg, "train", toks, frontend, True, spec=TaskData("mt", data_dir="mt-text"))
    assert len(ds) == 5 and ds[0].feats is None and ds[0].src_ids is not None
