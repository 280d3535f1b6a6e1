"""`evaluate(model, data_dir, split)`: decode a prepared split with a checkpoint and score it.

Speech models read the split's stored features (with the checkpoint's CMVN; the fbank settings of the
data must equal the checkpoint's), wav2vec2 models the utterances' audio. ST and MT are scored with BLEU
and chrF against the translations, ASR with WER and CER (fairseq's normalisation) against the transcripts; the
ASR of a whisper_asr model is Whisper's own transcript (speechmt.decoding.translate.decode_inputs).

A model that reads audio (wav2vec2, Whisper) has every utterance's audio read once before decoding: when some
cannot be read, evaluation stops with their count and the first few names, or with `skip_bad_audio` scores
the others and counts the skipped ones in the report (`extra["skipped"]`).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Collection
from dataclasses import asdict, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from speechmt.audio import AudioError, FbankConfig
from speechmt.checkpoint import CheckpointError
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import load_split
from speechmt.data.manifest import (
    ManifestError,
    Record,
    read_manifest,
    read_split,
    record_audio,
    record_directions,
    split_manifest,
)
from speechmt.data.retrieval import with_examples
from speechmt.decoding.cascade import asr_stage_options, check_cascade, translate_texts
from speechmt.decoding.search import DecodeOptions
from speechmt.decoding.translate import LoadedModel, decode_encoded, decode_inputs, encode_texts
from speechmt.evaluation.metrics import cer, optional_comet, translation_scores, wer
from speechmt.evaluation.report import EvalReport, git_commit, write_report
from speechmt.frontend import FbankFrontend
from speechmt.progress import Progress, progress


def _check_features(lm: LoadedModel, data_dir: Path) -> None:
    """CheckpointError when the model reads stored fbank features computed otherwise than it was trained on."""
    summary = data_dir / "prepare_summary.json"
    if isinstance(lm.frontend, FbankFrontend) and summary.exists():
        data_fbank = FbankConfig(**json.loads(summary.read_text())["fbank"])
        if data_fbank != lm.frontend.fbank:
            raise CheckpointError(
                f"{lm.path}: trained on features {lm.frontend.fbank}, but {data_dir} holds {data_fbank}"
            )


@torch.no_grad()
def _decode_batch(
    lm: LoadedModel, records, store, idx: list[int], data_dir: Path, options: DecodeOptions
) -> tuple[list[str], list[int]]:
    """The best text of each utterance `idx` and the length of what it was read from (decode_inputs); a whisper_asr
    model of several sources transcribes each in its record's src_lang (detected where the record names none)."""
    if lm.task == "mt":
        nbest, lengths = decode_encoded(lm, encode_texts(lm, [records[i].src_text for i in idx]), options)
        return [n[0] for n in nbest], lengths
    if lm.reads_audio:  # wav2vec2 and Whisper models read the utterances' audio, not the stored features
        inputs = [lm.frontend(record_audio(records[i], data_dir)) for i in idx]
    else:
        inputs = [lm.frontend.normalise(store.get(i)) for i in idx]  # prepared fbank
    nbest, lengths = decode_inputs(lm, inputs, options, [records[i].src_lang for i in idx])
    return [n[0] for n in nbest], lengths


def one_line(text: str) -> str:
    """A hypothesis as one line of the report's line-aligned files: line breaks and tabs become spaces."""
    return text.translate(_FLATTEN)


_FLATTEN = str.maketrans({"\n": " ", "\r": " ", "\t": " "})


def check_one_line(records: list[Record], manifest: Path) -> None:
    """ManifestError, before any decoding, when an id or text of `records` holds a line break or tab (the
    report's hyps.txt, refs.txt and results.tsv are one utterance a line)."""
    for r in records:
        for name, text in (("id", r.id), ("src_text", r.src_text), ("tgt_text", r.tgt_text)):
            if any(c in text for c in "\n\r\t"):
                raise ManifestError(
                    f"{manifest}: utterance {r.id!r}: its {name} holds a line break or tab "
                    f"({text!r}); the report's files are one utterance a line"
                )


