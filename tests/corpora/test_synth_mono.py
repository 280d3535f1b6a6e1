"""`synth-mono`: German sentences from a folder in fortune's layout (entries between `%` lines, `.dat` indexes,
`.u8` twins, a Latin-1 file), each drop counted by reason, the corpus' sentences kept out as synth-mt keeps them
out, the command's file for `backtranslate --input` and its one-line errors; then once on the installed
fortunes-de (skipped without). Every text here is written for the test."""

import json
from collections import Counter
from pathlib import Path

import pytest

from speechmt.cli import main
from speechmt.decoding.backtranslate import BacktranslateConfig, read_inputs
from speechmt_corpora.common import SynthError
from speechmt_corpora.fortunes import (
    FORTUNES_DE_DIR,
    entry_sentences,
    is_art,
    is_poem,
    rhyme_key,
    split_sentences,
    unquote,
)
from speechmt_corpora.mono_text import MonoPaths, build_mono_text
from speechmt_corpora.mt_filters import TextFilter, key
from tests.corpora.test_synth_mt_sources import DEV, TEST, corpus

ENTRIES = [
    "Der Zug fährt heute pünktlich ab. Alle Reisenden freuen sich\nsehr darüber.\n\t\t-- Ein Schaffner",
    "Wer früh aufsteht, hat den ganzen Tag vor sich.",
    "   /\\_/\\\n  ( o.o )\n   Eine Katze",  # ascii art
    "<anna> Hat jemand meinen Schlüssel gesehen?\n<ben> Nein, leider nicht.",  # chat
    "Im Garten steht ein kleiner Baum,\nder träumt im Winter seinen Traum.\nIm Frühling wird er wieder grün\n"
    "und alle Blumen fangen an zu blühn.",  # verse
    'Fragt der Lehrer: "Wer kann mir das erklären?"\nSagt Fritz: "Das kann nur meine Oma."',
    "Rezept: Brot\n Zutaten:   500 g Mehl\n            1 Prise Salz\nDen Teig eine Stunde lang kneten und dann "
    "backen.\nMehr unter http://example.org/brot steht es.\nGut so!",
    'Letzte Worte eines Bergsteigers:\n  "Das Seil hält bestimmt noch eine Weile."',
    "- Kommst du am 3. Mai zu uns?\n- Ja, ich bringe z. B. einen Kuchen mit.",
    "The early bird catches the worm, they say.",
    " ".join(["Wort"] * 44) + ".",
    "Wer früh aufsteht, hat den ganzen Tag vor sich.",  # again
    f"{DEV[1]} Niemand weiß, wem es gehört.",  # a dev sentence of the corpus
    "",
    "Das klappt bestimmt beim nächsten Mal. ;-)",
    "Die Mannschaft hat das Spiel nach langer Vorbe-\nreitung gewonnen.",
    "Der Rechner fragt: Wirklich löschen (j/n)?",
]
KEPT = [
    "Größer ist nicht immer besser, sagt der Riese.",
    "Über Nacht hat es sehr viel geschneit.",
    "Der Zug fährt heute pünktlich ab.",
    "Alle Reisenden freuen sich sehr darüber.",
    "Wer früh aufsteht, hat den ganzen Tag vor sich.",
    "Wer kann mir das erklären?",
    "Das kann nur meine Oma.",
    "Den Teig eine Stunde lang kneten und dann backen.",
    "Das Seil hält bestimmt noch eine Weile.",
    "Kommst du am 3. Mai zu uns?",
    "Ja, ich bringe z. B. einen Kuchen mit.",
    "Niemand weiß, wem es gehört.",
    "Das klappt bestimmt beim nächsten Mal.",
    "Die Mannschaft hat das Spiel nach langer Vorbereitung gewonnen.",
]


