"""The parallel text sources of `speechmt data synth-mt`: what each is, its Debian packages and licence, the
languages it pairs with English, its English word range, and how it is read (at run time, from the installed
packages: none of their text is in this repository).

`read_source(name, lang, paths)` returns (English, `lang`) pairs in source order and counts about the reading
(documents, unaligned blocks, the packages of gettext catalogs with their pairs and licences); it raises SourceMissing,
whose one-line message names the Debian packages to install, when the source is not installed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from speechmt_corpora.catalogs import LOCALE_DIR, catalog_pairs, licences
from speechmt_corpora.common import SynthError
from speechmt_corpora.manuals import DEBIAN_REFERENCE_DIR, debian_reference_pairs, gnome_help_pairs
from speechmt_corpora.text import DING_PATH, Pair, bible_pairs, ding_pairs, ding_phrase_pairs


class SourceMissing(SynthError):
    """A source whose Debian packages are not installed; the message says which to install."""


@dataclass(frozen=True)
class Source:
    """One text source: Debian packages, licence, languages paired with English and the range of its English
    words (a monolingual source, speechmt_corpora.mono_text: its own language and the range of its words)."""

    name: str
    description: str
    packages: str
    licence: str
    langs: tuple[str, ...]
    words: tuple[int, int]


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            "ding", "Ding dictionary: aligned phrases and whole sentences", "trans-de-en", "GPL-2+", ("de",), (2, 30)
        ),
        Source(
            "gettext",
            "gettext catalogs (.mo) of the installed packages: software messages",
            "the installed packages' own translations",
            "each package's own (see packages)",
            ("de", "es"),
            (4, 40),
        ),
        Source(
            "debian-reference",
            "Debian Reference: aligned paragraphs and headings",
            "debian-reference-en debian-reference-de",
            "GPL-2+",
            ("de",),
            (3, 80),
        ),
        Source(
            "gnome-help",
            "GNOME user help (Mallard pages): aligned paragraphs and titles",
            "gnome-user-docs",
            "CC-BY-SA-3.0",
            ("de", "es"),
            (3, 80),
        ),
        Source(
            "sword",
            "Bible verses by reference: Reina Valera 1909 and World English Bible (SWORD, diatheke)",
            "diatheke sword-text-web sword-text-sparv",
            "public domain",
            ("es",),
            (4, 30),
        ),
    )
}
DEFAULT_SOURCES = {"de": ("ding",), "es": ("sword",)}  # what synth-mt read before it read every source


@dataclass(frozen=True)
class SourcePaths:
    """Where the sources are installed (tests point them at small fixtures in the same layouts)."""

    ding: Path = DING_PATH
    locale: Path = LOCALE_DIR
    debian_reference: Path = DEBIAN_REFERENCE_DIR
    gnome_help: tuple[Path, ...] | None = None  # None: /usr/share/help, then $SPEECHMT_HOME's unpacked copy


def sources_for(lang: str, names: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The source names to read for `lang`: "all" (every source with `lang`), None (DEFAULT_SOURCES), or names.
    SynthError for an unknown name or one without `lang`."""
    if names is None:
        return DEFAULT_SOURCES[lang]
    if names == "all" or names == ("all",):
        return tuple(n for n, s in SOURCES.items() if lang in s.langs)
    names = (names,) if isinstance(names, str) else tuple(names)
    for name in names:
        if name not in SOURCES:
            raise SynthError(f"unknown text source {name!r}; expected all or some of {', '.join(SOURCES)}")
        if lang not in SOURCES[name].langs:
            raise SynthError(f"text source {name!r} has no {lang}-en text (it has {', '.join(SOURCES[name].langs)})")
    return tuple(dict.fromkeys(names))


def _ding(lang: str, paths: SourcePaths) -> tuple[list[Pair], dict]:
    if not Path(paths.ding).is_file():
        raise SourceMissing(f"{paths.ding} not found: install the Debian package trans-de-en")
    return list(ding_phrase_pairs(paths.ding)) + list(ding_pairs(paths.ding)), {}


def _gettext(lang: str, paths: SourcePaths) -> tuple[list[Pair], dict]:
    pairs, per_catalog, unreadable = [], Counter(), 0
    for english, other, catalog in catalog_pairs(lang, paths.locale):
        if not english:
            unreadable += 1
            continue
        pairs.append(Pair(english, other))
        per_catalog[catalog] += 1
    if not per_catalog:
        raise SourceMissing(
            f"no gettext catalog in {paths.locale}/{lang}/LC_MESSAGES: install packages with "
            f"{lang} translations (and do not strip locales)"
        )
    return pairs, {
        "catalogs": len(per_catalog),
        "unreadable catalogs": unreadable,
        "catalog_packages": licences(per_catalog),
    }


def _debian_reference(lang: str, paths: SourcePaths) -> tuple[list[Pair], dict]:
    try:
        texts, counts = debian_reference_pairs(lang, paths.debian_reference)
    except FileNotFoundError as e:
        raise SourceMissing(
            f"no Debian Reference in {paths.debian_reference}: install the Debian package {e.args[0]}"
        ) from None
    return [Pair(en, other) for en, other in texts], counts


def _gnome_help(lang: str, paths: SourcePaths) -> tuple[list[Pair], dict]:
    try:
        texts, counts = gnome_help_pairs(lang, paths.gnome_help)
    except FileNotFoundError:
        raise SourceMissing(
            "no GNOME help pages (C/gnome-help): run scripts/install_system_deps.sh (unpacks "
            "the Debian package gnome-user-docs without its help browser)"
        ) from None
    return [Pair(en, other) for en, other in texts], counts


def _sword(lang: str, paths: SourcePaths) -> tuple[list[Pair], dict]:
    try:
        verses = bible_pairs()
    except SynthError as e:
        raise SourceMissing(str(e)) from None
    return [Pair(en, es) for es, en in verses], {"books": "the whole Bible, less chapters whose verse numbers part"}


_READERS = {
    "ding": _ding,
    "gettext": _gettext,
    "debian-reference": _debian_reference,
    "gnome-help": _gnome_help,
    "sword": _sword,
}


def read_source(name: str, lang: str, paths: SourcePaths = SourcePaths()) -> tuple[list[Pair], dict]:
    """(English, `lang`) pairs of a source, in source order, and counts about the reading. SourceMissing when
    it is not installed."""
    return _READERS[name](lang, paths)
