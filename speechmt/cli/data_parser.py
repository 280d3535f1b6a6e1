"""`speechmt data ...`: the subcommands that build data rather than models (handlers: speechmt.cli.data_commands).
Corpus preparation, vocabularies and retrieved examples; MT pairs from monolingual text; the synthetic mini corpora
and texts built from Debian voices and packages."""

from __future__ import annotations

import argparse
import re

from speechmt import checks as opt
from speechmt.cli import data_commands

CORPORA = ("mustc", "covost2")


def add_data_group(sub) -> None:
    """The `data` command and its subcommands."""
    data = sub.add_parser(
        "data",
        help="build data: corpora, vocabularies, retrieved examples, MT pairs, mini corpora",
        description="Builds data rather than models: `speechmt data COMMAND --help` for each.",
    )
    commands = data.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    for add in (_prepare, _vocab, _retrieve, _backtranslate, _synth, _synth_mt, _synth_memory, _synth_mono, _synth_tts):
        add(commands)


def _add_prepare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder for manifests, features and the summary")
    p.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2, help="feature extraction processes")
    p.add_argument(
        "--min-frames",
        type=opt.integer(0, opt.MAX_TOKENS),
        default=5,
        help="training utterances shorter than this are skipped",
    )
    p.add_argument(
        "--max-frames",
        type=opt.integer(1, opt.MAX_TOKENS),
        default=3000,
        help="training utterances longer than this are skipped",
    )
    p.add_argument("--dtype", default="float16", choices=("float16", "float32"), help="feature store precision")
    p.add_argument("--overwrite", action="store_true", help="redo splits that are already prepared")
    p.set_defaults(check=_check_prepare)


def _check_prepare(args: argparse.Namespace) -> str | None:
    if args.min_frames > args.max_frames:
        return (
            f"argument --min-frames: invalid value '{args.min_frames}': expected at most --max-frames "
            f"({args.max_frames})"
        )
    return None


def _prepare(sub) -> None:
    prep = sub.add_parser("prepare", help="prepare a corpus: manifests, features, summary")
    corpora = prep.add_subparsers(dest="corpus", metavar="CORPUS", required=True)
    mustc = corpora.add_parser("mustc", help="MuST-C (released layout)")
    mustc.add_argument("--root", required=True, help="folder holding en-<tgt>/data/ (one folder per pair)")
    _add_langs(
        mustc,
        "tgt",
        "the target language (de)",
        'several targets into one folder ("de es fr"): train '
        "holds every pair, other splits are kept apart as dev_en-de, tst-COMMON_en-fr, ... (docs/data.md)",
    )
    mustc.add_argument("--splits", nargs="*", help="default: those present of train dev tst-COMMON tst-HE")
    _add_prepare_options(mustc)
    mustc.set_defaults(func=data_commands.cmd_prepare_mustc)
    covost = corpora.add_parser("covost2", help="CoVoST 2 (released layout)")
    covost.add_argument("--root", required=True, help="folder holding <src>/clips and the TSVs")
    _add_langs(
        covost,
        "src",
        "the source language (de)",
        'several sources ("de es fr"): every source into every target, one folder, as --tgt-langs (docs/data.md)',
    )
    _add_langs(covost, "tgt", "the target language (en)", 'several targets ("de ca" from --src-lang en)')
    _add_prepare_options(covost)
    covost.set_defaults(func=data_commands.cmd_prepare_covost2)


LANG_CODE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,4})?")


def language_list(text: str) -> tuple[str, ...]:
    """`--tgt-langs` values: language codes separated by spaces or commas ("de es fr", "zh-CN,sv-SE")."""
    langs = tuple(t for t in re.split(r"[\s,]+", text) if t)
    bad = [t for t in langs if not LANG_CODE.fullmatch(t)]
    if not langs or bad:
        raise argparse.ArgumentTypeError(f"invalid language list {text!r}: expected codes such as de, es, zh-CN")
    return langs


def _add_langs(p: argparse.ArgumentParser, side: str, one: str, several: str) -> None:
    """--<side>-lang or --<side>-langs, exactly one of them."""
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument(f"--{side}-lang", help=one)
    group.add_argument(f"--{side}-langs", nargs="+", type=language_list, metavar="LANGS", help=several)


