"""Text sources for the synthetic mini corpora, read at run time from Debian packages, and their filters.

- `ding_pairs()`: German-English sentence pairs from the Ding dictionary (`trans-de-en`, GPL-2+: never
  commit its text; it is read from /usr/share/trans/de-en whenever a corpus is built).
- `bible_pairs()`: Spanish-English verse pairs (Reina Valera 1909 and World English Bible, public domain)
  read through `diatheke` from the SWORD modules of `sword-text-sparv` and `sword-text-web`.

Both return pairs in source order with every side unique (compared case-folded), so that any partition of
the list into splits shares no sentence on either side.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, NamedTuple

from speechmt_corpora.common import SynthError

DING_PATH = Path("/usr/share/trans/de-en")
DING_WORDS = (5, 14)
BIBLE_WORDS = (4, 30)
BIBLE_MODULES = {"es": ("spaRV1909eb", "sword-text-sparv"), "en": ("engWEB2015eb", "sword-text-web")}
BIBLE_LENGTH_RATIO = (0.5, 2.0)  # Spanish / English characters
BIBLE_KEYS = {"john": "John 1:1-21:25", "all": "Genesis 1:1-Malachi 4:6;Matthew 1:1-Revelation 22:21"}

_MARKUP = re.compile(r"[\[\]{}()<>/\\|~=+*#_@…]|\.\.\.")
_DICT_ABBREVIATIONS = {"etw.", "jdn.", "jdm.", "jds.", "jd.", "sb.", "sth.", "sb.'s", "sb.’s", "o.", "od."}
_ENGLISH_WORDS = frozenset(
    "the and is are were of to that you he she we they not have has with for this "
    "what my your our their who does did would can could".split()
)
_GERMAN_WORDS = frozenset(
    "der das und ist sind waren nicht ein eine einen dem den des zu mit für auf ich "
    "du er sie wir ihr sich haben wird werden kann auch noch schon nach".split()
)
_SYNONYM_AFTER_SENTENCE = re.compile(r"(?<=[.!?]);\s*")
_VERSE_START = re.compile(r"^(?P<lead>\s*|.*?\s{2,})(?P<ref>[A-Z][A-Za-z ]*? \d+:\d+): ?(?P<text>.*)$")
_TAG = re.compile(r"<[^>]*>")
_BIBLE_MARKUP = re.compile(r"[\[\]{}<>/\\|=]")


class Pair(NamedTuple):
    """One aligned sentence pair; `src` and `tgt` name the languages of the corpus that uses it."""

    src: str
    tgt: str


def normalise_space(text: str) -> str:
    """Collapses runs of whitespace into one space and strips both ends."""
    return " ".join(text.split())


def is_dictionary_sentence(text: str) -> bool:
    """A whole Ding sentence: capital or digit first, ends in . ! or ?, 5-14 words, no dictionary markup."""
    words = text.split()
    if not DING_WORDS[0] <= len(words) <= DING_WORDS[1]:
        return False
    if not (text[0].isupper() or text[0].isdigit()) or text[-1] not in ".!?":
        return False
    if _MARKUP.search(text):
        return False
    return not any(w in _DICT_ABBREVIATIONS for w in words)


def _first_synonym(alternative: str) -> str:
    """The first of `;`-separated synonym sentences (`A.; B.` -> `A.`), without outer spaces."""
    if ";" in alternative:
        alternative = _SYNONYM_AFTER_SENTENCE.split(alternative, 1)[0]
    return alternative.strip()


def _language_votes(text: str) -> tuple[int, int]:
    """(English, German) function words in a sentence."""
    words = re.findall(r"[a-zäöüß]+", text.lower())
    return sum(w in _ENGLISH_WORDS for w in words), sum(w in _GERMAN_WORDS for w in words)


def looks_swapped(english: str, german: str) -> bool:
    """True when a dictionary entry has its sides swapped (more German function words on the English side)."""
    en_votes, de_votes = _language_votes(english), _language_votes(german)
    return en_votes[1] > en_votes[0] or de_votes[0] > de_votes[1]


def dedupe(pairs: list[Pair]) -> list[Pair]:
    """Keeps the first pair for each source and each target sentence (case-folded), in order."""
    seen_src: set[str] = set()
    seen_tgt: set[str] = set()
    kept = []
    for pair in pairs:
        s, t = pair.src.casefold(), pair.tgt.casefold()
        if s in seen_src or t in seen_tgt:
            continue
        seen_src.add(s)
        seen_tgt.add(t)
        kept.append(pair)
    return kept


@functools.lru_cache(maxsize=1)
def ding_pairs(path: Path = DING_PATH) -> tuple[Pair, ...]:
    """(English, German) whole-sentence pairs from the Ding dictionary, deduplicated, in file order.

    A line is `german :: english`, each side a `|`-separated list of aligned alternatives; an alternative
    may list `;`-separated synonyms, of which a sentence alternative keeps its first. Entries with their
    sides swapped are left out.
    """
    pairs = []
    for de, en in ding_alternatives(path):
        de, en = _first_synonym(de), _first_synonym(en)
        if de[-1:] not in ".!?" or en[-1:] not in ".!?":
            continue
        de, en = normalise_space(de), normalise_space(en)
        if is_dictionary_sentence(de) and is_dictionary_sentence(en) and not looks_swapped(en, de):
            pairs.append(Pair(src=en, tgt=de))
    return tuple(dedupe(pairs))


def ding_alternatives(path: Path = DING_PATH) -> Iterator[tuple[str, str]]:
    """Every aligned (German, English) alternative of the Ding dictionary, raw, in file order: a line is
    `german :: english`, each side a `|`-separated list of aligned alternatives (lines whose sides do not
    align are left out)."""
    if not path.is_file():
        raise SynthError(f"{path} not found: install the Debian package trans-de-en")
    with open(path, encoding="utf-8") as f:
        for line in f:
            sides = line.rstrip("\n").split(" :: ")
            if line.startswith("#") or len(sides) != 2:
                continue
            german, english = sides[0].split(" | "), sides[1].split(" | ")
            if len(german) == len(english):
                yield from zip(german, english)


def _capitalise(word: str) -> str:
    """`¿SACARÁS` -> `¿Sacarás`: lower case with the first letter kept upper."""
    lower = word.lower()
    for i, ch in enumerate(lower):
        if ch.isalpha():
            return lower[:i] + ch.upper() + lower[i + 1 :]
    return lower


def _is_caps(word: str) -> bool:
    """A word of two or more letters, all capitals (a drop capital of the printed Bible)."""
    letters = [ch for ch in word if ch.isalpha()]
    return len(letters) >= 2 and all(ch.isupper() for ch in letters)


def clean_verse(text: str, first_of_psalm: bool = False) -> str:
    """Removes tags (`<G1234>` Strong's numbers) and drop capitals (`DE DOCE años` -> `De doce años`).

    In the first verse of a psalm the Spanish text carries the psalm's title before the drop capital
    (`Salmo de David. BENDECIRÉ á Jehová`); the title is cut, as the English module gives it apart.
    """
    words = normalise_space(_TAG.sub(" ", text)).split()
    if first_of_psalm:
        starts = [i for i, w in enumerate(words) if i > 0 and _is_caps(w) and words[i - 1][-1] in ".:"]
        words = words[starts[0] :] if starts else words
    for i, word in enumerate(words[:3]):
        if _is_caps(word):
            words[i] = _capitalise(word) if i == 0 else word.lower()
        elif len(word) > 1:
            break
    return re.sub(r" +([,;:.!?])", r"\1", " ".join(words))


def parse_diatheke(output: str, module: str) -> dict[str, str]:
    """{verse reference: text} from `diatheke -f plain` output; a verse may span several lines.

    A heading (a psalm's title, repeated by diatheke before later verses) stands on the line before an
    indented verse start, or before the reference on the verse's own line; neither is kept.
    """
    verses: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in output.splitlines():
        if raw.strip() == f"({module})":
            break
        line = _TAG.sub(" ", raw)
        match = _VERSE_START.match(line)
        if match is None:
            if current is not None and line.strip():
                current.append(line)
            continue
        if match["lead"] and not match["lead"].strip() and current is not None and len(current) > 1:
            current.pop()
        current = verses.setdefault(match["ref"], [])
        current.append(match["text"])
    return {ref: normalise_space(" ".join(lines)) for ref, lines in verses.items()}


def _chapter(ref: str) -> tuple[str, int]:
    """("Job", 40) for "Job 40:24"."""
    book, chapter_verse = ref.rsplit(" ", 1)
    return book, int(chapter_verse.split(":")[0])


def shifted_chapters(*texts: dict[str, str]) -> set[tuple[str, int]]:
    """Chapters where the versifications may part: one with an empty verse on either side, and the next.

    The Reina Valera module keeps the Spanish verse numbering in places (Numbers 13, Job 40, Jonah 2...):
    it leaves a verse empty and shifts the verses after it, so by reference they no longer pair.
    """
    chapters = set()
    for verses in texts:
        for ref, text in verses.items():
            if not text:
                book, chapter = _chapter(ref)
                chapters |= {(book, chapter), (book, chapter + 1)}
    return chapters


def is_usable_verse(text: str) -> bool:
    """A verse worth voicing: 4-30 words and no markup left after cleaning."""
    return BIBLE_WORDS[0] <= len(text.split()) <= BIBLE_WORDS[1] and not _BIBLE_MARKUP.search(text)


def is_usable_verse_pair(src: str, tgt: str) -> bool:
    """Both verses usable and of similar length in characters (a guard against misaligned verses)."""
    return (
        is_usable_verse(src)
        and is_usable_verse(tgt)
        and BIBLE_LENGTH_RATIO[0] <= len(src) / len(tgt) <= BIBLE_LENGTH_RATIO[1]
    )


def _start_diatheke(module: str, key: str) -> subprocess.Popen:
    """Starts `diatheke` on one module; the two modules are read in parallel."""
    return subprocess.Popen(
        ["diatheke", "-b", module, "-f", "plain", "-k", key],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


@functools.lru_cache(maxsize=2)
def bible_pairs(key: str = BIBLE_KEYS["all"]) -> tuple[Pair, ...]:
    """(Spanish, English) verse pairs for a diatheke key, paired by reference, deduplicated."""
    if shutil.which("diatheke") is None:
        raise SynthError("diatheke not found: install the Debian package diatheke")
    procs = {lang: _start_diatheke(module, key) for lang, (module, _) in BIBLE_MODULES.items()}
    verses = {}
    for lang, proc in procs.items():
        out, err = proc.communicate()
        module, package = BIBLE_MODULES[lang]
        verses[lang] = parse_diatheke(out, module)
        if proc.returncode != 0 or not verses[lang]:
            raise SynthError(
                f"diatheke gave no verses of {module} ({err.strip()[:80]}): install the Debian package {package}"
            )
    skip = shifted_chapters(verses["es"], verses["en"])
    pairs = []
    for ref, es in verses["es"].items():
        if ref not in verses["en"] or _chapter(ref) in skip:
            continue
        first_of_psalm = ref.startswith("Psalms ") and ref.endswith(":1")
        pair = Pair(src=clean_verse(es, first_of_psalm), tgt=clean_verse(verses["en"][ref]))
        if is_usable_verse_pair(pair.src, pair.tgt):
            pairs.append(pair)
    return tuple(dedupe(pairs))


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
