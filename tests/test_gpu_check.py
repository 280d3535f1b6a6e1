"""scripts/gpu_check.py stays runnable where no GPU is: its checks on CPUs (gloo, one rank, 4 updates)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_gpu_check_passes_its_checks_on_the_cpu(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/gpu_check.py"),
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--updates",
            "4",
            "--max-ranks",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [k for k in results if k != "environment"] == [
        "bf16_ddp_world_size_1",
        "kill_and_exact_resume",
        "fsdp_world_size_1",
        "decode_on_device",
    ]
    assert results["kill_and_exact_resume"]["max_abs_difference"] == 0.0
    assert all(v["passed"] for k, v in results.items() if k != "environment")