def _vocab(sub) -> None:
    vocab = sub.add_parser("vocab", help="train a SentencePiece vocabulary from manifests")
    vocab.add_argument("manifests", nargs="+", help="manifest files (.jsonl)")
    vocab.add_argument("--field", default="tgt", choices=("src", "tgt", "joint"))
    vocab.add_argument("--vocab-size", type=opt.integer(1, 10**6), default=8000)
    vocab.add_argument("--model-type", default="unigram", choices=("unigram", "bpe", "char"))
    vocab.add_argument("--lang-tags", nargs="*", default=[], help="e.g. <en> <de> <audio>")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.set_defaults(func=data_commands.cmd_vocab)


def _retrieve(sub) -> None:
    ret = sub.add_parser(
        "retrieve",
        help="for each utterance of prepared splits, the most similar translation pairs "
        "(BM25 over source words) as few-shot examples for an LM decoder (decoder.examples)",
    )
    ret.add_argument("--data", required=True, help="the prepared data folder")
    ret.add_argument(
        "--splits",
        nargs="+",
        required=True,
        metavar="SPLIT",
        help="splits to write examples for, e.g. train dev tst-COMMON mt-text/train (a stream's split)",
    )
    ret.add_argument(
        "--memory",
        nargs="+",
        default=["train"],
        metavar="SPLIT",
        help="the splits whose pairs are searched (default: train); a split both searched and given "
        "examples never gets an utterance's own pair",
    )
    ret.add_argument("--k", type=opt.integer(1, 16), default=2, help="examples kept per utterance (default: 2)")
    ret.add_argument(
        "--distract",
        nargs="+",
        metavar="MEMORY",
        help="examples beside the point for training: a drawn share of the utterances (--distract-rate) "
        "get theirs from these manifests, memory folders or names (another domain's pairs) instead, so "
        "that a model learns to ignore misleading examples",
    )
    ret.add_argument(
        "--distract-rate",
        type=opt.number(0, 1, lo_open=True),
        default=None,
        metavar="P",
        help="the share of utterances drawn for --distract (default: 0.3)",
    )
    ret.add_argument(
        "--distract-skip",
        type=opt.integer(0),
        default=0,
        metavar="N",
        help="the drawn utterances get the best examples after the first N of the --distract memory, "
        "which may then be the training pairs themselves: pairs sharing fewer words, in the same "
        "register (default: 0)",
    )
    ret.add_argument("--seed", type=opt.integer(0), default=0, help="the draw of --distract (default: 0)")
    ret.set_defaults(func=data_commands.cmd_retrieve, check=_check_retrieve)


def _check_retrieve(args: argparse.Namespace) -> str | None:
    for name in ("distract_rate", "distract_skip"):
        if getattr(args, name) not in (None, 0) and not args.distract:
            return f"--{name.replace('_', '-')} needs --distract"
    return None


def _backtranslate(sub) -> None:
    """`backtranslate` and `distill`: one handler, two modes."""
    for name, mode, what in (
        ("backtranslate", "back", "target-side text into the source language (pairs: machine source -> human target)"),
        (
            "distill",
            "distill",
            "source-side text into the target language with a teacher (pairs: human source -> machine target)",
        ),
    ):
        p = sub.add_parser(name, help=f"a prepared MT folder from monolingual text: {what}")
        p.add_argument("--input", required=True, help="one text per line, or a manifest (.jsonl) and its --field")
        p.add_argument(
            "--field",
            default="tgt_text" if mode == "back" else "src_text",
            choices=("src_text", "tgt_text"),
            help="a manifest input's text (default: %(default)s)",
        )
        p.add_argument(
            "--out", required=True, help="the MT folder: train.jsonl, generated.jsonl, the summary; a rerun resumes it"
        )
        p.add_argument("--src-lang", required=True, help="the MT data's source language (en, de, es)")
        p.add_argument("--tgt-lang", required=True, help="the MT data's target language")
        p.add_argument("--model", help="a speechmt MT checkpoint translating the input")
        p.add_argument("--task", choices=("mt",), help="a multi-task --model's text translation")
        p.add_argument(
            "--lm",
            help="instead of --model: a causal LM (folder, or a name under $SPEECHMT_HOME such "
            "as gemma-3-270m) with a 3-shot prompt",
        )
        p.add_argument(
            "--round-trip",
            nargs="?",
            const="same",
            metavar="MODEL",
            help="score each pair by the chrF of its output translated back against the input: the "
            "--lm prompted the other way (no value), or a reverse checkpoint or LM folder",
        )
        p.add_argument(
            "--min-score",
            type=opt.number(0, 100),
            default=0.0,
            help="keep pairs whose round-trip chrF is at least this, 0 to 100 (default: 0)",
        )
        p.add_argument("--batch-size", type=opt.integer(1, opt.MAX_BATCH), default=16)
        p.add_argument("--beam", type=opt.integer(1, opt.MAX_BEAM), default=1, help="--model's beam (default: 1)")
        p.add_argument("--max-new-tokens", type=opt.integer(1, opt.MAX_OUTPUT_TOKENS), default=128)
        p.add_argument("--limit", type=opt.integer(0, 10**9), default=0, help="translate the first N texts (0: all)")
        p.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
        p.set_defaults(func=data_commands.cmd_backtranslate, mode=mode)


