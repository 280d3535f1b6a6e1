"""German sentences from the Debian `fortunes-de` package (GPL-2+: never commit its text), read at run time from
/usr/share/games/fortunes/de: quotations, jokes, sayings and anecdotes, as back-translation input.

A fortune file holds entries separated by lines with only `%`; beside it, `NAME.dat` is strfile's index (not
text) and `NAME.u8` its UTF-8 twin (a symlink to it here, a re-encoded copy where the original is Latin-1), so
each file is read once, the `.u8` one where both exist, in UTF-8 (Latin-1 where a file is not UTF-8, counted).
An entry becomes clean sentences, and every part left out is counted with its reason:

- whole entries: `empty`, `chat or mail quote` (IRC lines `<nick> ...`, `* nick ...`; e-mail quotes `> ...`),
  `ascii art or symbols` (a line mostly of symbols, or a run like `====`), `poem or verse` (4+ short lines, two
  in five rhyming);
- lines: `attribution` (`-- Goethe` and what follows it), `heading` (a line ending in `:` or `*wrapped*`),
  `table or list` (columns: a tab or 3+ spaces inside the line, or 8 columns of indent: recipes' ingredients,
  quiz options);
- cleaned, not dropped: dialogue and list markers (`- `, `F: `, `Name: "...`, `1) `, `a) `), quotation marks and
  brackets around a whole sentence or left unpaired by the split, emoticons.

What is left is joined line by line within blank-line paragraphs (hyphenation undone) and split into sentences
after . ! ? … before a capital, not after German abbreviations, ordinals or initials (`z. B.`, `3. Mai`,
`J. W. Goethe`). The sentence filters (length, language, URLs, corpus sentences, duplicates) are the caller's:
speechmt_corpora.mt_filters.TextFilter.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

from speechmt_corpora.text import normalise_space

FORTUNES_DE_DIR = Path("/usr/share/games/fortunes/de")
NOT_TEXT = (".dat", ".pos")  # strfile's index, fortune's position file
POEM_LINES = 4  # an entry of at least this many lines may be a poem
POEM_LINE_CHARS = 45  # a poem's lines are short (prose is wrapped near 70 characters)
POEM_RHYMES = 0.4  # and this share of them rhymes (ABCB stanzas: half)
TABLE_INDENT = 8  # a line indented this far (tabs at 8) is layout: a recipe's ingredients, a column

_ATTRIBUTION = re.compile(r"^\s*(?:--(?!-)|—)\s*\S")
_CHAT = re.compile(r"^\s*(?:<[^<>\s]{1,24}>|\* \S+ |-[!:]-|\[\d\d?:\d\d|>)")
_ART_RUN = re.compile(r"([-_=~#+|/\\<>^`])\1{3,}")  # not * (a censored word: Sch****)
_TABLE = re.compile(r"\S(?:\t| {3,})\S")
_HEADING = re.compile(r"^\s*(?:\S.*:|\*[^*]+\*)\s*$")
_MARKER = re.compile(r"^\s*(?:[-–—•]|\d{1,2}\)|[a-z]\))\s+(?=\S)")  # a dialogue turn's dash; a list's 1), a)
_SPEAKER = re.compile(r"^\s*(?:[A-ZÄÖÜ]|[A-ZÄÖÜ][\w.'-]*(?: [\w.'-]+){0,2}(?=:\s*[\"„“»]))\s*:\s+")
_EMOTICON = re.compile(r"(?<!\S)[:;8xX]-?[()DPp|/\\\]\[]+(?!\S)")
_BOUNDARY = re.compile(r"[.!?…]+[\"“”«»)]*\s+(?=[\"„“»«(]?[A-ZÄÖÜ0-9])")
_SHORT_WORD = re.compile(r"(?:\d{1,2}|\w|(?:\w\.)+\w)\.")  # an ordinal (3.), an initial (J.), z.B.
_ELLIPSIS_NEXT = frozenset({"und", "oder", "bis", "sowie", "als", "noch", "wie"})
_OPEN, _CLOSE = '"„“»«', '"“”«»'
ABBREVIATIONS = frozenset(
    "abs. allg. amerik. art. bd. bes. bspw. bzw. ca. chr. dr. ehem. eng. engl. etc. evtl. ff. franz. geb. gest. "
    "ggf. ggü. griech. hr. hrsg. inkl. jh. jhd. kath. lat. max. min. mio. mr. mrs. mrd. nr. prof. sog. st. str. "
    "tel. usw. vgl. z. u. d. o. s. v. n. i.".split()
)


def fortune_files(folder: Path) -> list[Path]:
    """Each fortune file of `folder` once, in name order: no index (`.dat`); of a file and its `NAME.u8` twin the
    `.u8` one; two names of one file (a symlink) read once."""
    chosen: dict[str, Path] = {}
    for path in sorted(Path(folder).iterdir()):
        if path.is_file() and not path.name.endswith(NOT_TEXT) and not path.name.startswith("."):
            base = path.name.removesuffix(".u8")
            if path.name.endswith(".u8") or base not in chosen:
                chosen[base] = path
    files, seen = [], set()
    for base in sorted(chosen):
        real = chosen[base].resolve()
        if real not in seen:
            seen.add(real)
            files.append(chosen[base])
    return files


def read_fortunes(path: Path) -> tuple[list[str], bool]:
    """The entries of a fortune file (text between `%` lines, in order) and whether it had to be read as Latin-1
    (not UTF-8)."""
    raw = Path(path).read_bytes()
    try:
        text, latin1 = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, latin1 = raw.decode("latin-1"), True
    entries, lines = [], []
    for line in text.splitlines():
        if line.rstrip("\r") == "%":
            entries.append("\n".join(lines))
            lines = []
        else:
            lines.append(line.rstrip("\r"))
    if any(line.strip() for line in lines):
        entries.append("\n".join(lines))
    return entries, latin1


def is_art(line: str) -> bool:
    """A line drawn, not written: a run of four of one symbol (`====`, `~~~~`), or five symbols or more (not
    letters, digits or . ! ?) where letters and digits are under 40 % of the characters."""
    chars = "".join(line.split())
    symbols = sum(not c.isalnum() and c not in ".!?" for c in chars)
    return _ART_RUN.search(chars) is not None or (symbols >= 5 and sum(map(str.isalnum, chars)) < 0.4 * len(chars))


def last_word(line: str) -> str:
    """The last word of a line, lower case, without punctuation ("" when it has none)."""
    words = re.findall(r"[^\W\d_]+", line.lower())
    return words[-1] if words else ""


def rhyme_key(word: str) -> str:
    """What a verse line ending on `word` rhymes on: from its last vowel group on, or from the one before where the
    last is an unstressed e (`schlagen`, `tragen`: `agen`; `Regeln`: `egeln`); ß as ss, a vowel's lengthening h
    dropped, doubled letters single (`dann`, `dran`: `an`; `gehn`: `en`)."""
    word = re.sub(r"(?<=[aeiouäöüy])h", "", word.replace("ß", "ss"))
    groups = list(re.finditer(r"[aeiouäöüy]+", word))
    if not groups:
        return ""
    start = groups[-2 if groups[-1].group() == "e" and len(groups) > 1 else -1].start()
    return re.sub(r"(.)\1+", r"\1", word[start:])


def is_poem(lines: list[str]) -> bool:
    """Verse: at least POEM_LINES lines, three in four short, and two in five rhyming (a line's rhyme_key is that
    of one of the two lines before or after it, ending on another word)."""
    lines = [line.strip() for line in lines if line.strip()]
    if len(lines) < POEM_LINES or sum(len(line) <= POEM_LINE_CHARS for line in lines) < 0.75 * len(lines):
        return False
    words = [last_word(line) for line in lines]
    keys = [rhyme_key(w) for w in words]
    rhyming = sum(
        any(
            keys[i] and keys[i] == keys[j] and words[i] != words[j]
            for j in range(max(0, i - 2), min(len(lines), i + 3))
        )
        for i in range(len(lines))
    )
    return rhyming >= POEM_RHYMES * len(lines)


def entry_reason(lines: list[str]) -> str | None:
    """Why a whole entry (its lines, attribution cut) is left out, or None."""
    if not any(line.strip() for line in lines):
        return "empty"
    if any(_CHAT.match(line) for line in lines):
        return "chat or mail quote"
    if any(is_art(line) for line in lines):
        return "ascii art or symbols"
    if is_poem(lines):
        return "poem or verse"
    return None


def cut_attribution(lines: list[str]) -> tuple[list[str], int]:
    """The entry's lines before its attribution (`-- Name`, and everything after it), and how many non-blank
    lines were cut."""
    for i, line in enumerate(lines):
        if _ATTRIBUTION.match(line):
            return lines[:i], sum(bool(rest.strip()) for rest in lines[i:])
    return lines, 0


def _indent(line: str) -> int:
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip())


def paragraphs(lines: list[str], counts: Counter) -> list[str]:
    """The entry's text as paragraphs: blank lines, headings and table lines end one (headings and table lines
    counted and left out), a dialogue turn or list item starts one (its marker counted and removed)."""
    blocks: list[list[str]] = [[]]
    for line in lines:
        if _TABLE.search(line.strip()) or _indent(line) >= TABLE_INDENT:
            counts["table or list"] += 1
            blocks.append([])
        elif _HEADING.match(line):
            counts["heading"] += 1
            blocks.append([])
        elif not line.strip():
            blocks.append([])
        else:
            turn = _MARKER.sub("", line, count=1)
            turn = _SPEAKER.sub("", turn, count=1)
            if turn != line:
                counts["dialogue or list marker"] += 1
                blocks.append([])
            blocks[-1].append(turn.strip())
    return [join_lines(block) for block in blocks if block]


def join_lines(lines: list[str]) -> str:
    """Lines of a paragraph as one text: a word hyphenated at a line end is joined again (`Wissen-` + `schaften`),
    a hyphen before a capital is kept (`Selbst-` + `Mißverständnisse`), and before `und`, `oder` a space too
    (`auf-` + `oder abwärts`); other lines meet with a space."""
    text = ""
    for line in lines:
        if not re.search(r"\w-$", text):
            text = f"{text} {line}" if text else line
        elif line[:1].islower() and line.split()[0] not in _ELLIPSIS_NEXT:
            text = text[:-1] + line
        else:
            text += (" " if line.split()[0] in _ELLIPSIS_NEXT else "") + line
    return normalise_space(text)


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph: split after . ! ? or … (and closing quotes) before a capital or digit, but not
    after an abbreviation (`bzw.`, `z. B.`), an ordinal (`3.`) or an initial (`J.`)."""
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        before = text[start : match.start() + 1].split()
        word = before[-1].lower().lstrip('"„“»«([') if before else ""
        if match.group().startswith(".") and (word in ABBREVIATIONS or _SHORT_WORD.fullmatch(word)):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def unquote(sentence: str) -> str:
    """A sentence without the quotation marks and brackets that the split left unpaired (at an edge, or else a
    lone quotation mark inside), and without a pair that encloses all of it and nothing else."""
    quotes = set(_OPEN + _CLOSE)
    if sum(c in quotes for c in sentence) % 2:
        at = (
            0
            if sentence[:1] in _OPEN
            else len(sentence) - 1
            if sentence[-1:] in _CLOSE
            else max(i for i, c in enumerate(sentence) if c in quotes)
        )
        sentence = normalise_space(sentence[:at] + " " + sentence[at + 1 :])
    if sentence.startswith("(") and sentence.count("(") > sentence.count(")"):
        sentence = sentence[1:]
    if sentence.endswith(")") and sentence.count(")") > sentence.count("("):
        sentence = sentence[:-1]
    for opening, closing in ((_OPEN, _CLOSE), ("(", ")")):
        inner = sentence[1:-1]
        if (
            len(sentence) > 2
            and sentence[0] in opening
            and sentence[-1] in closing
            and not any(c in inner for c in opening + closing)
        ):
            sentence = inner
    return sentence.strip()


