"""CoVoST 2 (on Common Voice 4.0 clips): read the released layout into manifest records.

Obtain the Common Voice 4.0 clips of the source language from https://commonvoice.mozilla.org and the
translations from https://github.com/facebookresearch/covost (covost_v2.<src>_<tgt>.tsv.tar.gz); unpack the
TSV next to the clips so that `root` holds:

    <src>/clips/common_voice_<src>_<id>.mp3
    <src>/validated.tsv               Common Voice: client_id, path, sentence, ...
    <src>/covost_v2.<src>_<tgt>.tsv   path, sentence, translation, client_id, split

Split values train and train_covost both go to `train`; dev and test keep their names.

Several directions (`prepare_covost2(root, out, ("de", "es", "fr"), "en")`: every source with every target, a
language never into itself) go into one folder as `speechmt.data.prepare.prepare_directions` lays it out:
`train` holds every direction, dev_de-en, test_es-en, ... each direction's other splits, `dev` their union; ids
end in @de-en.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Iterator

from speechmt.data.manifest import Record
from speechmt.data.prepare import (
    PrepareConfig,
    PrepareError,
    Skip,
    check_directions,
    direction,
    format_summary,
    prepare_directions,
    prepare_splits,
)

COVOST_SPLITS = {"train": "train", "train_covost": "train", "dev": "dev", "test": "test"}


def read_tsv(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str] | str]]:
    """(line number, row dict) per data row of a CoVoST/Common Voice TSV (no quoting, `\\` escapes).

    A row with the wrong number of fields comes as (line, error text) instead of a dict.
    """
    if not path.is_file():
        raise PrepareError(f"{path}: not found")
    csv.field_size_limit(1 << 24)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        header = next(reader, None)
        if header is None:
            raise PrepareError(f"{path}: empty file")
        missing = [c for c in required if c not in header]
        if missing:
            raise PrepareError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        for row in reader:
            if len(row) != len(header):
                yield (
                    reader.line_num,
                    (f"{path}:{reader.line_num}: malformed row ({len(row)} fields, header has {len(header)})"),
                )
            else:
                yield reader.line_num, dict(zip(header, row))


def _transcripts(path: Path) -> tuple[dict[str, tuple[str, str]], list[Skip]]:
    """Common Voice validated.tsv: clip path -> (sentence, client_id), and a Skip per malformed row."""
    table, bad = {}, []
    for line, row in read_tsv(path, ("path", "sentence", "client_id")):
        if isinstance(row, str):
            bad.append(Skip(f"{path.name}:{line}", "malformed row", row))
        else:
            table[row["path"]] = (row["sentence"], row["client_id"])
    return table, bad


def read_covost_splits(root: str | os.PathLike, src_lang: str, tgt_lang: str) -> dict[str, list[Record | Skip]]:
    """Records (or Skips) per split (train, dev, test), in TSV order.

    Malformed rows of either TSV are counted under `train` (a row that cannot be read has no split).
    """
    base = Path(root) / src_lang
    if not base.is_dir():
        raise PrepareError(f"{root}: no {src_lang}/ folder (is --root the CoVoST 2 / Common Voice folder?)")
    clips = (base / "clips").resolve()
    transcripts, bad_rows = _transcripts(base / "validated.tsv")
    table = base / f"covost_v2.{src_lang}_{tgt_lang}.tsv"
    out: dict[str, list[Record | Skip]] = {"train": list(bad_rows), "dev": [], "test": []}
    for line, row in read_tsv(table, ("path", "translation", "split")):
        if isinstance(row, str):
            out["train"].append(Skip(f"{table.name}:{line}", "malformed row", row))
            continue
        split = COVOST_SPLITS.get(row["split"])
        utt = Path(row["path"]).stem
        if split is None:
            out["train"].append(Skip(utt, "malformed row", f"{table}:{line}: unknown split {row['split']!r}"))
        elif row["path"] not in transcripts:
            out[split].append(Skip(utt, "missing transcript", f"{table}:{line}: {row['path']} not in validated.tsv"))
        elif not row["translation"].strip() or not transcripts[row["path"]][0].strip():
            out[split].append(Skip(utt, "missing text", f"{table}:{line}: empty sentence or translation"))
        else:
            sentence, client = transcripts[row["path"]]
            out[split].append(
                Record(
                    id=utt,
                    audio=str(clips / row["path"]),
                    offset=0.0,
                    duration=0.0,
                    n_frames=0,
                    src_text=sentence.strip(),
                    tgt_text=row["translation"].strip(),
                    speaker=client,
                    src_lang=src_lang,
                    tgt_lang=tgt_lang,
                )
            )
    return out


def covost_directions(src_lang: str | Sequence[str], tgt_lang: str | Sequence[str]) -> list[tuple[str, str]]:
    """(source, target) for every source with every target, a language never into itself, in the given order."""
    srcs = (src_lang,) if isinstance(src_lang, str) else tuple(dict.fromkeys(src_lang))
    tgts = (tgt_lang,) if isinstance(tgt_lang, str) else tuple(dict.fromkeys(tgt_lang))
    pairs = [(s, t) for s in srcs for t in tgts if s != t]
    if not pairs:
        raise PrepareError(
            f"no direction from {' '.join(srcs) or 'no source'} into {' '.join(tgts) or 'no target'} "
            "(a language is never translated into itself)"
        )
    return pairs


def prepare_covost2(
    root: str | os.PathLike,
    out: str | os.PathLike,
    src_lang: str | Sequence[str],
    tgt_lang: str | Sequence[str],
    cfg: PrepareConfig = PrepareConfig(),
) -> dict:
    """Prepares CoVoST 2 <src_lang>-><tgt_lang>: manifests, fbank stores, global CMVN and a summary.

    Several source or target languages: every direction between them into one folder (module docstring)."""
    pairs = covost_directions(src_lang, tgt_lang)
    if len(pairs) == 1:
        ((src, tgt),) = pairs
        check_directions(out, [direction(src, tgt)], cfg)
        splits = read_covost_splits(root, src, tgt)
        summary = prepare_splits(
            splits,
            out,
            cfg,
            {"corpus": "covost2", "src_lang": src, "tgt_lang": tgt, "root": str((Path(root) / src).resolve())},
        )
    else:
        by_direction = {direction(s, t): read_covost_splits(root, s, t) for s, t in pairs}
        summary = prepare_directions(
            by_direction,
            out,
            cfg,
            {
                "corpus": "covost2",
                "src_langs": list(dict.fromkeys(s for s, _ in pairs)),
                "tgt_langs": list(dict.fromkeys(t for _, t in pairs)),
                "roots": {direction(s, t): str((Path(root) / s).resolve()) for s, t in pairs},
            },
        )
    print(format_summary(summary))
    return summary
