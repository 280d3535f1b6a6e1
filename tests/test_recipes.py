"""The recipes' data stages, run as a user runs them, on the committed replicas of the released layouts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ASSETS

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "speechmt"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CLI.exists(), reason="the speechmt console script is not installed"),
]


def _run(recipe: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPEECHMT": str(CLI)}
    return subprocess.run(
        ["bash", str(REPO / "recipes" / recipe / "run.sh"), *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_mustc_data_stages(tmp_path):
    res = _run(
        "mustc",
        "--root",
        str(ASSETS / "mustc"),
        "--data",
        str(tmp_path),
        "--st-vocab",
        "60",
        "--stop-stage",
        "2",
        "--asr-vocab",
        "50",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "prepare_summary.json").read_text())
    assert {s: v["kept"] for s, v in summary["splits"].items()} == {"train": 6, "dev": 2, "tst-COMMON": 2}
    assert (tmp_path / "spm_st_60.model").exists() and (tmp_path / "spm_asr_50.model").exists()
    assert "stage 2" in res.stdout


def test_covost_data_stages(tmp_path):
    res = _run("covost2", "--root", str(ASSETS / "covost2"), "--data", str(tmp_path), "--stop-stage", "1")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "train.jsonl").read_text().count("\n") == 4
    assert not (tmp_path / "spm_st_8000.model").exists()


def test_unknown_option_is_refused():
    res = _run("mustc", "--no-such-option", "1")
    assert res.returncode == 2 and "unknown option --no-such-option" in res.stderr
