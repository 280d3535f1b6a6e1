"""Paragraph pairs from translated manuals installed as Debian packages, read at run time:

- `debian_reference_pairs`: the Debian Reference (`debian-reference-en` and `-de`, GPL-2+: never commit its
  text), one HTML file per chapter and language in /usr/share/debian-reference/ (`ch02.en.html`,
  `ch02.de.html`);
- `gnome_help_pairs`: the GNOME user help (`gnome-user-docs`, CC-BY-SA 3.0), Mallard pages per language in
  <help>/{C,de,es}/<guide>/*.page. The package depends on the yelp browser (and a web engine); its pages are
  also read from where scripts/install_system_deps.sh unpacks them without it
  ($SPEECHMT_HOME/debian/gnome-user-docs/usr/share/help).

Both are translated block by block from one source (po4a, itstool), so a chapter or page has the same
paragraphs, titles and list items in the same order in every language. Where a translation left a block out
(a link or a note), the blocks are aligned by length as Gale and Church (1993) align sentences: a dynamic
programme that pairs blocks of the same kind and similar length or skips one; skipped blocks are counted.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from speechmt_corpora.text import normalise_space

DEBIAN_REFERENCE_DIR = Path("/usr/share/debian-reference")
SKIP_COST = 1.5  # a skipped block costs as much as pairing blocks e^1.5 = 4.5 times apart in length
MALLARD = "{http://projectmallard.org/1.0/}"
_SECTION_NUMBER = re.compile(r"^(?:[A-Z]?\d+\.)+(?:\d+)?\s+")  # "1.1.12. ", "A.2. "
_HTML_BLOCKS = {"p": "p", "h1": "title", "h2": "title", "h3": "title", "h4": "title", "h5": "title"}


def gnome_help_dirs() -> tuple[Path, ...]:
    """Where GNOME help pages may be: installed, or unpacked by scripts/install_system_deps.sh."""
    home = Path(os.environ.get("SPEECHMT_HOME") or Path.home() / ".cache" / "speechmt")
    return (Path("/usr/share/help"), home / "debian" / "gnome-user-docs" / "usr" / "share" / "help")


class _Blocks(HTMLParser):
    """The text of every <p> and heading of an HTML page, in order, as (kind, text)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []
        self._tag: str | None = None  # the open block's tag
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if self._tag is None and tag in _HTML_BLOCKS:
            self._tag, self._text = tag, []

    def handle_endtag(self, tag):
        if tag == self._tag:
            self.blocks.append((_HTML_BLOCKS[tag], normalise_space("".join(self._text))))
            self._tag = None

    def handle_data(self, data):
        if self._tag is not None:
            self._text.append(data)


def html_blocks(path: Path) -> list[tuple[str, str]]:
    """(kind "p" or "title", text) of every paragraph and heading of an HTML file, in order."""
    parser = _Blocks()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    return [(kind, _SECTION_NUMBER.sub("", text) if kind == "title" else text) for kind, text in parser.blocks]


def mallard_blocks(path: Path) -> list[tuple[str, str]]:
    """(kind "p" or "title", text) of every paragraph and title of a Mallard page outside its <info>, in order.
    ET.ParseError for a malformed page."""
    blocks: list[tuple[str, str]] = []

    def walk(el: ET.Element) -> None:
        tag = el.tag.replace(MALLARD, "") if isinstance(el.tag, str) else ""
        if tag == "info":
            return
        if tag in ("p", "title"):
            blocks.append((tag, normalise_space("".join(el.itertext()))))
            return
        for child in el:
            walk(child)

    walk(ET.parse(path).getroot())
    return blocks


def align_blocks(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """Index pairs (i, j) of the blocks of two translations of one document, in order: blocks of the same kind
    paired when their lengths agree, others skipped (Gale-Church style dynamic programme, 1-1 / 1-0 / 0-1)."""
    if len(a) == len(b) and all(x[0] == y[0] for x, y in zip(a, b)):
        return [(i, i) for i in range(len(a))]
    inf = float("inf")
    cost = [[inf] * (len(b) + 1) for _ in range(len(a) + 1)]
    back = [[(0, 0)] * (len(b) + 1) for _ in range(len(a) + 1)]
    cost[0][0] = 0.0
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            here = cost[i][j]
            if here == inf:
                continue
            steps = [(1, 0, SKIP_COST), (0, 1, SKIP_COST)]
            if i < len(a) and j < len(b) and a[i][0] == b[j][0]:
                steps.append((1, 1, abs(math.log((len(a[i][1]) + 10) / (len(b[j][1]) + 10)))))
            for di, dj, c in steps:
                ni, nj = i + di, j + dj
                if ni <= len(a) and nj <= len(b) and here + c < cost[ni][nj]:
                    cost[ni][nj], back[ni][nj] = here + c, (di, dj)
    pairs, i, j = [], len(a), len(b)
    while i or j:
        di, dj = back[i][j]
        if di and dj:
            pairs.append((i - 1, j - 1))
        i, j = i - di, j - dj
    return pairs[::-1]


def aligned_texts(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """(text of a, text of b) of the aligned blocks, and how many blocks (of either side) were left unaligned."""
    pairs = align_blocks(a, b)
    return [(a[i][1], b[j][1]) for i, j in pairs], len(a) + len(b) - 2 * len(pairs)


def debian_reference_pairs(lang: str = "de", root: Path = DEBIAN_REFERENCE_DIR) -> tuple[list[tuple[str, str]], dict]:
    """(English, `lang`) paragraph and heading pairs of the Debian Reference, chapter by chapter, and counts
    (chapters, unaligned blocks). FileNotFoundError naming the package when a language is not installed."""
    english = sorted(Path(root).glob("*.en.html"))
    if not english:
        raise FileNotFoundError("debian-reference-en")
    chapters = [(p, p.with_name(p.name.replace(".en.html", f".{lang}.html"))) for p in english]
    chapters = [(en, other) for en, other in chapters if other.is_file()]
    if not chapters:
        raise FileNotFoundError(f"debian-reference-{lang}")
    pairs, unaligned = [], 0
    for en, other in chapters:
        texts, lost = aligned_texts(html_blocks(en), html_blocks(other))
        pairs += texts
        unaligned += lost
    return pairs, {"documents": len(chapters), "unaligned blocks": unaligned}


def gnome_help_pairs(lang: str, roots: tuple[Path, ...] | None = None) -> tuple[list[tuple[str, str]], dict]:
    """(English, `lang`) paragraph and title pairs of every GNOME help page translated into `lang` (the first of
    `roots` holding C/gnome-help), and counts (pages, unreadable pages, unaligned blocks). FileNotFoundError
    when no root holds the pages."""
    root = next((r for r in roots or gnome_help_dirs() if (Path(r) / "C" / "gnome-help").is_dir()), None)
    if root is None:
        raise FileNotFoundError("gnome-user-docs")
    pairs, counts = [], {"documents": 0, "unreadable documents": 0, "unaligned blocks": 0}
    for en in sorted(Path(root).glob("C/*/*.page")):
        other = Path(root) / lang / en.relative_to(Path(root) / "C")
        if not other.is_file():
            continue
        try:
            texts, lost = aligned_texts(mallard_blocks(en), mallard_blocks(other))
        except (ET.ParseError, OSError):
            counts["unreadable documents"] += 1
            continue
        pairs += texts
        counts["documents"] += 1
        counts["unaligned blocks"] += lost
    return pairs, counts
