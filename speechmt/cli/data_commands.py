"""The `speechmt` subcommands that build data rather than models: the synthetic corpora and texts (`synth`,
`synth-mt`, `synth-memory`, `synth-mono`, `synth-tts`), `retrieve`, `backtranslate` and `distill`; each a handler
`cmd_<name>(args) -> exit status` that imports its code when called (options: speechmt.cli.parser)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_synth(args: argparse.Namespace) -> int:
    import json

    from speechmt_corpora import build_mini_corpus

    for flag, value in (("--hold-out-voice", args.hold_out_voice), ("--unseen-voice", args.unseen_voice)):
        if value and args.corpus != "mustc":
            print(f"speechmt synth: error: {flag} is for --corpus mustc only", file=sys.stderr)
            return 2
    if args.unseen_voice:
        from speechmt_corpora.mustc import add_unseen_voice

        if args.hold_out_voice:
            print("speechmt synth: error: --unseen-voice adds to a finished build; --hold-out-voice makes a new one",
                  file=sys.stderr)
            return 2
        split, summary = add_unseen_voice(Path(args.out), args.unseen_voice, args.seed, args.jobs)
        print(json.dumps({"split": split, **summary["splits"][split], "voice": summary["unseen_voices"][split]},
                         indent=1, ensure_ascii=False))
        return 0
    summary = build_mini_corpus(args.corpus, args.size, Path(args.out), seed=args.seed, jobs=args.jobs,
                                hold_out_voice=args.hold_out_voice)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0


def cmd_synth_mt(args: argparse.Namespace) -> int:
    import json

    from speechmt_corpora.mt_text import build_mt_text, default_out

    out = Path(args.out) if args.out else default_out(args.corpus, Path(args.root), args.lang)
    sources = None if not args.sources else "all" if "all" in args.sources else tuple(args.sources)
    summary = build_mt_text(args.corpus, Path(args.root), out, args.lang, sources)
    shown = {k: v for k, v in summary.items() if k != "sources"}
    shown["sources"] = {n: {k: v for k, v in e.items() if k != "catalog_packages"}
                        for n, e in summary["sources"].items()}  # each catalog's package: in the summary file
    print(json.dumps({"out": str(out), **shown}, indent=1, ensure_ascii=False))
    return 0


def cmd_synth_memory(args: argparse.Namespace) -> int:
    import json

    from speechmt.hub import speechmt_home
    from speechmt_corpora.memory import NAME, build_memory
    from speechmt_corpora.mt_sources import SourcePaths

    paths = SourcePaths(ding=Path(args.ding)) if args.ding else SourcePaths()
    summary = build_memory(Path(args.out) if args.out else speechmt_home() / NAME, args.seed, paths)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0


def cmd_synth_mono(args: argparse.Namespace) -> int:
    import json

    from speechmt_corpora.mono_text import MonoPaths, build_mono_text
    from speechmt_corpora.mt_text import default_out

    out = Path(args.out) if args.out else default_out(args.corpus, Path(args.root), args.lang, "mono-text")
    paths = MonoPaths(fortunes_de=Path(args.fortunes)) if args.fortunes else MonoPaths()
    summary = build_mono_text(args.corpus, Path(args.root), out, args.lang, paths)
    shown = {**summary, "sources": {n: {k: v for k, v in e.items() if k != "per_file"}
                                    for n, e in summary["sources"].items()}}  # per file: in the summary file
    print(json.dumps(shown, indent=1, ensure_ascii=False))
    return 0


def cmd_synth_tts(args: argparse.Namespace) -> int:
    import json

    from speechmt_corpora.mt_text import default_out
    from speechmt_corpora.voiced_text import voice_text_pairs

    text = Path(args.text) if args.text else default_out("mustc", Path(args.root)) / "train.jsonl"
    summary = voice_text_pairs(Path(args.root), text, args.split, args.limit, args.seed, args.jobs, args.min_words,
                               args.sentences)
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}, indent=1, ensure_ascii=False))
    return 0


def cmd_retrieve(args: argparse.Namespace) -> int:
    import json

    from speechmt.data.retrieval import Distractors, retrieve_splits

    distract = Distractors(tuple(args.distract), 0.3 if args.distract_rate is None else args.distract_rate,
                           args.seed, args.distract_skip) if args.distract else None
    summary = retrieve_splits(args.data, args.splits, args.memory, args.k, distract)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0


def cmd_backtranslate(args: argparse.Namespace) -> int:
    """`speechmt backtranslate` (mode back) and `speechmt distill` (mode distill)."""
    import json

    from speechmt.decoding.backtranslate import (BacktranslateConfig, generate_pairs, load_generator,
                                             round_trip_generator)
    from speechmt.decoding.text_generators import GeneratorError

    cfg = BacktranslateConfig(args.input, args.out, args.src_lang, args.tgt_lang, args.mode, args.field,
                              args.batch_size, args.limit, args.min_score)
    try:
        gen, name = load_generator(args.model, args.lm, cfg.input_lang, cfg.output_lang, args.device, args.beam,
                                   args.max_new_tokens, args.task)
        back, back_name = round_trip_generator(args.round_trip, cfg, args.lm, args.device, args.beam,
                                               args.max_new_tokens)
    except GeneratorError as e:
        print(f"speechmt: error: {e}", file=sys.stderr)
        return 2
    summary = generate_pairs(cfg, gen, back, {"generator": name, "round_trip_generator": back_name})
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0
