"""`synth-mt`'s parallel text sources on small fixtures in the installed layouts (a Ding file, gettext catalogs,
Debian Reference chapters, GNOME help pages; the Bible through a stand-in), their filters and summary, the
exclusion of the corpus' dev and test sentences; then once on the real installed packages (skipped without).
Every text here is written for the test."""

import json
import struct
from pathlib import Path

import pytest

from speechmt.cli import main
from speechmt.data.manifest import read_manifest
from speechmt_corpora import mt_sources
from speechmt_corpora.catalogs import CatalogError, read_mo, strip_accelerator
from speechmt_corpora.common import SynthError
from speechmt_corpora.manuals import align_blocks
from speechmt_corpora.mt_filters import PairFilter, has_placeholder, key
from speechmt_corpora.mt_sources import SourcePaths
from speechmt_corpora.mt_text import build_mt_text
from speechmt_corpora.text import Pair

DEV = ("The red bicycle stands in the garden today.", "Das rote Fahrrad steht heute im Garten.")
TEST = ("My sister reads a long book every winter.", "Meine Schwester liest jeden Winter ein langes Buch.")
TRAIN = ("We will meet at the station at noon.", "Wir treffen uns mittags am Bahnhof.")


def write_mo(path: Path, messages: dict[str, str], charset: str = "UTF-8") -> None:
    """A little-endian gettext catalog as msgfmt writes one (header entry first, ids sorted)."""
    entries = {"": f"Content-Type: text/plain; charset={charset}\n", **messages}
    ids = sorted(entries)
    keys = [i.encode(charset) for i in ids]
    values = [entries[i].encode(charset) for i in ids]
    n, start = len(ids), 28 + 16 * len(ids)
    data, offsets = b"", []
    for blob in keys + values:
        offsets.append((len(blob), start + len(data)))
        data += blob + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    table = b"".join(struct.pack("<2I", *o) for o in offsets)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + table + data)


def corpus(root: Path) -> Path:
    """A MuST-C-layout mini corpus holding only its texts: one sentence per split."""
    for split, (en, de) in {"train": TRAIN, "dev": DEV, "tst-COMMON": TEST}.items():
        txt = root / "en-de" / "data" / split / "txt"
        txt.mkdir(parents=True)
        (txt / f"{split}.en").write_text(en + "\n", encoding="utf-8")
        (txt / f"{split}.de").write_text(de + "\n", encoding="utf-8")
    return root


