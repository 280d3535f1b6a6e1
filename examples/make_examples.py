"""Voices the example sentences (written for speechmt; no third-party text) into examples/*.flac.

Run from the repository root: `.venv/bin/python examples/make_examples.py` (needs espeak-ng, pico2wave and
mbrola, as `make setup` installs). The sentences and their reference translations are in
examples/examples.tsv; the voices are the ones the synthetic corpora use, so the clips sound like
MuST-C-mini. Each clip has 0.3 s of near-silence on both sides, as a segment cut from a talk would.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt.audio import SAMPLE_RATE
from speechmt.data.synth.voices import VOICES, Speaker, synthesize

HERE = Path(__file__).parent
PAD_S = 0.3
# (voice name, speed, pitch) per clip, one each of the engines the corpora use
SETTINGS = [("en-US", 100, 0), ("en-us", 155, 50), ("mb-us1", 155, 50), ("en-GB", 100, 0), ("en-gb", 155, 35)]


def _speaker(name: str, speed: int, pitch: int) -> Speaker:
    voice = next(v for v in VOICES["en"] if v.name == name)
    return Speaker(voice, speed, pitch)


def main() -> None:
    rows = list(csv.DictReader(open(HERE / "examples.tsv", encoding="utf-8"), delimiter="\t"))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for row, setting in zip(rows, SETTINGS, strict=True):
            wave = synthesize(_speaker(*setting), row["english"], SAMPLE_RATE, Path(tmp))
            pad = (1e-4 * rng.standard_normal(int(PAD_S * SAMPLE_RATE))).astype(np.float32)
            sf.write(HERE / row["file"], np.concatenate([pad, wave, pad]), SAMPLE_RATE, subtype="PCM_16")
            print(f"{row['file']}: {_speaker(*setting).label}: {row['english']}")


if __name__ == "__main__":
    main()
