"""The `speechmt` command: argparse subcommands, each a small function."""

from __future__ import annotations

import argparse
import sys
import warnings
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


def cmd_synth(args: argparse.Namespace) -> int:
    import json

    from speechmt.data.synth import build_mini_corpus

    summary = build_mini_corpus(args.corpus, args.size, Path(args.out), seed=args.seed, jobs=args.jobs)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
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


def _add_prepare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder for manifests, features and the summary")
    p.add_argument("--jobs", type=int, default=2, help="feature extraction processes")
    p.add_argument("--min-frames", type=int, default=5, help="training utterances shorter than this are skipped")
    p.add_argument("--max-frames", type=int, default=3000, help="training utterances longer than this are skipped")
    p.add_argument("--dtype", default="float16", choices=("float16", "float32"), help="feature store precision")
    p.add_argument("--overwrite", action="store_true", help="redo splits that are already prepared")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speechmt", description="End-to-end speech-to-text translation.")
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
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--jobs", type=int, default=2)
    synth.set_defaults(func=cmd_synth)

    vocab = sub.add_parser("vocab", help="train a SentencePiece vocabulary from manifests")
    vocab.add_argument("manifests", nargs="+", help="manifest files (.jsonl)")
    vocab.add_argument("--field", default="tgt", choices=("src", "tgt", "joint"))
    vocab.add_argument("--vocab-size", type=int, default=8000)
    vocab.add_argument("--model-type", default="unigram", choices=("unigram", "bpe"))
    vocab.add_argument("--lang-tags", nargs="*", default=[], help="e.g. <en> <de> <audio>")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.set_defaults(func=cmd_vocab)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from speechmt.data.manifest import ManifestError
    from speechmt.data.prepare import PrepareError

    errors: list[type[BaseException]] = [AudioError, ManifestError, PrepareError, FileNotFoundError]
    try:
        from speechmt.data.synth import SynthError

        errors.append(SynthError)
    except ImportError:
        pass
    return tuple(errors)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"speechmt: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    args = build_parser().parse_args(argv)
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
