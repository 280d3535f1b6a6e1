"""CoVoST-mini: synthetic German->English and Spanish->English clips in the CoVoST 2 layout.

```
out/<src>/clips/common_voice_<src>_<id>.mp3     48 kHz mono MP3, one sentence each
out/<src>/validated.tsv                          Common Voice columns (client_id, path, sentence, ...)
out/<src>/covost_v2.<src>_en.tsv                 path, sentence, translation, client_id, split
out/<src>/text-only.<src>_en.tsv                 sentence, translation: pairs held out from voicing
```
de: the German side of the Ding dictionary pairs (ordered by the same seed stream as MuST-C-mini, so the
two corpora hold out the same text-only pairs); es: Reina Valera 1909 verses paired with the World English
Bible. Each clip is one speaker (voice, speed, pitch) with 0.2-0.8 s of near-silence before and after.
Other sources (fr, it, pt, nl, ru, ca: `langs`) take the gettext catalogs of the installed packages, the message's
translation as the source and its English msgid as the translation (speechmt_corpora.languages), voiced by pico
(fr, it) and espeak-ng.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt_corpora.common import (
    SynthError,
    ensure_free,
    finish_summary,
    low_noise,
    publish,
    run_parallel,
    split_pool,
    staging_dir,
    write_tsv,
)
from speechmt_corpora.languages import COVOST_SOURCES, check_langs, gettext_pool, stream, too_little_text
from speechmt_corpora.text import BIBLE_KEYS, Pair, bible_pairs, ding_pairs
from speechmt_corpora.voices import Speaker, TTSError, check_voices, draw_speaker, synthesize

SAMPLE_RATE = 48000
PAD_S = (0.2, 0.8)
CLIPS_PER_JOB = 40
TRAIN_COVOST_EVERY = 4  # every 4th training clip is labelled train_covost
DIRECTIONS = ("de", "es")
STREAMS = {"de": 0, "es": 1}  # de shares stream 0 with MuST-C-mini: the same Ding order
ID_BASES = {"de": 11_000_000, "es": 12_000_000}
OTHER_ID_BASE = 20_000_000  # + 1,000,000 per language of COVOST_SOURCES after de and es
VALIDATED_HEADER = ("client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender", "accent")
COVOST_HEADER = ("path", "sentence", "translation", "client_id", "split")


@dataclass(frozen=True)
class Clip:
    """One clip to voice: numeric id, CoVoST split label, (source, English) pair and speaker."""

    clip_id: int
    split: str
    pair: Pair
    speaker: Speaker
    lang: str

    @property
    def path(self) -> str:
        """The clip's file name, as in the `path` column."""
        return f"common_voice_{self.lang}_{self.clip_id}.mp3"


@dataclass(frozen=True)
class ClipJob:
    """A batch of clips for one worker, written into `clips_dir`."""

    clips: tuple[Clip, ...]
    clips_dir: Path
    seed: int


@dataclass(frozen=True)
class ClipResult:
    """A clip's outcome: its length in seconds, or the reason it could not be voiced."""

    clip: Clip
    seconds: float = 0.0
    speech_seconds: float = 0.0
    reason: str | None = None


def lang_stream(lang: str) -> int:
    """The seed stream of a direction: STREAMS for de and es, a stable number of its own for the others."""
    return STREAMS[lang] if lang in STREAMS else stream("covost2", lang)


def id_base(lang: str) -> int:
    """The first clip number of a direction (ids of different directions never meet)."""
    return ID_BASES[lang] if lang in ID_BASES else OTHER_ID_BASE + 1_000_000 * COVOST_SOURCES.index(lang)


def source_pairs(lang: str, size: str) -> tuple[tuple[Pair, ...], dict | None]:
    """(source, English) pairs of a direction and, for a gettext direction, what its reading found; tiny reads only
    John's gospel of the Bible (fast)."""
    if lang == "de":
        return tuple(Pair(src=p.tgt, tgt=p.src) for p in ding_pairs()), None
    if lang == "es":
        return bible_pairs(BIBLE_KEYS["john"] if size == "tiny" else BIBLE_KEYS["all"]), None
    pairs, found = gettext_pool(lang)
    return tuple(Pair(src=p.tgt, tgt=p.src) for p in pairs), found


def plan_clips(lang: str, splits: dict[str, list[Pair]], seed: int) -> list[Clip]:
    """Numbers the clips of all splits and draws each a seeded speaker; train clips alternate labels."""
    rng = np.random.default_rng([seed, lang_stream(lang), 1])
    clips = []
    for split in ("train", "dev", "test"):
        for i, pair in enumerate(splits[split]):
            label = "train_covost" if split == "train" and i % TRAIN_COVOST_EVERY == 3 else split
            clips.append(Clip(id_base(lang) + len(clips), label, pair, draw_speaker(lang, rng), lang))
    return clips


def voice_clips(job: ClipJob) -> list[ClipResult]:
    """Speaks each clip, pads it with near-silence and writes it as 48 kHz mono MP3."""
    results = []
    with tempfile.TemporaryDirectory(prefix="synth-") as workdir:
        for clip in job.clips:
            rng = np.random.default_rng([job.seed, lang_stream(clip.lang), 2, clip.clip_id])
            try:
                speech = synthesize(clip.speaker, clip.pair.src, SAMPLE_RATE, Path(workdir))
            except TTSError as e:
                results.append(ClipResult(clip, reason=str(e)))
                continue
            wave = np.concatenate(
                [
                    low_noise(rng, rng.uniform(*PAD_S), SAMPLE_RATE),
                    speech,
                    low_noise(rng, rng.uniform(*PAD_S), SAMPLE_RATE),
                ]
            )
            sf.write(job.clips_dir / clip.path, wave, SAMPLE_RATE, format="MP3")
            results.append(ClipResult(clip, len(wave) / SAMPLE_RATE, len(speech) / SAMPLE_RATE))
    return results


