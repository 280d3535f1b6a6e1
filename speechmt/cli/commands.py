"""The everyday `speechmt` commands' handlers, each `cmd_<name>(args) -> exit status`: the options parsed
(speechmt.cli.parser), the public Python API called (speechmt.api, speechmt.api_evaluate, speechmt.api_train), what it
returned printed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speechmt.audio import AudioError


def cmd_train(args: argparse.Namespace) -> int:
    from speechmt.api_train import train
    from speechmt.ranks import is_main

    state = train(args.config, args.overrides, resume=not args.no_resume)
    if is_main():  # once per run, not once per rank
        print(f"finished at update {state.step} (epoch {state.epoch}); best dev loss {state.best_loss:.4f}")
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from speechmt.api_train import average

    used = average(args.inputs, args.out, last=args.last, by=args.by)
    print(f"{args.out}: average of {len(used)} checkpoints ({', '.join(p.name for p in used)})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from speechmt.api_train import export

    info = export(
        args.checkpoint,
        args.out,
        fp32=args.fp32,
        merge=args.merge,
        whisper_pad_seconds=args.whisper_pad_seconds,
        memory=args.memory,
    )
    print(
        f"{args.out}: {info['params']:,} parameters in {info['bytes'] / 2**20:.1f} MiB "
        f"({'float32' if args.fp32 else 'float16'} weights, inference only)"
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Serves the model until interrupted (speechmt.serve); one line when the serve extra is missing."""
    from speechmt.api_serve import MissingExtraError, ServeConfig, serve

    config = ServeConfig(
        model=args.model,
        host=args.host,
        port=args.port,
        workers=args.workers,
        device=args.device,
        dtype=args.dtype,
        beam=args.beam,
        max_len_b=args.max_len_b,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_upload_mb=args.max_upload_mb,
        request_timeout_s=args.request_timeout,
        max_chunk_seconds=args.max_chunk_seconds,
    )
    try:
        serve(config, args.log_level)
    except MissingExtraError as e:
        print(f"speechmt: error: {e}", file=sys.stderr)
        return 2
    return 0


def _search(args: argparse.Namespace) -> dict:
    """The search options every decoding command has, as the API's keyword arguments."""
    return {"len_penalty": args.len_penalty, "max_len_a": args.max_len_a, "max_len_b": args.max_len_b}


def _model(args: argparse.Namespace):
    """The --model (default: the bundled one), or the --cascade, loaded as the options say."""
    from speechmt.api import load_cascade, load_model

    langs = {"src_lang": args.src_lang, "tgt_lang": args.tgt_lang}
    if args.cascade:
        return load_cascade(*args.cascade, device=args.device, dtype=args.dtype, **langs)
    return load_model(args.model, args.device, args.task, args.dtype, getattr(args, "memory", None), **langs)


def cmd_translate(args: argparse.Namespace) -> int:
    """Translates every readable file; an unreadable one is named in one stderr line (and has an "error" in
    JSON output), and the exit status is then 1. Audio too short to translate gives a warning line."""
    from speechmt.api import translate

    model = _model(args)
    if args.simultaneous:
        return _translate_simultaneous(model, args)
    cut_pauses = args.cut_pauses if args.cut_pauses is not None else 300.0 if args.format in ("srt", "vtt") else 0
    options = dict(
        beam=args.beam,
        nbest=args.nbest,
        batch_size=args.batch_size,
        cut_pauses=cut_pauses,
        max_chunk_seconds=args.max_chunk_seconds,
        errors="keep",
        mbr=args.mbr,
        mbr_samples=args.mbr_samples,
        strategy=args.strategy,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        **_search(args),
    )
    if args.timing:
        return _translate_timed(model, args.audio, options)
    results = translate(model, args.audio, **options)
    for r in results:
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
        elif args.format in ("srt", "vtt"):
            _show_subtitles(r, args.format, args.output_dir)
        elif args.format == "text":
            print(r.text if len(results) == 1 else f"{r.source}\t{r.text}")
        if args.format == "json":
            print(json.dumps(_json_result(r), ensure_ascii=False))
    return 1 if any(r.error for r in results) else 0


