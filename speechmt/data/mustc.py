"""MuST-C (v1.0, v2): read the released layout into manifest records.

Obtain the corpus from https://ict.fbk.eu/must-c/ (one archive per pair, e.g. MUSTC_v1.0_en-de.tar.gz)
and unpack it; `root` is the folder that holds `en-de/` (or `en-de/` itself):

    en-de/data/{train,dev,tst-COMMON,tst-HE}/wav/ted_767.wav
    en-de/data/<split>/txt/<split>.yaml    - {duration: 3.5, offset: 16.08, ..., speaker_id: spk.767, wav: ted_767.wav}
    en-de/data/<split>/txt/<split>.en      line i belongs to yaml item i
    en-de/data/<split>/txt/<split>.<tgt>

Segments are grouped by talk, sorted by offset, and named `{talk}_{i}` (i from 0 in offset order).

Several targets (`prepare_mustc(root, out, ("de", "es", "fr"))`, each pair's folder under `root`) go into one
folder as `speechmt.data.prepare.prepare_directions` lays it out: `train` holds every pair, dev_en-de,
tst-COMMON_en-fr, ... each pair's other splits, `dev` their union; ids end in @en-de.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Iterator

import yaml

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

MUSTC_SPLITS = ("train", "dev", "tst-COMMON", "tst-HE")
_LOADER = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
_REQUIRED = ("duration", "offset", "wav")


def _pair_dir(root: Path, tgt_lang: str) -> Path:
    for cand in (root / f"en-{tgt_lang}", root):
        if (cand / "data").is_dir() and cand.name == f"en-{tgt_lang}":
            return cand
    raise PrepareError(f"{root}: no en-{tgt_lang}/data folder (is --root the unpacked MuST-C folder?)")


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise PrepareError(f"{path}: not found")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def _parse_yaml_items(path: Path) -> list[dict | str]:
    """One entry per yaml list item, in file order: a dict of strings, or the error text for a bad item."""
    items: list[dict | str] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.startswith("-"):
                raise PrepareError(f"{path}:{lineno}: expected one '- {{...}}' segment per line")
            items.append(_parse_item(line, f"{path}:{lineno}"))
    return items


def _parse_item(line: str, where: str) -> dict | str:
    try:
        parsed = yaml.load(line, Loader=_LOADER)
        item = parsed[0] if isinstance(parsed, list) and len(parsed) == 1 else None
        if not isinstance(item, dict):
            return f"{where}: malformed segment (not a mapping)"
        missing = [k for k in _REQUIRED if k not in item]
        if missing:
            return f"{where}: malformed segment (missing {', '.join(missing)})"
        offset, duration = float(item["offset"]), float(item["duration"])
    except (yaml.YAMLError, ValueError, TypeError) as e:
        return f"{where}: malformed segment ({str(e).splitlines()[0]})"
    if offset < 0 or duration <= 0:
        return f"{where}: malformed segment (offset {offset}, duration {duration})"
    return item


def read_mustc_split(root: str | os.PathLike, tgt_lang: str, split: str) -> Iterator[Record | Skip]:
    """Records of one split in talk order, segments by offset; Skips for malformed items or missing text."""
    pair = _pair_dir(Path(root), tgt_lang)
    txt, wav_dir = pair / "data" / split / "txt", (pair / "data" / split / "wav").resolve()
    items = _parse_yaml_items(txt / f"{split}.yaml")
    src, tgt = _read_lines(txt / f"{split}.en"), _read_lines(txt / f"{split}.{tgt_lang}")
    for path, lines in ((txt / f"{split}.en", src), (txt / f"{split}.{tgt_lang}", tgt)):
        if len(lines) != len(items):
            raise PrepareError(
                f"{path}: {len(lines)} lines but {txt / f'{split}.yaml'} has {len(items)} "
                "segments; line i must belong to segment i"
            )
    talks: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for i, item in enumerate(items):
        if isinstance(item, str):
            yield Skip(f"{split}.yaml#{i}", "malformed row", item)
        else:
            talks[item["wav"]].append((float(item["offset"]), i))
    for wav, segs in talks.items():
        stem = Path(wav).stem
        for k, (offset, i) in enumerate(sorted(segs)):
            utt = f"{stem}_{k}"
            if not src[i].strip() or not tgt[i].strip():
                side = "en" if not src[i].strip() else tgt_lang
                yield Skip(utt, "missing text", f"{txt / f'{split}.{side}'}:{i + 1}: empty line for {utt}")
                continue
            yield Record(
                id=utt,
                audio=str(wav_dir / wav),
                offset=offset,
                duration=float(items[i]["duration"]),
                n_frames=0,
                src_text=src[i].strip(),
                tgt_text=tgt[i].strip(),
                speaker=items[i].get("speaker_id", stem),
                src_lang="en",
                tgt_lang=tgt_lang,
            )


def present_splits(data_dir: Path) -> tuple[str, ...]:
    """The split folders (with a txt/ folder) under `data_dir`: the released ones (train, dev, tst-COMMON,
    tst-HE) first, then any other, such as `speechmt data synth-tts`'s train-tts, in name order."""
    names = sorted(d.parent.name for d in data_dir.glob("*/txt") if d.is_dir() and not d.parent.name.startswith("."))
    return tuple([s for s in MUSTC_SPLITS if s in names] + [s for s in names if s not in MUSTC_SPLITS])


def prepare_mustc(
    root: str | os.PathLike,
    out: str | os.PathLike,
    tgt_lang: str | Sequence[str],
    splits: tuple[str, ...] | None = None,
    cfg: PrepareConfig = PrepareConfig(),
) -> dict:
    """Prepares MuST-C en-<tgt_lang>: manifests, fbank stores, global CMVN and a summary under `out`.

    `tgt_lang`: one target, or several (en-de, en-fr, ... into one folder, module docstring). `splits` defaults
    to every split folder present (`present_splits`), per pair. Returns the summary dict.
    """
    langs = (tgt_lang,) if isinstance(tgt_lang, str) else tuple(dict.fromkeys(tgt_lang))
    if not langs:
        raise PrepareError("no target language")
    pairs = {lang: _pair_dir(Path(root), lang) for lang in langs}
    chosen = {lang: splits or present_splits(pair / "data") for lang, pair in pairs.items()}
    for lang, names in chosen.items():
        if not names:
            raise PrepareError(f"{pairs[lang] / 'data'}: no split folders ({', '.join(MUSTC_SPLITS)})")
    if len(langs) == 1:
        lang = langs[0]
        check_directions(out, [direction("en", lang)], cfg)
        readers = {s: read_mustc_split(root, lang, s) for s in chosen[lang]}
        summary = prepare_splits(
            readers,
            out,
            cfg,
            {"corpus": "mustc", "src_lang": "en", "tgt_lang": lang, "root": str(pairs[lang].resolve())},
        )
    else:
        by_direction = {
            direction("en", lang): {s: read_mustc_split(root, lang, s) for s in chosen[lang]} for lang in langs
        }
        summary = prepare_directions(
            by_direction,
            out,
            cfg,
            {
                "corpus": "mustc",
                "src_langs": ["en"],
                "tgt_langs": list(langs),
                "roots": {direction("en", lang): str(pair.resolve()) for lang, pair in pairs.items()},
            },
        )
    print(format_summary(summary))
    return summary
