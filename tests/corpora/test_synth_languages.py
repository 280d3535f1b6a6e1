"""Mini corpora in more languages (gettext text, more voices) and real speech beyond English, on small builds.

Text comes from the installed packages' gettext catalogs at run time: no catalog text is written in this file."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechmt.cli import main
from speechmt.data.covost2 import prepare_covost2
from speechmt.data.manifest import read_manifest
from speechmt.data.mustc import prepare_mustc
from speechmt.data.prepare import PrepareConfig
from speechmt_corpora import SynthError, build_mini_corpus
from speechmt_corpora.common import read_tsv
from speechmt_corpora.languages import SMALL_NEEDS, gettext_pool, speakable, stream, too_little_text
from speechmt_corpora.mt_filters import wrong_language
from speechmt_corpora.real_speech import PROMPTS, build_real_x_en, build_tst_real_targets, read_references

TOOLS = ("espeak-ng", "pico2wave", "mbrola", "flite")


def _catalogs(lang: str) -> bool:
    return any(Path(f"/usr/share/locale/{lang}/LC_MESSAGES").glob("*.mo"))


needs_voices = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS) or not _catalogs("fr") or not _catalogs("it"),
    reason="needs the voices and fr/it gettext catalogs",
)


def test_speakable_and_languages_of_the_filters():
    assert speakable("Open the selected file.") and not speakable("|N|set the length")
    assert not speakable("Use \\q to quit.") and not speakable("COPY TO writes a file.")
    assert not speakable("%s files") and not speakable("see /usr/share")
    assert wrong_language("Le fichier est ouvert.", "fr", "en") is False
    assert wrong_language("The file is open.", "fr", "en") is True
    assert wrong_language("Файл не найден и это ошибка.", "ru", "en") is False
    assert wrong_language("Open a file.", "en", "pt") is False  # English "a" is no Portuguese vote
    assert stream("mustc", "fr") == stream("mustc", "fr") != stream("covost2", "fr")
    assert stream("mustc", "fr") >= 1000


def test_too_little_text_names_small_pools():
    assert SMALL_NEEDS == 2727
    found = too_little_text({"en-nl": 1200, "en-fr": 9000})
    assert list(found) == ["en-nl"] and "1200 usable pairs" in found["en-nl"]


def test_gettext_pool_on_fake_catalogs(tmp_path):
    import struct

    def mo(pairs):
        keys = sorted(pairs)
        ids, strs = b"", b""
        offs = []
        for k in keys:
            offs.append((len(ids), len(k.encode()), len(strs), len(pairs[k].encode())))
            ids += k.encode() + b"\0"
            strs += pairs[k].encode() + b"\0"
        n = len(keys)
        start = 28 + 16 * n
        out = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
        for i0, li, _, _ in offs:
            out += struct.pack("<2I", li, start + i0)
        for _, _, s0, ls in offs:
            out += struct.pack("<2I", ls, start + len(ids) + s0)
        return out + ids + strs

    folder = tmp_path / "fr" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "demo.mo").write_bytes(
        mo(
            {
                "Open the selected file in a new window.": "Ouvrir le fichier choisi dans une nouvelle fenêtre.",
                "Save the current document before closing.": "Enregistrer le document avant de fermer.",
                "Could not read %s from the disk.": "Impossible de lire %s sur le disque.",
                "Quit": "Quitter",
                "|N| sets the length of the key": "|N| définit la longueur de la clé",
            }
        )
    )
    pairs, found = gettext_pool("fr", tmp_path)
    assert [p.src for p in pairs] == [
        "Open the selected file in a new window.",
        "Save the current document before closing.",
    ]
    assert found["dropped"] == {"placeholder or markup": 1, "too few words": 1, "not speakable": 1}
    assert found["catalogs"] == 1 and found["pairs"] == 2
    with pytest.raises(SynthError, match="no gettext catalog"):
        gettext_pool("nl", tmp_path)


@needs_voices
def test_mustc_mini_in_two_more_targets(tmp_path):
    summary = build_mini_corpus("mustc", "tiny", tmp_path, seed=0, jobs=2, langs=("fr", "it"))
    assert summary["langs"] == ["fr", "it"] and list(summary["pairs"]) == ["en-fr", "en-it"]
    for pair, lang in (("en-fr", "fr"), ("en-it", "it")):
        assert summary["pairs"][pair]["sentences"] == {"train": 12, "dev": 4, "tst-COMMON": 4}
        row = summary["per_direction"][pair]
        assert row["sentences"] == 20 and row["pairs_usable"] > SMALL_NEEDS and row["audio_hours"] > 0
        txt = tmp_path / pair / "data/dev/txt"
        assert {p.name for p in txt.iterdir()} == {"dev.en", "dev.yaml", f"dev.{lang}"}
        assert len((txt / f"dev.{lang}").read_text().splitlines()) == 4
        assert summary["pairs"][pair]["text_source"]["name"] == "gettext"
    assert summary["too_little_text"] == {}
    assert json.loads((tmp_path / "synth_summary.json").read_text())["langs"] == ["fr", "it"]
    # the two pairs prepare into one folder of two directions
    out = prepare_mustc(tmp_path, tmp_path / "data", ["fr", "it"], cfg=PrepareConfig(jobs=1))
    assert out["directions"]["en-it"]["train"]["kept"] == 12 and out["splits"]["tst-COMMON_en-fr"]["kept"] == 4
    # a rerun keeps the build; another target list builds only the new pair next to the kept ones
    assert build_mini_corpus("mustc", "tiny", tmp_path, seed=0, langs=("fr", "it"))["seconds"] == summary["seconds"]


@needs_voices
def test_covost_mini_french_into_english(tmp_path):
    summary = build_mini_corpus("covost2", "tiny", tmp_path, seed=0, jobs=2, langs=("fr",))
    assert summary["langs"] == ["fr"] and summary["sentences"]["fr"] == {"train": 12, "dev": 4, "test": 4}
    assert summary["per_direction"]["fr-en"]["sentences"] == 20 and summary["too_little_text"] == {}
    rows = read_tsv(tmp_path / "fr/covost_v2.fr_en.tsv")
    assert len(rows) == 20 and all(r["path"].startswith("common_voice_fr_2") for r in rows)
    voices = set(summary["voices"]["fr"])
    assert voices and all(
        v.split(":")[1] in ("fr-FR", "fr-fr", "fr-fr+f3", "fr-be", "fr-fr+m3", "fr-ch+f4") for v in voices
    )
    out = prepare_covost2(tmp_path, tmp_path / "data", "fr", "en", cfg=PrepareConfig(jobs=1))
    assert out["splits"]["train"]["kept"] == 12
    assert {r.src_lang for r in read_manifest(tmp_path / "data/train.jsonl")} == {"fr"}


def test_unknown_language_is_one_line(tmp_path, capsys):
    with pytest.raises(SynthError, match="expected some of de es fr it nl pt ro ru"):
        build_mini_corpus("mustc", "tiny", tmp_path, langs=("xx",))
    assert main(["data", "synth", "covost2", "--out", str(tmp_path), "--tgt-langs", "fr"]) == 2
    assert "--tgt-langs: for corpus mustc only" in capsys.readouterr().err


def _fake_asterisk(root: Path) -> tuple[Path, Path]:
    """A fake Debian layout: a French voice folder with three prompts' wavs and the transcript list."""
    sounds, docs = root / "sounds", root / "doc"
    (sounds / "fr_CA_f_June").mkdir(parents=True)
    (docs / "asterisk-core-sounds-fr").mkdir(parents=True)
    t = np.arange(8000) / 8000
    for name in ("tt-weasels", "vm-msgsaved"):  # 8 kHz telephone audio, as the package ships it
        sf.write(sounds / "fr_CA_f_June" / f"{name}.wav", 0.3 * np.sin(2 * np.pi * 440 * t), 8000, subtype="PCM_16")
    with gzip.open(docs / "asterisk-core-sounds-fr/core-sounds-fr.txt.gz", "wt", encoding="utf-8") as f:
        f.write(
            "; fake list\ntt-weasels: Un [texte] de test.\nvm-msgsaved: Un autre texte.\n"
            "vm-tooshort: Sans enregistrement.\n"
        )
    return sounds, docs


