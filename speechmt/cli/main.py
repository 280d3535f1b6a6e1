"""`speechmt`'s entry point: the command line parsed and checked (speechmt.cli.parser), the subcommand's
handler run (speechmt.cli.commands), and the errors that are bad input, not bugs, said in one line (rc 2)."""

from __future__ import annotations

import argparse
import sys
import warnings

from speechmt.audio import AudioError
from speechmt.cli.parser import build_parser


def _known_errors() -> tuple[type[BaseException], ...]:
    """The errors a subcommand reports as one line (rc 2): bad input, not a bug."""
    from speechmt.checkpoint import CheckpointError
    from speechmt.config import ConfigError
    from speechmt.data.manifest import ManifestError
    from speechmt.data.prepare import PrepareError
    from speechmt_corpora.common import SynthError
    from speechmt.decoding.backtranslate import BacktranslateError
    from speechmt.decoding.simultaneous import SimultaneousError
    from speechmt.evaluation.analyze import AnalysisError
    from speechmt.evaluation.benchmark import BenchmarkError
    from speechmt.interop import HFImportError

    return (AudioError, ManifestError, PrepareError, FileNotFoundError, HFImportError, BenchmarkError, AnalysisError,
            SimultaneousError, BacktranslateError, CheckpointError, ConfigError, SynthError)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"speechmt: warning: {message}\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed and checked: every option's type and range where it is parsed, then the options
    that depend on each other (--nbest <= --beam). A bad option exits with one line and status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        args.parser.error(problem)  # the subcommand's parser: "speechmt translate: error: ..."
    return args


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    try:
        args = parse_args(argv)
    except SystemExit as e:  # a bad option (2) or --help (0), already printed
        return e.code if isinstance(e.code, int) else 0
    try:
        return args.func(args)
    except _known_errors() as e:
        print(f"speechmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speechmt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
