"""The command tree: at most 10 top-level commands (the everyday ones, then the data, import and research groups);
every old spelling runs as its new one with exactly one notice line; one override syntax (positional key=value,
anywhere after the command); and every handler calls the public Python API."""

import ast
import contextlib
import inspect
import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from speechmt.cli import build_parser, commands, data_commands, main, parse_args, tools_commands
from speechmt.cli.legacy import MOVED, modernise
from speechmt.cli.parser import leaves
from tests.conftest import ASSETS

TOP = ["translate", "evaluate", "train", "average", "export", "serve", "data", "import", "research"]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def test_help_lists_nine_commands_and_no_old_spelling():
    done = subprocess.run([sys.executable, "-m", "speechmt", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    listed = done.stdout.split("\ncommands:\n  COMMAND\n")[1].splitlines()
    names = [line.split()[0] for line in listed if line.startswith("    ") and not line.startswith("     ")]
    assert names == TOP and len(names) <= 10
    assert not re.search(r"import-|synth|pretrain-audio", done.stdout)  # names only old spellings have


def test_the_groups_hold_the_other_commands():
    tree = sorted(command.removeprefix("speechmt ") for command, _ in leaves(build_parser()))
    assert tree == sorted(
        [
            "translate",
            "evaluate",
            "train",
            "average",
            "export",
            "serve",
            "data prepare mustc",
            "data prepare covost2",
            "data vocab",
            "data retrieve",
            "data backtranslate",
            "data distill",
            "data synth",
            "data synth-mt",
            "data synth-memory",
            "data synth-mono",
            "data synth-tts",
            "import hf",
            "import whisper",
            "import gguf",
            "import convert",
            "research analyze",
            "research benchmark",
            "research report",
            "research pretrain-audio",
        ]
    )


# (old spelling, new spelling): each as a user types it
SPELLINGS = [
    (
        ["prepare", "mustc", "--root", "r", "--tgt-lang", "de", "--out", "o"],
        ["data", "prepare", "mustc", "--root", "r", "--tgt-lang", "de", "--out", "o"],
    ),
    (
        ["prepare", "covost2", "--root", "r", "--src-lang", "en", "--tgt-lang", "de", "--out", "o"],
        ["data", "prepare", "covost2", "--root", "r", "--src-lang", "en", "--tgt-lang", "de", "--out", "o"],
    ),
    (
        ["synth", "--corpus", "mustc", "--size", "tiny", "--out", "o"],
        ["data", "synth", "mustc", "--size", "tiny", "--out", "o"],
    ),
    (["synth", "--out", "o", "--corpus=covost2"], ["data", "synth", "covost2", "--out", "o"]),
    (["synth-mt", "--corpus", "mustc", "--root", "r"], ["data", "synth-mt", "mustc", "--root", "r"]),
    (["synth-memory", "--out", "m"], ["data", "synth-memory", "--out", "m"]),
    (["synth-mono", "--root", "r", "--corpus", "covost2"], ["data", "synth-mono", "covost2", "--root", "r"]),
    (["synth-tts", "--root", "r"], ["data", "synth-tts", "--root", "r"]),
    (["vocab", "a.jsonl", "--out", "s.model"], ["data", "vocab", "a.jsonl", "--out", "s.model"]),
    (["retrieve", "--data", "d", "--splits", "dev"], ["data", "retrieve", "--data", "d", "--splits", "dev"]),
    (
        ["backtranslate", "--input", "i", "--out", "o", "--src-lang", "en", "--tgt-lang", "de"],
        ["data", "backtranslate", "--input", "i", "--out", "o", "--src-lang", "en", "--tgt-lang", "de"],
    ),
    (
        ["distill", "--input", "i", "--out", "o", "--src-lang", "en", "--tgt-lang", "de"],
        ["data", "distill", "--input", "i", "--out", "o", "--src-lang", "en", "--tgt-lang", "de"],
    ),
    (["import-hf", "src", "--out", "m.safetensors"], ["import", "hf", "src", "--out", "m.safetensors"]),
    (["import-whisper", "ct2", "--out", "hf"], ["import", "whisper", "ct2", "--out", "hf"]),
    (["import-gguf", "m.gguf", "--out", "hf"], ["import", "gguf", "m.gguf", "--out", "hf"]),
    (["convert", "old.pt", "--out", "new.safetensors"], ["import", "convert", "old.pt", "--out", "new.safetensors"]),
    (
        ["analyze", "--model", "m", "--data", "d", "--split", "dev", "--out", "a"],
        ["research", "analyze", "--model", "m", "--data", "d", "--split", "dev", "--out", "a"],
    ),
    (
        ["benchmark", "--data", "d", "--split", "dev", "--out", "b"],
        ["research", "benchmark", "--data", "d", "--split", "dev", "--out", "b"],
    ),
    (["pretrain-audio", "a.jsonl", "--out", "o"], ["research", "pretrain-audio", "a.jsonl", "--out", "o"]),
]


def _parsed(argv: list[str]) -> tuple[dict, str]:
    """The parsed options (the parser as its name) and what parsing wrote to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = vars(parse_args(argv))
    return {**args, "parser": args["parser"].prog}, err.getvalue()


@pytest.mark.parametrize("old, new", SPELLINGS, ids=[" ".join(o[:2]) for o, _ in SPELLINGS])
def test_an_old_spelling_parses_as_the_new_one_with_one_notice(old, new):
    argv, notice = modernise(old)
    assert argv == new and modernise(new) == (new, None)
    old_args, old_err = _parsed(old)
    new_args, new_err = _parsed(new)
    assert old_args == new_args and new_err == ""
    assert old_err == f"speechmt: notice: {notice}\n"


def test_the_notice_names_the_new_spelling():
    assert modernise(["prepare", "mustc", "--root", "r"])[1] == "speechmt prepare is now speechmt data prepare"
    assert modernise(["synth", "--out", "o", "--corpus=mustc"]) == (
        ["data", "synth", "mustc", "--out", "o"],
        "speechmt synth --corpus mustc is now speechmt data synth mustc",
    )
    assert modernise(["import-gguf", "F"])[1] == "speechmt import-gguf is now speechmt import gguf"
    assert modernise(["convert", "F"])[1] == "speechmt convert is now speechmt import convert"
    assert modernise(["pretrain-audio", "a.jsonl", "--set", "lr=1"]) == (
        ["research", "pretrain-audio", "a.jsonl", "--set", "lr=1"],
        "speechmt pretrain-audio --set KEY=VALUE is now speechmt research pretrain-audio KEY=VALUE",
    )
    assert modernise(["translate", "a.wav", "--set"]) == (["translate", "a.wav", "--set"], None)
    assert modernise([]) == ([], None)


def test_every_old_spelling_is_covered():
    assert sorted({old[0] for old, _ in SPELLINGS}) == sorted(MOVED)


@pytest.mark.parametrize(
    "old",
    [
        ["prepare", "mustc", "--root", "{empty}", "--tgt-lang", "de", "--out", "{tmp}/p"],
        ["synth", "--corpus", "mustc", "--unseen-voice", "kal", "--out", "{empty}"],
        ["synth-tts", "--root", "{empty}"],
        ["retrieve", "--data", "{empty}", "--splits", "dev"],
        ["distill", "--input", "{empty}/x.txt", "--out", "{tmp}/bt", "--src-lang", "en", "--tgt-lang", "de"],
        ["import-hf", "{empty}", "--out", "{tmp}/x.safetensors"],
        ["import-whisper", "{empty}", "--out", "{tmp}/hf"],
        ["import-gguf", "{empty}/x.gguf", "--out", "{tmp}/hf"],
        ["convert", "{empty}/x.pt", "--out", "{tmp}/x.safetensors"],
        ["analyze", "--model", "{empty}/m.safetensors", "--data", "{empty}", "--split", "dev", "--out", "{tmp}/an"],
        ["benchmark", "--data", "{empty}", "--split", "dev", "--out", "{tmp}/b"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_old_spelling_runs_its_command_and_adds_only_the_notice(old, tmp_path):
    """Each reaches its command's own check of the input (a one-line error here): the same exit status, output
    and error line as the new spelling, after the one notice line."""
    (tmp_path / "empty").mkdir()
    old = [a.format(empty=tmp_path / "empty", tmp=tmp_path) for a in old]
    new, notice = modernise(old)
    old_status, old_out, old_err = _run(old)
    new_status, new_out, new_err = _run(new)
    assert (old_status, old_out) == (new_status, new_out) and old_status == 2
    assert old_err == f"speechmt: notice: {notice}\n{new_err}" and new_err.count("\n") == 1
    assert new_err.startswith("speechmt: error: ")


def test_old_and_new_vocab_and_prepare_write_the_same_files(tiny_data, tmp_path):
    manifests = [str(tiny_data / "train.jsonl"), str(tiny_data / "dev.jsonl")]
    for argv, out in ((["vocab", *manifests], "old"), (["data", "vocab", *manifests], "new")):
        status, stdout, err = _run([*argv, "--vocab-size", "60", "--out", str(tmp_path / f"{out}.model")])
        assert status == 0 and stdout == f"{tmp_path / out}.model: 60 pieces (unigram, tgt_text)\n"
        assert err == ("speechmt: notice: speechmt vocab is now speechmt data vocab\n" if out == "old" else "")
    assert (tmp_path / "old.model").read_bytes() == (tmp_path / "new.model").read_bytes()
    for argv, out in ((["prepare", "mustc"], "old"), (["data", "prepare", "mustc"], "new")):
        status, _, err = _run(
            [
                *argv,
                "--root",
                str(ASSETS / "mustc"),
                "--tgt-lang",
                "de",
                "--jobs",
                "1",
                "--splits",
                "dev",
                "--out",
                str(tmp_path / out),
            ]
        )
        assert status == 0 and err.count("speechmt: notice:") == (out == "old")
    assert (tmp_path / "old/dev.jsonl").read_text().replace("/old/", "/") == (
        tmp_path / "new/dev.jsonl"
    ).read_text().replace("/new/", "/")


def test_pretrain_audio_overrides_are_positional_anywhere_and_set_still_works(monkeypatch):
    """`research pretrain-audio` takes key=value items as `train` takes section.key=value ones, before or after
    the options; `--set` gives the same call with one notice line."""
    calls = []

    def pretrain_audio(manifests, out, **kwargs):
        calls.append((list(manifests), out, kwargs))
        return type("Cfg", (), {"out": out})(), type("State", (), {"step": 3})()

    monkeypatch.setattr("speechmt.api_research.pretrain_audio", pretrain_audio)
    runs = [
        ["research", "pretrain-audio", "a.jsonl", "max_updates=3", "--out", "o", "lr=1e-4"],
        ["research", "pretrain-audio", "--out", "o", "a.jsonl", "max_updates=3", "lr=1e-4"],
        ["pretrain-audio", "a.jsonl", "--out", "o", "--set", "max_updates=3", "lr=1e-4"],
    ]
    errs = [_run(argv)[2] for argv in runs]
    expected = (["a.jsonl"], "o", {"config": None, "overrides": ["max_updates=3", "lr=1e-4"], "resume": True})
    assert calls == [expected] * 3
    assert errs == [
        "",
        "",
        "speechmt: notice: speechmt pretrain-audio --set KEY=VALUE is now speechmt research pretrain-audio KEY=VALUE\n",
    ]
    status, _, err = _run(["research", "pretrain-audio", "a.jsonl", "--out", "o", "max_updates=0"])
    assert (status, err) == (
        2,
        "speechmt research pretrain-audio: error: argument inputs: invalid value '0' for "
        "max_updates: expected an integer >= 1\n",
    )


def test_train_overrides_may_follow_the_options(monkeypatch):
    seen = []
    monkeypatch.setattr(
        "speechmt.api_train.train",
        lambda config, overrides, resume: (
            seen.append((config, list(overrides), resume))
            or type("State", (), {"step": 1, "epoch": 1, "best_loss": 0.5})()
        ),
    )
    status, out, _ = _run(["train", "train.lr=1e-3", "--config", "c.yaml", "--no-resume", "data.max_tokens=9"])
    assert status == 0 and seen == [("c.yaml", ["train.lr=1e-3", "data.max_tokens=9"], False)]
    assert out == "finished at update 1 (epoch 1); best dev loss 0.5000\n"
    status, _, err = _run(["train", "--config", "c.yaml", "data.max_tokens=0"])
    assert (status, err) == (
        2,
        "speechmt train: error: argument overrides: invalid value '0' for data.max_tokens: expected an integer >= 1\n",
    )
    status, _, err = _run(["train", "--config", "c.yaml", "x=1", "--nothing"])
    assert (status, err) == (2, "speechmt: error: unrecognized arguments: --nothing\n")
    status, _, err = _run(["train", "a=1", "--no-resume", "b=2", "--nothing"])
    assert (status, err) == (2, "speechmt: error: unrecognized arguments: b=2 --nothing\n")


HANDLER_MODULES = (commands, data_commands, tools_commands)
API_MODULES = {
    "speechmt.api",
    "speechmt.api_evaluate",
    "speechmt.api_train",
    "speechmt.api_data",
    "speechmt.api_interop",
    "speechmt.api_research",
    "speechmt.api_serve",
}


def _imports(function) -> set[str]:
    """The modules a function imports from inside its body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_every_handler_calls_the_public_api_and_nothing_deeper():
    """Each command's handler imports the API modules only (speechmt.ranks to print once per run); the modules'
    own imports hold nothing of speechmt beyond AudioError."""
    handlers = {leaf.get_default("func") for _, leaf in leaves(build_parser())}
    assert len(handlers) == 24 and all(inspect.getmodule(h) in HANDLER_MODULES for h in handlers)
    for module in HANDLER_MODULES:
        top = {
            n.module
            for n in ast.parse(Path(module.__file__).read_text()).body
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("speechmt")
        }
        assert top <= {"speechmt.audio"}, module.__name__
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ != module.__name__:
                continue
            deeper = {m for m in _imports(function) if m.startswith("speechmt")} - API_MODULES
            assert deeper <= {"speechmt.ranks"}, (module.__name__, name, deeper)
    assert all(any(m in API_MODULES for m in _imports(h)) for h in handlers)


def test_the_front_door_is_one_function_each():
    import speechmt.api_evaluate
    import speechmt.api_train

    assert speechmt.evaluate is speechmt.api_evaluate.evaluate and speechmt.train is speechmt.api_train.train
    assert speechmt.translate is speechmt.api.translate and speechmt.load_model is speechmt.api.load_model
    assert {
        "load_model",
        "load_cascade",
        "translate",
        "simultaneous",
        "subtitles",
        "write_subtitles",
        "evaluate",
        "evaluate_simultaneous",
        "train",
        "average",
        "export",
    } <= set(speechmt.__all__)
