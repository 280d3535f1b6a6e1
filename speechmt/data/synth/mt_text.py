"""Extra text-only MT pairs for the mini corpora, built at run time from installed packages: every aligned
phrase and sentence of the Ding dictionary (`trans-de-en`, GPL-2+: read from /usr/share/trans/de-en, never
committed) for en-de and de-en, and the Bible verse pairs for es-en, minus every sentence a corpus uses
(any split, either side, compared case-folded and whitespace-normalised) so that no dev or test sentence
reaches training through the back door.

`build_mt_text(corpus, root, out)` writes `out/train.jsonl` (manifest records with empty audio, n_frames 0:
what `TextDataset` and the stages' `data_dir` read) and `out/mt_text_summary.json` (size, sources, what was
excluded and why).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from speechmt.data.manifest import Record, write_manifest
from speechmt.data.synth.common import SynthError
from speechmt.data.synth.text import (DING_PATH, Pair, _DICT_ABBREVIATIONS, bible_pairs, dedupe, ding_alternatives,
                                      ding_pairs, looks_swapped, normalise_space)

_NOTES = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)")  # {n} gender, [Br.] labels, (explanations)
_LEFTOVER = re.compile(r"[\[\]{}()<>/\\|~=+*#_@…]|\.\.\.")
PHRASE_WORDS = (2, 30)


def clean_phrase(text: str) -> str:
    """A Ding alternative's first synonym without grammatical notes and labels; "" when unusable."""
    first = text.split("; ")[0]
    phrase = normalise_space(_NOTES.sub(" ", first))
    words = phrase.split()
    if not PHRASE_WORDS[0] <= len(words) <= PHRASE_WORDS[1] or _LEFTOVER.search(phrase):
        return ""
    if any(w in _DICT_ABBREVIATIONS or w.startswith(("jdn", "jdm", "jds", "sb.", "sth.")) for w in words):
        return ""  # placeholders (jdn., sth.) are not text
    return phrase


def ding_phrase_pairs(path: Path = DING_PATH) -> tuple[Pair, ...]:
    """(English, German) pairs of every aligned Ding alternative of 2-30 words on both sides (phrases and
    sentences), notes removed, swapped entries left out, deduplicated on each side, in file order."""
    pairs = []
    for de, en in ding_alternatives(path):
        de, en = clean_phrase(de), clean_phrase(en)
        if de and en and not looks_swapped(en, de):
            pairs.append(Pair(src=en, tgt=de))
    return tuple(dedupe(pairs))


def key(text: str) -> str:
    """How sentences are compared for exclusion: case-folded, whitespace-normalised."""
    return normalise_space(text).casefold()


def exclude(pairs: Iterable[Pair], used: set[str]) -> tuple[list[Pair], int]:
    """The pairs neither side of which is in `used` (keys), and how many were dropped."""
    kept, dropped = [], 0
    for p in pairs:
        if key(p.src) in used or key(p.tgt) in used:
            dropped += 1
        else:
            kept.append(p)
    return kept, dropped


def mustc_sentences(root: Path, pair: str = "en-de") -> set[str]:
    """Keys of every English and German sentence of a MuST-C layout corpus (all splits under data/)."""
    found = sorted((Path(root) / pair / "data").glob("*/txt/*.[a-z][a-z]"))
    if not found:
        raise SynthError(f"{root}: no MuST-C {pair}/data/<split>/txt/<split>.<lang> files to exclude")
    return {key(line) for path in found for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def covost_sentences(root: Path, lang: str) -> set[str]:
    """Keys of every sentence and translation of a CoVoST layout corpus' direction <lang>-en (all splits),
    and of the clips' transcripts in validated.tsv."""
    import csv

    tables = [Path(root) / lang / f"covost_v2.{lang}_en.tsv", Path(root) / lang / "validated.tsv"]
    if not tables[0].is_file():
        raise SynthError(f"{tables[0]} not found: not a CoVoST 2 layout corpus for {lang}-en")
    used = set()
    for table in tables:
        if table.is_file():
            with open(table, encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                    used.update(key(row[k]) for k in ("sentence", "translation") if row.get(k))
    return used


def default_out(corpus: str, root: Path, lang: str = "de") -> Path:
    """Beside the corpus: ROOT/en-de/mt-text (MuST-C) or ROOT/<lang>/mt-text (CoVoST 2)."""
    return Path(root) / ("en-de" if corpus == "mustc" else lang) / "mt-text"


def _records(pairs: list[Pair], src_lang: str, tgt_lang: str) -> list[Record]:
    return [Record(id=f"mt_{i}", audio="", offset=0.0, duration=0.0, n_frames=0, src_text=p.src, tgt_text=p.tgt,
                   speaker="", src_lang=src_lang, tgt_lang=tgt_lang) for i, p in enumerate(pairs)]


def build_mt_text(corpus: str, root: Path, out: Path, lang: str = "de") -> dict:
    """Writes the extra MT pairs of a mini corpus into `out` (train.jsonl + mt_text_summary.json); returns
    the summary. corpus "mustc": en-de from Ding; "covost2": <lang>-en, from Ding (de) or the Bible (es)."""
    if corpus == "mustc":
        src_lang, tgt_lang, used = "en", "de", mustc_sentences(root)
        sources = {"ding phrases and sentences (trans-de-en)": ding_phrase_pairs()}
    elif corpus == "covost2" and lang in ("de", "es"):
        src_lang, tgt_lang, used = lang, "en", covost_sentences(root, lang)
        pool = ding_phrase_pairs() if lang == "de" else bible_pairs()
        flipped = tuple(Pair(p.tgt, p.src) for p in pool) if lang == "de" else tuple(pool)
        sources = {"ding phrases and sentences (trans-de-en)" if lang == "de" else "bible verses (sword)": flipped}
    else:
        raise SynthError(f"no extra MT text for corpus {corpus!r} ({lang}); expected mustc, or covost2 with de or es")
    if corpus == "mustc":  # whole Ding sentences too (the corpus was drawn from them): only the unused ones stay
        sources["ding sentences (trans-de-en)"] = ding_pairs()
    pairs, dropped = exclude(dedupe([p for ps in sources.values() for p in ps]), used)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out / "train.jsonl", _records(pairs, src_lang, tgt_lang))
    summary = {"corpus": corpus, "pair": f"{src_lang}-{tgt_lang}", "pairs": len(pairs),
               "sources": {name: len(ps) for name, ps in sources.items()},
               "excluded_as_corpus_sentences": dropped, "corpus_sentences": len(used),
               "words": {src_lang: sum(len(p.src.split()) for p in pairs),
                         tgt_lang: sum(len(p.tgt.split()) for p in pairs)}}
    (out / "mt_text_summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    return summary