def fortunes(folder: Path) -> Path:
    """Fortune files as Debian installs them: a UTF-8 file with its index and a `.u8` symlink, a Latin-1 file, and
    a Latin-1 file beside its UTF-8 `.u8` copy."""
    folder.mkdir(parents=True)
    (folder / "sprueche").write_text("\n%\n".join(ENTRIES) + "\n%\n", encoding="utf-8")
    (folder / "sprueche.dat").write_bytes(b"\x00\x00\x00\x02\x00\x00\x00\x11\xff\xfe%\n")
    (folder / "sprueche.u8").symlink_to("sprueche")
    (folder / "alt").write_bytes(f"{KEPT[0]}\n%\n".encode("latin-1"))
    (folder / "neu").write_bytes(f"{KEPT[1]}\n%\n".encode("latin-1"))
    (folder / "neu.u8").write_text(f"{KEPT[1]}\n%\n", encoding="utf-8")
    return folder


@pytest.fixture
def fixtures(tmp_path):
    doc = tmp_path / "doc" / "fortunes-de"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("Files: *\nCopyright: the test\nLicense: GPL-2+\n", encoding="utf-8")
    return MonoPaths(fortunes_de=fortunes(tmp_path / "fortunes"), doc=tmp_path / "doc"), corpus(tmp_path / "corpus")


def test_every_drop_counted_by_reason_and_the_sentences_kept(fixtures, tmp_path):
    paths, root = fixtures
    summary = build_mono_text("mustc", root, tmp_path / "mono", paths=paths)
    assert (tmp_path / "mono" / "mono.de.txt").read_text(encoding="utf-8").splitlines() == KEPT
    source = summary["sources"]["fortunes-de"]
    assert (source["status"], source["licence"], source["files"]) == ("read", "GPL-2+", 3)
    assert source["files read as latin-1"] == ["alt"]  # neu is read from its UTF-8 twin, sprueche once
    assert source["entries"] == {
        "read": 19,
        "kept": 15,
        "dropped": {"ascii art or symbols": 1, "chat or mail quote": 1, "empty": 1, "poem or verse": 1},
    }
    assert source["lines cut"] == {"attribution": 1, "heading": 1, "table or list": 2}
    assert source["cleaned"] == {"dialogue or list marker": 4, "quotes or brackets": 3, "emoticon": 1}
    assert source["dropped"] == {
        "a corpus sentence": 1,
        "duplicate": 1,
        "not a whole sentence": 1,
        "placeholder or markup": 1,
        "too few words": 1,
        "too many words": 1,
        "url or e-mail": 1,
        "wrong language": 1,
    }
    assert source["read"] == 22 == source["kept"] + sum(source["dropped"].values())  # nothing dropped silently
    assert source["per_file"] == {
        "alt": {"entries": 1, "sentences": 1},
        "neu": {"entries": 1, "sentences": 1},
        "sprueche": {"entries": 17, "sentences": 20},
    }
    assert (summary["sentences"], summary["per_source"], summary["pair"]) == (14, {"fortunes-de": 14}, "en-de")
    assert summary["excluded_as_corpus_sentences"] == 1 and summary["corpus_sentences"] == 6
    assert summary["next"].startswith(
        f"speechmt data backtranslate --input {tmp_path / 'mono' / 'mono.de.txt'} --src-lang en --tgt-lang de"
    )
    assert json.loads((tmp_path / "mono" / "mono_text_summary.json").read_text(encoding="utf-8")) == summary


def test_no_sentence_of_the_corpus_reaches_the_text(fixtures, tmp_path):
    """The exclusion is synth-mt's (any split, either side, case-folded): a test sentence becomes a fortune too."""
    paths, root = fixtures
    (paths.fortunes_de / "mehr").write_text(f"{TEST[1].upper()}\n%\n{DEV[1]}\n", encoding="utf-8")
    summary = build_mono_text("mustc", root, tmp_path / "mono", paths=paths)
    kept = {key(line) for line in (tmp_path / "mono" / "mono.de.txt").read_text(encoding="utf-8").splitlines()}
    assert not kept & {key(t) for t in DEV + TEST} and summary["excluded_as_corpus_sentences"] == 3