def ding_file(path: Path) -> Path:
    lines = [
        "# test dictionary",
        "Guten Morgen, wie geht es dir? :: Good morning, how are you?",
        "ein schönes Haus {n} | schöne Häuser {pl} :: a beautiful house | beautiful houses",
        f"{DEV[1]} :: {DEV[0]}",  # a dev sentence: must not reach the MT text
        f"{TEST[1]} :: {TEST[0]}",
        "Das Wetter ist heute sehr schön. :: The weather is very nice today.",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def locale(root: Path) -> Path:
    write_mo(
        root / "de" / "LC_MESSAGES" / "viewer.mo",
        {
            "_Open the selected file in a new window": "Die ausgewählte Datei in einem neuen _Fenster öffnen",
            "Could not read %s: %s": "%s konnte nicht gelesen werden: %s",  # format codes
            "Quit": "Beenden",  # too few words
            "Show hidden files in the list": "Show hidden files in the list",  # untranslated
            "The document has been saved to disk": "Das Dokument wurde auf der Festplatte gespeichert",
            "menu\x04Close all open documents at once": "Alle offenen Dokumente auf einmal schließen",
            "One file was deleted from the folder\x00%d files were deleted": "Eine Datei wurde aus dem Ordner gelöscht\x00x",
            "Use <b>bold</b> text in the editor": "<b>Fetten</b> Text im Editor verwenden",
            "Print the current page of the document": "Print the current page and the document",  # English side
        },
    )
    (root / "de" / "LC_MESSAGES" / "broken.mo").write_bytes(b"not a catalog at all, really")
    return root


def reference(root: Path) -> Path:
    root.mkdir(parents=True)
    page = "<html><body><h2>{t}</h2><p>{a}</p><p>{b}</p></body></html>"
    (root / "ch01.en.html").write_text(
        page.format(
            t="1.2. Installing the system",
            a="The installer asks a few questions about the disk.",
            b="Edit <code>/etc/fstab</code> after the first boot of it.",
        ),
        encoding="utf-8",
    )
    (root / "ch01.de.html").write_text(
        page.format(
            t="1.2. Das System installieren",
            a="Das Installationsprogramm stellt ein paar Fragen zur Festplatte.",
            b="Bearbeiten Sie /etc/fstab nach dem ersten Start.",
        ),
        encoding="utf-8",
    )
    return root


def help_pages(root: Path) -> Path:
    page = (
        '<page xmlns="http://projectmallard.org/1.0/" id="p"><info><desc>{d}</desc></info><title>{t}</title>{ps}</page>'
    )
    en = [
        "Open the Activities overview and start typing Settings.",
        "A note that only English has today.",
        "Click on the Display panel to change the screen resolution.",
    ]
    other = {
        "de": [
            "Öffnen Sie die Aktivitäten-Übersicht und tippen Sie Einstellungen ein.",
            "Klicken Sie auf das Bildschirm-Panel, um die Auflösung des Bildschirms zu ändern.",
        ],
        "es": [
            "Abra la vista de Actividades y empiece a escribir Configuración.",
            "Pulse en el panel de Pantalla para cambiar la resolución de la pantalla.",
        ],
    }
    titles = {
        "C": "Change the screen resolution",
        "de": "Die Bildschirmauflösung ändern",
        "es": "Cambiar la resolución de la pantalla",
    }
    for lang, ps in (("C", en), *other.items()):
        folder = root / lang / "gnome-help"
        folder.mkdir(parents=True)
        (folder / "display.page").write_text(
            page.format(d="x", t=titles[lang], ps="".join(f"<p>{p}</p>" for p in ps)), encoding="utf-8"
        )
    (root / "de" / "gnome-help" / "broken.page").write_text("<page><p>unclosed", encoding="utf-8")
    (root / "C" / "gnome-help" / "broken.page").write_text("<page><p>An English page.</p></page>", encoding="utf-8")
    return (root,)


@pytest.fixture
def fixtures(tmp_path, monkeypatch):
    paths = SourcePaths(
        ding=ding_file(tmp_path / "de-en"),
        locale=locale(tmp_path / "locale"),
        debian_reference=reference(tmp_path / "debian-reference"),
        gnome_help=help_pages(tmp_path / "help"),
    )
    mt_sources.ding_pairs.cache_clear()
    verses = (Pair("Y dijo Dios: Sea la luz, y fué la luz.", "God said, “Let there be light,” and there was light."),)
    monkeypatch.setattr(mt_sources, "bible_pairs", lambda: verses)
    return paths, corpus(tmp_path / "corpus")


def test_every_source_with_its_licence_counts_and_filters(fixtures, tmp_path):
    paths, root = fixtures
    summary = build_mt_text("mustc", root, tmp_path / "mt", sources="all", paths=paths)
    src = summary["sources"]
    assert list(src) == ["ding", "gettext", "debian-reference", "gnome-help"]
    assert {n: e["licence"] for n, e in src.items() if n != "gettext"} == {
        "ding": "GPL-2+",
        "debian-reference": "GPL-2+",
        "gnome-help": "CC-BY-SA-3.0",
    }
    assert summary["per_source"] == {"ding": 4, "gettext": 4, "debian-reference": 2, "gnome-help": 3}
    assert summary["pairs"] == sum(summary["per_source"].values()) == len(read_manifest(tmp_path / "mt/train.jsonl"))
    assert src["ding"]["dropped"] == {"a corpus sentence": 4, "duplicate": 2}  # phrases and sentences: each twice
    assert src["gettext"]["dropped"] == {
        "placeholder or markup": 2,
        "too few words": 1,
        "untranslated": 1,
        "wrong language": 1,
    }
    assert src["gettext"]["unreadable catalogs"] == 1 and src["gettext"]["catalogs"] == 1
    assert src["gettext"]["catalog_packages"] == {
        "viewer.mo": {"messages": 9, "licence": "unknown (no Debian package owns it)"}
    }
    assert src["debian-reference"]["dropped"] == {"placeholder or markup": 1}
    assert src["gnome-help"]["unaligned blocks"] == 1
    assert src["gnome-help"]["unreadable documents"] == 1
    for entry in src.values():
        assert entry["read"] == entry["kept"] + sum(entry["dropped"].values())  # nothing dropped silently
    records = read_manifest(tmp_path / "mt/train.jsonl")
    assert [r.id for r in records][4:8] == ["gettext_0", "gettext_1", "gettext_2", "gettext_3"]
    texts = {(r.src_text, r.tgt_text) for r in records}
    assert ("Open the selected file in a new window", "Die ausgewählte Datei in einem neuen Fenster öffnen") in texts
    assert ("Installing the system", "Das System installieren") in texts  # section number gone
    assert ("Close all open documents at once", "Alle offenen Dokumente auf einmal schließen") in texts  # no context
    assert ("One file was deleted from the folder", "Eine Datei wurde aus dem Ordner gelöscht") in texts  # singular


def test_dev_and_test_sentences_never_reach_the_mt_text(fixtures, tmp_path):
    paths, root = fixtures
    build_mt_text("mustc", root, tmp_path / "mt", sources="all", paths=paths)
    held = {key(t) for t in DEV + TEST + TRAIN}
    records = read_manifest(tmp_path / "mt/train.jsonl")
    assert records and not held & {key(t) for r in records for t in (r.src_text, r.tgt_text)}


def test_a_missing_source_is_one_line_not_a_crash(fixtures, tmp_path, capsys):
    paths, root = fixtures
    gone = SourcePaths(
        ding=paths.ding, locale=tmp_path / "none", debian_reference=tmp_path / "none", gnome_help=(tmp_path / "none",)
    )
    summary = build_mt_text("mustc", root, tmp_path / "mt", sources="all", paths=gone)
    assert summary["per_source"] == {"ding": 4}
    status = {n: e["status"] for n, e in summary["sources"].items()}
    assert (
        status["debian-reference"].startswith("not installed: ") and "debian-reference-en" in status["debian-reference"]
    )
    assert "gnome-user-docs" in status["gnome-help"] and "de translations" in status["gettext"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("speechmt: synth-mt: ") for line in err)
    with pytest.raises(SynthError, match="no MT text from debian-reference: debian-reference: not installed"):
        build_mt_text("mustc", root, tmp_path / "mt2", sources=("debian-reference",), paths=gone)


def test_spanish_sources_and_the_direction(fixtures, tmp_path, monkeypatch):
    paths, _ = fixtures
    root = tmp_path / "covost"
    (root / "es").mkdir(parents=True)
    (root / "es" / "covost_v2.es_en.tsv").write_text(
        "path\tsentence\ttranslation\tclient_id\tsplit\na.mp3\tHola a todos.\tHello everyone.\tx\tdev\n",
        encoding="utf-8",
    )
    summary = build_mt_text("covost2", root, tmp_path / "mt", lang="es", sources="all", paths=paths)
    assert summary["pair"] == "es-en" and list(summary["sources"]) == ["gettext", "gnome-help", "sword"]
    assert summary["per_source"] == {"gnome-help": 3, "sword": 1}
    first = read_manifest(tmp_path / "mt/train.jsonl")[0]
    assert (first.src_lang, first.tgt_lang, first.src_text) == ("es", "en", "Cambiar la resolución de la pantalla")
    default = build_mt_text("covost2", root, tmp_path / "mt-default", lang="es", paths=paths)
    assert list(default["sources"]) == ["sword"]
    with pytest.raises(SynthError, match="text source 'ding' has no es-en text"):
        build_mt_text("covost2", root, tmp_path / "x", lang="es", sources=("ding",), paths=paths)


def test_filters_one_by_one():
    f = PairFilter("en", "de", corpus={key("Das ist verboten.")})
    words = (2, 10)
    assert f.reason(Pair("", "Hallo Welt"), words) == "empty"
    for text in (
        "Open %s now",
        "Open %(name)s now",
        "Open {0} now",
        "Set $HOME now",
        "Use <i>x</i> here",
        "Tom &amp; Jerry",
        "line one\nline two",
        "use --force here",
        "see /usr/share/doc",
        "call foo() now",
    ):
        assert has_placeholder(text), text
    assert not has_placeholder("It costs 5 % more, doesn't it?")
    assert f.reason(Pair("Hello", "Hallo"), words) == "too few words"
    assert f.reason(Pair("one two three four five six seven eight nine ten eleven", "x y"), words) == "too many words"
    assert f.reason(Pair("a very long English sentence indeed", "kurz"), words) == "length ratio"
    assert f.reason(Pair("Linux Kernel", "linux  kernel"), words) == "untranslated"
    assert f.reason(Pair("Das ist nicht gut", "Das ist nicht gut und so"), words) == "wrong language"
    assert f.reason(Pair("That is forbidden.", "Das ist verboten."), words) == "a corpus sentence"
    kept, dropped = f.keep([Pair("The big house", "Das große Haus"), Pair("the big  house", "Ein großes Haus")], words)
    assert len(kept) == 1 and dropped == {"duplicate": 1}


def test_catalog_reader_and_block_alignment(tmp_path):
    write_mo(tmp_path / "x.mo", {"Save the file": "Die Datei speichern"}, charset="ISO-8859-1")
    assert list(read_mo(tmp_path / "x.mo")) == [("Save the file", "Die Datei speichern")]
    (tmp_path / "bad.mo").write_bytes(struct.pack("<5I", 0x950412DE, 0, 5, 28, 1000) + b"\0" * 30)
    with pytest.raises(CatalogError, match="bad.mo"):
        list(read_mo(tmp_path / "bad.mo"))
    assert (
        strip_accelerator("_Open and Save _As") == "Open and Save As"
        and strip_accelerator("snake_case") == "snake_case"
    )
    a = [("title", "Title"), ("p", "a paragraph of some length here"), ("p", "an extra note"), ("p", "closing words")]
    b = [("title", "Titel"), ("p", "ein Absatz von einiger Länge hier"), ("p", "abschließende Worte")]
    assert align_blocks(a, b) == [(0, 0), (1, 1), (3, 2)]


def test_cli_selects_sources(fixtures, tmp_path, capsys, monkeypatch):
    paths, root = fixtures
    monkeypatch.setattr(mt_sources, "DING_PATH", paths.ding)
    monkeypatch.setattr(
        "speechmt_corpora.mt_text.SourcePaths",
        lambda: SourcePaths(
            ding=paths.ding, locale=paths.locale, debian_reference=paths.debian_reference, gnome_help=paths.gnome_help
        ),
    )
    assert main(["synth-mt", "--corpus", "mustc", "--root", str(root), "--sources", "gettext", "gnome-help"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (
        printed["per_source"] == {"gettext": 4, "gnome-help": 3}
        and "catalog_packages" not in printed["sources"]["gettext"]
    )
    assert main(["synth-mt", "--corpus", "mustc", "--root", str(root), "--sources", "bible"]) == 2


REAL = {
    "ding": Path("/usr/share/trans/de-en"),
    "gettext": Path("/usr/share/locale/de/LC_MESSAGES"),
    "debian-reference": Path("/usr/share/debian-reference/ch01.de.html"),
}


def test_the_real_installed_sources(tmp_path):
    missing = [str(p) for p in REAL.values() if not p.exists()]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/install_system_deps.sh)")
    mt_sources.ding_pairs.cache_clear()
    pairs, _ = mt_sources.read_source("debian-reference", "de")
    held = next(p for p in pairs if len(p.src.split()) > 8 and not has_placeholder(p.src + p.tgt))
    root = corpus(tmp_path / "corpus")
    (root / "en-de/data/dev/txt/dev.en").write_text(f"{DEV[0]}\n{held.src}\n", encoding="utf-8")
    (root / "en-de/data/dev/txt/dev.de").write_text(f"{DEV[1]}\n{held.tgt}\n", encoding="utf-8")
    summary = build_mt_text("mustc", root, tmp_path / "mt", sources="all")
    n = summary["per_source"]
    assert n["ding"] > 50000 and n["gettext"] > 5000 and n["debian-reference"] > 1500
    if summary["sources"]["gnome-help"]["status"] == "read":
        assert n["gnome-help"] > 1500
    assert summary["sources"]["debian-reference"]["dropped"]["a corpus sentence"] >= 1
    keys = {key(t) for r in read_manifest(tmp_path / "mt/train.jsonl") for t in (r.src_text, r.tgt_text)}
    assert key(held.src) not in keys and key(held.tgt) not in keys
    print(json.dumps(n))
