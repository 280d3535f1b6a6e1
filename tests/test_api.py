"""The Python API and the version: `speechmt.translate` names its options as typed keyword arguments with the
command line's defaults, checks them by the same rules with the same one-line messages, and `load_model()`
loads the bundled model; `speechmt --version` and `speechmt.__version__` are the package metadata's version;
examples/translate_files.py runs."""

import contextlib
import csv
import inspect
import io
import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import speechmt
from speechmt.cli import main, parse_args
from speechmt.pretrained import DEFAULT_MODEL

ROOT = Path(__file__).parents[1]
OPTIONS = {"task", "device", "beam", "nbest", "len_penalty", "max_len_a", "max_len_b", "min_len", "batch_size",
           "max_chunk_seconds", "cut_pauses", "errors", "mbr", "mbr_samples"}


def test_version_is_the_package_metadata(capsys):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert speechmt.__version__ == version("speechmt") == pyproject
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"speechmt {pyproject}\n"


def test_version_from_the_console_script():
    script = Path(sys.executable).with_name("speechmt")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "speechmt"]
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"speechmt {speechmt.__version__}\n", "")


def test_translate_names_typed_keyword_options_with_the_cli_defaults():
    sig = inspect.signature(speechmt.translate)
    params = sig.parameters
    assert list(params)[:2] == ["model", "inputs"]
    assert {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} == OPTIONS
    assert all(p.annotation is not inspect.Parameter.empty for p in params.values())
    assert sig.return_annotation == "list[Translation]"
    cli = parse_args(["translate", "a.wav"])
    for name in ("beam", "nbest", "len_penalty", "max_len_a", "max_len_b", "batch_size", "max_chunk_seconds",
                 "task", "mbr", "mbr_samples"):
        assert params[name].default == getattr(cli, name), name
    doc = inspect.getdoc(speechmt.translate)
    assert all(f"    {name}" in doc or f", {name}:" in doc for name in [*OPTIONS, "model", "inputs"])
    assert list(inspect.signature(speechmt.load_model).parameters) == ["path", "device", "task", "dtype", "memory"]
    assert inspect.signature(speechmt.load_model).parameters["path"].default is None
    assert inspect.signature(speechmt.load_model).parameters["dtype"].default == parse_args(["translate", "a.wav"]).dtype


def _cli_error(argv: list[str]) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(argv) == 2
    return err.getvalue().strip()


# (keyword arguments, the same values on the command line)
BAD = [({"beam": 0}, ["--beam", "0"]), ({"beam": 2.5}, ["--beam", "2.5"]), ({"beam": 10**5}, ["--beam", "100000"]),
       ({"nbest": 0}, ["--nbest", "0"]), ({"nbest": 9}, ["--nbest", "9"]),
       ({"len_penalty": float("nan")}, ["--len-penalty", "nan"]), ({"len_penalty": 11}, ["--len-penalty", "11"]),
       ({"max_len_a": -1}, ["--max-len-a", "-1"]), ({"max_len_b": -1}, ["--max-len-b", "-1"]),
       ({"max_len_b": 2.5}, ["--max-len-b", "2.5"]), ({"batch_size": 0}, ["--batch-size", "0"]),
       ({"max_chunk_seconds": 1}, ["--max-chunk-seconds", "1"]),
       ({"max_chunk_seconds": float("inf")}, ["--max-chunk-seconds", "inf"]),
       ({"cut_pauses": -1}, ["--cut-pauses", "-1"]), ({"cut_pauses": 2e4}, ["--cut-pauses", "20000.0"]),
       ({"mbr_samples": -1}, ["--mbr-samples", "-1"])]