def test_covost_german_is_the_source_side_for_distill(fixtures, tmp_path):
    paths, _ = fixtures
    root = tmp_path / "covost"
    (root / "de").mkdir(parents=True)
    (root / "de" / "covost_v2.de_en.tsv").write_text(
        f"path\tsentence\ttranslation\tclient_id\tsplit\na.mp3\t{KEPT[4]}\tWho rises early has the day.\tx\tdev\n",
        encoding="utf-8",
    )
    summary = build_mono_text("covost2", root, tmp_path / "mono", paths=paths)
    assert summary["pair"] == "de-en" and summary["next"].startswith("speechmt data distill ")
    assert summary["sources"]["fortunes-de"]["dropped"]["a corpus sentence"] == 2  # the sentence, and its repeat
    with pytest.raises(SynthError, match=r"corpus 'mustc' \(en-de\) has no es side"):
        build_mono_text("mustc", fixtures[1], tmp_path / "x", lang="es", paths=paths)


def test_the_pieces_one_by_one():
    counts = Counter()
    assert (
        entry_sentences("Erster Satz hier. Zweiter Satz dort!\n  -- Jemand\n  (im Jahr 1999)", counts)
        == (["Erster Satz hier.", "Zweiter Satz dort!"], None)
        and counts["attribution"] == 2
    )
    assert (
        entry_sentences("Drei Regeln:\n1) Nie aufgeben.\n2) Immer\nweitermachen.", counts)
        == (["Nie aufgeben.", "Immer weitermachen."], None)
        and counts["dialogue or list marker"] == 2
    )
    assert split_sentences("Er kam am 3. Mai, d. h. spät. Dr. Meier wartete. J. W. Goethe schrieb es.") == [
        "Er kam am 3. Mai, d. h. spät.",
        "Dr. Meier wartete.",
        "J. W. Goethe schrieb es.",
    ]
    assert split_sentences('"Halt!" Er blieb stehen.') == ['"Halt!"', "Er blieb stehen."]
    assert unquote('"Sag mal, wo bist du.') == "Sag mal, wo bist du." and unquote("„Ja, gern.“") == "Ja, gern."
    assert unquote('"Drag und drop" ist langsam.') == '"Drag und drop" ist langsam.'  # a quote inside stays
    assert unquote('Er ruft: "Ja, Officer ... das ist sie.') == "Er ruft: Ja, Officer ... das ist sie."
    assert unquote("(Das e ist schlecht.)") == "Das e ist schlecht." == unquote("Das e ist schlecht.)")
    assert split_sentences("Sie tunkt. (Das geht auch. Mit Ei.) Fertig ist es.") == [
        "Sie tunkt.",
        "(Das geht auch.",
        "Mit Ei.)",
        "Fertig ist es.",
    ]
    assert rhyme_key("dann") == rhyme_key("dran") == "an" and rhyme_key("gehn") == rhyme_key("zehn") == "en"
    assert rhyme_key("schlagen") == rhyme_key("tragen") == "agen" != rhyme_key("regeln")  # -en alone is no rhyme
    assert not is_poem(["Nein.", "Nein.", "Doch.", "Nein."])  # the same word again is no rhyme
    assert is_art("=====") and is_art(" (_/ |  | \\_)") and not is_art('"Hallo, 222-22-22?"')
    assert not is_art("Nicht einmal in Ruhe sch****en kann man hier!")  # a censored word is no drawing
    f = TextFilter("de", corpus={key("Das ist streng verboten.")})
    words = (4, 40)
    assert f.reason("Lang leben will jeder, alt werden will keiner.", words) is None  # German "will"
    assert f.reason("We will meet at the station.", words) == "wrong language"
    assert f.reason('"Wir schwimmen!" ruft er laut.', words) is None  # a quote first is a sentence start
    assert f.reason("das ist klein geschrieben.", words) == "not a whole sentence"
    assert f.reason("Er fand 5270153634595573856737 heraus.", words) == "numbers or symbols"
    assert f.reason("Schreib an info@example.com bitte.", words) == "url or e-mail"
    kept, dropped = f.keep(["Das ist streng verboten.", "Das  ist gut so.", "DAS IST GUT SO."], words)
    assert kept == ["Das ist gut so."] and dropped == {"a corpus sentence": 1, "duplicate": 1}