def test_real_x_en_on_a_fake_package_layout(tmp_path):
    sounds, docs = _fake_asterisk(tmp_path)
    summary = build_real_x_en(tmp_path / "out", ("fr",), sounds, docs)
    d = summary["directions"]["fr-en"]
    assert d["clips"] == 2 and d["seconds"] == 2.0
    reasons = {s["prompt"]: s["reason"] for s in d["skipped"]}
    assert reasons["vm-tooshort"] == "no recording" and reasons["agent-pass"] == "no transcript"
    assert len(d["skipped"]) == len(PROMPTS) - 2
    rows = read_tsv(tmp_path / "out/fr/covost_v2.fr_en.tsv")
    assert [(r["path"], r["sentence"], r["translation"], r["split"]) for r in rows] == [
        ("asterisk_fr_tt-weasels.wav", "Un texte de test.", PROMPTS["tt-weasels"], "test"),
        ("asterisk_fr_vm-msgsaved.wav", "Un autre texte.", PROMPTS["vm-msgsaved"], "test"),
    ]
    wave, rate = sf.read(tmp_path / "out/fr/clips/asterisk_fr_tt-weasels.wav")
    assert rate == 16000 and len(wave) == 16000
    prepared = prepare_covost2(tmp_path / "out", tmp_path / "data", "fr", "en", cfg=PrepareConfig(jobs=1))
    assert prepared["splits"]["test"]["kept"] == 2 and prepared["splits"]["train"]["kept"] == 0
    with pytest.raises(SynthError, match="install the Debian package asterisk-core-sounds-es-wav"):
        build_real_x_en(tmp_path / "out", ("es",), sounds, docs)


