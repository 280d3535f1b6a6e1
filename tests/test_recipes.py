"""The recipes' data stages, run as a user runs them, on the committed replicas of the released layouts; and the
commands every stage gives, run with a stand-in for speechmt that records them (one pair, several directions)."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ASSETS

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "speechmt"

needs_cli = pytest.mark.skipif(not CLI.exists(), reason="the speechmt console script is not installed")


def _run(recipe: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPEECHMT": str(CLI)}
    return subprocess.run(
        ["bash", str(REPO / "recipes" / recipe / "run.sh"), *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@needs_cli
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


@pytest.mark.slow
@needs_cli
def test_covost_data_stages(tmp_path):
    res = _run("covost2", "--root", str(ASSETS / "covost2"), "--data", str(tmp_path), "--stop-stage", "1")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "train.jsonl").read_text().count("\n") == 4
    assert not (tmp_path / "spm_st_8000.model").exists()


@pytest.mark.slow
@needs_cli
def test_unknown_option_is_refused():
    res = _run("mustc", "--no-such-option", "1")
    assert res.returncode == 2 and "unknown option --no-such-option" in res.stderr


# ---- every stage's commands, from a stand-in speechmt that records them (no data, no training: fast) ----


def _recorded(tmp_path: Path, recipe: str, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """run.sh with SPEECHMT a stand-in that writes each call's arguments (tab-separated) to a log; root, data and
    exp under tmp_path. The result and the calls, each its argument list."""
    log, stub = tmp_path / "calls.log", tmp_path / "speechmt"
    stub.write_text('#!/bin/bash\nprintf \'%s\\t\' "$@" >> "$FAKE_LOG"; echo >> "$FAKE_LOG"\n')
    stub.chmod(0o755)
    log.write_text("")
    paths = ["--root", f"{tmp_path}/corpus", "--data", f"{tmp_path}/d", "--exp", f"{tmp_path}/e"]
    env = {**os.environ, "SPEECHMT": str(stub), "FAKE_LOG": str(log)}
    env.pop("train_directions", None)
    res = subprocess.run(
        ["bash", str(REPO / "recipes" / recipe / "run.sh"), *args, *paths],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = [line.split("\t")[:-1] for line in log.read_text().splitlines()]
    return res, calls


def _lines(tmp_path: Path, calls: list[list[str]]) -> list[str]:
    return [shlex.join(c).replace(str(tmp_path), "TMP") for c in calls]


def _option(call: list[str], name: str) -> str:
    return call[call.index(name) + 1]


# One pair: the commands of the recipes before several directions could train, word for word.
MUSTC_ONE_PAIR = [
    "data prepare mustc --root TMP/corpus --tgt-langs fr --out TMP/d --jobs 2",
    "data vocab TMP/d/train.jsonl --field tgt --vocab-size 8000 --lang-tags '<en>' '<fr>' --out TMP/d/spm_st_8000.model",
    "data vocab TMP/d/train.jsonl --field src --vocab-size 5000 --lang-tags '<en>' --out TMP/d/spm_asr_5000.model",
    "train --config conf/asr_s2t_s.yaml data.dir=TMP/d data.src_vocab=TMP/d/spm_asr_5000.model data.src_lang=en "
    "data.tgt_lang=fr train.task=asr train.save_dir=TMP/e/asr",
    "average TMP/e/asr --last 10 --out TMP/e/asr/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/asr/checkpoint_avg.safetensors --data TMP/d --split tst-COMMON --beam 5 --out "
    "TMP/e/asr/eval_tst-COMMON --results RESULTS.md --name 'ASR corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "train --config conf/st_s2t_s.yaml data.dir=TMP/d data.tgt_vocab=TMP/d/spm_st_8000.model "
    "data.src_vocab=TMP/d/spm_asr_5000.model data.src_lang=en data.tgt_lang=fr train.task=st "
    "train.init_encoder_from=TMP/e/asr/checkpoint_avg.safetensors train.save_dir=TMP/e/st",
    "average TMP/e/st --last 10 --out TMP/e/st/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/st/checkpoint_avg.safetensors --data TMP/d --split tst-COMMON --beam 5 --out "
    "TMP/e/st/eval_tst-COMMON --results RESULTS.md --name 'ST corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "train --config M.yaml data.dir=TMP/d data.tgt_vocab=TMP/d/spm_st_8000.model data.src_vocab=TMP/d/spm_asr_5000.model "
    "data.src_lang=en data.tgt_lang=fr train.task=mt train.save_dir=TMP/e/mt",
    "average TMP/e/mt --last 10 --out TMP/e/mt/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/mt/checkpoint_avg.safetensors --data TMP/d --split tst-COMMON --beam 5 --out "
    "TMP/e/mt/eval_tst-COMMON --results RESULTS.md --name 'MT corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "evaluate --cascade TMP/e/asr/checkpoint_avg.safetensors TMP/e/mt/checkpoint_avg.safetensors --data TMP/d --split "
    "tst-COMMON --beam 5 --out TMP/e/cascade/eval_tst-COMMON --results RESULTS.md --name "
    "'Cascade corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "data synth-mt mustc --root TMP/corpus --out TMP/d/mt-text",
    "train --config X.yaml data.dir=TMP/d data.src_vocab=TMP/d/spm_asr_5000.model data.src_lang=en data.tgt_lang=fr "
    "train.save_dir=TMP/e/xstnet",
    "average TMP/e/xstnet --last 10 --out TMP/e/xstnet/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/xstnet/checkpoint_avg.safetensors --data TMP/d --split tst-COMMON --beam 5 --out "
    "TMP/e/xstnet/eval_tst-COMMON --results RESULTS.md --name 'XSTNet corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "evaluate --model TMP/e/xstnet/checkpoint_avg.safetensors --task mt --data TMP/d --split tst-COMMON --beam 5 --out "
    "TMP/e/xstnet/eval_tst-COMMON_mt --results RESULTS.md --name 'XSTNet as MT corpus asr_s2t_s+st_s2t_s (avg 10)'",
    "evaluate --cascade TMP/e/xstnet/checkpoint_avg.safetensors TMP/e/xstnet/checkpoint_avg.safetensors --data TMP/d "
    "--split tst-COMMON --beam 5 --out TMP/e/xstnet/eval_tst-COMMON_cascade --results RESULTS.md --name "
    "'XSTNet as cascade corpus asr_s2t_s+st_s2t_s (avg 10)'",
]

COVOST_ONE_PAIR = [
    "data prepare covost2 --root TMP/corpus --src-langs fr --tgt-langs en --out TMP/d --jobs 2",
    "data prepare covost2 --root TMP/corpus --src-lang en --tgt-lang de --out TMP/a --jobs 2",
    "data vocab TMP/d/train.jsonl --field tgt --model-type char --vocab-size 8000 --lang-tags '<fr>' '<en>' --out "
    "TMP/d/spm_st_char.model",
    "data vocab TMP/a/train.jsonl --field src --model-type char --vocab-size 5000 --lang-tags '<en>' --out "
    "TMP/a/spm_asr_char.model",
    "train --config conf/asr_s2t_s.yaml data.dir=TMP/a data.src_vocab=TMP/a/spm_asr_char.model data.src_lang=en "
    "data.tgt_lang=de train.task=asr train.save_dir=TMP/e/asr",
    "average TMP/e/asr --last 10 --out TMP/e/asr/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/asr/checkpoint_avg.safetensors --data TMP/a --split test --beam 5 --out TMP/e/asr/eval_test "
    "--results RESULTS.md --name 'ASR corpus fr-en asr_s2t_s+st_s2t_s (ASR on en) (avg 10)'",
    "train --config conf/st_s2t_s.yaml data.dir=TMP/d data.tgt_vocab=TMP/d/spm_st_char.model "
    "data.src_vocab=TMP/a/spm_asr_char.model data.src_lang=fr data.tgt_lang=en train.task=st "
    "train.init_encoder_from=TMP/e/asr/checkpoint_avg.safetensors train.save_dir=TMP/e/st",
    "average TMP/e/st --last 10 --out TMP/e/st/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/st/checkpoint_avg.safetensors --data TMP/d --split test --beam 5 --out TMP/e/st/eval_test "
    "--results RESULTS.md --name 'ST corpus fr-en asr_s2t_s+st_s2t_s (avg 10)'",
    "train --config M.yaml data.dir=TMP/d data.tgt_vocab=TMP/d/spm_st_char.model data.src_vocab=TMP/a/spm_asr_char.model "
    "data.src_lang=fr data.tgt_lang=en train.task=mt train.save_dir=TMP/e/mt",
    "average TMP/e/mt --last 10 --out TMP/e/mt/checkpoint_avg.safetensors",
    "evaluate --model TMP/e/mt/checkpoint_avg.safetensors --data TMP/d --split test --beam 5 --out TMP/e/mt/eval_test "
    "--results RESULTS.md --name 'MT corpus fr-en asr_s2t_s+st_s2t_s (avg 10)'",
    "evaluate --cascade TMP/e/asr/checkpoint_avg.safetensors TMP/e/mt/checkpoint_avg.safetensors --data TMP/d --split "
    "test --beam 5 --out TMP/e/cascade/eval_test --results RESULTS.md --name 'Cascade corpus fr-en asr_s2t_s+st_s2t_s "
    "(avg 10)'",
]


@pytest.mark.parametrize(
    "recipe, args, expected",
    [
        (
            "mustc",
            ["--tgt-lang", "fr", "--mt-conf", "M.yaml", "--xstnet-conf", "X.yaml", "--stop-stage", "10"],
            MUSTC_ONE_PAIR,
        ),
        # --tgt-langs of one language is --tgt-lang
        (
            "mustc",
            ["--tgt-langs", "fr", "--mt-conf", "M.yaml", "--xstnet-conf", "X.yaml", "--stop-stage", "10"],
            MUSTC_ONE_PAIR,
        ),
        (
            "covost2",
            [
                "--src-lang",
                "fr",
                "--asr-src-lang",
                "en",
                "--vocab-type",
                "char",
                "--mt-conf",
                "M.yaml",
                "--stop-stage",
                "8",
            ],
            COVOST_ONE_PAIR,
        ),
    ],
)
def test_one_pair_commands_are_unchanged(tmp_path, recipe, args, expected):
    args = [a.replace("TMP", str(tmp_path)) for a in args]
    res, calls = _recorded(tmp_path, recipe, *args, *([] if recipe == "mustc" else ["--asr-data", f"{tmp_path}/a"]))
    assert res.returncode == 0, res.stderr
    assert _lines(tmp_path, calls) == expected
    assert "needs one pair" not in res.stdout + res.stderr


def test_mustc_several_targets_train_one_model_and_score_each_pair(tmp_path):
    confs = ["--mt-conf", "M.yaml", "--whisper-conf", "conf/st_whisper_base_multilingual.yaml", "--lut-conf", "L.yaml"]
    confs += ["--xstnet-conf", "X.yaml", "--chimera-conf", "C.yaml", "--fat-conf", "F.yaml", "--fat-st-conf", "FS.yaml"]
    confs += ["--tts-conf", "T.yaml", "--lm-st-conf", "conf/st_lm_gemma_whisper_asr.yaml"]
    res, calls = _recorded(tmp_path, "mustc", "--tgt-langs", "de es fr", *confs)
    assert res.returncode == 0, res.stderr
    pairs = ["en-de", "en-es", "en-fr"]

    assert calls[0][:3] == ["data", "prepare", "mustc"] and _option(calls[0], "--out") == f"{tmp_path}/d"
    vocab = [c for c in calls if c[:2] == ["data", "vocab"]]
    assert [c[c.index("--lang-tags") + 1 : c.index("--out")] for c in vocab] == [
        ["<en>", "<de>", "<es>", "<fr>"],
        ["<en>"],
    ]

    trains = [c for c in calls if c[0] == "train"]  # one model for every pair: stages 3, 5, 7, 9 and 11
    assert [_option_value(c, "train.save_dir") for c in trains] == [
        f"{tmp_path}/e/{d}" for d in ("asr", "st", "mt", "st_whisper", "lut")
    ]
    assert all(c[-1] == "data.directions=[en-de,en-es,en-fr]" for c in trains)
    assert all(_option_value(c, "data.src_lang") == "en" and _option_value(c, "data.tgt_lang") == "de" for c in trains)

    scored = {}  # model folder -> splits
    for c in calls:
        if c[0] == "evaluate" and "--model" in c:
            scored.setdefault(Path(_option(c, "--model")).parent.name, []).append(_option(c, "--split"))
    assert scored == {d: [f"tst-COMMON_{p}" for p in pairs] for d in ("asr", "st", "mt", "st_whisper", "lut")}
    cascades = [c for c in calls if c[0] == "evaluate" and "--cascade" in c]
    assert [(_option(c, "--split"), _option(c, "--src-lang"), _option(c, "--tgt-lang")) for c in cascades] == [
        (f"tst-COMMON_{p}", "en", p[3:]) for p in pairs
    ]
    assert all("corpus en-de+es+fr asr_s2t_s+st_s2t_s" in _option(c, "--name") for c in calls if c[0] == "evaluate")

    # the stages of one pair's extras: one line each, no command
    assert not [c for c in calls if c[:2] in (["data", "synth-mt"], ["data", "synth-tts"])]
    for stage in (10, 12, 13, 14, 15):
        assert sum(f"stage {stage}: " in line and "needs one pair" in line for line in res.stdout.splitlines()) == 1


def _option_value(call: list[str], key: str) -> str:
    """The value of a key=value override in a train call."""
    (value,) = [a.split("=", 1)[1] for a in call if a.startswith(key + "=")]
    return value


def test_mustc_several_targets_keep_a_direction_test_set_and_stop_at_a_one_pair_stage_run_alone(tmp_path):
    res, calls = _recorded(
        tmp_path,
        "mustc",
        "--tgt-langs",
        "de,fr",
        "--stage",
        "6",
        "--stop-stage",
        "6",
        "--test-sets",
        "tst-COMMON tst-HE_en-fr",
    )
    assert res.returncode == 0, res.stderr
    assert [_option(c, "--split") for c in calls if c[0] == "evaluate"] == [
        "tst-COMMON_en-de",
        "tst-COMMON_en-fr",
        "tst-HE_en-fr",
    ]

    res, calls = _recorded(
        tmp_path, "mustc", "--tgt-langs", "de es", "--stage", "12", "--stop-stage", "12", "--chimera-conf", "C.yaml"
    )
    assert res.returncode == 2 and calls == []
    assert "stage 12: Chimera" in res.stderr and "needs one pair" in res.stderr


def test_covost_several_sources_train_one_model_and_score_each_direction(tmp_path):
    res, calls = _recorded(tmp_path, "covost2", "--src-langs", "de es fr", "--mt-conf", "M.yaml", "--stop-stage", "8")
    assert res.returncode == 0, res.stderr
    directions = ["de-en", "es-en", "fr-en"]
    vocab = [c for c in calls if c[:2] == ["data", "vocab"]]
    assert [c[c.index("--lang-tags") + 1 : c.index("--out")] for c in vocab] == [
        ["<de>", "<es>", "<fr>", "<en>"],
        ["<de>", "<es>", "<fr>"],  # the ASR model transcribes every source
    ]
    trains = [c for c in calls if c[0] == "train"]
    assert [_option_value(c, "train.save_dir") for c in trains] == [f"{tmp_path}/e/{d}" for d in ("asr", "st", "mt")]
    assert all(c[-1] == "data.directions=[de-en,es-en,fr-en]" for c in trains)
    evaluates = [c for c in calls if c[0] == "evaluate"]
    assert [_option(c, "--split") for c in evaluates] == [f"test_{d}" for d in directions] * 4  # ASR, ST, MT, cascade
    assert [(_option(c, "--src-lang"), _option(c, "--tgt-lang")) for c in evaluates if "--cascade" in c] == [
        (d[:2], "en") for d in directions
    ]


def test_covost_several_sources_with_english_asr(tmp_path):
    """--asr-src-lang en: the English ASR model trains on its own one-direction folder and test set; ST on every
    direction."""
    res, calls = _recorded(
        tmp_path,
        "covost2",
        "--src-langs",
        "de es",
        "--asr-src-lang",
        "en",
        "--asr-data",
        f"{tmp_path}/a",
        "--stop-stage",
        "6",
    )
    assert res.returncode == 0, res.stderr
    asr, st = [c for c in calls if c[0] == "train"]
    assert _option_value(asr, "data.dir") == f"{tmp_path}/a" and not any("data.directions" in a for a in asr)
    assert st[-1] == "data.directions=[de-en,es-en]"
    assert [_option(c, "--split") for c in calls if c[0] == "evaluate"] == ["test", "test_de-en", "test_es-en"]
    asr_vocab = [c for c in calls if c[:2] == ["data", "vocab"]][1]
    assert asr_vocab[asr_vocab.index("--lang-tags") + 1 : asr_vocab.index("--out")] == ["<en>"]
