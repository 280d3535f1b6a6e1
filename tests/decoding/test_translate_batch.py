"""A batch survives bad items: every readable file is translated, every unreadable one is named in one stderr
line (and has an "error" in JSON output), and the exit status is 1; audio too short to translate (10 ms, one
sample, a header without samples) gives one warning line naming the file and its length, an empty text and
exit status 0. Valid values at the edges of the options' ranges translate cleanly."""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from speechmt import load_model, translate
from speechmt.audio import AudioError
from speechmt.cli import main
from tests.conftest import ASSETS
from tests.helpers import two_update_st

GOOD = [ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav", ASSETS / "mustc/en-de/data/tst-COMMON/wav/ted_4.wav"]
FAST = ["--beam", "1", "--max-len-b", "8"]  # an untrained model would otherwise decode 200 tokens per chunk


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory) -> str:
    """A tiny ST model after 2 updates: it translates badly, and quickly."""
    return two_update_st(tiny_data, tmp_path_factory.mktemp("batch_exp"))


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """Bad and too-short audio files beside the two good ones."""
    sf.write(tmp_path / "ten_ms.wav", np.full(160, 0.01, dtype=np.float32), 16000)
    sf.write(tmp_path / "one_sample.wav", np.array([0.1], dtype=np.float32), 16000)
    sf.write(tmp_path / "full.wav", np.zeros(1600, dtype=np.float32), 16000)
    (tmp_path / "header_only.wav").write_bytes((tmp_path / "full.wav").read_bytes()[:44])  # truncated after the header
    (tmp_path / "text.wav").write_text("this is not audio")
    (tmp_path / "empty.wav").write_bytes(b"")
    sf.write(tmp_path / "nan.wav", np.array([0.1, np.nan] * 800, dtype=np.float32), 16000, subtype="FLOAT")
    names = ["ten_ms", "one_sample", "header_only", "text", "empty", "nan"]
    return {
        "good1": str(GOOD[0]),
        "good2": str(GOOD[1]),
        "missing": str(tmp_path / "missing.wav"),
        **{name: str(tmp_path / f"{name}.wav") for name in names},
    }


BAD = {"text": "cannot decode audio", "empty": "empty file", "missing": "file not found", "nan": "non-finite samples"}
SHORT = {"ten_ms": "10 ms of audio", "one_sample": "0.0625 ms of audio", "header_only": "0 ms of audio (no samples)"}


def _short_warning(path: str, length: str) -> str:
    return f"{path}: {length}, shorter than the model's smallest input (25 ms); nothing to translate"


def test_translate_keeps_going_past_bad_and_short_inputs(checkpoint, files):
    lm = load_model(checkpoint)
    order = ["good1", "text", "ten_ms", "missing", "one_sample", "empty", "header_only", "nan", "good2"]
    with pytest.warns(UserWarning) as caught:
        results = translate(lm, [files[k] for k in order], beam=1, max_len_b=8, errors="keep")
    by_name = dict(zip(order, results))
    for name in ("good1", "good2"):
        r = by_name[name]
        assert r.error is None and r.warning is None and r.text and len(r.chunks) == 1
        assert r.audio_seconds == pytest.approx(sf.info(files[name]).duration, abs=1e-3)
    for name, words in BAD.items():
        r = by_name[name]
        assert r.error.startswith(f"{files[name]}: ") and words in r.error and r.text == "" and not r.chunks
    for name, length in SHORT.items():
        r = by_name[name]
        assert r.error is None and r.text == "" and r.warning == _short_warning(files[name], length)
    assert [str(w.message) for w in caught] == [by_name[n].warning for n in order if n in SHORT]
    alone = translate(lm, [files["good1"]], beam=1, max_len_b=8)
    assert alone[0].text == by_name["good1"].text


