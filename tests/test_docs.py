"""The README and docs/ stay true: every relative link (and its #anchor) resolves, every documented `speechmt
<command>` exists with the options written after it (an old spelling as the command it is rewritten to), every other
`--option` exists in some command the repository has, docs/cli.md is what scripts/cli_reference.py writes from the
parsers, and the README stays a short front door that still has the set-up commands and a translation."""

import argparse
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import speechmt
from speechmt.cli import build_parser
from speechmt.cli.legacy import modernise

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`([^`]+)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OTHER_TOOLS = {"--nproc-per-node"}  # torchrun's


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> dict[str, set[str]]:
    """{"translate": {"--beam", ...}, "data prepare mustc": {...}, ...}: every command's option strings."""
    parser = build_parser()
    return {
        command.removeprefix("speechmt "): {s for a in sub._actions for s in a.option_strings}
        for command, _, sub in _cli_reference().subcommands(parser)
    }


def _groups() -> set[str]:
    """The commands that hold commands: "data", "data prepare", "import", "research"."""
    return {" ".join(c.split()[:n]) for c in _commands() for n in range(1, len(c.split()))}


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")


def _anchors(page: Path) -> Iterator[str]:
    """The page's link targets: its headings' anchors and its `<a id="...">` tags (docs/cli.md keeps the old
    spellings' anchors so)."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if m := re.fullmatch(r'<a id="([\w-]+)"></a>', line.strip()):
            yield m.group(1)
        elif m := re.match(r"#{1,6}\s+(.*)", line):
            slug = _slug(m.group(1))
            seen[slug] = seen.get(slug, -1) + 1
            yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def _prose(page: Path) -> str:
    """The page without its fenced code blocks and inline code."""
    return SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))


def _code(page: Path) -> list[str]:
    """Each shell line of the fenced blocks (continuations joined) and each inline code span."""
    text = page.read_text(encoding="utf-8")
    lines = []
    for block in FENCE.findall(text):
        lines += block.replace("\\\n", " ").splitlines()[1:-1]
    return lines + SPAN.findall(FENCE.sub("", text))


def _speechmt_calls(code: str) -> list[tuple[str, list[str]]]:
    """(command, the options written after it) for each `speechmt <command> ...` in a line of code, up to a comment
    or the end of the command; an old spelling is read as what it is rewritten to (speechmt.cli.legacy)."""
    tokens = re.split(r"\s+", code.split(" # ")[0].strip())
    calls = []
    for i, token in enumerate(tokens):
        if not (token == "speechmt" or token.endswith("/speechmt")) or i + 1 >= len(tokens):
            continue
        rest = tokens[i + 1 :]
        if not re.fullmatch(r"[a-z][a-z0-9-]*", rest[0]):  # a placeholder (COMMAND), `...` or an option
            calls.append(("", rest))
            continue
        end = next((k for k, t in enumerate(rest) if t in ("|", "&&", ";", ">", "2>")), len(rest))
        calls.append(_command_words(modernise(rest[:end])[0]))
    return calls


def _command_words(argv: list[str]) -> tuple[str, list[str]]:
    """(the command, what follows it) of a command line: words while they name a group's commands."""
    parser, words = build_parser(), []
    for token in argv:
        choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if choices is None or token not in choices:
            break
        parser = choices[token]
        words.append(token)
    return " ".join(words) or argv[0], argv[len(words) or 1 :]


def _options(tokens: list[str]) -> list[str]:
    return [m for t in tokens for m in OPTION.findall(t.split("=")[0])]


