"""Monolingual text for back-translation (or distillation, where the corpus' source side is in that language),
built at run time from installed Debian packages (none of their text is in this repository): each monolingual
source's sentences through the shared filters (speechmt_corpora.mt_filters.TextFilter), minus every sentence a
corpus uses, found as synth-mt finds them (speechmt_corpora.mt_text.direction: any split, either side).

`build_mono_text(corpus, root, out, lang, paths)` writes `out/mono.<lang>.txt`, one sentence per line (what
`speechmt data backtranslate --input` reads), and `out/mono_text_summary.json`: per source its licence, the entries
read, kept and dropped by reason, the lines cut and texts cleaned, and the sentences read, kept and dropped by
reason; and the command that translates the file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from speechmt_corpora.catalogs import DOC_DIR, package_licence
from speechmt_corpora.common import SynthError, write_lines
from speechmt_corpora.fortunes import FORTUNES_DE_DIR, fortune_sentences
from speechmt_corpora.mt_filters import TextFilter
from speechmt_corpora.mt_sources import Source, SourceMissing
from speechmt_corpora.mt_text import direction

MONO_SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            "fortunes-de",
            "German fortune cookies (fortune's de files): quotations, sayings, jokes, anecdotes",
            "fortunes-de",
            "GPL-2+",
            ("de",),
            (4, 40),
        ),
    )
}
FILTERS = {
    "entries": "empty, ascii art or symbols, chat or mail quote, poem or verse (speechmt_corpora.fortunes)",
    "lines": "attribution, heading, table or list cut; dialogue or list markers, quotes or brackets, emoticons cleaned",
    "sentences": "url or e-mail, placeholder or markup, not a whole sentence, the source's word range, "
    "numbers or symbols, wrong language, a corpus sentence (any split), duplicate",
}


@dataclass(frozen=True)
class MonoPaths:
    """Where the monolingual sources and the packages' copyright files are (tests point them at fixtures)."""

    fortunes_de: Path = FORTUNES_DE_DIR
    doc: Path = DOC_DIR


def _fortunes_de(paths: MonoPaths) -> tuple[tuple[str, ...], dict]:
    try:
        return fortune_sentences(paths.fortunes_de)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceMissing(f"{paths.fortunes_de}: no fortune files: install the Debian package fortunes-de") from None


_READERS = {"fortunes-de": _fortunes_de}


def licence(source: Source, doc: Path = DOC_DIR) -> str:
    """The licence the installed package's copyright file names, or the source's own note where there is none."""
    return (
        package_licence(source.packages, doc)
        if (Path(doc) / source.packages / "copyright").is_file()
        else source.licence
    )


def next_command(src_lang: str, tgt_lang: str, lang: str, path: Path) -> str:
    """The command that makes MT pairs of the file: back-translation of target-side text, distillation of source."""
    command = "backtranslate" if lang == tgt_lang else "distill"
    return (
        f"speechmt data {command} --input {path} --src-lang {src_lang} --tgt-lang {tgt_lang} --lm gemma-3-270m "
        f"--out {path.parent / command}"
    )


def build_mono_text(corpus: str, root: Path, out: Path, lang: str = "de", paths: MonoPaths | None = None) -> dict:
    """Writes every monolingual `lang` source's kept sentences into out/mono.<lang>.txt and the summary into
    out/mono_text_summary.json; returns the summary. corpus "mustc" (en-de: German is the target side) or
    "covost2" (<lang>-en). A source that is not installed is a line in the summary (and on stderr, where another
    gave text); SynthError (one line) when the corpus has no `lang` side or no source gave a sentence."""
    src_lang, tgt_lang, used = direction(corpus, root, lang)
    if lang not in (src_lang, tgt_lang):
        raise SynthError(f"corpus {corpus!r} ({src_lang}-{tgt_lang}) has no {lang} side for monolingual {lang} text")
    names = [n for n, s in MONO_SOURCES.items() if lang in s.langs]
    keep, paths = TextFilter(lang, corpus=used), paths or MonoPaths()
    sentences, entries = [], {}
    for name in names:
        source = MONO_SOURCES[name]
        entry = {
            "description": source.description,
            "packages": source.packages,
            "licence": licence(source, paths.doc),
            "words": list(source.words),
        }
        try:
            texts, counts = _READERS[name](paths)
        except SourceMissing as e:
            entries[name] = {"status": f"not installed: {e}", **entry}
            continue
        kept, dropped = keep.keep(texts, source.words)
        sentences += kept
        entries[name] = {
            "status": "read",
            **entry,
            **counts,
            "read": len(texts),
            "kept": len(kept),
            "dropped": dict(sorted(dropped.items())),
        }
    if not sentences:
        raise SynthError(
            f"no {lang} text: "
            + "; ".join(
                f"{n}: {e['status'] if e['status'] != 'read' else 'no sentence passed the filters'}"
                for n, e in entries.items()
            )
        )
    for name, e in entries.items():
        if e["status"] != "read":
            print(f"speechmt: synth-mono: {name}: {e['status']}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mono.{lang}.txt"
    write_lines(path, sentences)
    summary = {
        "corpus": corpus,
        "pair": f"{src_lang}-{tgt_lang}",
        "lang": lang,
        "file": str(path),
        "sentences": len(sentences),
        "words": sum(len(s.split()) for s in sentences),
        "per_source": {n: e["kept"] for n, e in entries.items() if e["status"] == "read"},
        "sources": entries,
        "excluded_as_corpus_sentences": sum(e.get("dropped", {}).get("a corpus sentence", 0) for e in entries.values()),
        "corpus_sentences": len(used),
        "next": next_command(src_lang, tgt_lang, lang, path),
        "filters": FILTERS,
    }
    (out / "mono_text_summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    return summary
