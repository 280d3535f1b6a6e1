"""Translates audio files with speechmt's Python API (`help(speechmt.translate)` lists its options).

Run from the repository root after `make setup`:

    .venv/bin/python examples/translate_files.py examples/*.flac
    .venv/bin/python examples/translate_files.py talk.wav --model exp/st/checkpoint_avg.safetensors --beam 8 --nbest 3

Without --model it uses the bundled English -> German model (speechmt/pretrained/MODEL_CARD.md). Prints
file<TAB>translation per file (and the other hypotheses with --nbest); an unreadable file is named on stderr.
"""

import argparse
import sys

import speechmt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", nargs="+", help="audio files")
    parser.add_argument("--model", help="checkpoint file (default: the bundled model)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--nbest", type=int, default=1)
    args = parser.parse_args()
    try:
        model = speechmt.load_model(args.model)  # None: the bundled model
        results = speechmt.translate(model, args.audio, beam=args.beam, nbest=args.nbest, errors="keep")
    except (ValueError, OSError) as e:  # a bad option (speechmt.OptionError) or checkpoint: one line naming it
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in results:
        if r.error:
            print(f"error: {r.error}", file=sys.stderr)
            continue
        print(f"{r.source}\t{r.text}")
        for rank, alternative in enumerate(r.nbest[1:], start=2):
            print(f"  {rank}. {alternative}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
