"""Speech for text-only MT pairs: the source side of a parallel text voiced by the mini corpora's synthetic
speakers into a new MuST-C split, so that MT data becomes ST data (synthetic source speech, real target
text), as Jia et al. (ICASSP 2019, "Leveraging weakly supervised data to improve end-to-end speech-to-text
translation") do with a TTS model.

`voice_text_pairs(root, text, split="train-tts")` reads pairs from a manifest (e.g. `speechmt data synth-mt`'s
`train.jsonl`, whose audio fields are empty), drops every pair either side of which is a sentence of one of
the corpus' dev or test splits (every split not named `train*`: none reaches training through the back
door), and writes

```
root/en-de/data/<split>/wav/ted_<N>.wav            talks of 10-40 segments, one speaker each (N after the corpus')
root/en-de/data/<split>/txt/<split>.{yaml,en,de}   as every MuST-C split
root/en-de/data/<split>/voiced_text_summary.json   pairs read, excluded, voiced, failed (with reasons), hours
```

which `speechmt data prepare mustc` prepares like the released splits (a `train*` name counts as training). Only
English-source corpora (the MuST-C layout) are voiced here. A voice that the corpus holds out (its
synth_summary.json's hold_out_voice) speaks none of these talks either.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from speechmt.data.manifest import iter_manifest
from speechmt_corpora.common import SynthError, ensure_free, publish, run_parallel, staging_dir
from speechmt_corpora.mt_text import key
from speechmt_corpora.mustc import (
    TALK_SEGMENTS,
    TalkJob,
    split_summary,
    talk_sizes,
    voice_counts,
    voice_talk,
    write_split,
)
from speechmt_corpora.text import Pair
from speechmt_corpora.voices import Voice, check_voices, draw_speaker, find_voice, other_voices, voice_label

PAIR = "en-de"
VOICED_STREAM = 7  # the seed stream of the voiced text (the corpus builders use 0 and 1)
_TALK = re.compile(r"ted_(\d+)\.wav")


def read_pairs(text: Path) -> list[Pair]:
    """(source, target) pairs of a manifest, in file order."""
    if not Path(text).is_file():
        raise SynthError(f"{text}: no such manifest (make one with `speechmt data synth-mt`)")
    return [Pair(r.src_text, r.tgt_text) for r in iter_manifest(text)]


def is_sentence(text: str) -> bool:
    """Ends as a sentence does (. ! or ?, before closing quotes), unlike a dictionary phrase."""
    return text.rstrip().rstrip("\"'»«“”„’").endswith((".", "!", "?"))


def held_out_sentences(data_dir: Path) -> set[str]:
    """Keys of every English and German sentence of the splits under `data_dir` not named train*."""
    return {
        key(line)
        for path in sorted(data_dir.glob("*/txt/*.[a-z][a-z]"))
        if not path.parent.parent.name.startswith(("train", "."))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }


def choose(
    pairs: list[Pair], held_out: set[str], limit: int, seed: int, min_words: int = 0, sentences: bool = False
) -> tuple[list[Pair], dict[str, int]]:
    """The pairs to voice: those with both sides non-empty, neither side a dev or test sentence (keys of
    `held_out`), at least `min_words` source words and, with `sentences`, both sides whole sentences; then a
    seeded sample of `limit` of them (0: all) in file order. Also returns the counts dropped, by reason."""
    dropped: Counter = Counter()
    kept = []
    for p in pairs:
        if not p.src.strip() or not p.tgt.strip():
            dropped["empty side"] += 1
        elif key(p.src) in held_out or key(p.tgt) in held_out:
            dropped["a dev or test sentence"] += 1
        elif len(p.src.split()) < min_words:
            dropped[f"fewer than {min_words} words"] += 1
        elif sentences and not (is_sentence(p.src) and is_sentence(p.tgt)):
            dropped["not a sentence"] += 1
        else:
            kept.append(p)
    if limit and len(kept) > limit:
        chosen = np.sort(np.random.default_rng([seed, VOICED_STREAM]).choice(len(kept), limit, replace=False))
        dropped["beyond the limit"] += len(kept) - limit
        kept = [kept[i] for i in chosen]
    return kept, dict(dropped)


def next_talk_id(data_dir: Path) -> int:
    """One more than the largest ted_<N>.wav of every split under `data_dir`, so talk names stay unique."""
    numbers = [int(m.group(1)) for p in data_dir.glob("*/wav/ted_*.wav") if (m := _TALK.fullmatch(p.name))]
    return max(numbers, default=0) + 1


def corpus_held_out_voice(root: Path) -> Voice | None:
    """The voice that the corpus at `root` holds out of training (its synth_summary.json says), if any."""
    path = Path(root) / "synth_summary.json"
    held = json.loads(path.read_text(encoding="utf-8")).get("hold_out_voice") if path.is_file() else None
    return find_voice("en", held) if held else None


def plan(
    pairs: list[Pair], first_talk: int, wav_dir: Path, seed: int, voices: tuple[Voice, ...] | None = None
) -> list[TalkJob]:
    """Groups the pairs into talks of 10-40 segments, numbered from `first_talk`, each with a seeded speaker
    of `voices` (default: every English voice)."""
    rng = np.random.default_rng([seed, VOICED_STREAM, 1])
    jobs, start = [], 0
    for i, n in enumerate(talk_sizes(len(pairs), *TALK_SEGMENTS["full"], rng)):
        talk = first_talk + i
        jobs.append(
            TalkJob(
                talk,
                draw_speaker("en", rng, voices),
                tuple(pairs[start : start + n]),
                wav_dir / f"ted_{talk}.wav",
                seed,
            )
        )
        start += n
    return jobs


def voice_text_pairs(
    root: Path,
    text: Path,
    split: str = "train-tts",
    limit: int = 0,
    seed: int = 0,
    jobs: int = 2,
    min_words: int = 0,
    sentences: bool = False,
) -> dict:
    """Voices the English side of the pairs in manifest `text` into split `split` of the MuST-C-layout corpus
    at `root` (see the module docstring) and returns the summary, also written beside the split's txt/.
    `limit`, `min_words` and `sentences` choose the pairs as `choose` says. Raises SynthError when the corpus
    is missing, the split exists, or no voice is installed."""
    data_dir = Path(root) / PAIR / "data"
    if not data_dir.is_dir():
        raise SynthError(f"{root}: no {PAIR}/data folder (build the corpus with `speechmt data synth` first)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", split):
        raise SynthError(f"split name {split!r}: use letters, digits, '.', '_' and '-' only")
    final = data_dir / split
    ensure_free(final)
    start = time.perf_counter()
    read = read_pairs(text)
    held_out = held_out_sentences(data_dir)
    if not held_out:
        raise SynthError(f"{data_dir}: no dev or test split (<split>/txt/<split>.<lang>) to keep out of training")
    pairs, dropped = choose(read, held_out, limit, seed, min_words, sentences)
    if not pairs:
        raise SynthError(f"{text}: no pair left to voice ({dropped or 'the manifest is empty'})")
    with tempfile.TemporaryDirectory(prefix="synth-check-") as workdir:
        check_voices("en", Path(workdir))
    staging = staging_dir(final)
    (staging / "wav").mkdir()
    (staging / "txt").mkdir()
    held = corpus_held_out_voice(Path(root))
    talks = plan(pairs, next_talk_id(data_dir), staging / "wav", seed, other_voices("en", held) if held else None)
    results = run_parallel(voice_talk, talks, jobs, f"synth-tts {split}", "talk")
    write_split(staging / "txt", split, results)
    failures = [f for r in results for f in r.failures]
    summary = {
        "corpus": "mustc",
        "pair": PAIR,
        "split": split,
        "text": str(text),
        "seed": seed,
        "limit": limit,
        "min_words": min_words,
        "sentences_only": sentences,
        "hold_out_voice": voice_label(held) if held else None,
        "pairs_read": len(pairs) + sum(dropped.values()),
        "dropped": dropped,
        **split_summary(results),
        "voices": dict(sorted(voice_counts(results).items())),
        "failures": failures,
        "failure_reasons": dict(Counter(f["reason"] for f in failures)),
    }
    summary["speech_hours"] = round(summary["speech_seconds"] / 3600, 4)
    summary["seconds"] = round(time.perf_counter() - start, 2)
    (staging / "voiced_text_summary.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    publish(staging, final)
    return summary
