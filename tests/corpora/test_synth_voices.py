"""flite voices beside espeak-ng, pico and mbrola: every voice speaks, speed and pitch settings act, a speaker's
label names them (skipped without Debian's flite)."""

import shutil

import numpy as np
import pytest

from speechmt_corpora.voices import FLITE_PITCHES, FLITE_RATES, VOICES, Speaker, _command, draw_speaker, synthesize

FLITE = [v for v in VOICES["en"] if v.engine == "flite"]


def test_flite_voices_join_the_english_speakers():
    assert [v.name for v in FLITE] == ["kal", "kal16", "awb", "rms", "slt"]
    rng = np.random.default_rng(0)
    drawn = [draw_speaker("en", rng) for _ in range(400)]
    flite = [s for s in drawn if s.voice.engine == "flite"]
    assert flite and {s.speed for s in flite} == set(FLITE_RATES) and {s.pitch for s in flite} == set(FLITE_PITCHES)
    s = Speaker(FLITE[4], speed=110, pitch=88)
    assert s.label == "flite:slt:r110:p88"
    cmd, stdin = _command(s, "Hello there.", __import__("pathlib").Path("x.wav"))
    assert stdin is None and cmd[:3] == ["flite", "-voice", "slt"] and "duration_stretch=0.909" in cmd
    assert "int_f0_target_mean=150" in cmd and cmd[-2:] == ["-t", "Hello there."]


@pytest.mark.skipif(shutil.which("flite") is None, reason="needs Debian's flite")
def test_every_flite_voice_speaks_with_its_speed(tmp_path):
    text = "The weather is very nice today, so we will walk to the station."
    for voice in FLITE:
        slow = synthesize(Speaker(voice, FLITE_RATES[0], 100), text, 16000, tmp_path)
        fast = synthesize(Speaker(voice, FLITE_RATES[-1], 100), text, 16000, tmp_path)
        assert slow.dtype == np.float32 and np.abs(slow).max() == pytest.approx(0.8, abs=1e-3)
        assert 1.0 < len(fast) / 16000 < len(slow) / 16000 < 8.0, voice.name  # faster: shorter