def _json_result(r) -> dict:
    """One file's translation as `--format json` prints it, subtitle cues in "segments"."""
    from speechmt.api import subtitle_cues

    notes = {k: v for k, v in (("src_lang", r.src_lang), ("error", r.error), ("warning", r.warning)) if v}
    cues = [{"start": c.start, "end": c.end, "text": c.text, "lines": list(c.lines)} for c in subtitle_cues(r)]
    return {
        "file": r.source,
        "text": r.text,
        "nbest": r.nbest,
        "chunks": r.chunks,
        "chunk_texts": r.chunk_texts,
        "segments": cues,
        "transcript": r.transcript,
        "audio_seconds": round(r.audio_seconds, 3),
        **notes,
    }


def _show_subtitles(r, fmt: str, output_dir: str | None) -> None:
    """One file's subtitles on standard output, or into output_dir/<stem>.<fmt> with a line on stderr."""
    from speechmt.api import subtitles, write_subtitles

    if output_dir:
        print(f"{r.source}: {write_subtitles(r, output_dir, fmt)}", file=sys.stderr)
    else:
        sys.stdout.write(subtitles(r, fmt))


def _translate_timed(model, paths: list[str], options: dict) -> int:
    """Translates one file at a time; prints file, translation, decoding seconds and audio seconds."""
    import time

    from speechmt.api import translate

    failed = False
    for path in paths:
        start = time.perf_counter()
        (r,) = translate(model, [path], **options)
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
            failed = True
            continue
        print(f"{r.source}\t{r.text}\t{time.perf_counter() - start:.2f} s for {r.audio_seconds:.2f} s of audio")
    return 1 if failed else 0


def _translate_simultaneous(model, args: argparse.Namespace) -> int:
    """Streams each input (a file, or raw 16-bit 16 kHz mono PCM on standard input for "-") through the policy,
    writing each commit as it is made: text appended to the line (after "file<TAB>" for several files; json: one
    object per commit, then one per input with the word delays and latency)."""
    from speechmt.api import simultaneous

    failed = False
    for path in args.audio:
        name = "stdin" if path == "-" else path
        show = _CommitWriter(f"{name}\t" if args.format == "text" and len(args.audio) > 1 else "", name, args.format)
        try:
            stream = simultaneous(
                model,
                _stdin_blocks(args.step_ms) if path == "-" else path,
                policy=args.simultaneous,
                k=args.k,
                step_ms=args.step_ms,
                window_seconds=min(args.max_chunk_seconds, 30.0),
                tail_beam=args.tail_beam or 1,
                on_commit=show,
                source=name,
                **_search(args),
            )
        except AudioError as e:
            print(f"speechmt: error: {e}", file=sys.stderr)
            failed = True
            continue
        if args.format == "json":
            print(
                json.dumps(
                    {
                        "file": name,
                        "text": stream.text,
                        "source_ms": round(stream.source_ms, 1),
                        "word_delays_ms": stream.word_delays_ms,
                        "word_elapsed_ms": [round(e, 1) for e in stream.word_elapsed_ms],
                        "latency_ms": stream.latency_ms,
                    },
                    ensure_ascii=False,
                ),
                flush=True,
            )
        else:
            show.start()
            print(flush=True)
    return 1 if failed else 0


class _CommitWriter:
    """The callback that writes each commit as it is made: its text appended to the line, which starts with
    `prefix` when the first text comes (json: an object per commit)."""

    def __init__(self, prefix: str, name: str, fmt: str):
        self.prefix, self.name, self.fmt = prefix, name, fmt

    def start(self) -> None:
        """Writes the line's prefix, once."""
        print(self.prefix, end="", flush=True)
        self.prefix = ""

    def __call__(self, commit) -> None:
        if self.fmt == "json":
            print(
                json.dumps(
                    {
                        "file": self.name,
                        "text": commit.text,
                        "delay_ms": round(commit.delay_ms, 1),
                        "elapsed_ms": round(commit.elapsed_ms, 1),
                    },
                    ensure_ascii=False,
                ),
                flush=True,
            )
            return
        self.start()
        print(commit.text, end="", flush=True)


