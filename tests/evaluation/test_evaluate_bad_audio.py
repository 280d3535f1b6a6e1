"""`evaluate` with a model that reads audio (Whisper) on a manifest whose audio has gone bad: it stops with the
count and the first names in one line, or with --skip-bad-audio scores the rest and counts the skipped ones
in report.json and report.md. The model's 30 s window bounds --max-chunk-seconds of translate."""

import json
import shutil

import pytest

from speechmt.cli import main
from speechmt.config import DataConfig, ExperimentConfig, TrainConfig, save_config
from speechmt.data.mustc import prepare_mustc
from speechmt.data.prepare import PrepareConfig
from speechmt.models.config import ModelConfig
from tests.conftest import ASSETS
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_model(tmp_path_factory) -> tuple[str, object]:
    """(checkpoint of a tiny Whisper ST model after 1 update, the prepared copy of the replica it reads)."""
    root = tmp_path_factory.mktemp("bad_audio")
    shutil.copytree(ASSETS / "mustc", root / "mustc")  # its audio is broken below, never the committed one
    prepare_mustc(root / "mustc", root / "data", "de", cfg=PrepareConfig(jobs=1))
    base = tiny_whisper_dir(root / "whisper")
    model = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(base), "finetune": "frozen"},
        decoder={"kind": "whisper"},
        dropout=0.0,
    )
    cfg = ExperimentConfig(
        model=model,
        data=DataConfig(dir=str(root / "data"), spec_augment="", tgt_lang="de"),
        train=TrainConfig(
            max_updates=1, warmup_updates=1, save_dir=str(root / "exp"), valid_decode=False, log_interval=1
        ),
    )
    save_config(cfg, root / "conf.yaml")
    assert main(["train", "--config", str(root / "conf.yaml")]) == 0
    ckpt = next(p for p in (root / "exp").glob("checkpoint_last*") if p.suffix == ".safetensors")
    return str(ckpt), root


def _evaluate(ckpt, root, out, *extra) -> list[str]:
    return [
        "evaluate",
        "--model",
        ckpt,
        "--data",
        str(root / "data"),
        "--split",
        "train",
        "--beam",
        "1",
        "--max-len-b",
        "5",
        "--out",
        str(out),
        *extra,
    ]


def test_unreadable_audio_stops_evaluate_with_the_count_and_names_unless_skipped(whisper_model, tmp_path, capsys):
    ckpt, root = whisper_model
    wav = root / "mustc/en-de/data/train/wav/ted_2.wav"
    good = wav.read_bytes()
    wav.write_text("not audio any more")
    try:
        assert main(_evaluate(ckpt, root, tmp_path / "ev")) == 2
        err = capsys.readouterr().err
        assert err == (
            f"speechmt: error: {root / 'data/train.jsonl'}: 3 of 6 utterances have unreadable audio: "
            "ted_2_0 (ted_2.wav: cannot decode), ted_2_1 (ted_2.wav: cannot decode), ted_2_2 (ted_2.wav: "
            "cannot decode); pass --skip-bad-audio to score the others\n"
        )
        assert not (tmp_path / "ev").exists()

        with pytest.warns(
            UserWarning, match="3 of 6 utterances have unreadable audio: .*; skipped, the other 3 scored"
        ):
            assert main(_evaluate(ckpt, root, tmp_path / "ev", "--skip-bad-audio")) == 0
        out = capsys.readouterr().out
        assert "skipped 3 utterances with unreadable audio (listed in the report)" in out
        report = json.loads((tmp_path / "ev/report.json").read_text())
        assert report["n"] == 3
        assert report["extra"]["skipped"] == {
            "count": 3,
            "reason": "unreadable audio",
            "ids": ["ted_2_0", "ted_2_1", "ted_2_2"],
        }
        assert (
            "- skipped (unreadable audio): 3: `ted_2_0`, `ted_2_1`, `ted_2_2`"
            in (tmp_path / "ev/report.md").read_text()
        )
        assert len((tmp_path / "ev/hyps.txt").read_text().splitlines()) == 3

        wav.unlink()
        (root / "mustc/en-de/data/train/wav/ted_1.wav").rename(tmp_path / "ted_1.wav")
        assert main(_evaluate(ckpt, root, tmp_path / "ev2", "--skip-bad-audio")) == 2  # nothing left to score
        assert capsys.readouterr().err.endswith(
            "6 of 6 utterances have unreadable audio: ted_1_0 (ted_1.wav: file not "
            "found), ted_1_1 (ted_1.wav: file not found), ted_1_2 (ted_1.wav: file "
            "not found), ...; nothing to score\n"
        )
        (tmp_path / "ted_1.wav").rename(root / "mustc/en-de/data/train/wav/ted_1.wav")
    finally:
        wav.write_bytes(good)
    assert main(_evaluate(ckpt, root, tmp_path / "ev3")) == 0
    assert "skipped" not in json.loads((tmp_path / "ev3/report.json").read_text())["extra"]


def test_max_chunk_seconds_beyond_the_whisper_window_is_one_line(whisper_model, capsys):
    ckpt, _ = whisper_model
    wav = str(ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav")
    assert main(["translate", wav, "--model", ckpt, "--max-chunk-seconds", "45"]) == 2
    assert capsys.readouterr().err == (
        f"speechmt translate: error: argument --max-chunk-seconds: invalid value '45': "
        f"{ckpt} takes at most 30 s of audio at once\n"
    )
    assert (
        main(["translate", wav, "--model", ckpt, "--max-chunk-seconds", "30", "--beam", "1", "--max-len-b", "3"]) == 0
    )
