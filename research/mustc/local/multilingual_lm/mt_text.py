"""Text pairs for a multilingual LM decoder (issue 64 part 6): English into de, fr, es, it from the pools the
MuST-C-mini builder draws on (Ding for de, gettext catalogs for the others), every pair outside the `full` size's
dev and test regions (so outside every size's dev/test and tst-COMMON), as one prepared MT folder; with
`--reverse`, each language into English as well (the same pairs the other way).

    python mt_text.py OUT [--langs de fr es it] [--dev 100] [--cap 12000] [--reverse]

OUT/train.jsonl holds all directions (src_lang/tgt_lang on every record); OUT/dev_<src>-<tgt>.jsonl the first
`dev` pairs of each direction's `full` dev region; OUT/dev.jsonl all of them.
"""

import argparse
import random
from pathlib import Path

from speechmt.data.manifest import Record, write_manifest
from speechmt_corpora.common import split_pool
from speechmt_corpora.languages import gettext_pool, stream
from speechmt_corpora.mustc import DING_STREAM
from speechmt_corpora.text import ding_pairs


def pool(lang: str):
    if lang == "de":
        return ding_pairs(), DING_STREAM
    return gettext_pool(lang)[0], stream("mustc", lang)


def record(i: int, lang: str, src: str, tgt: str, reverse: bool = False) -> Record:
    if reverse:
        return Record(f"mt{i}@{lang}-en", "", 0.0, 0.0, 0, tgt, src, "", lang, "en")
    return Record(f"mt{i}@en-{lang}", "", 0.0, 0.0, 0, src, tgt, "", "en", lang)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--langs", nargs="+", default=["de", "fr", "es", "it"])
    ap.add_argument("--dev", type=int, default=100)
    ap.add_argument("--cap", type=int, default=12000, help="most training pairs per direction (seeded draw)")
    ap.add_argument("--reverse", action="store_true", help="each language into English too")
    a = ap.parse_args()
    train, devs = [], []
    for lang in a.langs:
        pairs, s = pool(lang)
        text_only, splits = split_pool(pairs, "full", 0, s)
        pool_train = list(text_only) + list(splits["train"])
        random.Random(0).shuffle(pool_train)
        for reverse in (False, True) if a.reverse else (False,):
            name = f"{lang}-en" if reverse else f"en-{lang}"
            dev = [record(i, lang, p.src, p.tgt, reverse) for i, p in enumerate(splits["dev"][: a.dev])]
            write_manifest(a.out / f"dev_{name}.jsonl", dev)
            rows = [record(i, lang, p.src, p.tgt, reverse) for i, p in enumerate(pool_train[: a.cap])]
            print(f"{name}: {len(rows)} training pairs (of {len(pool_train)}), {len(dev)} dev")
            train += rows
            devs += dev
    random.Random(1).shuffle(train)
    write_manifest(a.out / "train.jsonl", train)
    write_manifest(a.out / "dev.jsonl", devs)


if __name__ == "__main__":
    main()
