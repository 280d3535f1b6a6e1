"""A request's form fields checked into RequestOptions: OpenAI's (`model`, `response_format`, `language`,
`prompt`, `temperature`, `timestamp_granularities[]`) and speechmt's extra ones (`target_language`, `beam`,
`cut_pauses`). A bad one is a 400 that names it, in the command line's words. `language` (the source) and
`target_language` pick the direction of a model of several (speechmt.serve.models.ServedModel.direction)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from speechmt.serve.errors import bad_request
from speechmt.serve.models import DirectionError, ServedModel

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
OPENAI_FIELDS = ("file", "model", "response_format", "language", "prompt", "temperature", "timestamp_granularities[]")
EXTRA_FIELDS = ("target_language", "beam", "cut_pauses")
SUBTITLE_PAUSE_MS = 300.0  # `translate --format srt|vtt` also cuts at every pause this long


@dataclass(frozen=True)
class RequestOptions:
    """What one request asks for: the task (st: /translations, asr: /transcriptions), the response format, the
    beam, the pause length that also cuts the audio (ms; 0: only where a chunk would be too long), the direction
    ("en-de"; None for a model of one)."""

    task: str
    response_format: str
    beam: int
    cut_pauses: float
    direction: str | None = None


def request_options(
    form: Mapping[str, object], task: str, served: ServedModel, default_beam: int, max_beam: int
) -> RequestOptions:
    """The form's fields checked (module docstring); 400 naming the first bad one."""
    fields = OPENAI_FIELDS + (EXTRA_FIELDS if task == "st" else EXTRA_FIELDS[1:])
    unknown = sorted(set(form) - set(fields))
    if unknown:
        raise bad_request(unknown[0], f"unknown field; expected {', '.join(fields)}")
    fmt = _text(form, "response_format") or "json"
    if fmt not in FORMATS:
        raise bad_request("response_format", f"invalid value {fmt!r}: expected {', '.join(FORMATS)}")
    direction = request_direction(form, task, served)
    if _text(form, "prompt"):
        raise bad_request("prompt", "not supported: the model takes no text prompt (leave it empty)")
    temperature = _number(form, "temperature", 0.0, 0.0, 1.0)
    if temperature != 0.0:
        raise bad_request(
            "temperature",
            f"invalid value '{temperature:g}': only 0 (the server decodes by beam search, not by sampling)",
        )
    granularity = _text(form, "timestamp_granularities[]")
    if granularity not in (None, "segment"):
        raise bad_request("timestamp_granularities[]", f"invalid value {granularity!r}: only segment")
    beam = int(_number(form, "beam", default_beam, 1, max_beam, integer=True))
    pauses = _number(form, "cut_pauses", SUBTITLE_PAUSE_MS if fmt in ("srt", "vtt") else 0.0, 0, 10000)
    return RequestOptions(task, fmt, beam, pauses, direction)


def request_direction(form: Mapping[str, object], task: str, served: ServedModel) -> str | None:
    """The direction `language` and `target_language` (st only) pick from those the model of `task` knows (None:
    a model of one, whose languages are checked as before); 400 naming the field and listing the directions for
    one it was not trained in."""
    if not served.multilingual(task):
        _check_language(form, "language", served.source_language, "reads")
        _check_language(form, "target_language", served.target_language, "writes")
        return None
    source = _text(form, "language") or None
    target = (_text(form, "target_language") or None) if task == "st" else None
    try:
        return served.direction(task, source, target)
    except DirectionError as e:
        raise bad_request(e.param, str(e)) from None


def _text(form: Mapping[str, object], name: str) -> str | None:
    """A text field's value, stripped; None when absent. 400 when it is a file."""
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(name, "expected a text field, not a file")
    return value.strip()


def _number(
    form: Mapping[str, object], name: str, default: float, lo: float, hi: float, integer: bool = False
) -> float:
    """A numeric field within [lo, hi] (an integer when asked); `default` when absent or empty."""
    text = _text(form, name)
    if not text:
        return default
    kind = "an integer" if integer else "a number"
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        raise bad_request(name, f"invalid value {text!r}: expected {kind} from {lo:g} to {hi:g}")
    return value


def _check_language(form: Mapping[str, object], name: str, served: str | None, verb: str) -> None:
    """400 for a language code speechmt does not know, or one the model does not read (source) or write
    (target) when it says which it does."""
    from speechmt.tokenizers.lm import LANGUAGE_NAMES

    code = _text(form, name)
    if not code:
        return
    if code.lower() not in LANGUAGE_NAMES:
        raise bad_request(
            name,
            f"unknown language {code!r}: expected an ISO 639-1 code such as en or de "
            f"({', '.join(sorted(LANGUAGE_NAMES))})",
        )
    if served and code.lower() != served:
        raise bad_request(name, f"invalid value {code!r}: this model {verb} {served}")
