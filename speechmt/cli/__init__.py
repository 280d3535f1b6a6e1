"""The `speechmt` command line: parser.py (every subcommand's options, checked where parsed), commands.py (one
handler per subcommand), main.py (the entry point: parse, run, one-line errors)."""

from speechmt.cli.main import main, parse_args
from speechmt.cli.parser import build_parser

__all__ = ["build_parser", "main", "parse_args"]
