"""Every option is checked where it is parsed: a bad value stops the command with one stderr line naming the
option, the value and what is allowed, exit status 2, no traceback; for each subcommand that has the option.
A property-based test draws values for the numeric options of translate and evaluate."""

import contextlib
import io
import subprocess
import sys

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechmt.checks import check_config, check_override
from speechmt.cli import main, parse_args
from speechmt.config import SECTIONS, ConfigError, load_config
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.segment import SegmentConfig

WAV = "a.wav"  # parsing comes first: no file is read before the options pass
DATA = ["--data", "data", "--split", "dev"]
TRANSLATE, EVALUATE = ["translate", WAV], ["evaluate", *DATA]
BENCHMARK = ["research", "benchmark", *DATA, "--out", "b"]
NO_CUDA = "CUDA is not available on this machine"
GROUPS = ("data", "import", "research")

# (command line, option named, words of what is allowed)
CASES = [
    *[
        (cmd + ["--beam", v], "--beam", "expected an integer from 1 to 256")
        for cmd in (TRANSLATE, EVALUATE, BENCHMARK)
        for v in ("0", "-1", "abc", "1.5", "100000")
    ],
    (TRANSLATE + ["--nbest", "9"], "--nbest", "expected an integer from 1 to --beam (5)"),
    *[
        (
            ["export", "m.safetensors", "--out", "o", "--whisper-pad-seconds", v],
            "--whisper-pad-seconds",
            "expected a number from 0 to 30",
        )
        for v in ("31", "-1", "x")
    ],
    (TRANSLATE + ["--nbest", "3", "--beam", "2"], "--nbest", "expected an integer from 1 to --beam (2)"),
    (TRANSLATE + ["--nbest", "0"], "--nbest", "expected an integer from 1 to 256"),
    *[(TRANSLATE + ["--batch-size", v], "--batch-size", "expected an integer from 1 to 4096") for v in ("0", "-3")],
    *[
        (TRANSLATE + ["--max-chunk-seconds", v], "--max-chunk-seconds", "expected a finite number > 1 and <= 3600")
        for v in ("0", "-5", "1", "nan", "inf", "1e9", "ten")
    ],
    *[
        (cmd + ["--device", "tpu"], "--device", "not a known device; expected cpu, cuda, cuda:N or mps")
        for cmd in (TRANSLATE, EVALUATE, BENCHMARK)
    ],
    *[(cmd + ["--device", "cpu:0:1"], "--device", "not a known device") for cmd in (TRANSLATE, EVALUATE)],
    *[
        (cmd + [f"--len-penalty={v}"], "--len-penalty", "expected a number from -10 to 10")  # -inf alone: an option
        for cmd in (TRANSLATE, EVALUATE)
        for v in ("nan", "inf", "-inf", "x", "1e300", "-11")
    ],
    *[
        (cmd + ["--max-len-a", v], "--max-len-a", "expected a number from 0 to 10")
        for cmd in (TRANSLATE, EVALUATE)
        for v in ("-1", "nan", "11", "1e300")
    ],
    *[
        (cmd + ["--max-len-b", v], "--max-len-b", "expected an integer from 0 to 100000")
        for cmd in (TRANSLATE, EVALUATE)
        for v in ("-1", "2.5", "99999999999999999999")
    ],
    *[
        (cmd + ["--max-tokens", v], "--max-tokens", "expected an integer from 1 to 1000000000")
        for cmd in (EVALUATE, BENCHMARK)
        for v in ("0", "-20000", "lots")
    ],
    # Python 3.11's argparse gave [] as the value ("expected one argument"); 3.12 hands "--" to the option's type
    *[
        (cmd + ["--beam=--"], "--beam", ("expected one argument", "invalid value '--': expected an integer from 1"))
        for cmd in (TRANSLATE, EVALUATE, BENCHMARK)
    ],
    (
        BENCHMARK + ["--buckets=--"],
        "--buckets",
        ("expected at least one argument", "invalid value '--': expected a finite number"),
    ),
    *[
        (
            cmd + ["--mbr", "chrf", "--beam", "1"],
            "--mbr",
            "needs a beam of 2 or more hypotheses, or --mbr-samples, to choose from (--beam is 1)",
        )
        for cmd in (TRANSLATE, EVALUATE, BENCHMARK)
    ],
    *[(cmd + ["--mbr-samples", "4"], "--mbr-samples", "only with --mbr") for cmd in (TRANSLATE, EVALUATE, BENCHMARK)],
    (EVALUATE + ["--mbr", "chrf", "--mbr-samples", "-1"], "--mbr-samples", "expected an integer from 0 to 256"),
    *[(cmd + ["--mbr", "ter"], "--mbr", "invalid choice: 'ter'") for cmd in (TRANSLATE, EVALUATE, BENCHMARK)],
    (TRANSLATE + ["--mbr", "bleu", "--simultaneous", "wait-k"], "--mbr", "not with --simultaneous"),
    (BENCHMARK + ["--limit", "0"], "--limit", "expected an integer from 1 to"),
    (BENCHMARK + ["--threads", "0"], "--threads", "expected an integer from 1 to 1024"),
    (BENCHMARK + ["--buckets", "2", "nan"], "--buckets", "expected a finite number > 0"),
    (BENCHMARK + ["--buckets", "-2"], "--buckets", "expected a finite number > 0"),
    (BENCHMARK + ["--buckets", "4", "2"], "--buckets", "expected increasing seconds"),
    (["average", "exp", "--out", "a.safetensors", "--last", "0"], "--last", "expected an integer from 1 to"),
    (["data", "synth", "mustc", "--out", "o", "--jobs", "0"], "--jobs", "expected an integer from 1 to 256"),
    (["data", "synth", "mustc", "--out", "o", "--seed", "-1"], "--seed", "expected an integer from 0 to"),
    (
        ["data", "vocab", "a.jsonl", "--out", "s.model", "--vocab-size", "0"],
        "--vocab-size",
        "expected an integer from 1 to",
    ),
    (["data", "retrieve", "--data", "d", "--splits", "train", "--k", "0"], "--k", "expected an integer from 1 to 16"),
    (["train", "model.decoder.examples=17"], "model.decoder.examples", "expected an integer from 0 to 16"),
    *[
        (["data", "prepare", *corpus, "--root", "r", "--tgt-lang", "de", "--out", "o", *extra], option, allowed)
        for corpus in (["mustc"], ["covost2", "--src-lang", "en"])
        for extra, option, allowed in (
            (["--jobs", "0"], "--jobs", "from 1 to 256"),
            (["--min-frames", "-1"], "--min-frames", "from 0 to"),
            (["--max-frames", "0"], "--max-frames", "from 1 to"),
            (["--min-frames", "50", "--max-frames", "10"], "--min-frames", "expected at most --max-frames (10)"),
        )
    ],
    (["train", "train.lr=abc"], "train.lr", "invalid value 'abc' for train.lr: expected a finite number"),
    (
        ["train", "data.max_tokens=0"],
        "data.max_tokens",
        "invalid value '0' for data.max_tokens: expected an integer >= 1",
    ),
    (["train", "train.max_updates=-5"], "train.max_updates", "expected an integer >= 0"),
    (["train", "train.max_updates=2.5"], "train.max_updates", "expected an integer"),
    (["train", "train.lr=nan"], "train.lr", "expected a finite number"),
    (["train", "train.lr=-1"], "train.lr", "expected a finite number > 0"),
    (["train", "train.label_smoothing=1"], "train.label_smoothing", "expected a finite number >= 0 and < 1"),
    (["train", "data.cache_encoder=maybe"], "data.cache_encoder", "expected true or false"),
    (["train", "train.adam_betas=[0.9]"], "train.adam_betas", "expected a list of 2 values"),
    (["train", "model.d_model=big"], "model.d_model", "expected an integer"),
    (
        ["train", "model.encoder.layers=abc"],
        "model.encoder.layers",
        "invalid value 'abc' for model.encoder.layers: expected an integer",
    ),
    (["train", "model.lora.dropout=1"], "model.lora.dropout", "expected a finite number >= 0 and < 1"),
    (["train", "model.encoder.layerdrop=1.5"], "model.encoder.layerdrop", "expected a number from 0 to 1"),
    (["train", "train.device=tpu"], "train.device", "not a known device; expected auto, cpu"),
    (
        ["research", "pretrain-audio", "a.jsonl", "--out", "o", "max_updates=0"],
        "max_updates",
        "expected an integer >= 1",
    ),
    (["research", "pretrain-audio", "a.jsonl", "--out", "o", "lr=abc"], "lr", "expected a finite number"),
]
if not torch.cuda.is_available():
    CASES += [
        (cmd + ["--device", dev], "--device", NO_CUDA)
        for cmd in (TRANSLATE, EVALUATE, BENCHMARK)
        for dev in ("cuda", "cuda:0")
    ]
    CASES += [(["train", "train.device=cuda"], "train.device", NO_CUDA)]


