"""A prepared split whose source texts are an ASR report's transcripts: the text an MT model reads in a cascade.

    python ../../research/mustc/local/transcript_split.py   # from recipes/mustc --report REPORT_DIR --data DATA --split tst-COMMON --out DATA2 --name tst-COMMON-wasr

REPORT_DIR is `speechmt evaluate --task asr --out REPORT_DIR` of DATA's split (its results.tsv: id, ref, hyp, src);
the new split DATA2/NAME.jsonl holds every record of the split with src_text replaced by its transcript, so that
`speechmt data retrieve` finds examples by what was heard and `speechmt evaluate --task mt` translates it (a cascade
through the MT path, retrieved examples included). Every utterance must have a transcript.
"""

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

from speechmt.data.manifest import read_split, write_manifest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--out", required=True, help="the data folder to write NAME.jsonl into")
    p.add_argument("--name", required=True)
    args = p.parse_args()
    with open(Path(args.report) / "results.tsv", encoding="utf-8", newline="") as f:
        heard = {row["id"]: row["hyp"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}
    records = read_split(args.data, args.split)
    missing = [r.id for r in records if r.id not in heard]
    if missing:
        print(f"transcript_split: error: {args.report}/results.tsv lacks {len(missing)} of {len(records)} utterances "
              f"of {args.split} ({', '.join(missing[:3])})", file=sys.stderr)
        return 2
    n = write_manifest(Path(args.out) / f"{args.name}.jsonl", [replace(r, src_text=heard[r.id]) for r in records])
    print(f"{n} utterances -> {Path(args.out) / (args.name + '.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
