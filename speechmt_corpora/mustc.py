"""MuST-C-mini en-de: German-English dictionary sentences voiced as synthetic talks, in the MuST-C layout; and
MuST-C-mini en-X for MuST-C's other targets (es, fr, it, nl, pt, ro, ru) from the gettext catalogs of the installed
packages (speechmt_corpora.languages), in the same layout under out/en-X/ with txt/<split>.X.

```
out/en-de/data/{train,dev,tst-COMMON}/wav/ted_<N>.wav      whole talks, 16 kHz mono 16-bit
out/en-de/data/<split>/txt/<split>.{yaml,en,de}            one segment per yaml item / line
out/en-de/data/<split>/talk_voices.tsv                     the speaker (voice, speed, pitch) of each talk
out/en-de/text-only/train.{en,de}                          pairs held out from voicing (MT data)
```
Each talk is one speaker (a voice with a speed and pitch); its segments are joined with 0.3-1.5 s of
near-silent noise, and each yaml item gives its segment's exact offset and duration in the talk.

With a held-out voice (`hold_out_voice="kal"`), that voice speaks no talk of train, dev or tst-COMMON and
speaks every talk of one more test split, `tst-<voice>` (e.g. tst-kal): tst-COMMON's talks and sentences
again, so that the two test sets differ in their voices only (seen voices against one never trained on).
`add_unseen_voice` adds such a split to a finished build afterwards, for a voice none of its talks uses (a
build from before flite's voices joined, say), so that models trained on it are measured without a rebuild.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from speechmt.evaluation.report import write_text_atomic
from speechmt_corpora.common import (
    SynthError,
    ensure_free,
    finish_summary,
    low_noise,
    publish,
    run_parallel,
    split_pool,
    staging_dir,
    write_lines,
)
from speechmt_corpora.languages import gettext_pool, stream
from speechmt_corpora.text import Pair, ding_pairs
from speechmt_corpora.voices import (
    Speaker,
    TTSError,
    Voice,
    check_voices,
    draw_speaker,
    find_voice,
    other_voices,
    synthesize,
    voice_label,
)

SAMPLE_RATE = 16000
PAIR = "en-de"
SPLIT_DIRS = {"train": "train", "dev": "dev", "test": "tst-COMMON"}
TALK_SEGMENTS = {"tiny": (6, 6), "small": (10, 40), "full": (10, 40)}  # segments per talk, min and max
PAUSE_S = (0.3, 1.5)
DING_STREAM = 0  # the seed stream that orders the dictionary pairs (shared with CoVoST-mini de)
TALK_VOICES = "talk_voices.tsv"  # beside a split's wav/ and txt/: wav name and speaker label of each talk


@dataclass(frozen=True)
class TalkJob:
    """One talk to voice: its number, speaker, (English, target) segments, the wav to write, and the seed stream of
    its pair (DING_STREAM for en-de)."""

    talk_id: int
    speaker: Speaker
    pairs: tuple[Pair, ...]
    wav_path: Path
    seed: int
    stream: int = DING_STREAM


@dataclass
class TalkResult:
    """A voiced talk: (offset s, duration s, pair) per voiced segment, failures, wav length in seconds."""

    talk_id: int
    speaker: str
    items: list[tuple[float, float, Pair]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0


def talk_sizes(n: int, low: int, high: int, rng: np.random.Generator) -> list[int]:
    """Splits n segments into talks of `low`..`high` segments (a short last talk only when n < low)."""
    sizes = []
    left = n
    while left > 0:
        if left <= high:
            sizes.append(left)
            break
        size = int(rng.integers(low, max(low, min(high, left - low)) + 1))
        sizes.append(size)
        left -= size
    return sizes


def plan_talks(
    splits: dict[str, list[Pair]],
    size: str,
    seed: int,
    root: Path,
    voices: tuple[Voice, ...] | None = None,
    stream: int = DING_STREAM,
) -> dict[str, list[TalkJob]]:
    """Groups each split's pairs into talks, numbered across splits, each with a seeded speaker of `voices`
    (default: every English voice)."""
    rng = np.random.default_rng([seed, stream, 1])
    low, high = TALK_SEGMENTS[size]
    plans: dict[str, list[TalkJob]] = {}
    talk_id = 1
    for split in ("train", "dev", "test"):
        pairs = splits[split]
        wav_dir = root / "data" / SPLIT_DIRS[split] / "wav"
        plans[split] = []
        start = 0
        for n in talk_sizes(len(pairs), low, high, rng):
            plans[split].append(
                TalkJob(
                    talk_id,
                    draw_speaker("en", rng, voices),
                    tuple(pairs[start : start + n]),
                    wav_dir / f"ted_{talk_id}.wav",
                    seed,
                    stream,
                )
            )
            talk_id += 1
            start += n
    return plans


def held_out_split(voice: Voice) -> str:
    """The test split that a held-out voice speaks: `tst-<name>`, e.g. tst-kal or tst-en-us-f3."""
    return "tst-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", voice.name)


def plan_held_out(
    test: list[TalkJob], voice: Voice, first_talk: int, wav_dir: Path, seed: int, stream: int = DING_STREAM
) -> list[TalkJob]:
    """The test talks again, numbered from `first_talk`, each spoken by `voice` at a seeded speed and pitch."""
    rng = np.random.default_rng([seed, stream, 3])
    return [
        TalkJob(
            first_talk + i,
            draw_speaker("en", rng, (voice,)),
            job.pairs,
            wav_dir / f"ted_{first_talk + i}.wav",
            seed,
            stream,
        )
        for i, job in enumerate(test)
    ]


def voice_talk(job: TalkJob) -> TalkResult:
    """Speaks a talk's English segments one after another and writes the talk wav (16 kHz PCM_16)."""
    rng = np.random.default_rng([job.seed, job.stream, 2, job.talk_id])
    result = TalkResult(job.talk_id, job.speaker.label)
    pieces = [low_noise(rng, rng.uniform(*PAUSE_S), SAMPLE_RATE)]
    position = len(pieces[0])
    with tempfile.TemporaryDirectory(prefix="synth-") as workdir:
        for pair in job.pairs:
            try:
                wave = synthesize(job.speaker, pair.src, SAMPLE_RATE, Path(workdir))
            except TTSError as e:
                result.failures.append(
                    {"talk": job.wav_path.stem, "sentence": pair.src, "voice": job.speaker.label, "reason": str(e)}
                )
                continue
            result.items.append((position / SAMPLE_RATE, len(wave) / SAMPLE_RATE, pair))
            pause = low_noise(rng, rng.uniform(*PAUSE_S), SAMPLE_RATE)
            pieces += [wave, pause]
            position += len(wave) + len(pause)
    if result.items:
        sf.write(job.wav_path, np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
        result.seconds = position / SAMPLE_RATE
    return result


def yaml_line(offset: float, duration: float, english: str, talk_id: int) -> str:
    """One MuST-C yaml item on one line (six decimals; rW = English word count, uW = 0)."""
    return (
        f"- {{duration: {duration:.6f}, offset: {offset:.6f}, rW: {len(english.split())}, uW: 0, "
        f"speaker_id: spk.{talk_id}, wav: ted_{talk_id}.wav}}"
    )


def write_split(txt_dir: Path, name: str, results: list[TalkResult], tgt_lang: str = "de") -> None:
    """Writes <name>.yaml, <name>.en and <name>.<tgt_lang>, talk by talk in offset order, and the speaker of each
    voiced talk in ../talk_voices.tsv (header `wav<TAB>voice`)."""
    items = [(r.talk_id, offset, duration, pair) for r in results for offset, duration, pair in r.items]
    write_lines(
        txt_dir.parent / TALK_VOICES, ["wav\tvoice"] + [f"ted_{r.talk_id}.wav\t{r.speaker}" for r in results if r.items]
    )
    write_lines(txt_dir / f"{name}.yaml", (yaml_line(o, d, p.src, t) for t, o, d, p in items))
    write_lines(txt_dir / f"{name}.en", (p.src for *_, p in items))
    write_lines(txt_dir / f"{name}.{tgt_lang}", (p.tgt for *_, p in items))


def voice_counts(results: list[TalkResult]) -> Counter:
    """Voiced segments per speaker label, summed over talks (several talks can share a label)."""
    counts: Counter = Counter()
    for r in results:
        counts[r.speaker] += len(r.items)
    return counts


def split_summary(results: list[TalkResult]) -> dict[str, float]:
    """Counts of one split: talks, segments, failed segments, audio and speech seconds."""
    return {
        "talks": sum(1 for r in results if r.items),
        "sentences": sum(len(r.items) for r in results),
        "failed": sum(len(r.failures) for r in results),
        "audio_seconds": round(sum(r.seconds for r in results), 2),
        "speech_seconds": round(sum(d for r in results for _, d, _ in r.items), 2),
    }


def build_mustc(
    out: Path, size: str, seed: int, jobs: int, hold_out_voice: str | None = None, tgt_lang: str = "de"
) -> dict:
    """Builds MuST-C-mini en-<tgt_lang> under `out` (see the module docstring) and returns its summary. With
    `hold_out_voice` (a voice name such as `kal` or `flite:kal`), that voice speaks the split tst-<name> only."""
    pair_name = f"en-{tgt_lang}"
    final = out / pair_name
    ensure_free(final)
    held = find_voice("en", hold_out_voice) if hold_out_voice else None
    with tempfile.TemporaryDirectory(prefix="synth-check-") as workdir:
        check_voices("en", Path(workdir))
    text_source = None
    if tgt_lang == "de":
        pairs, pool_stream = ding_pairs(), DING_STREAM
    else:
        pairs, text_source = gettext_pool(tgt_lang)
        pool_stream = stream("mustc", tgt_lang)
    text_only, splits = split_pool(pairs, size, seed, pool_stream)
    root = staging_dir(final)
    plans = plan_talks(splits, size, seed, root, other_voices("en", held) if held else None, pool_stream)
    dirs = dict(SPLIT_DIRS)
    if held:
        dirs["held-out"] = held_out_split(held)
        first = sum(len(p) for p in plans.values()) + 1
        plans["held-out"] = plan_held_out(
            plans["test"], held, first, root / "data" / dirs["held-out"] / "wav", seed, pool_stream
        )
    summary: dict = {
        "corpus": "mustc",
        "pair": pair_name,
        "size": size,
        "seed": seed,
        "pairs_usable": len(pairs),
        "hold_out_voice": voice_label(held) if held else None,
        "splits": {},
        "voices": Counter(),
        "failures": [],
    }
    if text_source:
        summary["text_source"] = text_source
    for split, jobs_of_split in plans.items():
        split_dir = root / "data" / dirs[split]
        (split_dir / "wav").mkdir(parents=True)
        (split_dir / "txt").mkdir()
        results = run_parallel(
            voice_talk,
            jobs_of_split,
            jobs,
            f"synth mustc {pair_name} {dirs[split]}" if tgt_lang != "de" else f"synth mustc {dirs[split]}",
            "talk",
        )
        write_split(split_dir / "txt", dirs[split], results, tgt_lang)
        summary["splits"][dirs[split]] = split_summary(results)
        summary["failures"] += [dict(f, split=dirs[split]) for r in results for f in r.failures]
        summary["voices"].update(voice_counts(results))
    (root / "text-only").mkdir()
    write_lines(root / "text-only" / "train.en", (p.src for p in text_only))
    write_lines(root / "text-only" / f"train.{tgt_lang}", (p.tgt for p in text_only))
    publish(root, final)
    return finish_summary(summary, len(text_only))


_TALK_WAV = re.compile(r"ted_(\d+)\.wav")  # a talk's wav name; its number


def read_talks(split_dir: Path, name: str) -> list[tuple[int, tuple[Pair, ...]]]:
    """The talks of a written split in order: (talk number, its (English, German) segments), from
    <name>.yaml, .en and .de (write_split's files). Raises SynthError naming a file that does not line up."""
    txt = split_dir / "txt"
    paths = [txt / f"{name}.{ext}" for ext in ("yaml", "en", "de")]
    missing = [str(q) for q in paths if not q.is_file()]
    if missing:
        raise SynthError(f"{missing[0]}: no such file (a MuST-C-mini split written by `speechmt data synth`)")
    yaml, en, de = (q.read_text(encoding="utf-8").splitlines() for q in paths)
    if not len(yaml) == len(en) == len(de):
        raise SynthError(f"{txt}: {name}.yaml, .en and .de have {len(yaml)}, {len(en)} and {len(de)} lines")
    talks: dict[int, list[Pair]] = {}
    for line_no, (item, src, tgt) in enumerate(zip(yaml, en, de), 1):
        found = _TALK_WAV.search(item)
        if not found:
            raise SynthError(f"{paths[0]}: line {line_no} names no wav: ted_<N>.wav")
        talks.setdefault(int(found.group(1)), []).append(Pair(src, tgt))
    return [(talk, tuple(pairs)) for talk, pairs in talks.items()]


def read_talk_voices(data_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Talk name (`ted_5`) -> speaker label (`flite:kal:r110:p114`) from the talk_voices.tsv of every split under
    `data_dir` (a build's <pair>/data) but those named in `skip`; {} for a build from before the files."""
    found: dict[str, str] = {}
    for path in sorted(data_dir.glob(f"*/{TALK_VOICES}")):
        if path.parent.name not in skip:
            with open(path, encoding="utf-8", newline="") as f:
                found.update((Path(row["wav"]).stem, row["voice"]) for row in csv.DictReader(f, delimiter="\t"))
    return found


def add_unseen_voice(out: Path, voice_name: str, seed: int = 0, jobs: int = 2) -> tuple[str, dict]:
    """Adds to the finished MuST-C-mini build at `out` the split tst-<voice>: tst-COMMON's talks and sentences
    spoken again by `voice_name`, which must speak no talk of the build (a voice never trained on; each talk at
    a seeded speed and pitch, as with a held-out voice). The build's summary records the split under
    `splits` and its voice under `unseen_voices`; returns the split's name and the summary. A split already
    added is kept as it is.
    Raises SynthError for a missing build or a voice the build already uses."""
    path = out / "synth_summary.json"
    test_dir = out / PAIR / "data" / SPLIT_DIRS["test"]
    if not path.is_file() or not test_dir.is_dir():
        raise SynthError(
            f"{out}: no finished MuST-C-mini build (synth_summary.json and {PAIR}/data/tst-COMMON); "
            "build it first with `speechmt data synth mustc`"
        )
    summary = json.loads(path.read_text(encoding="utf-8"))
    voice = find_voice("en", voice_name)
    label, split = voice_label(voice), held_out_split(voice)
    split_dir = out / PAIR / "data" / split
    if summary.get("unseen_voices", {}).get(split) == label and split_dir.is_dir():
        return split, summary
    # a split the summary does not know is a run's leftover (voiced, the summary not yet written): not the build's
    speakers = set(summary.get("voices", {})) | set(read_talk_voices(out / PAIR / "data", skip=(split,)).values())
    used = sorted(s for s in speakers if s == label or s.startswith(label + ":"))
    if used:
        raise SynthError(
            f"voice {label}: the build at {out} already speaks with it ({used[0]}); an unseen voice "
            "must speak none of its talks"
        )
    if split in summary.get("splits", {}):
        raise SynthError(f"{split_dir}: a split of the build already; an unseen voice needs a name of its own")
    if split_dir.exists():  # the leftover: voiced again
        shutil.rmtree(split_dir)
    test = read_talks(test_dir, SPLIT_DIRS["test"])
    numbers = [
        int(m.group(1))
        for m in (_TALK_WAV.fullmatch(w.name) for w in (out / PAIR / "data").glob("*/wav/ted_*.wav"))
        if m
    ]
    staging = split_dir.with_name(f".{split}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "wav").mkdir(parents=True)
    (staging / "txt").mkdir()
    jobs_of_split = plan_held_out(
        [TalkJob(talk, None, pairs, Path(), seed) for talk, pairs in test],
        voice,
        max(numbers, default=0) + 1,
        staging / "wav",
        seed,
    )
    results = run_parallel(voice_talk, jobs_of_split, jobs, f"synth mustc {split}", "talk")
    write_split(staging / "txt", split, results)
    publish(staging, split_dir)
    summary["splits"][split] = split_summary(results)
    summary["unseen_voices"] = {**summary.get("unseen_voices", {}), split: label}
    summary["voices"] = Counter(summary.get("voices", {})) + voice_counts(results)
    summary["failures"] = summary.get("failures", []) + [dict(f, split=split) for r in results for f in r.failures]
    summary = finish_summary(summary, summary.get("text_only_pairs", 0))
    write_text_atomic(path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return split, summary