def _run_in_process(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue()


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize("argv, option, allowed", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_option_is_one_line_naming_it_and_exit_status_2(argv, option, allowed):
    status, err = _run_in_process(argv)
    line = _one_line(err)
    assert status == 2
    words = 3 if argv[:2] == ["data", "prepare"] else 2 if argv[0] in GROUPS else 1
    command = " ".join(argv[:words])
    allowed = (allowed,) if isinstance(allowed, str) else allowed  # alternatives: Python versions word it apart
    assert line.startswith(f"speechmt {command}: error: ") and option in line and any(a in line for a in allowed), line


def test_the_error_line_names_the_value_as_given():
    status, err = _run_in_process(TRANSLATE + ["--beam", "-1"])
    assert status == 2 and _one_line(err) == (
        "speechmt translate: error: argument --beam: invalid value '-1': expected an integer from 1 to 256"
    )
    status, err = _run_in_process(TRANSLATE + ["--len-penalty", "nan"])
    assert _one_line(err) == (
        "speechmt translate: error: argument --len-penalty: invalid value 'nan': expected a number from -10 to 10"
    )


def test_argparse_errors_of_their_own_are_one_line_too():
    for argv, words in (
        (["evaluate"], "the following arguments are required: --data, --split"),
        (["translate", WAV, "--format", "xml"], "argument --format: invalid choice: 'xml'"),
        (["translate", WAV, "--beam"], "argument --beam: expected one argument"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
    ):
        status, err = _run_in_process(argv)
        assert status == 2 and words in _one_line(err)


def test_the_installed_command_prints_one_line_and_exits_2():
    """The console script itself (a process, as a user runs it): exit status and stderr."""
    for argv, line in (
        (
            ["translate", WAV, "--beam", "0"],
            "speechmt translate: error: argument --beam: invalid value '0': expected an integer from 1 to 256",
        ),
        (
            ["train", "data.max_tokens=0"],
            "speechmt train: error: argument overrides: invalid value '0' for data.max_tokens: expected an integer >= 1",
        ),
    ):
        done = subprocess.run([sys.executable, "-m", "speechmt", *argv], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr, done.stdout) == (2, line + "\n", "")


def test_a_file_that_is_not_a_model_is_one_line_for_every_command_that_loads_one(tmp_path, tiny_data):
    junk = tmp_path / "notes.safetensors"
    junk.write_text("these are my notes, not a model")
    wav = tmp_path / "a.wav"
    line = f"speechmt: error: {junk}: not a speechmt model file (neither safetensors nor an old pickled checkpoint)"
    for argv in (
        ["translate", str(wav), "--model", str(junk)],
        ["translate", str(wav), "--cascade", str(junk), str(junk)],
        ["evaluate", "--model", str(junk), "--data", str(tiny_data), "--split", "dev", "--out", str(tmp_path / "e")],
        [
            "research",
            "benchmark",
            "--model",
            str(junk),
            "--data",
            str(tiny_data),
            "--split",
            "dev",
            "--out",
            str(tmp_path / "b"),
        ],
        ["average", str(junk), str(junk), "--out", str(tmp_path / "avg.safetensors")],
        ["export", str(junk), "--out", str(tmp_path / "m.safetensors")],
    ):
        status, err = _run_in_process(argv)
        assert (status, _one_line(err)) == (2, line), argv


def test_retrieve_names_a_missing_split_in_one_line(tiny_data, tmp_path):
    status, err = _run_in_process(
        ["data", "retrieve", "--data", str(tiny_data), "--splits", "dev", "tst-HE", "--memory", "train"]
    )
    assert status == 2 and "tst-HE.jsonl: no split 'tst-HE'" in _one_line(err) and "prepared: dev" in err
    assert not (tiny_data / "examples").exists()  # nothing written when a split is missing


def test_translate_takes_a_model_or_a_cascade_not_both():
    status, err = _run_in_process(TRANSLATE + ["--model", "m", "--cascade", "a", "b"])
    assert (status, _one_line(err)) == (
        2,
        "speechmt translate: error: translate takes --model M or --cascade ASR MT, not both",
    )


def test_a_config_file_is_checked_as_the_overrides_are(tmp_path):
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml.safe_dump({"data": {"max_tokens": 0}}))
    status, err = _run_in_process(["train", "--config", str(conf)])
    assert (status, _one_line(err)) == (
        2,
        f"speechmt: error: {conf}: invalid value 0 for data.max_tokens: expected an integer >= 1",
    )
    conf.write_text("train:\n  lr: abc\n")
    status, err = _run_in_process(["train", "--config", str(conf)])
    assert status == 2 and _one_line(err).endswith("invalid value 'abc' for train.lr: expected a finite number")


def test_check_config_converts_what_yaml_leaves_as_strings():
    cfg = check_config(
        load_config(None, ["train.lr=1e-3", "train.adam_betas=[0.9, 0.99]", "train.clip_norm=1"]), SECTIONS
    )
    assert cfg.train.lr == 1e-3 and type(cfg.train.lr) is float
    assert cfg.train.adam_betas == (0.9, 0.99) and type(cfg.train.clip_norm) is float
    assert check_override("train.no_such=1", SECTIONS) == "train.no_such=1"  # load_config names unknown keys itself
    assert check_override("model.preset=tiny", SECTIONS) == "model.preset=tiny"
    for item in ("model.encoder=whisper", "model.encoder_layers=x", "model.encoder.hf_config.x=1"):
        assert check_override(item, SECTIONS) == item  # older flat names, mappings: load_config migrates and checks
    with pytest.raises(ConfigError, match=r"^invalid value 'x' for model\.shrink\.kernel: expected an integer$"):
        check_override("model.shrink.kernel=x", SECTIONS)
    with pytest.raises(ConfigError, match="invalid value 'no' for data.tgt_lang: expected a string"):
        check_override("data.tgt_lang=no", SECTIONS)  # YAML 1.1 reads it as false


# -- property-based: whatever the values, a clean parse or one line and exit status 2 ----------------------

_NUMBERS = st.one_of(
    st.integers(-10, 10),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e6, 1e6),
    st.sampled_from(
        [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "infinity",
            "1e309",
            "-0",
            "0x10",
            " 5 ",
            "1_000",
            "",
            "5.",
            "abc",
            "--",
            "-",
            "1e-3",
            "٣",
        ]
    ),
    st.text(max_size=8),
)
TRANSLATE_OPTIONS = (
    "--beam",
    "--nbest",
    "--batch-size",
    "--max-chunk-seconds",
    "--max-len-a",
    "--max-len-b",
    "--len-penalty",
)
EVALUATE_OPTIONS = ("--beam", "--max-len-a", "--max-len-b", "--len-penalty", "--max-tokens")


def _outcome(argv: list[str]):
    """(Namespace or None, exit status or None, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return parse_args(argv), None, err.getvalue()
        except SystemExit as e:
            return None, e.code, err.getvalue()


def _check_outcome(command: list[str], values: dict) -> None:
    argv = command + [f"{option}={value}" for option, value in values.items()]
    args, status, err = _outcome(argv)
    assert "Traceback" not in err
    if args is None:
        assert status == 2
        line = _one_line(err)
        assert line.startswith(f"speechmt {command[0]}: error: argument ")
        assert any(f"argument {option}:" in line for option in values), line
        return
    assert err == ""
    # a clean result: values the decoder and the segmenter accept as they are
    DecodeOptions(
        beam_size=args.beam,
        nbest=getattr(args, "nbest", 1),
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        len_penalty=args.len_penalty,
    )
    assert -10 <= args.len_penalty <= 10 and 0 <= args.max_len_a <= 10
    if command[0] == "translate":
        SegmentConfig(max_seconds=args.max_chunk_seconds)
        assert 1 <= args.batch_size and 1 <= args.nbest <= args.beam
    else:
        assert args.max_tokens >= 1


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(TRANSLATE_OPTIONS), _NUMBERS.map(str), min_size=1, max_size=3))
def test_translate_numeric_options_parse_cleanly_or_fail_in_one_line(values):
    _check_outcome(TRANSLATE, values)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(EVALUATE_OPTIONS), _NUMBERS.map(str), min_size=1, max_size=3))
def test_evaluate_numeric_options_parse_cleanly_or_fail_in_one_line(values):
    _check_outcome(EVALUATE, values)
