"""The Python API and the version: `speechmt.translate` names its options as typed keyword arguments with the
command line's defaults, checks them by the same rules with the same one-line messages, and `load_model()`
loads the bundled model; `speechmt --version` and `speechmt.__version__` are the package metadata's version;
examples/translate_files.py runs. Each command is its API call: `speechmt evaluate` prints the scores
`speechmt.evaluate` returns, and so for translate, subtitles, simultaneous translation and the cascade."""

import contextlib
import csv
import inspect
import io
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tomllib
import torch

import speechmt
from speechmt.audio import read_audio
from speechmt.cli import main, parse_args
from speechmt.pretrained import DEFAULT_MODEL
from tests.conftest import ASSETS
from tests.helpers import tiny_config, two_update_st

ROOT = Path(__file__).parents[1]
OPTIONS = {
    "task",
    "device",
    "beam",
    "nbest",
    "len_penalty",
    "max_len_a",
    "max_len_b",
    "min_len",
    "batch_size",
    "max_chunk_seconds",
    "cut_pauses",
    "errors",
    "mbr",
    "mbr_samples",
    "strategy",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "src_lang",
    "tgt_lang",
}


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
    for name in (
        "beam",
        "nbest",
        "len_penalty",
        "max_len_a",
        "max_len_b",
        "batch_size",
        "max_chunk_seconds",
        "task",
        "mbr",
        "mbr_samples",
        "strategy",
        "temperature",
        "top_k",
        "top_p",
        "seed",
        "src_lang",
        "tgt_lang",
    ):
        assert params[name].default == getattr(cli, name), name
    doc = inspect.getdoc(speechmt.translate)
    assert all(f"    {name}" in doc or f", {name}:" in doc for name in [*OPTIONS, "model", "inputs"])
    assert list(inspect.signature(speechmt.load_model).parameters) == [
        "path",
        "device",
        "task",
        "dtype",
        "memory",
        "src_lang",
        "tgt_lang",
    ]
    assert inspect.signature(speechmt.load_model).parameters["path"].default is None
    assert (
        inspect.signature(speechmt.load_model).parameters["dtype"].default == parse_args(["translate", "a.wav"]).dtype
    )


def _cli_error(argv: list[str]) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(argv) == 2
    return err.getvalue().strip()


# (keyword arguments, the same values on the command line)
BAD = [
    ({"beam": 0}, ["--beam", "0"]),
    ({"beam": 2.5}, ["--beam", "2.5"]),
    ({"beam": 10**5}, ["--beam", "100000"]),
    ({"nbest": 0}, ["--nbest", "0"]),
    ({"nbest": 9}, ["--nbest", "9"]),
    ({"len_penalty": float("nan")}, ["--len-penalty", "nan"]),
    ({"len_penalty": 11}, ["--len-penalty", "11"]),
    ({"max_len_a": -1}, ["--max-len-a", "-1"]),
    ({"max_len_b": -1}, ["--max-len-b", "-1"]),
    ({"max_len_b": 2.5}, ["--max-len-b", "2.5"]),
    ({"batch_size": 0}, ["--batch-size", "0"]),
    ({"max_chunk_seconds": 1}, ["--max-chunk-seconds", "1"]),
    ({"max_chunk_seconds": float("inf")}, ["--max-chunk-seconds", "inf"]),
    ({"cut_pauses": -1}, ["--cut-pauses", "-1"]),
    ({"cut_pauses": 2e4}, ["--cut-pauses", "20000.0"]),
    ({"mbr_samples": -1}, ["--mbr-samples", "-1"]),
    ({"temperature": -1}, ["--temperature", "-1"]),
    ({"top_k": -1}, ["--top-k", "-1"]),
    ({"top_p": 0}, ["--top-p", "0"]),
    ({"seed": -1}, ["--seed", "-1"]),
]


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
    with pytest.raises(
        speechmt.OptionError,
        match="^device: invalid value 'tpu': not a known device; expected cpu, cuda, cuda:N or mps$",
    ):
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
    with pytest.raises(
        speechmt.OptionError,
        match=r"^mbr: needs a beam of 2 or more hypotheses, or mbr_samples, to "
        r"choose from \(beam is 1\)$",
    ):
        speechmt.translate(None, "a.wav", mbr="chrf", beam=1)
    with pytest.raises(speechmt.OptionError, match=r"^mbr_samples: only with mbr \(chrf or bleu\)$"):
        speechmt.translate(None, "a.wav", mbr_samples=4)


