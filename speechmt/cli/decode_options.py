"""The options every decoding command shares (translate, evaluate, benchmark): the model or cascade, the
search and its length limits, minimum Bayes risk, the weights' type, simultaneous translation; and their
cross-option checks (each returns the one error line, or None)."""

from __future__ import annotations

import argparse

from speechmt import checks as opt
from speechmt.decoding.mbr import UTILITIES


def add_decode_options(
    p: argparse.ArgumentParser, model_help: str = "checkpoint file", tasks: tuple[str, ...] = ("st", "asr")
) -> None:
    p.add_argument("--model", help=model_help)
    p.add_argument(
        "--cascade",
        nargs=2,
        metavar=("ASR", "MT"),
        help="instead of --model: an ASR checkpoint whose transcripts an MT checkpoint translates",
    )
    p.add_argument(
        "--beam",
        type=opt.integer(1, opt.MAX_BEAM),
        default=5,
        help=f"beam size, 1 (greedy) to {opt.MAX_BEAM} (default: 5)",
    )
    p.add_argument(
        "--max-len-a",
        type=opt.number(0, 10),
        default=0.0,
        help="max output length = a * encoder length + b; a from 0 to 10 (default: 0)",
    )
    p.add_argument(
        "--max-len-b",
        type=opt.integer(0, opt.MAX_OUTPUT_TOKENS),
        default=200,
        help=f"b from 0 to {opt.MAX_OUTPUT_TOKENS} (default: 200)",
    )
    p.add_argument(
        "--len-penalty",
        type=opt.number(-10, 10),
        default=1.0,
        help="hypothesis scores are divided by length ** len-penalty; -10 to 10 (default: 1)",
    )
    add_mbr_option(p)
    p.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    add_dtype_option(p)
    p.add_argument(
        "--task",
        choices=tasks,
        help="what a multi-task --model does: st translates, asr transcribes"
        + (", mt translates the transcripts (text input)" if "mt" in tasks else "")
        + " (default: the model's own task)",
    )
    p.add_argument(
        "--tgt-lang",
        type=opt.language,
        help="the language a model of several writes (fr); default: its first, or what --src-lang leaves",
    )
    p.add_argument("--src-lang", type=opt.language, help="the source language, where a model knows several (en)")


def add_strategy_options(p: argparse.ArgumentParser) -> None:
    """The token decoder and its sampling settings (speechmt.decoding.search.TOKEN_DECODERS)."""
    from speechmt.decoding.search import TOKEN_DECODERS

    p.add_argument(
        "--strategy",
        choices=list(TOKEN_DECODERS),
        help="how each step's token is chosen (default: greedy at --beam 1, else beam search)",
    )
    p.add_argument(
        "--temperature",
        type=opt.number(0, 100),
        default=1.0,
        help="--strategy sample: draw from softmax(log-probs / T); 0 is greedy (default: 1)",
    )
    p.add_argument(
        "--top-k", type=opt.integer(0, 10**6), default=0, help="--strategy sample: among the k most probable (0: all)"
    )
    p.add_argument(
        "--top-p",
        type=opt.number(0, 1, lo_open=True),
        default=1.0,
        help="--strategy sample: among the most probable tokens holding this much of the mass (default: 1)",
    )
    p.add_argument("--seed", type=opt.integer(0, 2**31 - 1), default=0, help="the draws' random seed (default: 0)")


def add_memory_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--memory",
        nargs="+",
        metavar="MANIFEST",
        help="a model that reads retrieved examples before the speech (decoder.examples): the manifests "
        "(.jsonl) whose translation pairs it searches by its own transcript, e.g. the training pairs "
        "DATA/train.jsonl DATA/mt-text/train.jsonl, or memory folders or names (`speechmt data "
        "synth-memory` builds ding-en-de) (default: the memory the model names, decoder.memory)",
    )


def add_mbr_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mbr",
        choices=UTILITIES,
        help="minimum Bayes risk: of the beam's --beam hypotheses, output the one with the highest mean "
        "sentence chrF (or BLEU) against the others (default: the best-scoring hypothesis)",
    )
    p.add_argument(
        "--mbr-samples",
        type=opt.integer(0, opt.MAX_BEAM),
        default=0,
        metavar="N",
        help="with --mbr: draw N epsilon samples (epsilon 0.02) per utterance and choose the beam "
        "hypothesis with the highest mean score against them (default: 0: against the beam itself)",
    )


def check_mbr(args: argparse.Namespace) -> str | None:
    if args.mbr_samples and not args.mbr:
        return "argument --mbr-samples: only with --mbr (chrf or bleu)"
    if args.mbr and args.beam < 2 and not args.mbr_samples:
        return (
            f"argument --mbr: needs a beam of 2 or more hypotheses, or --mbr-samples, to choose from (--beam is "
            f"{args.beam})"
        )
    if args.mbr and getattr(args, "simultaneous", None):
        return "argument --mbr: not with --simultaneous (it writes one hypothesis as the audio arrives)"
    return None


def add_dtype_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        choices=opt.DTYPES,
        default="float32",
        help="the weights' type while decoding: bfloat16 runs the matrix products about twice as fast on "
        "CPUs with AVX512-BF16 or AMX and on GPUs, at a small cost in precision (default: float32)",
    )


def add_simultaneous_options(p: argparse.ArgumentParser, several: bool) -> None:
    p.add_argument(
        "--simultaneous",
        choices=("wait-k", "alignatt"),
        help="translate as the audio arrives (docs/subtitles.md): wait-k writes a token per step after k "
        "steps; alignatt writes while the attention is not on the last k source positions",
    )
    p.add_argument(
        "--k",
        type=opt.integer(1, 1000),
        nargs="+" if several else None,
        help="wait-k: steps read before the first token; alignatt: source positions, encoder frames "
        "(Whisper: 20 ms) or, into a language-model decoder, its source positions (whisper_asr: "
        "transcript tokens) "
        + ("(several: a quality-latency table, one pass) " if several else "")
        + "(default: 3 for wait-k; 30 for alignatt, 2 into a language-model decoder)",
    )
    p.add_argument(
        "--step-ms",
        type=opt.number(25, 10000),
        default=400.0,
        help="the decision step in milliseconds of audio, 25 to 10000 (default: 400)",
    )
    p.add_argument(
        "--tail-beam",
        type=opt.integer(1, opt.MAX_BEAM),
        default=None,
        help="beam size for what is written after the input has ended, behind the committed tokens "
        f"(1 to {opt.MAX_BEAM}; default: 1, greedy like the committed tokens)",
    )


def check_simultaneous(args: argparse.Namespace) -> str | None:
    if args.simultaneous is None:
        if args.k is not None:
            return "argument --k: only with --simultaneous"
        if args.tail_beam is not None:
            return "argument --tail-beam: only with --simultaneous"
        return None
    if args.cascade:
        return "--simultaneous takes a --model, not a --cascade"
    return None