def entry_sentences(entry: str, counts: Counter) -> tuple[list[str], str | None]:
    """The clean sentences of one fortune and None, or [] and why the whole entry is left out; what was cut or
    cleaned is added to `counts` (attribution, heading, table or list, dialogue or list marker, quotes or
    brackets, emoticon)."""
    lines, cut = cut_attribution(entry.splitlines())
    counts["attribution"] += cut
    reason = entry_reason(lines)
    if reason is not None:
        return [], reason
    sentences = []
    for paragraph in paragraphs(lines, counts):
        paragraph, n = _EMOTICON.subn("", paragraph)
        counts["emoticon"] += n
        for sentence in split_sentences(normalise_space(paragraph)):
            clean = unquote(sentence)
            counts["quotes or brackets"] += clean != sentence
            if clean:
                sentences.append(clean)
    return sentences, None


@functools.lru_cache(maxsize=2)
def fortune_sentences(folder: Path = FORTUNES_DE_DIR) -> tuple[tuple[str, ...], dict]:
    """Every clean sentence of every fortune file in `folder`, in file and entry order, and the counts: files
    (and which were read as Latin-1), entries read / kept / dropped by reason, lines cut and texts cleaned by
    kind, entries and sentences per file. FileNotFoundError when the folder holds no fortune file. Read once
    per folder and process (as speechmt_corpora.text.ding_pairs): treat the result as read-only."""
    files = fortune_files(folder) if Path(folder).is_dir() else []
    if not files:
        raise FileNotFoundError(f"{folder}: no fortune files")
    sentences: list[str] = []
    dropped, cleaned, per_file, latin1 = Counter(), Counter(), {}, []
    n_entries = 0
    for path in files:
        entries, was_latin1 = read_fortunes(path)
        if was_latin1:
            latin1.append(path.name.removesuffix(".u8"))
        before = len(sentences)
        for entry in entries:
            found, reason = entry_sentences(entry, cleaned)
            if reason is not None:
                dropped[reason] += 1
            sentences += found
        n_entries += len(entries)
        per_file[path.name.removesuffix(".u8")] = {"entries": len(entries), "sentences": len(sentences) - before}
    counts = {
        "folder": str(folder),
        "files": len(files),
        "files read as latin-1": latin1,
        "entries": {
            "read": n_entries,
            "kept": n_entries - sum(dropped.values()),
            "dropped": dict(sorted(dropped.items())),
        },
        "lines cut": {k: cleaned[k] for k in ("attribution", "heading", "table or list")},
        "cleaned": {k: cleaned[k] for k in ("dialogue or list marker", "quotes or brackets", "emoticon")},
        "per_file": per_file,
    }
    return tuple(sentences), counts
