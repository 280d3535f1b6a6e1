"""`speechmt data ...`'s handlers, each `cmd_<name>(args) -> exit status`: the options parsed
(speechmt.cli.data_parser), the Python API called (speechmt.api_data), its summary printed."""

from __future__ import annotations

import argparse
import json


def _print_json(summary: dict) -> None:
    print(json.dumps(summary, indent=1, ensure_ascii=False))


def _prepare_options(args: argparse.Namespace) -> dict:
    return dict(
        jobs=args.jobs,
        min_frames=args.min_frames,
        max_frames=args.max_frames,
        dtype=args.dtype,
        overwrite=args.overwrite,
    )


def _langs(args: argparse.Namespace, side: str) -> str | list[str]:
    """--<side>-lang's value, or --<side>-langs' codes (each value may hold several)."""
    several = getattr(args, f"{side}_langs")
    return [lang for value in several for lang in value] if several else getattr(args, f"{side}_lang")


def cmd_prepare_mustc(args: argparse.Namespace) -> int:
    from speechmt.api_data import prepare_mustc

    prepare_mustc(args.root, args.out, _langs(args, "tgt"), splits=args.splits, **_prepare_options(args))
    return 0


def cmd_prepare_covost2(args: argparse.Namespace) -> int:
    from speechmt.api_data import prepare_covost2

    prepare_covost2(args.root, args.out, _langs(args, "src"), _langs(args, "tgt"), **_prepare_options(args))
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    from speechmt.api_data import VOCAB_FIELDS, train_vocab

    tok = train_vocab(
        args.manifests,
        args.out,
        field=args.field,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        lang_tags=args.lang_tags,
    )
    print(f"{args.out}: {len(tok)} pieces ({args.model_type}, {'+'.join(VOCAB_FIELDS[args.field])})")
    return 0


def cmd_retrieve(args: argparse.Namespace) -> int:
    from speechmt.api_data import retrieve

    _print_json(
        retrieve(
            args.data,
            args.splits,
            memory=args.memory,
            k=args.k,
            distract=args.distract,
            distract_rate=args.distract_rate,
            distract_skip=args.distract_skip,
            seed=args.seed,
        )
    )
    return 0


def cmd_backtranslate(args: argparse.Namespace) -> int:
    """`speechmt data backtranslate` (mode back) and `speechmt data distill` (mode distill)."""
    from speechmt.api_data import backtranslate

    _print_json(
        backtranslate(
            args.input,
            args.out,
            args.src_lang,
            args.tgt_lang,
            model=args.model,
            lm=args.lm,
            task=args.task,
            field=args.field,
            round_trip=args.round_trip,
            min_score=args.min_score,
            batch_size=args.batch_size,
            beam=args.beam,
            max_new_tokens=args.max_new_tokens,
            limit=args.limit,
            device=args.device,
            mode=args.mode,
        )
    )
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from speechmt.api_data import add_unseen_voice, synth

    if args.unseen_voice:
        _print_json(add_unseen_voice(args.out, args.unseen_voice, seed=args.seed, jobs=args.jobs))
    else:
        several = args.tgt_langs or args.src_langs
        langs = [lang for value in several for lang in value] if several else None
        _print_json(
            synth(
                args.corpus,
                args.out,
                size=args.size,
                seed=args.seed,
                jobs=args.jobs,
                hold_out_voice=args.hold_out_voice,
                langs=langs,
                tst_real=args.tst_real,
            )
        )
    return 0


def cmd_synth_mt(args: argparse.Namespace) -> int:
    from speechmt.api_data import synth_mt

    summary = synth_mt(args.corpus, args.root, lang=args.lang, out=args.out, sources=args.sources)
    shown = {k: v for k, v in summary.items() if k != "sources"}
    shown["sources"] = {
        n: {k: v for k, v in e.items() if k != "catalog_packages"} for n, e in summary["sources"].items()
    }  # each catalog's package: in the summary file
    _print_json(shown)
    return 0


def cmd_synth_memory(args: argparse.Namespace) -> int:
    from speechmt.api_data import synth_memory

    _print_json(synth_memory(args.out, seed=args.seed, ding=args.ding))
    return 0


def cmd_synth_mono(args: argparse.Namespace) -> int:
    from speechmt.api_data import synth_mono

    summary = synth_mono(args.corpus, args.root, lang=args.lang, out=args.out, fortunes=args.fortunes)
    _print_json(
        {
            **summary,
            "sources": {n: {k: v for k, v in e.items() if k != "per_file"} for n, e in summary["sources"].items()},
        }
    )  # per file: in the summary file
    return 0


def cmd_synth_tts(args: argparse.Namespace) -> int:
    from speechmt.api_data import synth_tts

    summary = synth_tts(
        args.root,
        text=args.text,
        split=args.split,
        limit=args.limit,
        min_words=args.min_words,
        sentences=args.sentences,
        seed=args.seed,
        jobs=args.jobs,
    )
    _print_json({k: v for k, v in summary.items() if k != "failures"})
    return 0
