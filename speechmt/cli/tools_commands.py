"""`speechmt import ...` and `speechmt research ...`'s handlers, each `cmd_<name>(args) -> exit status`: the options
parsed (speechmt.cli.tools_parser), the Python API called (speechmt.api_interop, speechmt.api_research), what it did
printed."""

from __future__ import annotations

import argparse


def cmd_import_hf(args: argparse.Namespace) -> int:
    from speechmt.api_interop import import_hf

    out = import_hf(args.source, args.out, tgt_lang=args.tgt_lang, task=args.task)
    print(f"{out}: speechmt checkpoint of {args.source}")
    return 0


def cmd_import_whisper(args: argparse.Namespace) -> int:
    from speechmt.api_interop import import_whisper

    out = import_whisper(args.ct2_dir, args.out)
    print(f"{out}: Hugging Face Whisper model of {args.ct2_dir}")
    return 0


def cmd_import_gguf(args: argparse.Namespace) -> int:
    from speechmt.api_interop import import_gguf

    out = import_gguf(args.gguf_file, args.out, dtype=args.dtype)
    print(f"{out}: Hugging Face causal LM of {args.gguf_file} ({args.dtype})")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from speechmt.api_interop import convert

    info = convert(args.old, args.out, trust=args.trust)
    print(
        f"{args.out}: {args.old} in the safe format ({info['model_tensors']} model tensors, "
        f"{info['bytes'] / 2**20:.1f} MiB)"
    )
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from speechmt.api_research import analyze

    result, written = analyze(
        args.model, args.data, args.split, args.out, text_model=args.text_model, limit=args.limit, device=args.device
    )
    top = result["sentence"]["top"]
    raw = top["raw"] or top["procrustes"]["retrieval"]
    print(
        f"{result['n']} utterances; top layers {top['speech']} / {top['text']}: CKA {top['cka']:.3f}, "
        f"sentence P@1 speech->text {raw['cosine']['speech_to_text']:.3f} (cosine), "
        f"{raw['csls']['speech_to_text']:.3f} (CSLS){'' if top['raw'] else ' after Procrustes'}"
    )
    if result["speech"]["words"]["skipped"]:
        print(f"speech words: {result['speech']['words']['note']}")
    print(f"wrote {', '.join(p.name for p in written)} in {args.out}")
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    from speechmt.api_research import benchmark

    run = benchmark(
        args.data,
        args.split,
        args.out,
        models=args.model,
        cascades=[tuple(c) for c in args.cascade],
        peers=args.peer,
        compare=args.compare,
        names=args.name,
        tasks=args.task,
        analyses=args.analysis,
        beam=args.beam,
        mbr=args.mbr,
        mbr_samples=args.mbr_samples,
        max_tokens=args.max_tokens,
        limit=args.limit,
        threads=args.threads,
        device=args.device,
        dtype=args.dtype,
        buckets=args.buckets,
    )
    print(run.markdown, end="")
    print(f"wrote {', '.join(p.name for p in run.written)} in {args.out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from speechmt.api_research import report

    print(report(args.benchmarks, args.out, args.title, args.metrics), end="")
    print(f"wrote {args.out}")
    return 0


def cmd_pretrain_audio(args: argparse.Namespace) -> int:
    from speechmt.api_research import pretrain_audio

    cfg, state = pretrain_audio(
        args.manifests,
        args.out,
        config=args.config,
        overrides=[*args.overrides, *args.set],
        resume=not args.no_resume,
    )
    print(
        f"{cfg.out}: wav2vec2 encoder after {state.step} updates; use it with "
        f"model.encoder.kind=wav2vec2 model.encoder.name_or_path={cfg.out}"
    )
    return 0
