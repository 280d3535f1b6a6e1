"""research/mustc/local/data_ablation.sh with a stand-in `speechmt` that records its calls: the steps in order, the
data sets' differences (all-data: its own folder, augmentation, encoder states live), runs started from the right
checkpoints, benchmark systems named by data set first, CPU seconds per step, and a rerun that skips finished
steps."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "research" / "mustc" / "local" / "data_ablation.sh"
STUB = """#!/bin/bash
echo "speechmt $*" >> "$CALLS"
out=""; prev=""
for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
cmd=$1; case "$1" in data|import|research) cmd=$2 ;; esac
case "$cmd" in
  synth) mkdir -p "$out/en-de/data/tst-COMMON" "$out/en-de/data/tst-kal" ;;
  prepare) mkdir -p "$out"; for s in train dev tst-COMMON tst-kal train-tts-all; do echo "{\\"id\\": \\"$s\\"}" > "$out/$s.jsonl"; done ;;
  *) case "$out" in *.safetensors) mkdir -p "$(dirname "$out")"; touch "$out" ;; "") ;; *) mkdir -p "$out"; echo "{\\"id\\": \\"$1\\"}" > "$out/train.jsonl" ;; esac ;;
esac
"""

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or not Path("/usr/bin/time").exists(), reason="needs bash and /usr/bin/time"
)


def _run(tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    for name in ("speechmt", "python"):
        (tmp_path / name).write_text(STUB.replace("speechmt $*", f"{name} $*"))
        (tmp_path / name).chmod(0o755)
    env = {
        **os.environ,
        "SPEECHMT": str(tmp_path / "speechmt"),
        "PYTHON": str(tmp_path / "python"),
        "CALLS": str(calls),
    }
    res = subprocess.run(
        [
            "bash",
            str(DRIVER),
            "--size",
            "tiny",
            "--corpus",
            str(tmp_path / "corpus"),
            "--work",
            str(tmp_path / "work"),
            "--report",
            str(tmp_path / "report"),
            "--mt-updates",
            "2",
            "--limit",
            "4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res, calls.read_text().splitlines() if calls.exists() else []


def _command(call: str) -> str:
    """A recorded call's command, as the driver spells it: "train", "data synth mustc", "research benchmark", ..."""
    words = call.split()[1:]
    if words[0] not in ("data", "import", "research"):
        return words[0]
    return " ".join(words[:3] if words[2:3] in (["mustc"], ["covost2"]) else words[:2])


def test_the_ablation_runs_every_step_once_and_a_rerun_skips_them(tmp_path):
    res, calls = _run(tmp_path)
    assert res.returncode == 0, res.stderr
    commands = [_command(c) for c in calls]
    assert commands == [
        "data synth mustc",
        "data prepare mustc",
        "data synth-mt mustc",
        "train",
        "average",
        "train",
        "train",
        "average",
        "data synth-mt mustc",
        "data backtranslate",
        "data distill",
        "data synth-tts",
        "data prepare mustc",
        "train",
        "average",
        "train",
        "train",
        "average",
        "research benchmark",
        "research benchmark",
        "../../benchmarks/bleu_by_voice.py",
        "../../benchmarks/bleu_by_voice.py",
    ]
    assert "--hold-out-voice kal" in calls[0] and "--splits train dev tst-COMMON tst-kal" in calls[1]
    trains = [c for c in calls if c.startswith("speechmt train")]
    work = tmp_path / "work"
    for call in trains[:3]:
        assert f"data.dir={work}/data " in call and "augment" not in call and "cache_encoder" not in call
    assert "train.max_updates=2" in trains[0] and "max_updates" not in trains[1]
    assert f"data.dir={work}/all-data " in trains[4] and "data.cache_encoder=false data.augment_noise=0.3" in trains[4]
    assert "augment" not in trains[3]  # text MT reads no audio
    assert f"{work}/all-data/lm_mt/checkpoint_avg.safetensors:decoder." in trains[5]
    assert f"{work}/all-data/lm_ctc/checkpoint_last.safetensors:speech_encoder.,ctc_head." in trains[5]
    assert f"--model {work}/corpus-only/lm_mt/checkpoint_avg.safetensors --task mt" in calls[10]
    bench = [c for c in calls if c.startswith("speechmt research benchmark")]
    assert "--split tst-COMMON" in bench[0] and "--split tst-kal" in bench[1] and "--limit 4" in bench[1]
    assert bench[0].count("--name") == 4 and "--name corpus-only lm-st --task st" in bench[0]
    assert "--name all-data lm-mt --task mt" in bench[0]
    # all-data's folder: training = corpus + voiced text; extra text = every source + back-translated + distilled
    assert (work / "all-data" / "train.jsonl").read_text().splitlines() == [
        '{"id": "train"}',
        '{"id": "train-tts-all"}',
    ]
    assert len((work / "all-data" / "mt-text" / "train.jsonl").read_text().splitlines()) == 3
    assert (work / "all-data" / "tst-kal.jsonl").is_symlink()
    table = (tmp_path / "report" / "cpu_time.md").read_text().splitlines()
    assert table[2].startswith("| corpus-only lm-st | ") and table[3].startswith("| all-data lm-st | ")
    steps = (tmp_path / "report" / "cpu_time.tsv").read_text().splitlines()
    assert steps[0] == "step\tuser_s\tsystem_s\twall_s" and len(steps) == 1 + 20
    # a rerun calls nothing; a step marked unfinished runs again, alone
    res, calls = _run(tmp_path)
    assert res.returncode == 0 and calls == [] and res.stdout.count("(done)") == 22
    (work / "done" / "all-data-lm_st").unlink()
    res, calls = _run(tmp_path)
    assert res.returncode == 0 and [c.split()[1] for c in calls] == ["train"]
    assert len((tmp_path / "report" / "cpu_time.tsv").read_text().splitlines()) == 1 + 21
