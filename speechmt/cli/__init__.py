"""The `speechmt` command line: parser.py (the everyday commands' options and the top level), data_parser.py (`data
...`), tools_parser.py (`import ...`, `research ...`), each command's options checked where parsed; commands.py,
data_commands.py, tools_commands.py (one small handler per command: parse -> the public Python API -> print);
legacy.py (old spellings, rewritten with a notice); main.py (the entry point: parse, run, one-line errors)."""

from speechmt.cli.main import main, parse_args
from speechmt.cli.parser import build_parser

__all__ = ["build_parser", "main", "parse_args"]