@pytest.mark.parametrize("kwargs,argv", BAD, ids=[next(iter(k)) + "=" + a[1] for k, a in BAD])
def test_bad_options_fail_in_one_line_as_on_the_command_line(kwargs, argv):
    with pytest.raises(speechmt.OptionError) as e:
        speechmt.translate(None, "a.wav", **kwargs)  # checked before any model loads
    name = next(iter(kwargs))
    cli = _cli_error(["translate", "a.wav", *argv])
    assert cli.startswith(f"speechmt translate: error: argument {argv[0]}: ")
    expected = cli.split(f"argument {argv[0]}: ", 1)[1].replace("--beam", "beam")
    assert str(e.value) == f"{name}: {expected}" and "\n" not in str(e.value)


def test_bad_device_task_and_errors():
    with pytest.raises(speechmt.OptionError, match="^device: invalid value 'tpu': not a known device; expected cpu, "
                                                   "cuda, cuda:N or mps$"):
        speechmt.translate(None, "a.wav", device="tpu")
    with pytest.raises(speechmt.OptionError, match="^device: invalid value 'tpu'"):
        speechmt.load_model(device="tpu")
    with pytest.raises(speechmt.OptionError, match=r"^task: invalid value 'mt': expected one of st, asr \(or None"):
        speechmt.translate(None, "a.wav", task="mt")
    with pytest.raises(speechmt.OptionError, match="^task: invalid value 'xx': expected one of st, asr, mt"):
        speechmt.load_model(task="xx")
    with pytest.raises(speechmt.OptionError, match="^errors: invalid value 'ignore': expected raise or keep$"):
        speechmt.translate(None, "a.wav", errors="ignore")
    with pytest.raises(speechmt.OptionError, match="^mbr: invalid value 'ter': expected chrf, bleu or None$"):
        speechmt.translate(None, "a.wav", mbr="ter")
    with pytest.raises(speechmt.OptionError, match=r"^mbr: needs a beam of 2 or more hypotheses, or mbr_samples, to "
                                                   r"choose from \(beam is 1\)$"):
        speechmt.translate(None, "a.wav", mbr="chrf", beam=1)
    with pytest.raises(speechmt.OptionError, match=r"^mbr_samples: only with mbr \(chrf or bleu\)$"):
        speechmt.translate(None, "a.wav", mbr_samples=4)


def test_a_loaded_model_keeps_its_task_device_and_input_limit():
    loaded = SimpleNamespace(task="st", device=torch.device("cpu"), max_input_seconds=30.0, path="m.safetensors")
    with pytest.raises(speechmt.OptionError, match="^task: invalid value 'asr': the model was loaded for 'st'; pass "
                                                   "task to load_model, or a checkpoint path to translate$"):
        speechmt.translate(loaded, "a.wav", task="asr")
    with pytest.raises(speechmt.OptionError, match="^max_chunk_seconds: invalid value '45': m.safetensors takes at "
                                                   "most 30 s of audio at once$"):
        speechmt.translate(loaded, "a.wav", max_chunk_seconds=45)


def test_load_model_without_a_path_loads_the_bundled_model_and_translate_takes_one_file():
    lm = speechmt.load_model()
    assert lm.path == str(DEFAULT_MODEL) and lm.task == "st" and lm.tag == "<de>"
    with open(ROOT / "examples/default_model_outputs.tsv", encoding="utf-8") as f:
        expected = {row["file"]: row["translation"] for row in csv.DictReader(f, delimiter="\t")}
    (result,) = speechmt.translate(lm, ROOT / "examples/01_weather.flac", beam=5, nbest=2, device="cpu")
    assert result.text == expected["01_weather.flac"] and len(result.nbest) == 2


def test_the_example_script_translates_with_the_bundled_model():
    with open(ROOT / "examples/default_model_outputs.tsv", encoding="utf-8") as f:
        expected = {row["file"]: row["translation"] for row in csv.DictReader(f, delimiter="\t")}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "examples/translate_files.py", "examples/03_station.flac",
                           "examples/missing.wav"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stdout == f"examples/03_station.flac\t{expected['03_station.flac']}\n"
    assert done.stderr == "error: examples/missing.wav: file not found\n"