class DecodedSplit(NamedTuple):
    """A decoded split, all in record order: hypotheses, the decoding seconds, and the length of the
    decoder's memory (the encoder output it attends to, after any shrinking) for each utterance."""

    records: list
    hyps: list[str]
    seconds: float
    memory_lengths: list[int]


def decode_split(
    lm: LoadedModel,
    data_dir: str | os.PathLike,
    split: str,
    options: DecodeOptions,
    max_tokens: int = 20000,
    limit: int | None = None,
    exclude: Collection[str] = (),
) -> DecodedSplit:
    """Decodes a prepared split, or its first `limit` utterances in manifest order, leaving out the
    utterances whose ids are in `exclude`."""
    data_dir = Path(data_dir)
    _check_features(lm, data_dir)
    if lm.task == "mt" or lm.reads_audio:  # text, or audio read from its files: no stored features needed
        all_records, store = read_split(data_dir, split), None
    else:
        all_records, store = load_split(data_dir, split)
    keep = [i for i, r in enumerate(all_records[:limit]) if r.id not in exclude]  # indices into the store
    records = [all_records[i] for i in keep]
    check_one_line(records, split_manifest(data_dir, split))
    if lm.task == "mt" and lm.examples:  # the sources the model reads; the report keeps the plain ones
        all_records = list(all_records)
        for i, r in zip(keep, with_examples(records, data_dir, split, lm.examples)):
            all_records[i] = r
    hyps, memory = [""] * len(records), [0] * len(records)
    start = time.perf_counter()
    with Progress(len(records), f"decode {split} with {Path(lm.path).name}", "utt") as bar:
        for opts, members in direction_groups(lm, records, options, split):
            for batch in BucketBatchSampler([records[j].n_frames for j in members], max_tokens, shuffle=False):
                idx = [members[j] for j in batch]
                texts, lengths = _decode_batch(lm, all_records, store, [keep[j] for j in idx], data_dir, opts)
                for j, text, length in zip(idx, texts, lengths):
                    hyps[j], memory[j] = one_line(text), length
                bar.update(len(idx))
    return DecodedSplit(records, hyps, time.perf_counter() - start, memory)


def direction_groups(
    lm: LoadedModel, records: list[Record], options: DecodeOptions, split: str
) -> list[tuple[DecodeOptions, list[int]]]:
    """The records (positions) to decode with each set of options: all with `options` for a model of one
    direction, else each direction's with its own tag as the forced prefix (CheckpointError, one line, for a
    direction the model does not know)."""
    if len(lm.directions) <= 1:
        return [(options, list(range(len(records))))]
    index, names = record_directions(records)
    unknown = [n for n in names if n not in lm.directions]
    if unknown:
        raise CheckpointError(
            f"{split}: utterances in {', '.join(unknown)}; the model knows {', '.join(lm.directions)}"
        )
    return [
        (replace(options, prefix=lm.tokenizer.prefix_ids(lm.directions[name])), np.flatnonzero(index == d).tolist())
        for d, name in enumerate(names)
    ]


def unreadable_audio(
    lm: LoadedModel, data_dir: str | os.PathLike, records: list[Record]
) -> list[tuple[Record, AudioError]]:
    """The records whose audio `lm` would read and cannot (missing, undecodable, non-finite, a slice outside the
    file), with the reason; [] for a model that reads stored features or text. Reads each record's audio."""
    if lm.task == "mt" or not lm.reads_audio:
        return []
    bad = []
    for r in progress(records, "read audio", "utt"):
        try:
            record_audio(r, data_dir)
        except AudioError as e:
            bad.append((r, e))
    return bad