def test_a_loaded_model_keeps_its_task_device_and_input_limit():
    loaded = SimpleNamespace(task="st", device=torch.device("cpu"), max_input_seconds=30.0, path="m.safetensors")
    with pytest.raises(
        speechmt.OptionError,
        match="^task: invalid value 'asr': the model was loaded for 'st'; pass "
        "task to load_model, or a checkpoint path to translate$",
    ):
        speechmt.translate(loaded, "a.wav", task="asr")
    with pytest.raises(
        speechmt.OptionError,
        match="^max_chunk_seconds: invalid value '45': m.safetensors takes at most 30 s of audio at once$",
    ):
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
    done = subprocess.run(
        [sys.executable, "examples/translate_files.py", "examples/03_station.flac", "examples/missing.wav"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stdout == f"examples/03_station.flac\t{expected['03_station.flac']}\n"
    assert done.stderr == "error: examples/missing.wav: file not found\n"


# -- the front door: each command is its API call -----------------------------------------------------------

WAV = ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav"


@pytest.fixture(scope="module")
def st_model(tiny_data, tmp_path_factory) -> str:
    return two_update_st(tiny_data, tmp_path_factory.mktemp("st"))


def _two_update(data: Path, exp: Path, task: str) -> str:
    """A tiny `task` model after 2 updates (as tests.helpers.two_update_st): quick, and translates badly."""
    from speechmt.config import save_config

    exp.mkdir()
    cfg = tiny_config(data, exp, task=task, max_updates=2, save_interval_updates=2, valid_decode=False)
    if task == "mt":  # the text encoder: the speech encoder's layers, shared (tests/decoding/test_cascade.py)
        cfg.model.text_encoder.layers = cfg.model.encoder.layers
        cfg.model.text_encoder.shared = True
    save_config(cfg, exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return str(exp / "checkpoint_last.safetensors")


def _cli(capsys, argv: list[str]) -> list[str]:
    """The command's standard output lines (it must succeed)."""
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def test_evaluate_returns_the_scores_the_command_line_prints(st_model, tiny_data, tmp_path, capsys):
    report = speechmt.evaluate(st_model, tiny_data, "dev", beam=2, max_len_b=8, out=tmp_path / "api")
    lines = _cli(
        capsys,
        [
            "evaluate",
            "--model",
            st_model,
            "--data",
            str(tiny_data),
            "--split",
            "dev",
            "--beam",
            "2",
            "--max-len-b",
            "8",
            "--out",
            str(tmp_path / "cli"),
        ],
    )
    bleu = report.metrics["BLEU"]
    assert report.n == 2 and list(report.metrics) == ["BLEU", "chrF", "chrF++"] and 0 <= bleu.score <= 100
    assert bleu.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert lines[:3] == [f"{s.name} = {s.score:.2f}  ({s.signature})" for s in report.metrics.values()]
    assert lines[-1].endswith(f"; report in {tmp_path / 'cli'}")
    api, cli = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("api", "cli"))
    assert api["metrics"] == cli["metrics"] and api["extra"]["decode"] == cli["extra"]["decode"]
    assert (tmp_path / "api/hyps.txt").read_text() == (tmp_path / "cli/hyps.txt").read_text()
    assert api["extra"]["decode"]["beam_size"] == 2 and api["extra"]["decode"]["max_len_b"] == 8


def test_translate_and_its_subtitles_are_what_the_command_line_prints(st_model, tmp_path, capsys):
    (result,) = speechmt.translate(st_model, WAV, beam=2, max_len_b=6, cut_pauses=300)
    line = json.loads(
        _cli(
            capsys,
            [
                "translate",
                str(WAV),
                "--model",
                st_model,
                "--beam",
                "2",
                "--max-len-b",
                "6",
                "--cut-pauses",
                "300",
                "--format",
                "json",
            ],
        )[0]
    )
    assert (line["text"], line["chunk_texts"]) == (result.text, result.chunk_texts)
    assert line["audio_seconds"] == pytest.approx(result.audio_seconds, abs=1e-3)
    assert line["segments"] == [
        {"start": c.start, "end": c.end, "text": c.text, "lines": list(c.lines)} for c in speechmt.subtitle_cues(result)
    ]
    srt = _cli(
        capsys, ["translate", str(WAV), "--model", st_model, "--beam", "2", "--max-len-b", "6", "--format", "srt"]
    )
    assert "\n".join(srt) + "\n" == speechmt.subtitles(result, "srt") and srt[0] == "1"
    written = speechmt.write_subtitles(result, tmp_path / "subs", "vtt")
    assert written == tmp_path / "subs/ted_3.vtt" and written.read_text().startswith("WEBVTT\n")
    assert written.read_text() == speechmt.subtitles(result, "vtt")


def test_sampling_at_temperature_zero_is_greedy_and_seeded_draws_repeat(st_model, capsys):
    greedy = speechmt.translate(st_model, WAV, beam=1, max_len_b=8)
    cold = speechmt.translate(st_model, WAV, beam=1, max_len_b=8, strategy="sample", temperature=0)
    assert cold[0].text == greedy[0].text
    hot = [
        speechmt.translate(st_model, WAV, beam=1, max_len_b=8, strategy="sample", temperature=5, seed=s)[0].text
        for s in (1, 1, 2, 3, 4)
    ]
    assert hot[0] == hot[1] and len(set(hot)) > 1  # one seed, one draw; other seeds, other draws
    argv = [
        "translate",
        str(WAV),
        "--model",
        st_model,
        "--beam",
        "1",
        "--max-len-b",
        "8",
        "--strategy",
        "sample",
        "--temperature",
        "5",
        "--seed",
        "1",
        "--format",
        "json",
    ]
    assert json.loads(_cli(capsys, argv)[0])["text"] == hot[0]
    with pytest.raises(speechmt.OptionError, match=r"^strategy: invalid value 'nucleus': expected one of greedy, "):
        speechmt.translate(st_model, WAV, strategy="nucleus")


def test_simultaneous_is_what_translate_simultaneous_prints(st_model, capsys):
    stream = speechmt.simultaneous(st_model, WAV, policy="wait-k", k=2, max_len_b=6)
    lines = [
        json.loads(line)
        for line in _cli(
            capsys,
            [
                "translate",
                str(WAV),
                "--model",
                st_model,
                "--simultaneous",
                "wait-k",
                "--k",
                "2",
                "--max-len-b",
                "6",
                "--format",
                "json",
            ],
        )
    ]
    *commits, last = lines
    assert [c["text"] for c in commits] == [c.text for c in stream.commits]
    assert (last["text"], last["word_delays_ms"]) == (stream.text, stream.word_delays_ms)
    assert last["source_ms"] == pytest.approx(stream.source_ms, abs=0.1) and stream.source == str(WAV)
    assert set(stream.latency_ms) == {"AL", "LAAL", "AL_CA", "LAAL_CA"}
    blocks = np.array_split(read_audio(WAV), 7)  # a live stream: blocks of any size
    assert speechmt.simultaneous(st_model, iter(blocks), k=2, max_len_b=6).text == stream.text


def test_evaluate_simultaneous_is_what_evaluate_simultaneous_prints(st_model, tiny_data, tmp_path, capsys):
    result = speechmt.evaluate_simultaneous(
        st_model, tiny_data, "dev", k=[2, 3], max_len_b=6, beam=2, out=tmp_path / "api"
    )
    lines = _cli(
        capsys,
        [
            "evaluate",
            "--model",
            st_model,
            "--data",
            str(tiny_data),
            "--split",
            "dev",
            "--simultaneous",
            "wait-k",
            "--k",
            "2",
            "3",
            "--max-len-b",
            "6",
            "--beam",
            "2",
            "--out",
            str(tmp_path / "cli"),
        ],
    )
    assert [r.config.k for r in result.runs] == [2, 3] and [r["k"] for r in result.rows] == [2, 3]
    assert [line.split("; ")[0] for line in lines[:2]] == [r.summary.split("; ")[0] for r in result.runs]
    assert lines[0].startswith("wait-k k=2 step 400 ms: BLEU = ")
    offline = result.offline.metrics
    assert result.offline.n == 2 and lines[2] == "offline (beam 2): " + ", ".join(
        f"{s.name} = {s.score:.2f}" for s in offline.values()
    )
    assert [p.name for p in result.written[:2]] == ["quality_latency.md", "quality_latency.json"]
    assert (tmp_path / "api/wait-k-k3/report.json").exists() and (tmp_path / "cli/offline/report.json").exists()


def test_the_cascade_is_a_model_for_translate_and_evaluate(tiny_data, tmp_path, capsys):
    asr, mt = (_two_update(tiny_data, tmp_path / task, task) for task in ("asr", "mt"))
    cascade = speechmt.load_cascade(asr, mt)
    (result,) = speechmt.translate(cascade, WAV, beam=2, max_len_b=6)
    line = json.loads(
        _cli(
            capsys, ["translate", str(WAV), "--cascade", asr, mt, "--beam", "2", "--max-len-b", "6", "--format", "json"]
        )[0]
    )
    assert (line["text"], line["transcript"]) == (result.text, result.transcript) and result.nbest == []
    report = speechmt.evaluate(cascade, tiny_data, "dev", beam=2, max_len_b=6)
    lines = _cli(
        capsys,
        [
            "evaluate",
            "--cascade",
            asr,
            mt,
            "--data",
            str(tiny_data),
            "--split",
            "dev",
            "--beam",
            "2",
            "--max-len-b",
            "6",
            "--out",
            str(tmp_path / "ev"),
        ],
    )
    assert lines[0] == f"ASR WER = {report.extra['asr_wer']:.2f} (transcripts of the cascade's first stage)"
    assert lines[1] == f"BLEU = {report.metrics['BLEU'].score:.2f}  ({report.metrics['BLEU'].signature})"
    assert report.extra["task"] == "cascade" and cascade.path == mt
    with pytest.raises(
        speechmt.OptionError, match="^task: invalid value 'st': task picks a model's task, not a cascade's$"
    ):
        speechmt.translate(cascade, WAV, task="st")
    with pytest.raises(speechmt.OptionError, match="^model: simultaneous translation takes a model, not a cascade$"):
        speechmt.simultaneous(cascade, WAV)
    from speechmt.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="the cascade's first model must be an ASR model"):
        speechmt.load_cascade(mt, mt)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: speechmt.evaluate(None, "d", "dev", beam=0),
            "beam: invalid value '0': expected an integer from 1 to 256",
        ),
        (
            lambda: speechmt.evaluate(None, "d", "dev", limit=0),
            "limit: invalid value '0': expected an integer from 1 to",
        ),
        (lambda: speechmt.evaluate(None, "d", "dev", max_tokens=0), "max_tokens: invalid value '0'"),
        (
            lambda: speechmt.evaluate(None, "d", "dev", task="xx"),
            "task: invalid value 'xx': expected one of st, asr, mt",
        ),
        (
            lambda: speechmt.evaluate_simultaneous(None, "d", "dev", policy="greedy"),
            "policy: invalid value 'greedy': expected wait-k or alignatt",
        ),
        (
            lambda: speechmt.simultaneous(None, "a.wav", policy="greedy"),
            "policy: invalid value 'greedy': expected wait-k or alignatt",
        ),
        (
            lambda: speechmt.simultaneous(None, "a.wav", step_ms=10),
            "step_ms: invalid value '10': expected a number from 25",
        ),
        (lambda: speechmt.simultaneous(None, "a.wav", tail_beam=0), "tail_beam: invalid value '0'"),
        (
            lambda: speechmt.load_cascade("a", "b", dtype="float16"),
            "dtype: invalid value 'float16': expected float32 or bfloat16",
        ),
        (lambda: speechmt.average(["a"], "b", by="day"), "by: invalid value 'day': expected auto, epoch or update"),
    ],
    ids=["beam", "limit", "max_tokens", "task", "policy", "stream-policy", "step_ms", "tail_beam", "dtype", "by"],
)
def test_the_new_functions_check_their_arguments_before_loading_anything(call, message):
    with pytest.raises(speechmt.OptionError) as e:
        call()
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_subtitles_need_a_translated_result(tmp_path):
    from speechmt.decoding.translate import Translation

    failed = Translation("gone.wav", error="gone.wav: file not found")
    with pytest.raises(speechmt.OptionError, match="^result: gone.wav: file not found$"):
        speechmt.write_subtitles(failed, tmp_path)
    with pytest.raises(speechmt.OptionError, match="^fmt: invalid value 'ass': expected srt or vtt$"):
        speechmt.subtitles(Translation("a.wav"), "ass")  # type: ignore[arg-type]
    assert speechmt.subtitles(Translation("a.wav"), "vtt") == "WEBVTT\n" and not list(tmp_path.iterdir())


