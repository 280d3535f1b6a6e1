"""BLEU and chrF per synthetic voice of MuST-C-mini evaluations, the seen voices pooled against the held-out one
(`speechmt data synth --hold-out-voice kal` builds tst-kal: tst-COMMON's sentences spoken by a voice never trained on).

    .venv/bin/python benchmarks/bleu_by_voice.py --corpus corpora/mustc-kal \\
        --eval exp/st/eval_tst-COMMON --eval exp/st/eval_tst-kal
    .venv/bin/python benchmarks/bleu_by_voice.py --corpus corpora/mustc-kal \\
        --benchmark ../../research/mustc/reports/data-ablation --benchmark ../../research/mustc/reports/data-ablation/tst-kal \\
        --system "all-data lm-st" [--out by_voice.json] [--markdown by_voice.md]

Sources are `speechmt evaluate` folders (--eval) or one --system of `speechmt research benchmark` folders (--benchmark);
their utterances are pooled. Prints one row per voice, then the seen voices and the held-out voice with the
ratio of their BLEU (speechmt_corpora.voice_scores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speechmt_corpora.common import SynthError
from speechmt_corpora.voice_scores import (
    held_out_voice,
    markdown,
    read_benchmark,
    read_evaluation,
    scores_by_voice,
    talk_voices,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="the MuST-C-mini folder (`speechmt data synth --out`)")
    parser.add_argument("--eval", action="append", default=[], help="a `speechmt evaluate --out` folder; repeat")
    parser.add_argument(
        "--benchmark",
        action="append",
        default=[],
        help="a `speechmt research benchmark --out` folder; repeat (with --system)",
    )
    parser.add_argument("--system", help="the benchmark system to score (its --name)")
    parser.add_argument("--out", help="write the scores as JSON here")
    parser.add_argument("--markdown", help="write the table here")
    args = parser.parse_args(argv)
    if args.benchmark and not args.system:
        parser.error("--benchmark needs --system")
    if not args.eval and not args.benchmark:
        parser.error("give at least one --eval or --benchmark folder")
    try:
        rows = [r for folder in args.eval for r in read_evaluation(Path(folder))]
        rows += [r for folder in args.benchmark for r in read_benchmark(Path(folder), args.system)]
        result = scores_by_voice(rows, talk_voices(Path(args.corpus)), held_out_voice(Path(args.corpus)))
    except SynthError as e:
        print(f"bleu_by_voice: error: {e}", file=sys.stderr)
        return 2
    table = markdown(result, args.system or "")
    print(table, end="")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