def _bad_audio(lm: LoadedModel, data_dir: str | os.PathLike, split: str, skip: bool) -> list[Record]:
    """The utterances of the split to leave out for unreadable audio: none, or with `skip` those that cannot be
    read (one warning line). Without `skip`, unreadable audio raises AudioError with the count and first names."""
    if lm.task == "mt" or not lm.reads_audio:
        return []
    manifest = split_manifest(data_dir, split)
    records = read_manifest(manifest)
    bad = unreadable_audio(lm, data_dir, records)
    if not bad:
        return []
    reasons = {"unreadable audio": "cannot decode", "missing audio": "file not found"}
    first = ", ".join(f"{r.id} ({Path(r.audio).name}: {reasons.get(e.reason, e.reason)})" for r, e in bad[:3])
    first += ", ..." if len(bad) > 3 else ""
    what = f"{manifest}: {len(bad)} of {len(records)} utterances have unreadable audio: {first}"
    if len(bad) == len(records):
        raise AudioError(f"{what}; nothing to score", "unreadable audio")
    if not skip:
        raise AudioError(f"{what}; pass --skip-bad-audio to score the others", "unreadable audio")
    warnings.warn(f"{what}; skipped, the other {len(records) - len(bad)} scored", stacklevel=3)
    return [r for r, _ in bad]


def _skipped(bad: list[Record]) -> dict:
    return {"skipped": {"count": len(bad), "reason": "unreadable audio", "ids": [r.id for r in bad]}} if bad else {}


def memory_per_target(lm: LoadedModel, refs: list[str], memory_lengths: list[int]) -> dict:
    """How long the decoder's memory is against the sequence it decodes: the mean memory length, the mean
    target length (the reference's pieces under the model's target vocabulary, plus EOS), and the mean over
    utterances of their ratio (memory vectors per target token)."""
    targets = [len(lm.tokenizer.encode(ref)) + 1 for ref in refs]
    n = max(len(refs), 1)
    return {
        "mean_memory_length": round(sum(memory_lengths) / n, 2),
        "mean_target_tokens": round(sum(targets) / n, 2),
        "memory_per_target_token": round(sum(m / t for m, t in zip(memory_lengths, targets)) / n, 3),
    }


def score(task: str, hyps: list[str], refs: list[str]) -> dict:
    """BLEU, chrF and chrF++ for translation tasks, WER and CER for ASR: {name: Score}."""
    scores = (wer(hyps, refs), cer(hyps, refs)) if task == "asr" else translation_scores(hyps, refs)
    return {s.name: s for s in scores}


def references(task: str, records) -> list[str]:
    return [r.src_text if task == "asr" else r.tgt_text for r in records]


def evaluate(
    lm: LoadedModel,
    data_dir: str | os.PathLike,
    split: str,
    options: DecodeOptions,
    out_dir: str | os.PathLike | None = None,
    max_tokens: int = 20000,
    name: str | None = None,
    skip_bad_audio: bool = False,
    comet_model: str | None = None,
    limit: int | None = None,
) -> EvalReport:
    """Decodes and scores a split (its first `limit` utterances); writes the report files to `out_dir` when
    given. `name` labels the model in reports (default: the checkpoint path). Utterances with unreadable
    audio (for a model that reads audio) raise AudioError naming them, or with `skip_bad_audio` are left out
    and counted in `extra`. A translation is also scored with COMET where `unbabel-comet` and `comet_model`
    are at hand; otherwise `extra["comet_skipped"]` says why."""
    bad = _bad_audio(lm, data_dir, split, skip_bad_audio)
    records, hyps, seconds, memory = decode_split(
        lm, data_dir, split, options, max_tokens, limit, exclude={r.id for r in bad}
    )
    refs = references(lm.task, records)
    metrics = score(lm.task, hyps, refs)
    srcs = [r.src_text for r in records]
    comet, skipped = (None, None) if lm.task == "asr" else optional_comet(hyps, refs, srcs, comet_model)
    metrics.update({comet.name: comet} if comet else {})
    audio = sum(r.duration for r in records)
    extra = {
        "task": lm.task,
        "decode": _search_facts(lm, options),
        "decode_seconds": round(seconds, 3),
        "audio_seconds": round(audio, 3),
        "rtf": round(seconds / audio, 5) if audio else None,
        "memory": memory_per_target(lm, refs, memory),
        "commit": git_commit(),
        "device": str(lm.device),
        "checkpoint": lm.path,
        **_skipped(bad),
        **({"comet_skipped": skipped} if skipped else {}),
    }
    report = EvalReport(
        model=name or lm.path, data=str(data_dir), split=split, n=len(records), metrics=metrics, extra=extra
    )
    if out_dir is not None:
        write_report(report, out_dir, hyps, refs, [r.id for r in records], [r.src_text for r in records])
    return report


