"""The languages of the mini corpora beyond MuST-C-mini en-de and CoVoST-mini de/es->en, and their text.

MuST-C-mini en->X for X of MuST-C v1.0's other targets (es, fr, it, nl, pt, ro, ru) and CoVoST-mini X->en for the
CoVoST 2 sources that Debian's voices speak (fr, it, pt, nl, ru, ca besides de and es) take their pairs from the
gettext catalogs of the installed Debian packages (speechmt_corpora.catalogs): every translated message whose
English side has 4 to 30 words and passes the shared filters of `synth-mt` (speechmt_corpora.mt_filters: no format
codes or markup, length ratio, language, duplicates) and reads as speech (`speakable`), in catalog order. Software messages: menu items, errors,
option help. Each catalog is under its package's licence; the summary lists the packages. Read at run time: none
of their text is in this repository, and a machine with other packages installed gets other pairs.

A direction whose pool holds fewer pairs than the `small` size voices (with its text-only part) is named in the
build's summary under `too_little_text`; a direction without any pair cannot be built (SynthError).
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from pathlib import Path

from speechmt_corpora.catalogs import LOCALE_DIR, catalog_pairs, licences
from speechmt_corpora.common import SIZES, TEXT_ONLY_FRACTION, SynthError
from speechmt_corpora.mt_filters import PairFilter
from speechmt_corpora.text import Pair

MUSTC_TARGETS = ("de", "es", "fr", "it", "nl", "pt", "ro", "ru")  # MuST-C v1.0's pairs, en->X
COVOST_SOURCES = ("de", "es", "fr", "it", "pt", "nl", "ru", "ca")  # CoVoST 2's X->en with Debian voices here
LOCALES = {"pt": ("pt_BR", "pt")}  # gettext locale folders of a language, in order (default: the code itself)
GETTEXT_WORDS = (4, 30)  # English words of a pair (a segment of speech, not a paragraph)
_small = SIZES["small"]
SMALL_NEEDS = round((_small.train + _small.dev + _small.test) / (1 - TEXT_ONLY_FRACTION))  # 2,727 pairs


def stream(corpus: str, lang: str) -> int:
    """The seed stream that orders a gettext direction's pool (a stable number of its own, far from the streams
    0 and 1 of the Ding and Bible directions)."""
    return 1000 + zlib.crc32(f"{corpus}:{lang}".encode()) % 1_000_000


def gettext_pool(lang: str, locale_dir: Path = LOCALE_DIR) -> tuple[tuple[Pair, ...], dict]:
    """(English, `lang`) pairs of the installed gettext catalogs that pass the filters (module docstring), in
    catalog order, and what the reading found: catalogs, packages with their licences, drops by reason.
    SynthError when no catalog of `lang` is installed or none of its pairs passes."""
    raw, per_catalog, unreadable = [], {}, 0
    for folder in LOCALES.get(lang, (lang,)):
        for english, other, catalog in catalog_pairs(folder, locale_dir):
            if not english:
                unreadable += 1
                continue
            raw.append(Pair(english, other))
            per_catalog[catalog] = per_catalog.get(catalog, 0) + 1
    if not per_catalog:
        folders = ", ".join(f"{locale_dir}/{f}/LC_MESSAGES" for f in LOCALES.get(lang, (lang,)))
        raise SynthError(
            f"no gettext catalog in {folders}: install Debian packages with {lang} translations "
            "(and do not strip locales)"
        )
    kept, dropped = PairFilter("en", lang).keep(raw, GETTEXT_WORDS)
    spoken = [p for p in kept if speakable(p.src) and speakable(p.tgt)]
    if len(spoken) < len(kept):
        dropped["not speakable"] = len(kept) - len(spoken)
    kept = spoken
    if not kept:
        raise SynthError(f"the {lang} gettext catalogs hold no pair that passes the filters")
    packages = licences(Counter(per_catalog))
    return tuple(kept), {
        "name": "gettext",
        "catalogs": len(per_catalog),
        "unreadable_catalogs": unreadable,
        "messages": len(raw),
        "pairs": len(kept),
        "dropped": dict(dropped.most_common()),
        "packages": {name: e["licence"] for name, e in packages.items()},
    }


_UNSPOKEN = re.compile(r"[|\\/_=*#~^{}\[\]<>@+]|\.\.\.|[A-Z]{2,}\w* [A-Z]{2,}")


def speakable(text: str) -> bool:
    """Whether a message reads as speech: no symbols that a voice spells out (| \\ / _ = * # ...), no two words in
    capitals in a row (SQL keywords, constants), and letters first."""
    return _UNSPOKEN.search(text) is None and text[:1].isalpha()


def too_little_text(pools: dict[str, int]) -> dict[str, str]:
    """{direction: why} for the directions whose pool is smaller than the `small` size needs."""
    return {
        d: f"{n} usable pairs, fewer than the {SMALL_NEEDS} that size small voices with its text-only part"
        for d, n in pools.items()
        if n < SMALL_NEEDS
    }


def check_langs(langs: tuple[str, ...], known: tuple[str, ...], what: str) -> tuple[str, ...]:
    """`langs` without duplicates, in order; SynthError naming the known ones for an unknown language."""
    langs = tuple(dict.fromkeys(langs))
    unknown = [lang for lang in langs if lang not in known]
    if unknown or not langs:
        raise SynthError(f"{what}: {' '.join(unknown) or 'none given'}: expected some of {' '.join(known)}")
    return langs