def test_the_api_is_typed_and_documented():
    import speechmt.api_data
    import speechmt.api_interop
    import speechmt.api_research

    functions = [getattr(speechmt, n) for n in speechmt.__all__ if inspect.isfunction(getattr(speechmt, n))]
    for module in (speechmt.api_data, speechmt.api_interop, speechmt.api_research):
        functions += [
            f
            for n, f in inspect.getmembers(module, inspect.isfunction)
            if not n.startswith("_") and f.__module__ == module.__name__
        ]
    assert len(functions) == 32  # 12 in speechmt, 12 in api_data, 4 in api_interop, 4 in api_research
    for f in functions:
        sig = inspect.signature(f)
        untyped = [
            n
            for n, p in sig.parameters.items()
            if p.annotation is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        assert untyped == [] and sig.return_annotation is not inspect.Parameter.empty, f.__qualname__
        assert f.__doc__ and len(f.__doc__.split()) > 8, f.__qualname__


def test_the_python_api_page_shows_every_function():
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    names = [n for n in speechmt.__all__ if inspect.isfunction(getattr(speechmt, n))]
    assert all(f"speechmt.{n}(" in page for n in names), [n for n in names if f"speechmt.{n}(" not in page]
    for module in ("api_data", "api_interop", "api_research"):
        assert f"speechmt.{module}" in page


def test_language_options_are_language_codes():
    from speechmt.api import OptionError
    from speechmt.checkpoint import CheckpointError

    with pytest.raises(OptionError, match=r"tgt_lang: invalid value 'French': expected a language code"):
        speechmt.load_model(None, tgt_lang="French")
    with pytest.raises(OptionError, match=r"src_lang: invalid value '3'"):
        speechmt.load_cascade("a", "b", src_lang=3)
    with pytest.raises(CheckpointError, match=r"fr: the model writes de only"):
        speechmt.load_model(None, tgt_lang="fr")