def _stdin_blocks(step_ms: float):
    """Raw 16-bit little-endian 16 kHz mono PCM from standard input, one decision step at a time."""
    import numpy as np

    samples = round(step_ms * 16)
    while chunk := sys.stdin.buffer.read(2 * samples):
        yield np.frombuffer(chunk[: len(chunk) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


def _default_out(args: argparse.Namespace, model_path: str) -> str:
    """evaluate's report folder: --out, or eval/<model>_<split>[_<task>] under the current directory (never beside
    a model: the bundled one lives inside the package)."""
    if args.out:
        return args.out
    task = f"_{args.task}" if args.task else ""  # one model's st and asr reports side by side
    return str(Path("eval") / f"{Path(model_path).stem}_{args.split}{task}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from speechmt.api_evaluate import evaluate

    if args.model and args.cascade:
        print("speechmt: error: evaluate takes --model M or --cascade ASR MT, not both", file=sys.stderr)
        return 2
    model = _model(args)
    out = _default_out(args, model.path)
    if args.simultaneous:
        return _evaluate_simultaneous(model, args, out)
    report = evaluate(
        model,
        args.data,
        args.split,
        beam=args.beam,
        mbr=args.mbr,
        mbr_samples=args.mbr_samples,
        max_tokens=args.max_tokens,
        limit=args.limit,
        out=out,
        name=args.name,
        skip_bad_audio=args.skip_bad_audio,
        comet=args.comet,
        results=args.results,
        **_search(args),
    )
    if args.cascade:
        print(f"ASR WER = {report.extra['asr_wer']:.2f} (transcripts of the cascade's first stage)")
    for score in report.metrics.values():
        print(f"{score.name} = {score.score:.2f}  ({score.signature})")
    if report.extra.get("comet_skipped"):
        print(report.extra["comet_skipped"])
    if "memory" in report.extra:
        m = report.extra["memory"]
        print(
            f"decoder memory: {m['mean_memory_length']} vectors for {m['mean_target_tokens']} target tokens "
            f"on average; {m['memory_per_target_token']} per target token"
        )
    if report.extra.get("skipped"):
        print(f"skipped {report.extra['skipped']['count']} utterances with unreadable audio (listed in the report)")
    print(f"RTF {report.extra['rtf']}; report in {out}")
    return 0


def _evaluate_simultaneous(model, args: argparse.Namespace, out: str) -> int:
    """Streams the split through the policy for each --k (one pass); prints scores and latency per k. With several
    k (or --compare) it also decodes the same utterances offline (--beam) and writes the quality-latency table,
    its JSON and plot into the report folder, one subfolder per k. A killed run started again with the same
    options resumes after its last finished utterance (OUT/streams.jsonl)."""
    from speechmt.api_evaluate import evaluate_simultaneous

    result = evaluate_simultaneous(
        model,
        args.data,
        args.split,
        policy=args.simultaneous,
        k=args.k,
        step_ms=args.step_ms,
        tail_beam=args.tail_beam or 1,
        beam=args.beam,
        max_tokens=args.max_tokens,
        limit=args.limit,
        out=out,
        name=args.name,
        compare=args.compare or (),
        **_search(args),
    )
    for run in result.runs:
        print(run.summary)
    if result.offline is None:
        print(f"report in {out}")
        return 0
    print(
        f"offline (beam {args.beam}): "
        + ", ".join(f"{s.name} = {s.score:.2f}" for s in result.offline.metrics.values())
    )
    written = result.written
    print(
        f"quality-latency table in {written[0]}"
        + (f", plot {written[2]}" if len(written) > 2 else " (no plot: matplotlib is not installed)")
    )
    return 0