def test_command_writes_beside_the_corpus_for_backtranslate(fixtures, capsys):
    paths, root = fixtures
    assert main(["data", "synth-mono", "mustc", "--root", str(root), "--fortunes", str(paths.fortunes_de)]) == 0
    printed = json.loads(capsys.readouterr().out)
    out = root / "en-de" / "mono-text"
    assert printed["file"] == str(out / "mono.de.txt") and (out / "mono_text_summary.json").is_file()
    assert printed["sentences"] == 14 and "per_file" not in printed["sources"]["fortunes-de"]
    items, skipped = read_inputs(BacktranslateConfig(str(out / "mono.de.txt"), str(out / "bt"), "en", "de"))
    assert [text for _, text in items] == KEPT and not skipped


def test_command_errors_are_one_line(fixtures, tmp_path, capsys):
    paths, root = fixtures
    missing = tmp_path / "no-fortunes"
    assert main(["data", "synth-mono", "mustc", "--root", str(root), "--fortunes", str(missing)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"speechmt: error: no de text: fortunes-de: not installed: {missing}: no fortune files: install "
        "the Debian package fortunes-de"
    ]
    assert (
        main(["data", "synth-mono", "mustc", "--root", str(tmp_path / "none"), "--fortunes", str(paths.fortunes_de)])
        == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"speechmt: error: {tmp_path / 'none'}: no MuST-C en-de")
    assert main(["data", "synth-mono", "mustc", "--root", str(root), "--lang", "es"]) == 2
    assert capsys.readouterr().err.startswith("speechmt data synth-mono: error: argument --lang: invalid choice: 'es'")


def test_the_real_installed_fortunes(tmp_path):
    if not FORTUNES_DE_DIR.is_dir():
        pytest.skip(f"needs {FORTUNES_DE_DIR} (Debian package fortunes-de)")
    first = build_mono_text("mustc", corpus(tmp_path / "corpus"), tmp_path / "mono")
    held = (tmp_path / "mono" / "mono.de.txt").read_text(encoding="utf-8").splitlines()[100]
    root = corpus(tmp_path / "corpus2")
    (root / "en-de/data/dev/txt/dev.de").write_text(f"{DEV[1]}\n{held}\n", encoding="utf-8")
    (root / "en-de/data/dev/txt/dev.en").write_text(f"{DEV[0]}\nA sentence.\n", encoding="utf-8")
    summary = build_mono_text("mustc", root, tmp_path / "mono2")
    source = summary["sources"]["fortunes-de"]
    assert summary["sentences"] == first["sentences"] - 1 > 20000 and source["licence"] == "GPL-2+"
    assert source["dropped"]["a corpus sentence"] >= 1 and source["files"] >= 40
    assert source["entries"]["read"] == source["entries"]["kept"] + sum(source["entries"]["dropped"].values())
    assert source["read"] == source["kept"] + sum(source["dropped"].values())
    assert all(n > 0 for n in source["entries"]["dropped"].values()) and len(source["entries"]["dropped"]) >= 3
    assert source["per_file"].get("asciiart", {"sentences": 0})["sentences"] == 0
    lines = (tmp_path / "mono2" / "mono.de.txt").read_text(encoding="utf-8").splitlines()
    assert key(held) not in {key(line) for line in lines} and len(set(map(key, lines))) == len(lines)
    assert all(4 <= len(line.split()) <= 40 for line in lines)
