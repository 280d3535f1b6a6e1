"""The `speechmt` command line's parser: the everyday commands at the top (translate, evaluate, train, average,
export; handlers: speechmt.cli.commands), the others in groups: `data` (speechmt.cli.data_parser), `import` and
`research` (speechmt.cli.tools_parser). Options are checked where they are parsed (speechmt.checks), and options that
depend on each other by each subcommand's `check`. Old spellings are rewritten before parsing (speechmt.cli.legacy)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from speechmt import __version__
from speechmt import checks as opt
from speechmt.cli import commands
from speechmt.cli.data_parser import add_data_group
from speechmt.cli.decode_options import (
    add_decode_options,
    add_dtype_option,
    add_memory_option,
    add_simultaneous_options,
    add_strategy_options,
    check_mbr,
    check_simultaneous,
)
from speechmt.cli.tools_parser import add_import_group, add_research_group


def override(item: str) -> str:
    """An argparse type: a `section.key=value` experiment config override, type- and range-checked."""
    from speechmt.config import SECTIONS

    try:
        return opt.check_override(item, SECTIONS)
    except opt.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_translate(args: argparse.Namespace) -> str | None:
    if args.nbest > args.beam:
        return f"argument --nbest: invalid value '{args.nbest}': expected an integer from 1 to --beam ({args.beam})"
    if args.model and args.cascade:
        return "translate takes --model M or --cascade ASR MT, not both"
    if args.output_dir and args.format not in ("srt", "vtt"):
        return f"argument --output-dir: only with --format srt or vtt, not {args.format}"
    if args.format in ("srt", "vtt") and len(args.audio) > 1 and not args.output_dir:
        return f"--format {args.format} with {len(args.audio)} files needs --output-dir (one subtitle file each)"
    if args.simultaneous and args.format not in ("text", "json"):
        return f"--simultaneous writes text or json, not {args.format}"
    if "-" in args.audio and not args.simultaneous:
        return "audio '-' (standard input) needs --simultaneous"
    return check_mbr(args) or check_simultaneous(args) or _check_task(args)


def _check_evaluate(args: argparse.Namespace) -> str | None:
    if args.compare and not args.simultaneous:
        return "argument --compare: only with --simultaneous"
    missing = [f for f in args.compare or [] if not (Path(f) / "quality_latency.json").is_file()]
    if missing:
        return f"argument --compare: {missing[0]} holds no quality_latency.json (an evaluate --simultaneous folder)"
    return check_mbr(args) or check_simultaneous(args) or _check_task(args)


def _check_task(args: argparse.Namespace) -> str | None:
    if args.task and args.cascade:
        return f"argument --task: invalid value '{args.task}': --task picks a --model's task, not a cascade's"
    return None


class CommandHelpFormatter(argparse.HelpFormatter):
    """argparse's help, with room for a group's command names before their descriptions (Python 3.11 measures them
    one indent step short and wraps the longest)."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.choices:
            longest = max(map(len, action.choices)) + self._current_indent + 2 * self._indent_increment
            self._action_max_length = max(self._action_max_length, longest)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, "speechmt translate: error: ...", exit status 2 (no usage
    block: `speechmt <command> --help` shows it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", CommandHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):
        # Python 3.11's argparse drops a "--" value ("--beam=--") and hands the option an empty list
        value = super()._get_values(action, arg_strings)
        if value == [] and action.option_strings and action.nargs in (None, "+"):
            self.error(
                f"argument {'/'.join(action.option_strings)}: expected "
                f"{'one argument' if action.nargs is None else 'at least one argument'}"
            )
        return value


def _train(sub) -> None:
    train = sub.add_parser("train", help="train a model (resumes from save_dir/checkpoint_last.safetensors)")
    train.add_argument("--config", help="experiment YAML (model, data, train sections)")
    train.add_argument(
        "overrides",
        nargs="*",
        type=override,
        help="section.key=value, e.g. train.lr=1e-3 data.max_tokens=20000 (checked against the "
        "types and ranges of the config fields)",
    )
    train.add_argument("--no-resume", action="store_true", help="start afresh even if a checkpoint exists")
    train.set_defaults(func=commands.cmd_train, items="overrides")


def _average(sub) -> None:
    avg = sub.add_parser("average", help="average checkpoints (files, or the last N of a folder)")
    avg.add_argument(
        "inputs",
        nargs="+",
        help="checkpoint files, or folders of checkpoint_epoch<E>.safetensors and checkpoint_<step>.safetensors",
    )
    avg.add_argument("--last", type=opt.integer(1, 10**6), default=10, help="how many numbered checkpoints of a folder")
    avg.add_argument(
        "--by",
        choices=("auto", "epoch", "update"),
        default="auto",
        help="which numbered checkpoints of a folder: epoch (checkpoint_epoch<E>: the last N epochs, "
        "as fairseq averages), update (checkpoint_<step>), auto: the epoch ones when it has any",
    )
    avg.add_argument("--out", required=True)
    avg.set_defaults(func=commands.cmd_average)


def _translate(sub) -> None:
    tr = sub.add_parser(
        "translate",
        help="translate audio files (any length) with a checkpoint",
        description="Translates each audio file. An unreadable file is named in one line on stderr "
        '(and has an "error" in --format json) while the others are translated, and the exit '
        "status is then 1; audio too short to translate gives a warning line and an empty text.",
    )
    tr.add_argument(
        "audio",
        nargs="+",
        help="audio files (wav, flac, ogg, mp3); with --simultaneous, - reads raw "
        "16-bit 16 kHz mono PCM from standard input",
    )
    add_decode_options(
        tr,
        "checkpoint file, or `multilingual` (the bundled model of eight directions; default: the bundled "
        "English->German model, speechmt/pretrained)",
    )
    add_strategy_options(tr)
    tr.add_argument(
        "--nbest",
        type=opt.integer(1, opt.MAX_BEAM),
        default=1,
        help="hypotheses kept in JSON output, 1 to --beam (default: 1)",
    )
    tr.add_argument(
        "--batch-size",
        type=opt.integer(1, opt.MAX_BATCH),
        default=16,
        help=f"chunks decoded at once, 1 to {opt.MAX_BATCH} (default: 16)",
    )
    tr.add_argument(
        "--max-chunk-seconds",
        type=opt.number(1, opt.MAX_CHUNK_SECONDS, lo_open=True),
        default=20.0,
        help="long audio is cut at pauses into chunks of at most this many seconds: more than 1, at most "
        f"{opt.MAX_CHUNK_SECONDS:g} and what the model takes at once (Whisper: 30) (default: 20)",
    )
    tr.add_argument(
        "--format",
        default="text",
        choices=("text", "json", "srt", "vtt"),
        help="text: the translation (file<TAB>translation for several files); json: one object per "
        'file, with subtitle cues in "segments"; srt, vtt: subtitles (docs/subtitles.md)',
    )
    tr.add_argument(
        "--cut-pauses",
        type=opt.number(0, 10000),
        metavar="MS",
        help="also cut the audio at every pause of at least MS milliseconds, about one sentence per "
        "chunk; 0: only where a chunk would pass --max-chunk-seconds (default: 300 with --format srt "
        "or vtt, else 0)",
    )
    tr.add_argument(
        "--output-dir",
        help="srt, vtt: write <file stem>.srt or .vtt per file into this folder "
        "(needed for several files; default: standard output)",
    )
    tr.add_argument(
        "--timing",
        action="store_true",
        help="one file at a time; print file, translation and seconds taken (text format)",
    )
    add_memory_option(tr)
    add_simultaneous_options(tr, several=False)
    tr.set_defaults(func=commands.cmd_translate, check=_check_translate)


def _evaluate(sub) -> None:
    ev = sub.add_parser("evaluate", help="decode a prepared split and score it (BLEU/chrF or WER/CER)")
    add_decode_options(
        ev, "checkpoint file, or `multilingual` (default: the bundled English->German model)", ("st", "asr", "mt")
    )
    ev.add_argument("--data", required=True, help="prepared data folder")
    ev.add_argument("--split", required=True)
    ev.add_argument("--out", help="report folder (default: eval/<model>_<split> in the current directory)")
    ev.add_argument(
        "--max-tokens", type=opt.integer(1, opt.MAX_TOKENS), default=20000, help="feature frames per decoding batch"
    )
    ev.add_argument("--results", help="a RESULTS.md to append a row to")
    ev.add_argument("--name", help="how the model is named in the report and RESULTS row")
    ev.add_argument(
        "--skip-bad-audio",
        action="store_true",
        help="score the utterances whose audio can be read and count the others in the report "
        "(default: stop, naming them)",
    )
    ev.add_argument(
        "--comet",
        metavar="MODEL",
        help="also score translations with COMET (needs the unbabel-comet "
        "package, pip install 'speechmt[comet]'): a checkpoint file, a model folder, or a name to "
        "download such as Unbabel/wmt22-comet-da; without it a line says COMET was skipped",
    )
    add_memory_option(ev)
    add_simultaneous_options(ev, several=True)
    ev.add_argument(
        "--limit", type=opt.integer(1, opt.MAX_TOKENS), help="only the first N utterances of the split (manifest order)"
    )
    ev.add_argument(
        "--compare",
        nargs="+",
        metavar="FOLDER",
        help="with --simultaneous: report folders of earlier "
        "runs whose quality-latency rows (quality_latency.json) join this run's table and plot",
    )
    ev.set_defaults(func=commands.cmd_evaluate, check=_check_evaluate)


def _export(sub) -> None:
    exp = sub.add_parser("export", help="an inference-only copy of a checkpoint (float16 weights by default)")
    exp.add_argument("checkpoint")
    exp.add_argument("--out", required=True)
    exp.add_argument("--fp32", action="store_true", help="keep float32 weights")
    exp.add_argument(
        "--merge",
        action="store_true",
        help="a checkpoint of trained parameters on a pretrained base "
        "(LoRA, LNA): write the whole model, adapters folded in, so that it needs no base",
    )
    exp.add_argument(
        "--whisper-pad-seconds",
        type=opt.number(0, 30),
        default=None,
        metavar="S",
        help="a model on Whisper's log-mel input: pad each clip to S seconds instead (30: Whisper's own "
        "window; 10-15 hear short clips as well at half the encoder's cost; see docs/lm-decoders.md)",
    )
    exp.add_argument(
        "--memory",
        metavar="NAME",
        help="a model that reads retrieved examples (decoder.examples): "
        "the translation memory it searches when decoding is given none (a folder's name under "
        "$SPEECHMT_HOME, e.g. ding-en-de from `speechmt data synth-memory`, a folder or a manifest; "
        "stored as decoder.memory)",
    )
    exp.set_defaults(func=commands.cmd_export)


def _serve(sub) -> None:
    srv = sub.add_parser(
        "serve",
        help="an OpenAI-compatible translation server (docs/serving.md)",
        description="Serves a model over HTTP: OpenAI's POST /v1/audio/translations and "
        "/v1/audio/transcriptions, GET /v1/models and /health; concurrent requests are decoded "
        "together. Needs the serve extra: pip install 'speechmt[serve]'.",
    )
    srv.add_argument("--model", help="checkpoint file, or `multilingual` (default: the bundled English->German model)")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    srv.add_argument("--port", type=opt.integer(0, 65535), default=8000, help="port (default: 8000)")
    srv.add_argument(
        "--workers",
        type=opt.integer(1, 64),
        default=1,
        help="processes, each with its own copy of the model, sharing the port (default: 1)",
    )
    srv.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    add_dtype_option(srv)
    srv.add_argument(
        "--beam",
        type=opt.integer(1, 16),
        default=5,
        help="beam size unless a request asks for another (field beam), 1 to 16 (default: 5)",
    )
    srv.add_argument(
        "--max-len-b",
        type=opt.integer(1, opt.MAX_OUTPUT_TOKENS),
        default=200,
        help="output tokens per chunk at most (default: 200)",
    )
    srv.add_argument(
        "--max-batch", type=opt.integer(1, opt.MAX_BATCH), default=8, help="chunks decoded at once (default: 8)"
    )
    srv.add_argument(
        "--max-wait-ms",
        type=opt.number(0, 10000),
        default=30.0,
        help="how long the first queued chunk waits for others to share its batch (default: 30)",
    )
    srv.add_argument(
        "--max-queue",
        type=opt.integer(1, 100000),
        default=32,
        help="requests waiting or decoding; more are answered 503 with Retry-After (default: 32)",
    )
    srv.add_argument(
        "--max-upload-mb",
        type=opt.number(0, 4096, lo_open=True),
        default=25.0,
        help="largest upload in MiB; larger ones are answered 413 (default: 25)",
    )
    srv.add_argument(
        "--request-timeout",
        type=opt.number(0, 86400, lo_open=True),
        default=300.0,
        metavar="S",
        help="seconds a request may take; then 504 and its work is dropped (default: 300)",
    )
    srv.add_argument(
        "--max-chunk-seconds",
        type=opt.number(1, 30, lo_open=True),
        default=20.0,
        help="audio is cut at pauses into chunks of at most this many seconds (default: 20)",
    )
    srv.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="info")
    srv.set_defaults(func=commands.cmd_serve)


SUBCOMMANDS = (
    _translate,
    _evaluate,
    _train,
    _average,
    _export,
    _serve,
    add_data_group,
    add_import_group,
    add_research_group,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, each calling its handler with the parsed options; each leaf subcommand's
    parser is its `args.parser` (for its error lines)."""
    parser = OneLineParser(
        prog="speechmt",
        description="End-to-end speech-to-text translation. The "
        "commands' old spellings still run, with a notice naming the new one.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"speechmt {__version__}",
        help="print the version (the installed package's) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    for _, leaf in leaves(parser):
        leaf.set_defaults(parser=leaf)
    return parser


def leaves(parser: argparse.ArgumentParser, prefix: str = "speechmt") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(full command, parser) of every subcommand that runs, nested ones (`data prepare mustc`) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from leaves(sub, f"{prefix} {name}")
                else:
                    yield f"{prefix} {name}", sub
