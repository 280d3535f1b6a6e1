"""recipes/common/env.sh's speechmt_train: the plain command on one GPU, torchrun with N ranks on N."""

import subprocess
from pathlib import Path

import pytest

ENV = Path(__file__).resolve().parent.parent / "recipes/common/env.sh"


@pytest.mark.parametrize(
    "gpus, expected",
    [
        (1, "speechmt train --config c.yaml a.b=1"),
        (4, "torchrun --standalone --nproc-per-node 4 --module speechmt train --config c.yaml a.b=1"),
    ],
)
def test_speechmt_train_runs_under_torchrun_with_several_gpus(tmp_path, gpus, expected):
    for name in ("speechmt", "torchrun"):  # stand-ins that print how they were called
        stub = tmp_path / name
        stub.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        stub.chmod(0o755)
    script = f"SPEECHMT={tmp_path}/speechmt; source {ENV}; gpus={gpus}; speechmt_train --config c.yaml a.b=1"
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expected