def write_tables(root: Path, lang: str, results: list[ClipResult], text_only: list[Pair]) -> None:
    """Writes validated.tsv, covost_v2.<lang>_en.tsv (voiced clips only) and the text-only TSV."""
    voiced = [r.clip for r in results if r.reason is None]
    write_tsv(
        root / "validated.tsv",
        VALIDATED_HEADER,
        ((c.speaker.client_id, c.path, c.pair.src, 2, 0, "", c.speaker.voice.gender, "") for c in voiced),
    )
    write_tsv(
        root / f"covost_v2.{lang}_en.tsv",
        COVOST_HEADER,
        ((c.path, c.pair.src, c.pair.tgt, c.speaker.client_id, c.split) for c in voiced),
    )
    write_tsv(root / f"text-only.{lang}_en.tsv", ("sentence", "translation"), ((p.src, p.tgt) for p in text_only))


def split_counts(results: list[ClipResult]) -> dict[str, float]:
    """Counts of one split: voiced and failed clips, audio and speech seconds."""
    voiced = [r for r in results if r.reason is None]
    return {
        "sentences": len(voiced),
        "failed": len(results) - len(voiced),
        "audio_seconds": round(sum(r.seconds for r in voiced), 2),
        "speech_seconds": round(sum(r.speech_seconds for r in voiced), 2),
    }


def direction_summary(lang: str, n_pairs: int, results: list[ClipResult]) -> dict:
    """Summary of one direction: counts per split, voices, hours and every failure with its reason."""
    splits = {
        name: split_counts([r for r in results if r.clip.split.startswith(name)]) for name in ("train", "dev", "test")
    }
    voiced_covost = [r for r in results if r.clip.split == "train_covost" and r.reason is None]
    splits["train"]["train_covost"] = len(voiced_covost)
    return {
        "direction": f"{lang}-en",
        "pairs_usable": n_pairs,
        "splits": splits,
        "voices": Counter(r.clip.speaker.label for r in results if r.reason is None),
        "failures": [
            {
                "clip": r.clip.path,
                "split": r.clip.split,
                "sentence": r.clip.pair.src,
                "voice": r.clip.speaker.label,
                "reason": r.reason,
            }
            for r in results
            if r.reason
        ],
    }


def build_direction(out: Path, lang: str, size: str, seed: int, jobs: int) -> dict:
    """Builds out/<lang> for one X->en direction and returns its summary."""
    pairs, text_source = source_pairs(lang, size)
    text_only, splits = split_pool(pairs, size, seed, lang_stream(lang))
    final = out / lang
    root = staging_dir(final)
    (root / "clips").mkdir()
    clips = plan_clips(lang, splits, seed)
    batches = [
        ClipJob(tuple(clips[i : i + CLIPS_PER_JOB]), root / "clips", seed) for i in range(0, len(clips), CLIPS_PER_JOB)
    ]
    desc = f"synth covost2 {lang}: batches of {CLIPS_PER_JOB} clips"
    results = [r for batch in run_parallel(voice_clips, batches, jobs, desc, "batch") for r in batch]
    write_tables(root, lang, results, text_only)
    publish(root, final)
    summary = direction_summary(lang, len(pairs), results)
    if text_source:
        summary["text_source"] = text_source
    return finish_summary(summary, len(text_only))


def build_covost2(out: Path, size: str, seed: int, jobs: int, langs: tuple[str, ...] = DIRECTIONS) -> dict:
    """Builds CoVoST-mini <lang>->en for each of `langs` (default de and es) under `out` and returns the summary
    of every direction. A build of other languages than de and es adds per direction the usable pairs and hours
    (`per_direction`) and names the directions with too little text (`too_little_text`)."""
    langs = check_langs(langs, COVOST_SOURCES, "CoVoST-mini source languages")
    for lang in langs:
        ensure_free(out / lang)
    if "MP3" not in sf.available_formats():
        raise SynthError("this libsndfile cannot write MP3 (needs 1.1 or newer): install soundfile>=0.12.1")
    with tempfile.TemporaryDirectory(prefix="synth-check-") as workdir:
        for lang in langs:
            check_voices(lang, Path(workdir))
    directions = {lang: build_direction(out, lang, size, seed, jobs) for lang in langs}
    summary = {
        "corpus": "covost2",
        "size": size,
        "seed": seed,
        "directions": directions,
        "sentences": {lang: d["sentences"] for lang, d in directions.items()},
        "voices": {lang: d["voices"] for lang, d in directions.items()},
        "audio_hours": round(sum(d["audio_hours"] for d in directions.values()), 4),
        "text_only_pairs": sum(d["text_only_pairs"] for d in directions.values()),
    }
    if langs != DIRECTIONS:
        summary["langs"] = list(langs)
        summary["per_direction"] = {f"{lang}-en": per_direction(d) for lang, d in directions.items()}
        summary["too_little_text"] = too_little_text(
            {f"{lang}-en": d["pairs_usable"] for lang, d in directions.items()}
        )
    return summary


def per_direction(summary: dict) -> dict:
    """A direction's usable pairs, voiced sentences, text-only pairs and hours: the line of the summary's table."""
    return {
        "pairs_usable": summary["pairs_usable"],
        "sentences": sum(summary["sentences"].values()),
        "text_only_pairs": summary["text_only_pairs"],
        "audio_hours": summary["audio_hours"],
        "speech_hours": summary["speech_hours"],
    }
