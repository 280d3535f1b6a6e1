"""`speechmt`'s entry point: an old spelling rewritten (speechmt.cli.legacy, one notice line), the command line
parsed and checked (speechmt.cli.parser), the subcommand's handler run, and the errors that are bad input, not bugs,
said in one line (rc 2)."""

from __future__ import annotations

import argparse
import sys
import warnings

from speechmt.audio import AudioError
from speechmt.cli.legacy import modernise
from speechmt.cli.parser import build_parser


def _known_errors() -> tuple[type[BaseException], ...]:
    """The errors a subcommand reports as one line (rc 2): bad input, not a bug."""
    from speechmt.checkpoint import CheckpointError
    from speechmt.config import ConfigError
    from speechmt.data.manifest import ManifestError
    from speechmt.data.prepare import PrepareError
    from speechmt.decoding.backtranslate import BacktranslateError
    from speechmt.decoding.simultaneous import SimultaneousError
    from speechmt.decoding.text_generators import GeneratorError
    from speechmt.evaluation.analyze import AnalysisError
    from speechmt.evaluation.benchmark import BenchmarkError
    from speechmt.interop import HFImportError
    from speechmt_corpora.common import SynthError

    return (
        AudioError,
        ManifestError,
        PrepareError,
        FileNotFoundError,
        HFImportError,
        BenchmarkError,
        AnalysisError,
        SimultaneousError,
        BacktranslateError,
        GeneratorError,
        CheckpointError,
        ConfigError,
        SynthError,
    )


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"speechmt: warning: {message}\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed and checked: an old spelling rewritten with one notice line on stderr, every
    option's type and range checked where it is parsed, then the options that depend on each other (--nbest <=
    --beam). A bad option exits with one line and status 2."""
    argv, notice = modernise(sys.argv[1:] if argv is None else argv)
    if notice:
        print(f"speechmt: notice: {notice}", file=sys.stderr)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _add_later_items(parser, args, extra)
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        args.parser.error(problem)  # the subcommand's parser: "speechmt translate: error: ..."
    return args


def _add_later_items(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Positional items after an option (`train --config c.yaml train.lr=1e-3`, `research pretrain-audio a.jsonl
    --out o max_updates=9`), checked by their argparse type and added to the command's `items` list; anything
    else left over is the one-line error argparse gives."""
    action = next(
        (
            a
            for a in getattr(args, "parser", parser)._actions
            if not a.option_strings and a.dest == getattr(args, "items", None)
        ),
        None,
    )
    if action is None or any(t.startswith("-") for t in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        values = [action.type(t) if action.type else t for t in extra]
    except argparse.ArgumentTypeError as e:
        args.parser.error(f"argument {action.dest}: {e}")
    action(getattr(args, "parser", parser), args, [*(getattr(args, action.dest) or []), *values])


def _option_error(args: argparse.Namespace, error: ValueError) -> int:
    """An API argument's OptionError ("beam: invalid value ...") as the subcommand's usage error naming its
    option ("speechmt translate: error: argument --beam: invalid value ..."), rc 2; one plain error line when
    the subcommand has no such option."""
    name, _, problem = str(error).partition(": ")
    option = f"--{name.replace('_', '-')}"
    if option in args.parser._option_string_actions:
        print(f"{args.parser.prog}: error: argument {option}: {problem}", file=sys.stderr)
    else:
        print(f"speechmt: error: {error}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Runs one `speechmt` command line; returns its exit status."""
    from speechmt.api import OptionError

    warnings.formatwarning = _one_line_warning
    try:
        args = parse_args(argv)
    except SystemExit as e:  # a bad option (2) or --help (0), already printed
        return e.code if isinstance(e.code, int) else 0
    try:
        return args.func(args)
    except OptionError as e:
        return _option_error(args, e)
    except _known_errors() as e:
        print(f"speechmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speechmt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
