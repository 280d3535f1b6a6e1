"""The filters every parallel text source of `speechmt data synth-mt` goes through, each drop counted by reason:

- `empty`: a side without text;
- `placeholder or markup`: printf/Python/shell format codes (`%s`, `%(name)d`, `{0}`, `${VAR}`), tags,
  entities, escapes, command-line options (software messages are full of them, and none can be spoken);
- `too few words` / `too many words`: the source's word range on the English side (and 1..range on the other);
- `length ratio`: one side more than twice as long as the other in characters (+10 each: short phrases may
  differ more), a sign of a misalignment or a partial translation;
- `untranslated`: both sides the same text;
- `wrong language`: a side with more function words of the other language than of its own (a German
  catalog entry left in English, a swapped dictionary entry);
- `a corpus sentence`: either side is a sentence of the mini corpus (any split), so that no dev or test
  sentence reaches training;
- `duplicate`: a source or target text seen before (case-folded), in this or an earlier source.

`TextFilter` does the same for the sentences of monolingual text (`speechmt data synth-mono`): `empty`, `url or
e-mail`, `placeholder or markup`, `not a whole sentence` (no capital or digit first, or no . ! ? … last),
`too few words` / `too many words` (the source's range), `numbers or symbols` (under 60 % of the characters
letters), `wrong language` (more English function words than of its own language), `a corpus sentence`,
`duplicate`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from speechmt_corpora.text import Pair, normalise_space

T = TypeVar("T")
LENGTH_RATIO = 2.0
LENGTH_SMOOTHING = 10
MIN_LETTERS = 0.6  # a sentence's share of letters among its characters (not spaces)
HOMOGRAPHS = {"de": frozenset({"will"})}  # English function words that are also words of the language
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        "the and is are were of to that you he she we they not have has with for this what my your our "
        "their who does did would can could will from".split()
    ),
    "de": frozenset(
        "der das und ist sind waren nicht ein eine einen dem den des zu mit für auf ich du er sie wir "
        "ihr sich haben wird werden kann auch noch schon nach oder wenn".split()
    ),
    "es": frozenset(
        "el la los las del que y en un una es son por para con se su sus al lo como más pero le ya "
        "este esta estos hay muy sin sobre también".split()
    ),
    # the languages of MuST-C's other targets and of more CoVoST 2 sources (speechmt_corpora.languages)
    "fr": frozenset(
        "le la les des du un une est sont et dans pour avec sur pas ne que qui il elle nous vous ils ce "
        "cette ces au aux se sa son ses leur être avoir peut été".split()
    ),
    "it": frozenset(
        "il lo la gli le dei delle della del un una è sono e per con su non che di da nel nella questo "
        "questa si suo sua essere può stato".split()
    ),
    "nl": frozenset(
        "de het een zijn en van voor met op niet dat die deze dit er wordt worden kan naar bij om "
        "ook als uit geen".split()
    ),
    "pt": frozenset(
        "o os as um uma é são e para com em não que do da dos das no na este esta se seu sua ser "
        "pode foi ao pelo pela".split()
    ),
    "ro": frozenset(
        "și este sunt un o în pentru cu pe nu că care de la din acest această se fi poate fost mai sau "
        "al ale lui".split()
    ),
    "ru": frozenset("и в не на что с по для это как из от к у же или быть может был все этот эта его её".split()),
    "ca": frozenset(
        "el la els les un una és són i per amb en que del dels als aquest aquesta es seu seva ser pot ha".split()
    ),
}
LEGACY_VOTES = ("en", "de", "es")  # counted over the words of _WORD, as before the other languages joined
_PLACEHOLDER = re.compile(
    r"%(?:\(\w+\))?[-+#0']*(?:\d+\$)?\*?\d*(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?[diouxXeEfFgGaAcspnmS%]"
    r"|%\d|%[A-Z]\w*%"  # %1, %NAME%
    r"|\{[\w.:!]*\}"  # {0}, {name}
    r"|\$\{?\w+"  # $VAR, ${VAR}
    r"|<[^<>]*>|&[#\w]+;"  # tags, entities
    r"|@\w+@|\\[ntr\\]|[\n\t\r]"  # @VAR@, escapes, layout
    r"|(?:^|\s)--?[a-zA-Z][\w-]*"  # command-line options
    r"|\w+\(\)|[\w-]+/[\w./-]+|\bhttps?:|`"  # calls, paths, addresses, code quotes
)


_URL = re.compile(r"\b(?:https?|ftp)://|\bwww\.|\S@\w[\w-]*\.\w|\b[\w-]+\.(?:de|com|org|net|html?)\b", re.I)
_OPENING = "\"„“»«‚‘'(["
_SENTENCE_END = re.compile(r"[.!?…][\"“”«»’')]*$")


def has_placeholder(text: str) -> bool:
    """Whether a text holds a format code, markup, an escape, an option, a path or code (see _PLACEHOLDER)."""
    return _PLACEHOLDER.search(text) is not None


_WORD = re.compile(r"[a-zäöüßáéíóúñ]+")
_ANY_WORD = re.compile(r"[^\W\d_]+")


def language_votes(text: str) -> Counter:
    """{language: function words of it in `text`} for each language of FUNCTION_WORDS (English, German and Spanish
    over their own letters, as they always were; the others over any letters)."""
    lower = text.lower()
    words, any_words = _WORD.findall(lower), _ANY_WORD.findall(lower)
    return Counter(
        {
            lang: sum(w in vocab for w in (words if lang in LEGACY_VOTES else any_words))
            for lang, vocab in FUNCTION_WORDS.items()
        }
    )


def wrong_language(text: str, lang: str, other: str, homographs: frozenset[str] = frozenset()) -> bool:
    """True when `text`, meant to be `lang`, holds more function words of `other` than of `lang` (words of
    `homographs`, also words of `lang`, not counted for `other`)."""
    votes = language_votes(text)
    if homographs:
        votes[other] -= sum(w in homographs for w in re.findall(r"[a-zäöüßáéíóúñ]+", text.lower()))
    return votes[other] > votes[lang]


def key(text: str) -> str:
    """How texts are compared for duplicates and exclusion: case-folded, whitespace-normalised."""
    return normalise_space(text).casefold()


def keep_counted(
    items: Sequence[T], reason: Callable[[T], str | None], accept: Callable[[T], T]
) -> tuple[list[T], Counter]:
    """The items whose `reason` is None, in order, each as `accept` returns it (after it is recorded as seen), and
    the others counted by reason: no item is dropped without one."""
    kept, dropped = [], Counter()
    for item in items:
        why = reason(item)
        if why is None:
            kept.append(accept(item))
        else:
            dropped[why] += 1
    return kept, dropped


@dataclass
class PairFilter:
    """The shared filters for pairs of `src_lang` -> `tgt_lang`, with the texts seen so far (duplicates across
    sources) and the keys of the corpus' sentences to keep out. Call `keep` on each source's pairs in turn."""

    src_lang: str
    tgt_lang: str
    corpus: set[str] = field(default_factory=set)
    seen_src: set[str] = field(default_factory=set)
    seen_tgt: set[str] = field(default_factory=set)

    def reason(self, pair: Pair, words: tuple[int, int]) -> str | None:
        """Why a pair is dropped (a reason of the module docstring), or None to keep it; `words`: the source's
        range of English words."""
        if not pair.src.strip() or not pair.tgt.strip():
            return "empty"
        if has_placeholder(pair.src) or has_placeholder(pair.tgt):  # before layout (newlines, tabs) is normalised
            return "placeholder or markup"
        src, tgt = normalise_space(pair.src), normalise_space(pair.tgt)
        english = src if self.src_lang == "en" else tgt
        n = len(english.split())
        if n < words[0]:
            return "too few words"
        if n > words[1] or max(len(src.split()), len(tgt.split())) > 2 * words[1]:
            return "too many words"
        ratio = (len(src) + LENGTH_SMOOTHING) / (len(tgt) + LENGTH_SMOOTHING)
        if not 1 / LENGTH_RATIO <= ratio <= LENGTH_RATIO:
            return "length ratio"
        s, t = key(src), key(tgt)
        if s == t:
            return "untranslated"
        if wrong_language(src, self.src_lang, self.tgt_lang) or wrong_language(tgt, self.tgt_lang, self.src_lang):
            return "wrong language"
        if s in self.corpus or t in self.corpus:
            return "a corpus sentence"
        if s in self.seen_src or t in self.seen_tgt:
            return "duplicate"
        return None

    def keep(self, pairs: list[Pair], words: tuple[int, int]) -> tuple[list[Pair], Counter]:
        """The pairs that pass, in order (each one's texts then count as seen), and the drops by reason."""
        return keep_counted(pairs, lambda pair: self.reason(pair, words), self._accept)

    def _accept(self, pair: Pair) -> Pair:
        pair = Pair(normalise_space(pair.src), normalise_space(pair.tgt))
        self.seen_src.add(key(pair.src))
        self.seen_tgt.add(key(pair.tgt))
        return pair


@dataclass
class TextFilter:
    """The filters for the sentences of monolingual text in `lang` (German, Spanish or English), with the texts
    seen so far (duplicates across sources) and the keys of the corpus' sentences to keep out. Call `keep` on
    each source's sentences in turn."""

    lang: str
    corpus: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)

    def reason(self, text: str, words: tuple[int, int]) -> str | None:
        """Why a sentence is dropped (a reason of the module docstring), or None to keep it; `words`: its range."""
        text = normalise_space(text)
        if not text:
            return "empty"
        if _URL.search(text):
            return "url or e-mail"
        if has_placeholder(text):
            return "placeholder or markup"
        first = text.lstrip(_OPENING)[:1]
        if not (first.isupper() or first.isdigit()) or not _SENTENCE_END.search(text):
            return "not a whole sentence"
        n = len(text.split())
        if n < words[0]:
            return "too few words"
        if n > words[1]:
            return "too many words"
        chars = text.replace(" ", "")
        if sum(c.isalpha() for c in chars) < MIN_LETTERS * len(chars):
            return "numbers or symbols"
        other = "en" if self.lang != "en" else "de"
        if wrong_language(text, self.lang, other, HOMOGRAPHS.get(self.lang, frozenset())):
            return "wrong language"
        if key(text) in self.corpus:
            return "a corpus sentence"
        if key(text) in self.seen:
            return "duplicate"
        return None

    def keep(self, texts: Sequence[str], words: tuple[int, int]) -> tuple[list[str], Counter]:
        """The sentences that pass, in order and whitespace-normalised (each then counts as seen), and the drops
        by reason."""
        return keep_counted(texts, lambda text: self.reason(text, words), self._accept)

    def _accept(self, text: str) -> str:
        self.seen.add(key(text))
        return normalise_space(text)