def test_pages_exist_and_the_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme and "speechmt translate talk.wav" in readme
    names = {p.name for p in PAGES}
    assert {
        "README.md",
        "install.md",
        "data.md",
        "training.md",
        "models.md",
        "semantic-layers.md",
        "lm-decoders.md",
        "analysis.md",
        "benchmarks.md",
        "model-files.md",
        "recipes.md",
        "cli.md",
        "python-api.md",
        "translate-evaluate.md",
        "limitations.md",
        "layout.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in set(_anchors(file)):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_anchor_slugs():
    assert _slug("Set-up: two commands") == "set-up-two-commands"
    assert _slug("speechmt prepare mustc") == "speechmt-prepare-mustc"
    assert _slug("States by name, a new variant, the text path") == "states-by-name-a-new-variant-the-text-path"


def _known_elsewhere() -> set[str]:
    """Options of the repository's other commands: recipes' run.sh, benchmark and set-up scripts, examples."""
    files = [
        *ROOT.glob("recipes/**/*.sh"),
        *ROOT.glob("benchmarks/**/*.py"),
        *ROOT.glob("benchmarks/**/*.sh"),
        *ROOT.glob("scripts/*"),
        *ROOT.glob("examples/*.py"),
        ROOT / "Makefile",
    ]
    return {o for f in files if f.is_file() for o in OPTION.findall(f.read_text(encoding="utf-8"))} | OTHER_TOOLS


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_documented_subcommands_and_options_exist(page):
    commands, groups = _commands(), _groups()
    top = {s for a in build_parser()._actions for s in a.option_strings}
    everywhere = set().union(*commands.values()) | top | _known_elsewhere()
    wrong = []
    for code in _code(page):
        for command, tokens in _speechmt_calls(code):
            if command and command not in commands and command not in groups:
                wrong.append(f"speechmt {command}: no such command")
                continue
            allowed = commands.get(command, {"-h", "--help"}) if command else top
            wrong += [
                f"speechmt {command} {o}: no such option" for o in _options(tokens) if command and o not in allowed
            ]
        wrong += [f"{o}: no command has it" for o in _options([code]) if o not in everywhere]
    wrong += [f"{o}: no command has it" for o in OPTION.findall(_prose(page)) if o not in everywhere]
    assert wrong == [], f"{page.relative_to(ROOT)}: {sorted(set(wrong))}"


def test_the_checker_catches_a_wrong_subcommand_and_option():
    calls = _speechmt_calls("../../.venv/bin/speechmt translate a.wav --beam 5 --format=json  # the --nothing")
    assert calls == [("translate", ["a.wav", "--beam", "5", "--format=json"])]
    assert _options(calls[0][1]) == ["--beam", "--format"]
    assert _speechmt_calls("speechmt data prepare mustc --root R") == [("data prepare mustc", ["--root", "R"])]
    assert _speechmt_calls("speechmt prepare mustc --root R") == [("data prepare mustc", ["--root", "R"])]
    assert _speechmt_calls("speechmt synth --corpus mustc --out o") == [("data synth", ["mustc", "--out", "o"])]
    assert _speechmt_calls("speechmt import-gguf F --out D | tee log") == [("import gguf", ["F", "--out", "D"])]
    assert _speechmt_calls("torchrun --nproc-per-node 2 -m speechmt train --config c.yaml")[0][0] == "train"
    assert _speechmt_calls("speechmt no-such --x") == [("no-such", ["--x"])]
    assert _speechmt_calls("import speechmt") == []
    commands = _commands()
    assert "translate" in commands and "--beam" in commands["translate"] and "--beam" not in commands["data vocab"]
    assert "speechmt" not in commands and "data prepare mustc" in commands and "prepare mustc" not in commands
    assert _groups() == {"data", "data prepare", "import", "research"}


def test_cli_reference_is_generated_from_the_parsers():
    module = _cli_reference()
    text = module.build()
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == text, (
        "docs/cli.md is out of date: run .venv/bin/python scripts/cli_reference.py"
    )
    shown = {
        command.removeprefix("speechmt "): {
            s for a in sub._actions if a.help != argparse.SUPPRESS for s in a.option_strings
        }
        for command, _, sub in module.subcommands(build_parser())
    }
    for command, options in shown.items():
        assert f"## speechmt {command}\n" in text
        assert all(f"`{o}" in text for o in options if o not in ("-h", "--help"))
    assert "`--set" not in text.split("## Old spellings")[0]  # an old spelling: in its table only


def test_cli_reference_keeps_the_old_spellings_anchors_and_table():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    anchors = set(_anchors(ROOT / "docs" / "cli.md"))
    assert {
        "speechmt-prepare-mustc",
        "speechmt-synth",
        "speechmt-vocab",
        "speechmt-analyze",
        "speechmt-benchmark",
        "speechmt-convert",
        "speechmt-import-gguf",
        "speechmt-pretrain-audio",
    } <= anchors
    assert '<a id="speechmt-prepare-mustc"></a>\n\n## speechmt data prepare mustc\n' in text
    assert "| `speechmt synth --corpus CORPUS` | [`speechmt data synth CORPUS`](#speechmt-data-synth) |" in text
    assert "| `speechmt import-gguf` | [`speechmt import gguf`](#speechmt-import-gguf) |" in text
    rows = text.split("## Old spellings")[1].count("\n| `speechmt")
    assert rows == 19  # 18 commands moved, and pretrain-audio's --set


def test_cli_reference_renders_an_option_table():
    parser = argparse.ArgumentParser(prog="speechmt")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="a | demo")
    demo.add_argument("files", nargs="+", help="<audio> files")
    demo.add_argument("--beam", type=int, default=5, help="beam size")
    demo.add_argument("--pair", nargs=2, metavar=("A", "B"), action="append", default=[])
    demo.add_argument("--format", choices=("text", "json"), default="text")
    demo.add_argument("--out", required=True)
    demo.add_argument("--fast", action="store_true")
    text = _cli_reference().render(parser)
    assert "| [`speechmt demo`](#speechmt-demo) | a \\| demo |" in text
    assert text.endswith(
        "| option | default | |\n|---|---|---|\n| `files ...` |  | &lt;audio&gt; files |\n"
        "| `--beam BEAM` | 5 | beam size |\n| `--pair A B` |  | repeatable |\n"
        "| `--format {text,json}` | text |  |\n| `--out OUT` |  | required |\n| `--fast` |  |  |\n"
    )


def test_python_api_page_lists_every_translate_option():
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    params = inspect.signature(speechmt.translate).parameters
    keyword = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert all(f"`{name}`" in page for name in keyword)
