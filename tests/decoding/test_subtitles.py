"""Subtitles: cue rules (lines of <= 42 characters, <= 2 lines, 1-7 s, no overlaps, text kept), SRT and
WebVTT read back by the `srt` and `webvtt-py` libraries, the default model's subtitles of the examples, and a
10-minute file whose subtitles parse, cover the speech and never overlap."""

import io
import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechmt.cli import main
from speechmt.decoding.segment import SegmentConfig, find_segments, voiced_span
from speechmt.decoding.subtitles import (
    Cue,
    SubtitleConfig,
    chunk_cues,
    fit_durations,
    make_cues,
    part_words,
    timestamp,
    to_srt,
    to_vtt,
    wrap,
)

srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")

EXAMPLES = Path(__file__).parents[2] / "examples"
TEXT = (
    "Wir müssen die Arbeit vor dem Abend fertig machen. Das Wetter ist heute sehr schön, und ich hätte gern "
    "eine Tasse Kaffee, bitte. Wo ist der Bahnhof? Mein Bruder arbeitet in einem kleinen Krankenhaus."
)


def _check(cues: list[Cue], cfg: SubtitleConfig = SubtitleConfig()) -> None:
    for c in cues:
        assert 1 <= len(c.lines) <= cfg.max_lines and all(0 < len(line) <= cfg.max_chars for line in c.lines)
        assert c.end > c.start
    for a, b in zip(cues, cues[1:]):
        assert a.end <= b.start


def test_two_lines_are_balanced_and_at_most_42_characters():
    words = "Das Wetter ist heute sehr schön, und ich hätte gern eine Tasse Kaffee.".split()
    assert wrap(words) == ["Das Wetter ist heute sehr schön,", "und ich hätte gern eine Tasse Kaffee."]
    assert wrap(["kurz"]) == ["kurz"]
    assert len(wrap(["a" * 20] * 5)) == 3  # 104 characters: three lines, more than a cue holds


def test_words_part_into_even_cues_ending_at_sentences():
    groups = part_words(TEXT.split(), 3)
    assert [" ".join(g) for g in groups] == [
        "Wir müssen die Arbeit vor dem Abend fertig machen.",
        "Das Wetter ist heute sehr schön, und ich hätte gern eine Tasse Kaffee, bitte.",
        "Wo ist der Bahnhof? Mein Bruder arbeitet in einem kleinen Krankenhaus.",
    ]
    assert sum(groups, []) == TEXT.split()


def test_durations_are_proportional_within_one_and_seven_seconds():
    assert fit_durations([1, 1, 10], 9.0, 1.0, 7.0) == pytest.approx([1.0, 1.0, 7.0])
    assert fit_durations([1, 2, 3], 6.0, 1.0, 7.0) == pytest.approx([1.0, 2.0, 3.0])
    assert fit_durations([1, 1, 1, 5], 7.0, 1.0, 7.0) == pytest.approx([1.0, 1.0, 1.0, 4.0])  # s = 0.8
    assert fit_durations([1, 1, 1, 5], 10.0, 1.0, 7.0) == pytest.approx([1.25, 1.25, 1.25, 6.25])


def test_a_long_chunk_is_split_proportionally_to_text():
    cues = chunk_cues(0.5, 18.2, TEXT)
    _check(cues)
    assert " ".join(c.text for c in cues) == TEXT
    assert len(cues) == 3 and cues[0].start == 0.5 and cues[-1].end == pytest.approx(18.2)
    chars = np.array([len(c.text) for c in cues])
    seconds = np.array([c.end - c.start for c in cues])
    assert seconds == pytest.approx(17.7 * chars / chars.sum())  # all within 1-7 s: exactly proportional
    assert all(1.0 <= s <= 7.0 for s in seconds)


def test_short_cues_grow_into_silence_and_long_spans_stay_at_seven_seconds():
    cues = make_cues([(0.0, 3.0, "Eins."), (5.0, 5.3, "Ja."), (5.5, 25.0, "Hallo")], 26.0)
    assert [(c.start, c.end, c.text) for c in cues] == [(0.0, 3.0, "Eins."), (4.5, 5.5, "Ja."), (5.5, 12.5, "Hallo")]
    last = make_cues([(9.8, 10.0, "Ende.")], 10.0)  # at the end of the audio: grows backwards
    assert [(c.start, c.end) for c in last] == [(9.0, 10.0)]


def test_a_word_longer_than_a_line_is_cut():
    cues = chunk_cues(0.0, 4.0, "x" * 100)
    _check(cues)
    assert "".join(c.text.replace(" ", "") for c in cues) == "x" * 100


def test_timestamps():
    assert timestamp(3723.0456) == "01:02:03,046"
    assert timestamp(0.9995, ".") == "00:00:01.000"


def test_srt_and_vtt_parse_with_subtitle_libraries():
    cues = make_cues([(0.5, 18.2, TEXT), (20.0, 21.5, "Kein --> Pfeil.")], 22.0)
    parsed = list(srt.parse(to_srt(cues)))
    assert [(p.start, p.end, p.content) for p in parsed] == [
        (timedelta(seconds=c.start), timedelta(seconds=c.end), "\n".join(c.lines)) for c in cues
    ]
    vtt = webvtt.from_buffer(io.StringIO(to_vtt(cues)))
    assert [(v.start, v.end) for v in vtt] == [(timestamp(c.start, "."), timestamp(c.end, ".")) for c in cues]
    assert vtt[-1].text == "Kein -> Pfeil."
    assert list(srt.parse(to_srt([]))) == [] and len(webvtt.from_buffer(io.StringIO(to_vtt([])))) == 0