def _synth(sub) -> None:
    synth = sub.add_parser(
        "synth",
        help="build a synthetic mini corpus in a released layout (or `real`: real "
        "recorded speech beyond English from Debian packages)",
    )
    synth.add_argument(
        "corpus",
        choices=CORPORA + ("real",),
        help="the layout: mustc or covost2; real: Asterisk's "
        "recorded French, Spanish and Italian prompts with English references written for speechmt "
        "(CoVoST 2 layout, split test; docs/data.md)",
    )
    synth.add_argument("--size", default="small", choices=("tiny", "small", "full"))
    synth.add_argument("--out", required=True)
    synth.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0)
    synth.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2)
    synth.add_argument(
        "--hold-out-voice",
        metavar="VOICE",
        help="mustc: this voice (e.g. kal or flite:kal) speaks "
        "no train, dev or tst-COMMON talk, only the test split tst-VOICE (tst-COMMON's sentences again)",
    )
    synth.add_argument(
        "--unseen-voice",
        metavar="VOICE",
        help="mustc: add to the finished build at --out the test "
        "split tst-VOICE, tst-COMMON's sentences spoken by a voice none of its talks uses (a voice "
        "never trained on, measured without rebuilding)",
    )
    synth.add_argument(
        "--tgt-langs",
        nargs="+",
        type=language_list,
        metavar="LANGS",
        help="mustc: the targets, one folder en-X each (default de; any of de es fr it nl pt ro ru: "
        "other than de from the installed gettext catalogs)",
    )
    synth.add_argument(
        "--src-langs",
        nargs="+",
        type=language_list,
        metavar="LANGS",
        help="covost2: the sources into English (default de es; any of de es fr it pt nl ru ca: other "
        "than de and es from the installed gettext catalogs); real: the prompts' languages (default "
        "fr es it)",
    )
    synth.add_argument(
        "--tst-real",
        metavar="ROOT",
        help="real: also write ROOT/en-fr, en-es, en-it/data/tst-REAL "
        "(French, Spanish, Italian references) from ROOT/en-de/data/tst-REAL, as "
        "benchmarks/real_speech/build.sh ROOT writes it",
    )
    synth.set_defaults(func=data_commands.cmd_synth, check=_check_synth)


def _check_synth(args: argparse.Namespace) -> str | None:
    for flag, value in (("--hold-out-voice", args.hold_out_voice), ("--unseen-voice", args.unseen_voice)):
        if value and args.corpus != "mustc":
            return f"argument {flag}: for corpus mustc only, not {args.corpus}"
    if args.unseen_voice and args.hold_out_voice:
        return "argument --unseen-voice: adds to a finished build; --hold-out-voice makes a new one"
    for flag, value, corpora in (
        ("--tgt-langs", args.tgt_langs, ("mustc",)),
        ("--src-langs", args.src_langs, ("covost2", "real")),
        ("--tst-real", args.tst_real, ("real",)),
    ):
        if value and args.corpus not in corpora:
            return f"argument {flag}: for corpus {' or '.join(corpora)} only, not {args.corpus}"
    if args.corpus == "real" and args.size != "small":
        return "argument --size: corpus real has one size"
    return None


