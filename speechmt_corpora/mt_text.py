"""Extra text-only MT pairs for the mini corpora, built at run time from installed Debian packages (none of
their text is in this repository): the sources of speechmt_corpora.mt_sources (Ding dictionary, gettext
catalogs, Debian Reference, GNOME help, SWORD Bible verses), each through the shared filters of
speechmt_corpora.mt_filters, minus every sentence a corpus uses (any split, either side, compared
case-folded and whitespace-normalised) so that no dev or test sentence reaches training through the back door.

`build_mt_text(corpus, root, out, lang, sources)` writes `out/train.jsonl` (manifest records with empty audio,
n_frames 0, ids `<source>_<n>`: what `TextDataset` and the stages' `data_dir` read) and
`out/mt_text_summary.json` (pairs per source, each source's licence, status, counts and drops by reason).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from speechmt.data.manifest import Record, write_manifest
from speechmt_corpora.common import SynthError
from speechmt_corpora.mt_filters import PairFilter, key
from speechmt_corpora.mt_sources import SOURCES, SourceMissing, SourcePaths, read_source, sources_for
from speechmt_corpora.text import DING_PATH, Pair, clean_phrase, ding_phrase_pairs  # noqa: F401 (their old home)

FILTERS = {
    "length ratio": "characters + 10, at most 2:1",
    "duplicates": "either side seen before (case-folded)",
    "language check": "no side with more function words of the other language",
    "placeholders": "format codes, markup, escapes, options, paths dropped",
    "corpus sentences": "every sentence of the corpus (any split) on either side dropped",
    "words": "each source's English word range (sources.<name>.english_words)",
}


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


def default_out(corpus: str, root: Path, lang: str = "de", name: str = "mt-text") -> Path:
    """Beside the corpus: ROOT/en-de/<name> (MuST-C) or ROOT/<lang>/<name> (CoVoST 2)."""
    return Path(root) / ("en-de" if corpus == "mustc" else lang) / name


def _records(pairs: list[tuple[str, Pair]], src_lang: str, tgt_lang: str) -> list[Record]:
    """Manifest records of (source name, pair), numbered per source: ding_0, gettext_0, ..."""
    counts: Counter = Counter()
    records = []
    for name, p in pairs:
        records.append(
            Record(
                id=f"{name}_{counts[name]}",
                audio="",
                offset=0.0,
                duration=0.0,
                n_frames=0,
                src_text=p.src,
                tgt_text=p.tgt,
                speaker="",
                src_lang=src_lang,
                tgt_lang=tgt_lang,
            )
        )
        counts[name] += 1
    return records


def direction(corpus: str, root: Path, lang: str) -> tuple[str, str, set[str]]:
    """(source language, target language, keys of every corpus sentence) of a mini corpus' extra MT text."""
    if corpus == "mustc":
        return "en", "de", mustc_sentences(root)
    if corpus == "covost2" and lang in ("de", "es"):
        return lang, "en", covost_sentences(root, lang)
    raise SynthError(f"no extra MT text for corpus {corpus!r} ({lang}); expected mustc, or covost2 with de or es")


def gather(
    names: tuple[str, ...], src_lang: str, tgt_lang: str, used: set[str], paths: SourcePaths
) -> tuple[list[tuple[str, Pair]], dict]:
    """Every named source read and filtered in turn (earlier sources win duplicates): (source name, pair) in
    order, and each source's summary entry (status, licence, packages, read, kept, dropped by reason)."""
    lang = src_lang if tgt_lang == "en" else tgt_lang
    keep = PairFilter(src_lang, tgt_lang, corpus=used)
    pairs, entries = [], {}
    for name in names:
        source = SOURCES[name]
        entry = {
            "description": source.description,
            "packages": source.packages,
            "licence": source.licence,
            "english_words": list(source.words),
        }
        try:
            english_pairs, counts = read_source(name, lang, paths)
        except SourceMissing as e:
            entries[name] = {"status": f"not installed: {e}", **entry}
            print(f"speechmt: synth-mt: {name}: not installed: {e}", file=sys.stderr)
            continue
        oriented = [Pair(en, other) if src_lang == "en" else Pair(other, en) for en, other in english_pairs]
        kept, dropped = keep.keep(oriented, source.words)
        pairs += [(name, p) for p in kept]
        entries[name] = {
            "status": "read",
            **entry,
            "read": len(oriented),
            "kept": len(kept),
            "dropped": dict(sorted(dropped.items())),
            **counts,
        }
    return pairs, entries


def build_mt_text(
    corpus: str,
    root: Path,
    out: Path,
    lang: str = "de",
    sources: str | tuple[str, ...] | None = None,
    paths: SourcePaths | None = None,
) -> dict:
    """Writes the extra MT pairs of a mini corpus into `out` (train.jsonl + mt_text_summary.json); returns
    the summary. corpus "mustc": en-de; "covost2": <lang>-en. `sources`: source names (speechmt_corpora.
    mt_sources.SOURCES), "all" for every one with the language, None for Ding (de) or the Bible (es) only.
    `paths`: where the sources are (None: where Debian installs them). A source that is not installed is a line
    in the summary (and on stderr); SynthError when no source gave a pair."""
    src_lang, tgt_lang, used = direction(corpus, root, lang)
    names = sources_for(src_lang if tgt_lang == "en" else tgt_lang, sources)
    pairs, entries = gather(names, src_lang, tgt_lang, used, paths or SourcePaths())
    if not pairs:
        raise SynthError(
            f"no MT text from {', '.join(names)}: "
            + "; ".join(
                f"{n}: {e['status'] if e['status'] != 'read' else 'no pair passed the filters'}"
                for n, e in entries.items()
            )
        )
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out / "train.jsonl", _records(pairs, src_lang, tgt_lang))
    summary = {
        "corpus": corpus,
        "pair": f"{src_lang}-{tgt_lang}",
        "pairs": len(pairs),
        "per_source": dict(Counter(name for name, _ in pairs)),
        "sources": entries,
        "excluded_as_corpus_sentences": sum(e.get("dropped", {}).get("a corpus sentence", 0) for e in entries.values()),
        "corpus_sentences": len(used),
        "words": {
            src_lang: sum(len(p.src.split()) for _, p in pairs),
            tgt_lang: sum(len(p.tgt.split()) for _, p in pairs),
        },
        "filters": FILTERS,
    }
    (out / "mt_text_summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    return summary
