"""The `speechmt` subcommands, each a small handler function `cmd_<name>(args) -> exit status` (its options:
speechmt.cli.parser)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from speechmt.audio import AudioError


def _prepare_config(args: argparse.Namespace):
    from speechmt.data.prepare import PrepareConfig

    return PrepareConfig(min_frames=args.min_frames, max_frames=args.max_frames, jobs=args.jobs,
                         store_dtype=args.dtype, overwrite=args.overwrite)


def cmd_prepare_mustc(args: argparse.Namespace) -> int:
    from speechmt.data.mustc import prepare_mustc

    splits = tuple(args.splits) if args.splits else None
    prepare_mustc(args.root, args.out, args.tgt_lang, splits, _prepare_config(args))
    return 0


def cmd_prepare_covost2(args: argparse.Namespace) -> int:
    from speechmt.data.covost2 import prepare_covost2

    prepare_covost2(args.root, args.out, args.src_lang, args.tgt_lang, _prepare_config(args))
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    from speechmt.data.vocab import train_from_manifests
    from speechmt.tokenizers.sentencepiece import TokenizerConfig

    fields = {"src": ("src_text",), "tgt": ("tgt_text",), "joint": ("src_text", "tgt_text")}[args.field]
    cfg = TokenizerConfig(model_type=args.model_type, vocab_size=args.vocab_size,
                          lang_tags=tuple(args.lang_tags))
    tok = train_from_manifests(args.manifests, fields, cfg)
    tok.save(args.out)
    print(f"{args.out}: {len(tok)} pieces ({args.model_type}, {'+'.join(fields)})")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from speechmt.config import load_config
    from speechmt.training.run import run_training

    cfg = load_config(args.config, args.overrides)  # type- and range-checked, naming the file
    from speechmt.ranks import is_main

    state = run_training(cfg, resume=not args.no_resume)
    if is_main():  # once per run, not once per rank
        print(f"finished at update {state.step} (epoch {state.epoch}); best dev loss {state.best_loss:.4f}")
    return 0


def cmd_pretrain_audio(args: argparse.Namespace) -> int:
    from speechmt.training.pretrain_audio import load_pretrain_config, pretrain_audio

    cfg = load_pretrain_config(args.config, args.set, manifests=args.manifests or None, out=args.out)
    state = pretrain_audio(cfg, resume=not args.no_resume)
    print(f"{cfg.out}: wav2vec2 encoder after {state.step} updates; use it with "
          f"model.encoder.kind=wav2vec2 model.encoder.name_or_path={cfg.out}")
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from speechmt.training.run import average

    used = average(args.inputs, args.last, args.out, args.by)
    print(f"{args.out}: average of {len(used)} checkpoints ({', '.join(p.name for p in used)})")
    return 0


def _decode_kwargs(args: argparse.Namespace) -> dict:
    return {"max_len_a": args.max_len_a, "max_len_b": args.max_len_b, "len_penalty": args.len_penalty, "mbr": args.mbr,
            "samples": args.mbr_samples}


def cmd_translate(args: argparse.Namespace) -> int:
    """Translates every readable file; an unreadable one is named in one stderr line (and has an "error" in
    JSON output), and the exit status is then 1. Audio too short to translate gives a warning line."""
    import json

    from speechmt.decoding.segment import SegmentConfig
    from speechmt.decoding.translate import load_model, translate, with_memory

    cut_pauses = args.cut_pauses if args.cut_pauses is not None else 300.0 if args.format in ("srt", "vtt") else 0
    segment = SegmentConfig(max_seconds=args.max_chunk_seconds, pause_cut_ms=cut_pauses)
    kwargs = dict(beam=args.beam, batch_size=args.batch_size, segment=segment, errors="keep", **_decode_kwargs(args))
    if args.cascade:
        from speechmt.decoding.cascade import cascade_translate, load_cascade

        asr, mt = load_cascade(*args.cascade, args.device, args.dtype)
        if (problem := _chunk_limit_problem(args, asr)) is not None:
            return problem
        results = cascade_translate(asr, mt, args.audio, **kwargs)
    else:
        from speechmt.pretrained import default_model_path

        lm = with_memory(load_model(args.model or default_model_path(), args.device, args.task, args.dtype),
                         args.memory)
        if args.simultaneous:
            return _translate_simultaneous(lm, args)
        if (problem := _chunk_limit_problem(args, lm)) is not None:
            return problem
        if args.timing:
            return _translate_timed(lm, args.audio, nbest=args.nbest, **kwargs)
        results = translate(lm, args.audio, nbest=args.nbest, **kwargs)
    if args.format in ("srt", "vtt"):
        return _write_subtitles(results, args.format, args.output_dir)
    from speechmt.decoding.subtitles import make_cues

    for r in results:
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
        if args.format == "json":
            notes = {k: v for k, v in (("error", r.error), ("warning", r.warning)) if v}
            cues = [{"start": c.start, "end": c.end, "text": c.text, "lines": list(c.lines)}
                    for c in make_cues(r.timed_texts(), r.audio_seconds)]
            print(json.dumps({"file": r.source, "text": r.text, "nbest": r.nbest, "chunks": r.chunks,
                              "chunk_texts": r.chunk_texts, "segments": cues, "transcript": r.transcript,
                              "audio_seconds": round(r.audio_seconds, 3), **notes}, ensure_ascii=False))
        elif not r.error:
            print(r.text if len(results) == 1 else f"{r.source}\t{r.text}")
    return 1 if any(r.error for r in results) else 0


def _translate_simultaneous(lm, args: argparse.Namespace) -> int:
    """Streams each input (a file, or raw 16-bit 16 kHz mono PCM on standard input for "-") through the policy,
    writing each commit as it is made: text appended to the line (json: one object per commit, then one per
    input with the word delays and latency)."""
    import json

    from speechmt.audio import read_audio
    from speechmt.decoding.simultaneous import SimultaneousConfig, default_k, translate_stream
    from speechmt.evaluation.latency import corpus_latency, Delays, word_delays

    cfg = SimultaneousConfig(args.simultaneous, args.k or default_k(args.simultaneous, lm), args.step_ms,
                             min(args.max_chunk_seconds, 30.0), tail_beam=args.tail_beam or 1)
    failed = False
    for path in args.audio:
        try:
            blocks = _stdin_blocks(cfg.step_samples) if path == "-" else [read_audio(path)]
        except AudioError as e:
            print(f"speechmt: error: {e}", file=sys.stderr)
            failed = True
            continue
        name = "stdin" if path == "-" else path
        if args.format == "text" and len(args.audio) > 1:
            print(f"{name}\t", end="", flush=True)

        def show(commit) -> None:
            if args.format == "json":
                print(json.dumps({"file": name, "text": commit.text, "delay_ms": round(commit.delay_ms, 1),
                                  "elapsed_ms": round(commit.elapsed_ms, 1)}, ensure_ascii=False), flush=True)
            else:
                print(commit.text, end="", flush=True)

        result = translate_stream(lm, blocks, cfg, lm.decode_options(1, **_decode_kwargs(args)), show)
        delays, elapsed = word_delays(result.events())
        if args.format == "json":
            latency = corpus_latency([Delays(tuple(delays), tuple(elapsed), result.source_ms)])
            print(json.dumps({"file": name, "text": result.text, "source_ms": round(result.source_ms, 1),
                              "word_delays_ms": delays, "word_elapsed_ms": [round(e, 1) for e in elapsed],
                              "latency_ms": {k: latency[k] for k in ("AL", "LAAL", "AL_CA", "LAAL_CA")}},
                             ensure_ascii=False), flush=True)
        else:
            print(flush=True)
    return 1 if failed else 0


def _stdin_blocks(samples: int):
    """Raw 16-bit little-endian 16 kHz mono PCM from standard input, one decision step at a time."""
    import numpy as np

    while chunk := sys.stdin.buffer.read(2 * samples):
        yield np.frombuffer(chunk[: len(chunk) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


def _write_subtitles(results, fmt: str, output_dir: str | None) -> int:
    """Each translated file's subtitles (speechmt.decoding.subtitles) to standard output, or to
    output_dir/<stem>.<fmt>; an unreadable file gets one stderr line and no subtitles (exit status 1)."""
    from speechmt.decoding.subtitles import make_cues, to_srt, to_vtt

    write = to_srt if fmt == "srt" else to_vtt
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
            continue
        text = write(make_cues(r.timed_texts(), r.audio_seconds))
        if output_dir:
            out = Path(output_dir) / f"{Path(r.source).stem}.{fmt}"
            out.write_text(text, encoding="utf-8")
            print(f"{r.source}: {out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
    return 1 if any(r.error for r in results) else 0


def _chunk_limit_problem(args: argparse.Namespace, lm) -> int | None:
    """Exit status 2 with one line when --max-chunk-seconds is more than the model takes at once (Whisper's
    30 s window); None when it fits."""
    limit = lm.max_input_seconds
    if limit is None or args.max_chunk_seconds <= limit:
        return None
    print(f"speechmt translate: error: argument --max-chunk-seconds: invalid value '{args.max_chunk_seconds:g}': "
          f"{lm.path} takes at most {limit:g} s of audio at once", file=sys.stderr)
    return 2


def _translate_timed(lm, paths: list[str], **kwargs) -> int:
    """Translates one file at a time; prints file, translation, decoding seconds and audio seconds."""
    import time

    from speechmt.decoding.translate import translate

    failed = False
    for path in paths:
        start = time.perf_counter()
        (r,) = translate(lm, [path], **kwargs)
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
            failed = True
            continue
        print(f"{r.source}\t{r.text}\t{time.perf_counter() - start:.2f} s for {r.audio_seconds:.2f} s of audio")
    return 1 if failed else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from speechmt.decoding.translate import load_model, with_memory
    from speechmt.evaluation.evaluate import evaluate
    from speechmt.evaluation.report import append_results_row

    if args.model and args.cascade:
        print("speechmt: error: evaluate takes --model M or --cascade ASR MT, not both", file=sys.stderr)
        return 2
    if not args.cascade and not args.model:
        from speechmt.pretrained import default_model_path

        args.model = str(default_model_path())
    # under the current directory, never beside a model (the bundled one lives inside the package)
    task = f"_{args.task}" if args.task else ""  # one model's st and asr reports side by side
    out = args.out or str(Path("eval") / f"{Path(args.model or args.cascade[1]).stem}_{args.split}{task}")
    if args.simultaneous:
        return _evaluate_simultaneous(args, out)
    if args.cascade:
        from speechmt.decoding.cascade import load_cascade
        from speechmt.evaluation.evaluate import evaluate_cascade

        asr, mt = load_cascade(*args.cascade, args.device, args.dtype)
        report = evaluate_cascade(asr, mt, args.data, args.split, args.beam, out, args.max_tokens, args.name,
                                  skip_bad_audio=args.skip_bad_audio, comet_model=args.comet, limit=args.limit,
                                  **_decode_kwargs(args))
        print(f"ASR WER = {report.extra['asr_wer']:.2f} (transcripts of the cascade's first stage)")
    else:
        lm = with_memory(load_model(args.model, args.device, args.task, args.dtype), args.memory)
        report = evaluate(lm, args.data, args.split, lm.decode_options(args.beam, **_decode_kwargs(args)), out,
                          args.max_tokens, args.name, skip_bad_audio=args.skip_bad_audio, comet_model=args.comet,
                          limit=args.limit)
    for score in report.metrics.values():
        print(f"{score.name} = {score.score:.2f}  ({score.signature})")
    if report.extra.get("comet_skipped"):
        print(report.extra["comet_skipped"])
    if "memory" in report.extra:
        m = report.extra["memory"]
        print(f"decoder memory: {m['mean_memory_length']} vectors for {m['mean_target_tokens']} target tokens "
              f"on average; {m['memory_per_target_token']} per target token")
    if report.extra.get("skipped"):
        print(f"skipped {report.extra['skipped']['count']} utterances with unreadable audio (listed in the report)")
    print(f"RTF {report.extra['rtf']}; report in {out}")
    if args.results:
        append_results_row(args.results, report)
    return 0


def _evaluate_simultaneous(args: argparse.Namespace, out: str) -> int:
    """Streams the split through the policy for each --k (one pass: each utterance through every k, its encoder
    outputs shared); prints scores and latency per k. With several k (or --compare) it also decodes the same
    utterances offline (--beam) and writes the quality-latency table, its JSON and plot (quality_latency.md,
    .json, .png) into the report folder, one subfolder per k. Each finished utterance is kept in
    OUT/streams.jsonl: a killed run started again with the same options resumes after it."""
    from speechmt.decoding.simultaneous import SimultaneousConfig, default_k
    from speechmt.decoding.translate import load_model
    from speechmt.evaluation.evaluate import evaluate
    from speechmt.evaluation.simultaneous_eval import (evaluate_simultaneous_settings, latency_line, latency_row,
                                                       policy_label, read_quality_latency, write_quality_latency)

    lm = load_model(args.model, args.device, args.task, args.dtype)
    ks = args.k or [default_k(args.simultaneous, lm)]
    rows = []
    for folder in args.compare or []:
        rows += read_quality_latency(folder)
    cfgs = [SimultaneousConfig(args.simultaneous, k, args.step_ms, tail_beam=args.tail_beam or 1) for k in ks]
    folders = [out] if len(ks) == 1 else [str(Path(out) / f"{args.simultaneous}-k{k}") for k in ks]
    reports = evaluate_simultaneous_settings(lm, args.data, args.split, cfgs, folders, args.name, args.limit,
                                             lm.decode_options(1, **_decode_kwargs(args)),
                                             journal=Path(out) / "streams.jsonl")
    for k, cfg, report in zip(ks, cfgs, reports):
        rows.append(latency_row(cfg, report))
        scores = ", ".join(f"{s.name} = {s.score:.2f}" for s in report.metrics.values())
        print(f"{policy_label(cfg)} k={k} step {args.step_ms:g} ms: {scores}; {latency_line(report.extra['latency'])}; "
              f"RTF {report.extra['rtf']}")
    if len(rows) == 1:
        print(f"report in {out}")
        return 0
    offline = evaluate(lm, args.data, args.split, lm.decode_options(args.beam, **_decode_kwargs(args)),
                       str(Path(out) / "offline"), args.max_tokens, args.name, limit=args.limit)
    print(f"offline (beam {args.beam}): " + ", ".join(f"{s.name} = {s.score:.2f}" for s in offline.metrics.values()))
    policies = " and ".join(dict.fromkeys(r["policy"] for r in rows))
    written = write_quality_latency(out, rows, f"Quality and latency: {Path(lm.path).name} on {args.split} "
                                    f"({offline.n} utterances), {policies}", offline)
    print(f"quality-latency table in {written[0]}" + (f", plot {written[2]}" if len(written) > 2 else
                                                      " (no plot: matplotlib is not installed)"))
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    from speechmt.evaluation.benchmark import BenchmarkConfig, run_benchmark
    from speechmt.evaluation.benchmark_report import benchmark_markdown, write_benchmark

    cfg = BenchmarkConfig(data=args.data, split=args.split, models=tuple(args.model),
                          cascades=tuple(tuple(c) for c in args.cascade), peers=tuple(args.peer),
                          compare=tuple(args.compare), names=tuple(args.name), tasks=tuple(args.task), beam=args.beam,
                          mbr=args.mbr, mbr_samples=args.mbr_samples, max_tokens=args.max_tokens, limit=args.limit,
                          threads=args.threads, device=args.device, dtype=args.dtype,
                          edges=tuple(args.buckets), analyses=tuple(args.analysis))
    bench, hyps = run_benchmark(cfg)
    written = write_benchmark(bench, args.out, hyps)
    print(benchmark_markdown(bench), end="")
    print(f"wrote {', '.join(p.name for p in written)} in {args.out}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from speechmt.evaluation.analyze import AnalyzeConfig, run_analysis

    cfg = AnalyzeConfig(model=args.model, data=args.data, split=args.split, out=args.out,
                        text_model=args.text_model, limit=args.limit, device=args.device)
    result, written = run_analysis(cfg)
    top = result["sentence"]["top"]
    raw = top["raw"] or top["procrustes"]["retrieval"]
    print(f"{result['n']} utterances; top layers {top['speech']} / {top['text']}: CKA {top['cka']:.3f}, "
          f"sentence P@1 speech->text {raw['cosine']['speech_to_text']:.3f} (cosine), "
          f"{raw['csls']['speech_to_text']:.3f} (CSLS){'' if top['raw'] else ' after Procrustes'}")
    if result["speech"]["words"]["skipped"]:
        print(f"speech words: {result['speech']['words']['note']}")
    print(f"wrote {', '.join(p.name for p in written)} in {args.out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from speechmt.pretrained import export_model

    info = export_model(args.checkpoint, args.out, half=not args.fp32, merge=args.merge,
                        whisper_pad_seconds=args.whisper_pad_seconds, memory=args.memory)
    print(f"{args.out}: {info['params']:,} parameters in {info['bytes'] / 2**20:.1f} MiB "
          f"({'float32' if args.fp32 else 'float16'} weights, inference only)")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from speechmt.training.convert import convert_pickled_checkpoint

    info = convert_pickled_checkpoint(args.old, args.out, trust=args.trust)
    print(f"{args.out}: {args.old} in the safe format ({info['model_tensors']} model tensors, "
          f"{info['bytes'] / 2**20:.1f} MiB)")
    return 0


def cmd_import_hf(args: argparse.Namespace) -> int:
    from speechmt.interop.hf_s2t import import_hf_s2t

    out = import_hf_s2t(args.source, args.out, tgt_lang=args.tgt_lang, task=args.task)
    print(f"{out}: speechmt checkpoint of {args.source}")
    return 0


def cmd_import_whisper(args: argparse.Namespace) -> int:
    from speechmt.interop.whisper_ct2 import import_whisper

    out = import_whisper(args.ct2_dir, args.out)
    print(f"{out}: Hugging Face Whisper model of {args.ct2_dir}")
    return 0


def cmd_import_gguf(args: argparse.Namespace) -> int:
    from speechmt.interop.gguf import import_gguf

    out = import_gguf(args.gguf_file, args.out, dtype=args.dtype)
    print(f"{out}: Hugging Face causal LM of {args.gguf_file} ({args.dtype})")
    return 0