def test_voiced_span_leaves_out_edge_silence():
    wave = np.zeros(48000, dtype=np.float32)
    wave[16000:32000] = 0.1 * np.sin(np.arange(16000) * 0.3)
    start, end = voiced_span(wave, 16000)
    assert abs(start - 16000) <= 400 and abs(end - 32000) <= 400
    assert voiced_span(np.zeros(16000, dtype=np.float32), 16000) is None


def test_pause_cuts_make_a_segment_of_each_phrase():
    tone = (0.1 * np.sin(np.arange(32000) * 0.3)).astype(np.float32)  # 2 s
    quiet = lambda seconds: np.full(int(seconds * 16000), 1e-5, dtype=np.float32)  # noqa: E731
    wave = np.concatenate([tone, quiet(0.5), tone, quiet(0.2), tone, quiet(0.4), tone[:8000]])
    assert len(find_segments(wave, 16000)) == 1  # 7.6 s: no cut is needed
    cuts = [e for _, e in find_segments(wave, 16000, SegmentConfig(pause_cut_ms=300))[:-1]]
    assert len(cuts) == 1 and 32000 < cuts[0] < 40000  # the 0.5 s pause; not the 0.2 s one, nor the 0.4 s one
    # the 0.4 s pause leaves 0.9 s after it: cut there only when min_seconds allows it
    cuts = [e for _, e in find_segments(wave, 16000, SegmentConfig(pause_cut_ms=300, min_seconds=0.4))[:-1]]
    assert len(cuts) == 2 and 32000 < cuts[0] < 40000 and 6.7 * 16000 <= cuts[1] < 7.1 * 16000


def test_default_model_srt_and_vtt_of_the_examples_open_unchanged(tmp_path, capsys):
    clips = sorted(str(p) for p in EXAMPLES.glob("*.flac"))[:2]
    assert main(["translate", clips[0], "--format", "srt", "--beam", "1"]) == 0
    subs = list(srt.parse(capsys.readouterr().out))
    duration = sf.info(clips[0]).duration
    assert subs and subs[0].start >= timedelta(0) and subs[-1].end <= timedelta(seconds=duration)
    assert "sehr schön" in " ".join(s.content for s in subs)
    assert main(["translate", *clips, "--format", "vtt", "--beam", "1", "--output-dir", str(tmp_path)]) == 0
    for clip in clips:
        cues = webvtt.read(str(tmp_path / f"{Path(clip).stem}.vtt"))
        assert len(cues) >= 1 and all(len(line) <= 42 for c in cues for line in c.text.splitlines())
    assert main(["translate", clips[0], "--format", "json", "--beam", "1"]) == 0
    segments = json.loads(capsys.readouterr().out)["segments"]
    assert [s["text"] for s in segments] == [s.content.replace("\n", " ") for s in subs]
    assert all(s["end"] - s["start"] >= 1.0 for s in segments)


def test_subtitle_options_are_checked(capsys):
    clips = [str(p) for p in sorted(EXAMPLES.glob("*.flac"))[:2]]
    assert main(["translate", *clips, "--format", "srt"]) == 2
    assert capsys.readouterr().err.strip() == (
        "speechmt translate: error: --format srt with 2 files needs --output-dir (one subtitle file each)"
    )
    assert main(["translate", clips[0], "--output-dir", "x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "speechmt translate: error: argument --output-dir: only with --format srt or vtt, not text"
    )


def _ten_minutes(path: Path, seed: int = 0) -> list[tuple[float, float]]:
    """The example clips again and again with 0.3-2.5 s of faint noise between them, 600 s in all; the
    (start s, end s) of the speech in each clip: from its first to its last sample above 2 % of its peak."""
    rng = np.random.default_rng(seed)
    clips = [sf.read(p, dtype="float32")[0] for p in sorted(EXAMPLES.glob("*.flac"))]
    parts, speech, t = [], [], 0
    while True:
        gap = rng.integers(4800, 40000)
        clip = clips[len(speech) % len(clips)]
        if t + gap + len(clip) > 600 * 16000:
            break
        parts += [rng.normal(0, 1e-4, gap).astype(np.float32), clip]
        loud = np.flatnonzero(np.abs(clip) > 0.02 * np.abs(clip).max())
        speech.append(((t + gap + loud[0]) / 16000, (t + gap + loud[-1] + 1) / 16000))
        t += gap + len(clip)
    parts.append(rng.normal(0, 1e-4, 600 * 16000 - t).astype(np.float32))
    sf.write(path, np.concatenate(parts), 16000)
    return speech


@pytest.mark.slow
def test_ten_minute_file_subtitles_parse_cover_the_speech_and_never_overlap(tmp_path, capsys):
    speech = _ten_minutes(tmp_path / "talk.wav")
    assert sf.info(tmp_path / "talk.wav").duration == 600.0
    assert main(["translate", str(tmp_path / "talk.wav"), "--format", "srt", "--beam", "1"]) == 0
    subs = list(srt.parse(capsys.readouterr().out))
    cues = [(s.start.total_seconds(), s.end.total_seconds()) for s in subs]
    assert len(speech) == 147 and len(speech) <= len(cues) <= len(speech) + 5  # about one sentence each
    for (_, a1), (b0, _) in zip(cues, cues[1:]):
        assert a1 <= b0
    for s in subs:
        assert 1.0 <= (s.end - s.start).total_seconds() <= 7.0
        assert 1 <= len(s.content.splitlines()) <= 2 and all(len(x) <= 42 for x in s.content.splitlines())
    covered = sum(max(0.0, min(e, c1) - max(s, c0)) for s, e in speech for c0, c1 in cues)
    total = sum(e - s for s, e in speech)
    assert covered / total >= 0.95
    assert all(any(min(e, c1) > max(s, c0) for c0, c1 in cues) for s, e in speech)  # every clip has a cue
    assert cues[-1][1] <= 600.0