def test_translate_raises_on_a_bad_input_unless_told_to_keep_going(checkpoint, files):
    lm = load_model(checkpoint)
    with pytest.raises(AudioError, match="text.wav: cannot decode audio"):
        translate(lm, [files["good1"], files["text"]], beam=1, max_len_b=8)


def test_the_command_names_each_bad_file_warns_each_short_one_and_exits_1(checkpoint, files):
    order = ["good1", "text", "ten_ms", "missing", "header_only", "good2"]
    done = subprocess.run(
        [sys.executable, "-m", "speechmt", "translate", *[files[k] for k in order], "--model", checkpoint, *FAST],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"speechmt: warning: {_short_warning(files['ten_ms'], SHORT['ten_ms'])}",
        f"speechmt: warning: {_short_warning(files['header_only'], SHORT['header_only'])}",
        f"speechmt: error: {files['text']}: cannot decode audio (Error opening {files['text']!r}: Format not "
        "recognised.)",
        f"speechmt: error: {files['missing']}: file not found",
    ]
    out = [line.split("\t") for line in done.stdout.splitlines()]
    assert [f for f, _ in out] == [files[k] for k in order if k not in BAD]  # readable files, in order
    texts = dict(out)
    assert (
        texts[files["good1"]] and texts[files["good2"]] and texts[files["ten_ms"]] == texts[files["header_only"]] == ""
    )


def test_json_output_carries_the_error_and_the_warning(checkpoint, files, capsys):
    order = ["good1", "nan", "one_sample", "good2"]
    with pytest.warns(UserWarning, match="one_sample.wav: 0.0625 ms of audio"):
        status = main(["translate", *[files[k] for k in order], "--model", checkpoint, "--format", "json", *FAST])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err == f"speechmt: error: {files['nan']}: non-finite samples (NaN or Inf)\n"
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [d["file"] for d in lines] == [files[k] for k in order]
    good1, nan, short, good2 = lines
    assert "error" not in good1 and "warning" not in good1 and good1["text"] and good2["text"]
    assert nan["error"] == f"{files['nan']}: non-finite samples (NaN or Inf)" and nan["text"] == ""
    assert short["warning"] == _short_warning(files["one_sample"], SHORT["one_sample"]) and short["text"] == ""


def test_short_files_alone_are_not_a_failure(checkpoint, files, capsys):
    with pytest.warns(UserWarning):
        assert (
            main(["translate", files["ten_ms"], files["header_only"], files["good2"], "--model", checkpoint, *FAST])
            == 0
        )
    assert capsys.readouterr().err == ""  # the warnings went to pytest here; a terminal shows one line each


def test_timing_mode_also_goes_on_past_a_bad_file(checkpoint, files, capsys):
    assert (
        main(["translate", files["good1"], files["missing"], files["good2"], "--model", checkpoint, "--timing", *FAST])
        == 1
    )
    captured = capsys.readouterr()
    assert captured.err == f"speechmt: error: {files['missing']}: file not found\n"
    assert [line.split("\t")[0] for line in captured.out.splitlines()] == [files["good1"], files["good2"]]


@pytest.mark.parametrize(
    "options",
    [
        ["--beam", "1", "--len-penalty", "-3", "--max-len-b", "0"],
        ["--beam", "3", "--nbest", "3", "--max-len-a", "0.05", "--max-len-b", "5", "--len-penalty", "10"],
        ["--beam", "2", "--max-len-b", "5", "--len-penalty=-10"],
        ["--max-chunk-seconds", "3600", "--batch-size", "4096", "--beam", "2", "--max-len-b", "5"],
        ["--max-chunk-seconds", "1.5", "--batch-size", "1", "--beam", "1", "--max-len-b", "5"],
    ],
)
def test_values_at_the_edges_of_the_allowed_ranges_translate_cleanly(checkpoint, options, capsys):
    assert main(["translate", *map(str, GOOD), "--model", checkpoint, "--format", "json", *options]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and len(captured.out.splitlines()) == 2
