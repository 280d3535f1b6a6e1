"""The whole path on the committed replica: train (overfit) -> average -> evaluate -> translate."""

import json

import pytest

from speechmt import load_model, translate
from speechmt.cli import main
from speechmt.config import save_config
from speechmt.data.manifest import read_manifest
from tests.helpers import tiny_config


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    exp = tmp_path_factory.mktemp("exp")
    cfg = tiny_config(
        tiny_data,
        exp,
        max_updates=200,
        save_interval_updates=50,
        validate_interval_updates=100,
        lr=3e-3,
        warmup_updates=20,
    )
    save_config(cfg, exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return exp


@pytest.mark.slow
def test_overfit_model_translates_its_training_audio_exactly(trained, tiny_data):
    lm = load_model(trained / "checkpoint_last.safetensors")
    records = read_manifest(tiny_data / "train.jsonl")
    # whole talk files hold several segments: translate the exact segments as arrays
    from speechmt.audio import read_audio

    waves = [read_audio(r.audio, r.offset, r.duration) for r in records]
    results = translate(lm, waves, beam=4)
    assert [r.text for r in results] == [r.tgt_text for r in records]


@pytest.mark.slow
def test_mbr_chooses_from_the_beam_by_expected_chrf(trained, tiny_data):
    """The API's mbr="chrf" output is mbr_order of the same beam's 4 hypotheses (not always the beam's best: the
    overfit model's beam holds its target and near variants, and the consensus can be a variant)."""
    from speechmt.audio import read_audio
    from speechmt.decoding.mbr import mbr_order

    lm = load_model(trained / "checkpoint_last.safetensors")
    waves = [read_audio(r.audio, r.offset, r.duration) for r in read_manifest(tiny_data / "train.jsonl")]
    beams = translate(lm, waves, beam=4, nbest=4)
    chosen = translate(lm, waves, beam=4, nbest=2, mbr="chrf")
    assert all(len(b.nbest) == 4 for b in beams)
    assert [c.nbest for c in chosen] == [mbr_order(b.nbest, "chrf")[:2] for b in beams]
    assert [c.text for c in chosen] == [c.nbest[0] for c in chosen]


@pytest.mark.slow
def test_cli_average_evaluate_translate(trained, tiny_data, capsys, tmp_path):
    assert main(["average", str(trained), "--last", "2", "--out", str(trained / "avg.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "average of 2 checkpoints (checkpoint_150.safetensors, checkpoint_200.safetensors)" in out
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(trained / "checkpoint_last.safetensors"),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--out",
                str(tmp_path / "ev"),
                "--results",
                str(tmp_path / "RESULTS.md"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "BLEU = 100.00" in out and "tok:13a" in out
    report = json.loads((tmp_path / "ev/report.json").read_text())
    assert report["n"] == 6 and report["metrics"]["BLEU"]["score"] == pytest.approx(100.0)
    assert (tmp_path / "RESULTS.md").read_text().count("| train |") == 1
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(trained / "checkpoint_last.safetensors"),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--limit",
                "2",
                "--out",
                str(tmp_path / "ev2"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    report = json.loads((tmp_path / "ev2/report.json").read_text())
    ids = [json.loads(line)["id"] for line in (tiny_data / "train.jsonl").read_text().splitlines()]
    assert report["n"] == 2
    assert [line.split("\t")[0] for line in (tmp_path / "ev2/results.tsv").read_text().splitlines()[1:]] == ids[:2]
    # MBR over the beam: the report keeps the setting; the choice is checked in test_mbr_chooses_from_the_beam
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(trained / "checkpoint_last.safetensors"),
                "--data",
                str(tiny_data),
                "--split",
                "train",
                "--limit",
                "3",
                "--beam",
                "4",
                "--mbr",
                "chrf",
                "--out",
                str(tmp_path / "ev3"),
            ]
        )
        == 0
    )
    assert "BLEU = " in capsys.readouterr().out
    report = json.loads((tmp_path / "ev3/report.json").read_text())
    assert (
        report["n"] == 3 and report["extra"]["decode"]["mbr"] == "chrf" and report["extra"]["decode"]["beam_size"] == 4
    )
    from tests.conftest import ASSETS

    wav = ASSETS / "mustc/en-de/data/train/wav/ted_1.wav"
    model = str(trained / "checkpoint_last.safetensors")
    assert main(["translate", str(wav), "--model", model, "--format", "json"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["file"] == str(wav) and line["text"] and line["audio_seconds"] == pytest.approx(6.31, abs=0.01)


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["translate", str(tmp_path / "missing.wav"), "--model", str(tmp_path / "none.safetensors")]) == 2
    assert capsys.readouterr().err.strip() == f"speechmt: error: {tmp_path / 'none.safetensors'}: checkpoint not found"