def _search_facts(lm: LoadedModel, options: DecodeOptions) -> dict:
    """The search that wrote the hypotheses: the decoder's options, or Whisper's own (whisper_transcript)."""
    return {"whisper_asr_beam": lm.model.speech_encoder.beam} if lm.whisper_transcript else asdict(options)


def evaluate_cascade(
    asr: LoadedModel,
    mt: LoadedModel,
    data_dir: str | os.PathLike,
    split: str,
    beam: int = 5,
    out_dir: str | os.PathLike | None = None,
    max_tokens: int = 20000,
    name: str | None = None,
    skip_bad_audio: bool = False,
    comet_model: str | None = None,
    limit: int | None = None,
    **decode,
) -> EvalReport:
    """Scores the cascade on a split (its first `limit` utterances): `asr` transcribes the stored features, `mt`
    translates the transcripts, each record's into its own direction where `mt` knows several.

    BLEU and chrF against the translations; the transcripts' WER is kept in `extra` beside the timing of
    both stages (RTF counts both). In results.tsv the src column holds the ASR transcripts. COMET (against the
    gold source texts) as in `evaluate`."""
    check_cascade(asr, mt)
    asr_options, mt_options = asr.decode_options(beam, **asr_stage_options(decode)), mt.decode_options(beam, **decode)
    bad = _bad_audio(asr, data_dir, split, skip_bad_audio)
    records, transcripts, asr_seconds, _ = decode_split(
        asr, data_dir, split, asr_options, max_tokens, limit, exclude={r.id for r in bad}
    )
    start = time.perf_counter()
    hyps = [""] * len(records)
    for opts, members in direction_groups(mt, records, mt_options, split):  # each direction with its own tag
        for i, h in zip(members, translate_texts(mt, [transcripts[i] for i in members], opts)):
            hyps[i] = one_line(h)
    mt_seconds = time.perf_counter() - start
    refs = references("st", records)
    audio = sum(r.duration for r in records)
    asr_wer = wer(transcripts, references("asr", records))
    extra = {
        "task": "cascade",
        "decode": asdict(mt_options),
        "asr_wer": round(asr_wer.score, 2),
        "asr_seconds": round(asr_seconds, 3),
        "mt_seconds": round(mt_seconds, 3),
        "decode_seconds": round(asr_seconds + mt_seconds, 3),
        "audio_seconds": round(audio, 3),
        "rtf": round((asr_seconds + mt_seconds) / audio, 5) if audio else None,
        "commit": git_commit(),
        "device": str(asr.device),
        "checkpoint": f"{asr.path} -> {mt.path}",
        **_skipped(bad),
    }
    metrics = score("st", hyps, refs)
    comet, skipped = optional_comet(hyps, refs, [r.src_text for r in records], comet_model)
    metrics.update({comet.name: comet} if comet else {})
    extra.update({"comet_skipped": skipped} if skipped else {})
    report = EvalReport(
        model=name or f"{asr.path} -> {mt.path}",
        data=str(data_dir),
        split=split,
        n=len(records),
        metrics=metrics,
        extra=extra,
    )
    if out_dir is not None:
        write_report(report, out_dir, hyps, refs, [r.id for r in records], transcripts)
    return report