def test_tst_real_references_cover_every_segment_in_three_languages(tmp_path):
    table = read_references()
    segments = Path(__file__).resolve().parents[2] / "benchmarks/real_speech/segments.tsv"
    english = [
        line.split("\t")[6] for line in segments.read_text(encoding="utf-8").splitlines() if line.startswith("real_")
    ]
    assert len(english) == 60 and set(english) == set(table)
    assert all(set(refs) == {"fr", "es", "it"} and all(refs.values()) for refs in table.values())
    assert table["Front left."] == {"fr": "Avant gauche.", "es": "Delantero izquierdo.", "it": "Anteriore sinistro."}
    # from a (fake) en-de tst-REAL build: the same audio and yaml, the new references line by line
    src = tmp_path / "en-de/data/tst-REAL"
    (src / "wav").mkdir(parents=True)
    (src / "txt").mkdir()
    sf.write(src / "wav/real_x.wav", 0.3 * np.sin(np.arange(16000) / 5.0), 16000)
    (src / "txt/tst-REAL.en").write_text("Front left.\nRear right.\n")
    (src / "txt/tst-REAL.yaml").write_text(
        "- {duration: 0.5, offset: 0.0, speaker_id: s, wav: real_x.wav}\n"
        "- {duration: 0.5, offset: 0.5, speaker_id: s, wav: real_x.wav}\n"
    )
    assert build_tst_real_targets(tmp_path) == {"fr": 2, "es": 2, "it": 2}
    assert (tmp_path / "en-it/data/tst-REAL/txt/tst-REAL.it").read_text() == "Anteriore sinistro.\nPosteriore destro.\n"
    assert (tmp_path / "en-fr/data/tst-REAL/wav/real_x.wav").read_bytes() == (src / "wav/real_x.wav").read_bytes()
    prepared = prepare_mustc(tmp_path, tmp_path / "data", ["fr", "es"], splits=("tst-REAL",), cfg=PrepareConfig(jobs=1))
    assert [r.tgt_text for r in read_manifest(tmp_path / "data/tst-REAL_en-es.jsonl")] == [
        "Delantero izquierdo.",
        "Trasero derecho.",
    ]
    assert prepared["directions"]["en-fr"]["tst-REAL_en-fr"]["kept"] == 2


def test_cli_synth_real(tmp_path, capsys):
    assert main(["data", "synth", "mustc", "--out", str(tmp_path), "--tst-real", str(tmp_path)]) == 2
    assert "--tst-real: for corpus real only, not mustc" in capsys.readouterr().err
    if (
        not Path("/usr/share/asterisk/sounds/fr_CA_f_June").is_dir()
        or not Path("/usr/share/doc/asterisk-core-sounds-fr/core-sounds-fr.txt.gz").is_file()
    ):
        pytest.skip("needs Debian asterisk-core-sounds-fr-wav and asterisk-core-sounds-fr")
    assert main(["data", "synth", "real", "--out", str(tmp_path / "real"), "--src-langs", "fr"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["directions"]["fr-en"]["clips"] == 46 and summary["directions"]["fr-en"]["skipped"] == []
    assert len(read_tsv(tmp_path / "real/fr/covost_v2.fr_en.tsv")) == 46
