"""The Python API's evaluation: `evaluate()` decodes a prepared split with a model or a cascade and scores it
(BLEU and chrF, or WER and CER, each with its sacreBLEU signature); `evaluate_simultaneous()` streams it through a
simultaneous policy for one or several k and scores quality with latency. `speechmt evaluate` calls them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from speechmt import checks as opt
from speechmt.api import (
    TASKS,
    Cascade,
    OptionError,
    Policy,
    Task,
    _loaded,
    _model,
    checked,
    checked_device,
    checked_task,
    search_options,
)

if TYPE_CHECKING:
    from speechmt.decoding.search import DecodeOptions
    from speechmt.decoding.simultaneous import SimultaneousConfig
    from speechmt.decoding.translate import LoadedModel
    from speechmt.evaluation.report import EvalReport


def evaluate(
    model: LoadedModel | Cascade | str | os.PathLike | None,
    data: str | os.PathLike,
    split: str,
    *,
    task: Task | None = None,
    device: str | None = None,
    beam: int = 5,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    mbr: Literal["chrf", "bleu"] | None = None,
    mbr_samples: int = 0,
    max_tokens: int = 20000,
    limit: int | None = None,
    out: str | os.PathLike | None = None,
    name: str | None = None,
    skip_bad_audio: bool = False,
    comet: str | None = None,
    results: str | os.PathLike | None = None,
) -> EvalReport:
    """Decodes the split `split` of the prepared data folder `data` (its first `limit` utterances) and scores it.

    ST and MT are scored with BLEU and chrF against the translations, ASR with WER and CER against the transcripts;
    a cascade's report also holds its transcripts' WER (`extra["asr_wer"]`). `speechmt evaluate`'s options:

    Args:
        model: a model from `load_model` (with its task, device, dtype and memory), a cascade from `load_cascade`,
            a checkpoint path (loaded here with `task` and `device`), or None for the bundled model.
        task: "st", "asr" or "mt" (the transcripts as text input): what a multi-task model does; only with a
            path or None as `model`.
        device, beam, len_penalty, max_len_a, max_len_b, min_len, mbr, mbr_samples: as `translate`'s.
        max_tokens: feature frames per decoding batch, 1 to 10**9.
        limit: only the first N utterances of the split (manifest order); None: all.
        out: the report folder (hyps.txt, refs.txt, results.tsv, report.json, report.md); None: none written.
        name: how the model is named in the report and RESULTS row (default: the checkpoint path).
        skip_bad_audio: score the utterances whose audio can be read and count the others in the report
            (`extra["skipped"]`); False: speechmt.audio.AudioError naming them.
        comet: also score translations with COMET (the unbabel-comet package): a checkpoint file, a model folder
            or a name such as Unbabel/wmt22-comet-da; without it `extra["comet_skipped"]` says why.
        results: a RESULTS.md to append the report's row to.

    Returns the speechmt.evaluation.report.EvalReport: `metrics` (name -> Score: `score`, `signature`), `n`, and
    `extra` (decode options, seconds, real-time factor `rtf`, memory per target token, commit).
    """
    from speechmt.evaluation.evaluate import evaluate as _evaluate
    from speechmt.evaluation.evaluate import evaluate_cascade
    from speechmt.evaluation.report import append_results_row

    beam, search = search_options(beam, len_penalty, max_len_a, max_len_b, min_len, mbr, mbr_samples)
    max_tokens = checked("max_tokens", opt.integer(1, opt.MAX_TOKENS), max_tokens)
    limit = None if limit is None else checked("limit", opt.integer(1, opt.MAX_TOKENS), limit)
    lm = _model(model, checked_task(task, TASKS), None if device is None else checked_device(device))
    if isinstance(lm, Cascade):
        report = evaluate_cascade(
            lm.asr,
            lm.mt,
            data,
            split,
            beam,
            out_dir=out,
            max_tokens=max_tokens,
            name=name,
            skip_bad_audio=skip_bad_audio,
            comet_model=comet,
            limit=limit,
            len_penalty=search.len_penalty,
            max_len_a=search.max_len_a,
            max_len_b=search.max_len_b,
            min_len=search.min_len,
            mbr=search.mbr,
            samples=search.samples,
        )
    else:
        report = _evaluate(
            lm,
            data,
            split,
            search.decode_options(lm, beam),
            out_dir=out,
            max_tokens=max_tokens,
            name=name,
            skip_bad_audio=skip_bad_audio,
            comet_model=comet,
            limit=limit,
        )
    if results is not None:
        append_results_row(results, report)
    return report


@dataclass
class SimultaneousRun:
    """One policy setting of `evaluate_simultaneous`: its speechmt.decoding.simultaneous.SimultaneousConfig and
    report (quality in `metrics`, latency in `extra["latency"]`, ms)."""

    config: SimultaneousConfig
    report: EvalReport

    @property
    def summary(self) -> str:
        """One line: the setting, its scores, its latency (s) and real-time factor."""
        from speechmt.evaluation.simultaneous_eval import latency_line, policy_label

        scores = ", ".join(f"{s.name} = {s.score:.2f}" for s in self.report.metrics.values())
        return (
            f"{policy_label(self.config)} k={self.config.k} step {self.config.step_ms:g} ms: {scores}; "
            f"{latency_line(self.report.extra['latency'])}; RTF {self.report.extra['rtf']}"
        )


@dataclass
class SimultaneousEvaluation:
    """`evaluate_simultaneous`'s outcome: a run per k; the quality-latency rows (those of `compare` first); with
    several rows, the offline report (the same utterances decoded with the whole input) and the table files
    written (quality_latency.md, .json and, where matplotlib is installed, .png)."""

    runs: list[SimultaneousRun]
    rows: list[dict]
    offline: EvalReport | None = None
    written: list[Path] = field(default_factory=list)


def evaluate_simultaneous(
    model: LoadedModel | str | os.PathLike | None,
    data: str | os.PathLike,
    split: str,
    *,
    policy: Policy = "wait-k",
    k: int | Sequence[int] | None = None,
    step_ms: float = 400.0,
    tail_beam: int = 1,
    task: Task | None = None,
    device: str | None = None,
    beam: int = 5,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    max_tokens: int = 20000,
    limit: int | None = None,
    out: str | os.PathLike | None = None,
    name: str | None = None,
    compare: Sequence[str | os.PathLike] = (),
) -> SimultaneousEvaluation:
    """Streams the split's utterances through a simultaneous policy (`speechmt evaluate --simultaneous`) and scores
    quality and latency (AL, LAAL; computation-unaware and -aware) for each k, in one pass (each utterance read
    once, its encoder outputs shared between the settings).

    Args:
        model, task, device: as `evaluate`'s (not a cascade).
        policy, step_ms, tail_beam: as `simultaneous`'s.
        k: one k or several (a quality-latency table); None: the policy's default.
        beam: the offline decoding's beam (with several k or `compare`), len_penalty ... min_len: both searches'.
        max_tokens, limit, name: as `evaluate`'s.
        out: the report folder (one subfolder per k when there are several, `offline/`, the quality-latency table,
            and streams.jsonl, which lets a killed run started again with the same arguments resume); None: no
            files.
        compare: report folders of earlier runs whose quality-latency rows (quality_latency.json) join the table.
    """
    from speechmt.decoding.simultaneous import POLICIES, SimultaneousConfig, default_k
    from speechmt.evaluation.simultaneous_eval import evaluate_simultaneous_settings, latency_row, read_quality_latency

    if policy not in POLICIES:
        raise OptionError(f"policy: invalid value {str(policy)!r}: expected {' or '.join(POLICIES)}")
    beam, search = search_options(beam, len_penalty, max_len_a, max_len_b, min_len, None, 0)
    lm = _loaded(model, checked_task(task, TASKS), None if device is None else checked_device(device))
    ks = [default_k(policy, lm)] if k is None else [k] if isinstance(k, int) else list(k)
    cfgs = [
        SimultaneousConfig(
            policy,
            checked("k", opt.integer(1, 1000), n),
            checked("step_ms", opt.number(25, 10000), step_ms),
            tail_beam=checked("tail_beam", opt.integer(1, opt.MAX_BEAM), tail_beam),
        )
        for n in ks
    ]
    folders = _run_folders(out, cfgs)
    reports = evaluate_simultaneous_settings(
        lm,
        data,
        split,
        cfgs,
        folders,
        name,
        limit,
        search.decode_options(lm, 1),
        journal=None if out is None else Path(out) / "streams.jsonl",
    )
    runs = [SimultaneousRun(c, r) for c, r in zip(cfgs, reports)]
    rows = [row for folder in compare for row in read_quality_latency(folder)]
    rows += [latency_row(run.config, run.report) for run in runs]
    if len(rows) == 1:
        return SimultaneousEvaluation(runs, rows)
    return _with_offline(
        lm,
        data,
        split,
        SimultaneousEvaluation(runs, rows),
        search.decode_options(lm, beam),
        max_tokens,
        limit,
        out,
        name,
    )


def _run_folders(out: str | os.PathLike | None, cfgs: list[SimultaneousConfig]) -> list[str | os.PathLike | None]:
    """Each setting's report folder: `out` itself for one, out/<policy>-k<k> for several; None without `out`."""
    if out is None:
        return [None] * len(cfgs)
    return [str(out)] if len(cfgs) == 1 else [str(Path(out) / f"{c.policy}-k{c.k}") for c in cfgs]


def _with_offline(
    lm: LoadedModel,
    data: str | os.PathLike,
    split: str,
    result: SimultaneousEvaluation,
    options: DecodeOptions,
    max_tokens: int,
    limit: int | None,
    out: str | os.PathLike | None,
    name: str | None,
) -> SimultaneousEvaluation:
    """`result` with the offline report of the same utterances and, with `out`, the quality-latency table."""
    from speechmt.evaluation.evaluate import evaluate as _evaluate
    from speechmt.evaluation.simultaneous_eval import write_quality_latency

    offline_dir = None if out is None else str(Path(out) / "offline")
    result.offline = _evaluate(lm, data, split, options, offline_dir, max_tokens, name, limit=limit)
    if out is not None:
        policies = " and ".join(dict.fromkeys(r["policy"] for r in result.rows))
        title = f"Quality and latency: {Path(lm.path).name} on {split} ({result.offline.n} utterances), {policies}"
        result.written = write_quality_latency(out, result.rows, title, result.offline)
    return result
