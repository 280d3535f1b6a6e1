"""The cascade: a tiny ASR model and a tiny MT model, each overfit on the replica, chained reproduce the
training translations; wrong model kinds fail with one line."""

import json

import pytest

from speechmt import load_model
from speechmt.audio import read_audio
from speechmt.checkpoint import CheckpointError
from speechmt.cli import main
from speechmt.config import save_config
from speechmt.data.manifest import read_manifest
from speechmt.decoding.cascade import cascade_translate, check_cascade, load_cascade, translate_texts
from tests.helpers import tiny_config


def _train(cfg, exp) -> str:
    save_config(cfg, exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return str(exp / "checkpoint_last.safetensors")


@pytest.fixture(scope="module")
def pair(tiny_data, tmp_path_factory):
    """(ASR checkpoint, MT checkpoint), each trained until it reproduces the replica's 6 training segments."""
    common = dict(
        max_updates=200,
        save_interval_updates=100,
        validate_interval_updates=200,
        lr=3e-3,
        warmup_updates=20,
        valid_decode=False,
    )
    asr_dir, mt_dir = tmp_path_factory.mktemp("asr"), tmp_path_factory.mktemp("mt")
    asr = _train(tiny_config(tiny_data, asr_dir, task="asr", **common), asr_dir)
    mt_cfg = tiny_config(tiny_data, mt_dir, task="mt", **common)
    mt_cfg.model.text_encoder.layers = mt_cfg.model.encoder.layers
    mt_cfg.model.text_encoder.shared = True
    return asr, _train(mt_cfg, mt_dir)


@pytest.mark.slow
def test_cascade_reproduces_training_translations(pair, tiny_data):
    asr, mt = (load_model(p) for p in pair)
    records = read_manifest(tiny_data / "train.jsonl")
    assert translate_texts(mt, [r.src_text for r in records], mt.decode_options(4)) == [r.tgt_text for r in records]
    waves = [read_audio(r.audio, r.offset, r.duration) for r in records]
    results = cascade_translate(asr, mt, waves, beam=4)
    assert [r.transcript for r in results] == [r.src_text for r in records]
    assert [r.text for r in results] == [r.tgt_text for r in records]
    assert all(len(r.chunks) == len(r.chunk_texts) == 1 for r in results)


@pytest.mark.slow
def test_cli_evaluate_and_translate_cascade(pair, tiny_data, tmp_path, capsys):
    assert (
        main(
            [
                "evaluate",
                "--cascade",
                *pair,
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--beam",
                "4",
                "--out",
                str(tmp_path / "ev"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ASR WER = 0.00" in out and "BLEU = 100.00" in out
    report = json.loads((tmp_path / "ev/report.json").read_text())
    assert report["n"] == 6 and report["extra"]["task"] == "cascade"
    assert report["extra"]["decode_seconds"] == pytest.approx(
        report["extra"]["asr_seconds"] + report["extra"]["mt_seconds"], abs=2e-3
    )
    assert (
        main(
            [
                "evaluate",
                "--cascade",
                *pair,
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--beam",
                "4",
                "--limit",
                "3",
                "--out",
                str(tmp_path / "ev3"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert json.loads((tmp_path / "ev3/report.json").read_text())["n"] == 3
    wav = read_manifest(tiny_data / "train.jsonl")[0].audio
    assert main(["translate", wav, "--cascade", *pair, "--format", "json"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["transcript"] and line["text"] and len(line["chunk_texts"]) == len(line["chunks"])


@pytest.mark.slow
def test_cascade_rejects_models_in_the_wrong_roles(pair):
    asr, mt = (load_model(p) for p in pair)
    with pytest.raises(CheckpointError, match="must be an ASR model, got task 'mt'"):
        check_cascade(mt, asr)
    with pytest.raises(CheckpointError, match="must be a text MT model, got task 'asr'"):
        check_cascade(asr, asr)
    with pytest.raises(
        CheckpointError, match=r"first model must be an ASR model \(not trained for task 'asr'; it does mt\)"
    ):
        load_cascade(pair[1], pair[0])
    assert [m.task for m in load_cascade(*pair)] == ["asr", "mt"]


def test_evaluate_takes_model_or_cascade_not_both(tmp_path, capsys):
    assert main(["evaluate", "--model", "m", "--cascade", "a", "b", "--data", str(tmp_path), "--split", "test"]) == 2
    assert capsys.readouterr().err.strip() == "speechmt: error: evaluate takes --model M or --cascade ASR MT, not both"


def test_evaluate_without_model_uses_the_default_model_and_fails_on_missing_data_in_one_line(tmp_path, capsys):
    assert main(["evaluate", "--data", str(tmp_path), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("speechmt: error: ") and f"{tmp_path}/test.jsonl" in err and "\n" not in err


@pytest.mark.slow
def test_benchmark_scores_the_cascade_as_one_system(pair, tiny_data, tmp_path, capsys):
    assert (
        main(
            [
                "research",
                "benchmark",
                "--cascade",
                *pair,
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--beam",
                "4",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    (row,) = json.loads((tmp_path / "b/benchmark.json").read_text())["systems"]
    asr, mt = (load_model(p) for p in pair)
    assert row["task"] == "st" and row["n"] == 6 and row["metrics"]["BLEU"]["score"] == pytest.approx(100.0)
    assert row["params"] == sum(p.numel() for m in (asr, mt) for p in m.model.parameters())
    assert row["name"].startswith("cascade ")