def _synth_mt(sub) -> None:
    mt = sub.add_parser("synth-mt", help="extra text-only MT pairs for a mini corpus, none of its sentences")
    mt.add_argument("corpus", choices=CORPORA, help="the mini corpus' layout: mustc or covost2")
    mt.add_argument("--root", required=True, help="the corpus folder (as `data synth --out` made it)")
    mt.add_argument("--lang", default="de", choices=("de", "es"), help="covost2: the source language")
    mt.add_argument("--out", help="default: beside the corpus, ROOT/<pair>/mt-text (mustc) or ROOT/<lang>/mt-text")
    mt.add_argument(
        "--sources",
        nargs="+",
        metavar="SOURCE",
        choices=("all", "ding", "gettext", "debian-reference", "gnome-help", "sword"),
        help="parallel text to gather: all, or some of ding (de), gettext (de, es), debian-reference (de), "
        "gnome-help (de, es), sword (es) (default: ding for de, sword for es)",
    )
    mt.set_defaults(func=data_commands.cmd_synth_mt)


def _synth_memory(sub) -> None:
    memory = sub.add_parser(
        "synth-memory",
        help="the translation memory a model with retrieved examples reads "
        "(every filtered Ding pair, none of MuST-C-mini's dev or test sentences)",
    )
    memory.add_argument(
        "--out",
        help="the folder to write (memory.jsonl, summary.json, NOTICE); default: "
        "$SPEECHMT_HOME/ding-en-de, a memory that models and --memory name ding-en-de",
    )
    memory.add_argument(
        "--seed",
        type=opt.integer(0, 2**32 - 1),
        default=0,
        help="the MuST-C-mini seed whose dev and test sentences are held out (default 0)",
    )
    memory.add_argument(
        "--ding",
        metavar="FILE",
        help="the Ding dictionary (default: /usr/share/trans/de-en, from the Debian package trans-de-en)",
    )
    memory.set_defaults(func=data_commands.cmd_synth_memory)


def _synth_mono(sub) -> None:
    mono = sub.add_parser(
        "synth-mono",
        help="monolingual German text for backtranslate (mustc) or distill (covost2), none of a mini corpus' sentences",
    )
    mono.add_argument("corpus", choices=CORPORA, help="the mini corpus' layout: mustc or covost2")
    mono.add_argument("--root", required=True, help="the corpus folder (as `data synth --out` made it)")
    mono.add_argument(
        "--lang",
        default="de",
        choices=("de",),
        help="the text's language: mustc's target side, covost2's de-en source side",
    )
    mono.add_argument(
        "--out",
        help="default: beside the corpus, ROOT/en-de/mono-text (mustc) or ROOT/de/mono-text; "
        "writes mono.<lang>.txt (one sentence a line) and mono_text_summary.json",
    )
    mono.add_argument("--fortunes", metavar="DIR", help="the fortunes-de files (default: /usr/share/games/fortunes/de)")
    mono.set_defaults(func=data_commands.cmd_synth_mono)


def _synth_tts(sub) -> None:
    tts = sub.add_parser(
        "synth-tts", help="voice the English side of MT pairs into a new MuST-C split (MT data as synthetic ST data)"
    )
    tts.add_argument("--root", required=True, help="the MuST-C layout corpus (holds en-de/data/)")
    tts.add_argument(
        "--text", help="a manifest of text pairs (default: ROOT/en-de/mt-text/train.jsonl, what data synth-mt writes)"
    )
    tts.add_argument("--split", default="train-tts", help="the new split's name (a train* name trains)")
    tts.add_argument(
        "--limit",
        type=opt.integer(0, 10**9),
        default=0,
        help="voice a seeded sample of this many pairs (default 0: all)",
    )
    tts.add_argument(
        "--min-words", type=opt.integer(0, 1000), default=0, help="voice pairs of at least this many source words only"
    )
    tts.add_argument(
        "--sentences",
        action="store_true",
        help="voice whole sentences only (both sides end in . ! or ?), not dictionary phrases",
    )
    tts.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0)
    tts.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2)
    tts.set_defaults(func=data_commands.cmd_synth_tts)
