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


@pytest.mark.parametrize("gpus", [1, 4])
def test_speechmt_train_appends_the_directions_of_a_run_of_several(tmp_path, gpus):
    for name in ("speechmt", "torchrun"):
        stub = tmp_path / name
        stub.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        stub.chmod(0o755)
    script = (
        f"SPEECHMT={tmp_path}/speechmt; source {ENV}; gpus={gpus}; train_directions=en-de,en-fr; "
        "speechmt_train --config c.yaml a.b=1; train_directions=; speechmt_train --config c.yaml"
    )
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    several, one = res.stdout.splitlines()
    assert several.endswith("train --config c.yaml a.b=1 data.directions=[en-de,en-fr]")
    assert one.endswith("train --config c.yaml")


STAGES = ENV.parent / "train_stages.sh"


@pytest.mark.parametrize(
    "sources, targets, test_sets, expected",
    [
        (
            "en",
            "de es fr",
            "tst-COMMON tst-HE_en-fr",
            "en-de,en-es,en-fr|en-de|<en> <de> <es> <fr>|<en>|tst-COMMON_en-de tst-COMMON_en-es tst-COMMON_en-fr tst-HE_en-fr",
        ),
        (
            "de es fr",
            "en",
            "test",
            "de-en,es-en,fr-en|de-en|<de> <es> <fr> <en>|<de> <es> <fr>|test_de-en test_es-en test_fr-en",
        ),
        # every source into every other target, never a language into itself
        ("de en", "en de", "test", "de-en,en-de|de-en|<de> <en>|<de> <en>|test_de-en test_en-de"),
    ],
)
def test_use_directions(sources, targets, test_sets, expected):
    script = (
        f"source {ENV}; source {STAGES}; test_sets='{test_sets}'; use_directions '{sources}' '{targets}'; "
        'echo "$train_directions|$src_lang-$tgt_lang|${st_tags[*]}|${asr_tags[*]}|$test_sets"'
    )
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expected
