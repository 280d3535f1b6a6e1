"""The command line's old spellings, which keep working for now: each is rewritten to its new one before parsing,
with one notice line on stderr naming the new spelling. They are in no `--help` list.

    speechmt prepare mustc ...        -> speechmt data prepare mustc ...
    speechmt synth --corpus mustc ... -> speechmt data synth mustc ...
    speechmt import-gguf FILE ...     -> speechmt import gguf FILE ...
    speechmt pretrain-audio ... --set max_updates=9 -> speechmt research pretrain-audio ... max_updates=9
"""

from __future__ import annotations

from collections.abc import Sequence

MOVED = {
    **{
        name: ("data", name)
        for name in (
            "prepare",
            "synth",
            "synth-mt",
            "synth-memory",
            "synth-mono",
            "synth-tts",
            "vocab",
            "retrieve",
            "backtranslate",
            "distill",
        )
    },
    "import-hf": ("import", "hf"),
    "import-whisper": ("import", "whisper"),
    "import-gguf": ("import", "gguf"),
    "convert": ("import", "convert"),
    **{name: ("research", name) for name in ("analyze", "benchmark", "pretrain-audio")},
}
CORPUS_OPTION = ("synth", "synth-mt", "synth-mono")  # their --corpus option became a positional argument
SET_OPTION = ("--set KEY=VALUE", "KEY=VALUE")  # pretrain-audio's overrides, now positional as train's


def _take_option(tokens: list[str], option: str) -> tuple[list[str], str | None]:
    """`tokens` without `option VALUE` (or `option=VALUE`), and VALUE (None when the option is not there)."""
    for i, token in enumerate(tokens):
        if token == option and i + 1 < len(tokens):
            return tokens[:i] + tokens[i + 2 :], tokens[i + 1]
        if token.startswith(option + "="):
            return tokens[:i] + tokens[i + 1 :], token.split("=", 1)[1]
    return tokens, None


def _uses_set(command: list[str], rest: list[str]) -> bool:
    """Whether a pretrain-audio command line gives its overrides the old way, `--set KEY=VALUE`."""
    return command[-1:] == ["pretrain-audio"] and any(t == "--set" or t.startswith("--set=") for t in rest)


def modernise(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """`argv` in the current spelling, and the notice naming the change (None when it was current already)."""
    argv = list(argv)
    if not argv or argv[0] not in MOVED:
        command, rest = argv[:2], argv[2:]
        if not _uses_set(command, rest):
            return argv, None
        now = f"speechmt {' '.join(command)}"
        return argv, f"{now} {SET_OPTION[0]} is now {now} {SET_OPTION[1]}"
    old, rest = argv[0], argv[1:]
    command, was = list(MOVED[old]), f"speechmt {old}"
    if old in CORPUS_OPTION:
        rest, corpus = _take_option(rest, "--corpus")
        if corpus is not None:
            command.append(corpus)
            was += f" --corpus {corpus}"
    now = f"speechmt {' '.join(command)}"
    if _uses_set(command, rest):
        was, now = f"{was} {SET_OPTION[0]}", f"{now} {SET_OPTION[1]}"
    return command + rest, f"{was} is now {now}"
