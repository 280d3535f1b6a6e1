"""A Translation as each `response_format` writes it: `json` {"text"}, `text`, `verbose_json` (OpenAI's
fields, its segments the subtitle cues that `translate --format json` lists), `srt` and `vtt` (the subtitles
`translate --format srt|vtt` writes, speechmt.api.subtitles)."""

from __future__ import annotations

import json

from speechmt.decoding.translate import Translation
from speechmt.serve.models import TASK_NAMES

MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def render(result: Translation, fmt: str, task: str, language: str | None) -> tuple[str, str]:
    """(body, media type) of one result in `fmt` (options.FORMATS); `language` the output's ISO 639-1 code."""
    from speechmt.api import subtitles

    if fmt in ("srt", "vtt"):
        return subtitles(result, fmt), MEDIA_TYPES[fmt]
    if fmt == "text":
        return result.text + "\n", MEDIA_TYPES[fmt]
    body = verbose_json(result, task, language) if fmt == "verbose_json" else {"text": result.text}
    return json.dumps(body, ensure_ascii=False), MEDIA_TYPES[fmt]


def verbose_json(result: Translation, task: str, language: str | None) -> dict:
    """OpenAI's verbose_json: task, language (its English name in lower case, as OpenAI writes it), duration (s),
    text and segments (id, start, end, text and OpenAI's other fields, which beam search does not have: zero)."""
    from speechmt.api import subtitle_cues
    from speechmt.tokenizers.lm import LANGUAGE_NAMES

    segments = [
        {
            "id": i,
            "seek": 0,
            "start": round(c.start, 3),
            "end": round(c.end, 3),
            "text": c.text,
            "tokens": [],
            "temperature": 0.0,
            "avg_logprob": 0.0,
            "compression_ratio": 0.0,
            "no_speech_prob": 0.0,
        }
        for i, c in enumerate(subtitle_cues(result))
    ]
    code = language or ""
    name = LANGUAGE_NAMES.get(code) or LANGUAGE_NAMES.get(code.split("-")[0].lower(), code)  # zh-CN: chinese
    return {
        "task": TASK_NAMES[task],
        "language": name.lower(),
        "duration": round(result.audio_seconds, 3),
        "text": result.text,
        "segments": segments,
    }
