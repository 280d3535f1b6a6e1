"""Synthetic mini corpora: exact MuST-C / CoVoST 2 layouts, disjoint splits, determinism, text-only part.

The tiny corpora are built once per module (twice, to compare two builds with the same seed). Text comes
from Debian packages at run time: no dictionary or Bible text is written in this file.
"""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from speechmt.audio import read_audio
from speechmt_corpora import SynthError, build_mini_corpus
from speechmt_corpora import mustc as mustc_builder
from speechmt_corpora.common import NOISE_STD, read_tsv, split_pool, write_tsv
from speechmt_corpora.mustc import TalkJob, talk_sizes, voice_talk
from speechmt_corpora.text import Pair, clean_verse, is_dictionary_sentence, parse_diatheke
from speechmt_corpora.voices import VOICES, Speaker, TTSError, check_voices

MUSTC_SPLITS = ("train", "dev", "tst-COMMON")
YAML_LINE = re.compile(
    r"^- \{duration: \d+\.\d{6}, offset: \d+\.\d{6}, rW: \d+, uW: 0, "
    r"speaker_id: spk\.(\d+), wav: ted_(\d+)\.wav\}$"
)
VALIDATED_HEADER = ["client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender", "accent"]
COVOST_HEADER = ["path", "sentence", "translation", "client_id", "split"]
NEEDS = {
    "mustc": [("espeak-ng", "espeak-ng"), ("pico2wave", "libttspico-utils"), ("mbrola", "mbrola"), ("flite", "flite")],
    "covost2": [
        ("espeak-ng", "espeak-ng"),
        ("pico2wave", "libttspico-utils"),
        ("mbrola", "mbrola"),
        ("flite", "flite"),
        ("diatheke", "diatheke"),
    ],
}


def _build_twice(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """Two tiny builds with seed 0; skips when a system tool or text package is absent."""
    missing = [f"{tool} (Debian {pkg})" for tool, pkg in NEEDS[corpus] if shutil.which(tool) is None]
    if not Path("/usr/share/trans/de-en").is_file():
        missing.append("/usr/share/trans/de-en (Debian trans-de-en)")
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    a, b = tmp_path_factory.mktemp(f"{corpus}_a"), tmp_path_factory.mktemp(f"{corpus}_b")
    summary = build_mini_corpus(corpus, "tiny", a, seed=0, jobs=2)
    build_mini_corpus(corpus, "tiny", b, seed=0, jobs=1)
    return a, b, summary


@pytest.fixture(scope="module")
def mustc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    return _build_twice("mustc", tmp_path_factory)


@pytest.fixture(scope="module")
def covost(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    return _build_twice("covost2", tmp_path_factory)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "synth_summary.json"
    }


# ---- MuST-C-mini ----


def test_mustc_layout_and_yaml(mustc):
    root = mustc[0] / "en-de" / "data"
    for split in MUSTC_SPLITS:
        txt = root / split / "txt"
        lines = _lines(txt / f"{split}.yaml")
        en, de = _lines(txt / f"{split}.en"), _lines(txt / f"{split}.de")
        assert len(lines) == len(en) == len(de) > 0
        items = yaml.load("\n".join(lines), Loader=yaml.BaseLoader)
        last_end: dict[str, float] = {}
        for line, item, sentence in zip(lines, items, en):
            match = YAML_LINE.match(line)
            assert match and match[1] == match[2], line
            assert set(item) == {"duration", "offset", "rW", "uW", "speaker_id", "wav"}
            assert int(item["rW"]) == len(sentence.split())
            info = sf.info(root / split / "wav" / item["wav"])
            assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
            offset, duration = float(item["offset"]), float(item["duration"])
            assert offset > 0 and duration > 0.3
            assert offset + duration <= info.frames / info.samplerate
            assert offset >= last_end.get(item["wav"], 0.0)  # grouped by talk, in offset order
            last_end[item["wav"]] = offset + duration
        wavs = sorted(p.name for p in (root / split / "wav").iterdir())
        assert wavs == sorted(last_end)


def test_mustc_segments_hold_speech_between_quiet_pauses(mustc):
    txt = mustc[0] / "en-de" / "data" / "train" / "txt"
    first = yaml.load(_lines(txt / "train.yaml")[0], Loader=yaml.BaseLoader)[0]
    wav = mustc[0] / "en-de" / "data" / "train" / "wav" / first["wav"]
    speech = read_audio(wav, float(first["offset"]), float(first["duration"]))
    pause = read_audio(wav, 0.0, float(first["offset"]) - 0.01)
    assert np.sqrt(np.mean(speech**2)) > 0.02
    assert np.abs(pause).max() < 20 * NOISE_STD


def test_mustc_splits_share_no_sentence_or_talk(mustc):
    root = mustc[0] / "en-de"
    sides: dict[str, list[set[str]]] = {"en": [], "de": []}
    for split in MUSTC_SPLITS:
        for lang in sides:
            sides[lang].append(set(_lines(root / "data" / split / "txt" / f"{split}.{lang}")))
    for lang in sides:
        sides[lang].append(set(_lines(root / "text-only" / f"train.{lang}")))
        parts = sides[lang]
        assert sum(len(p) for p in parts) == len(set().union(*parts))
    talks = [{p.name for p in (root / "data" / s / "wav").iterdir()} for s in MUSTC_SPLITS]
    assert sum(len(t) for t in talks) == len(set().union(*talks))


def test_mustc_text_only_part(mustc):
    en, de = (_lines(mustc[0] / "en-de" / "text-only" / f"train.{lang}") for lang in ("en", "de"))
    assert len(en) == len(de) == mustc[2]["text_only_pairs"]
    assert 0.10 <= len(en) / mustc[2]["pairs_usable"] <= 0.15


def test_mustc_summary(mustc):
    summary = mustc[2]
    assert summary["sentences"] == {"train": 12, "dev": 4, "tst-COMMON": 4}
    assert summary["splits"]["train"]["talks"] == 2
    assert summary["failures"] == [] and summary["audio_hours"] > 0
    assert sum(summary["voices"].values()) == 20
    assert (mustc[0] / "synth_summary.json").is_file()


def test_mustc_same_seed_same_files(mustc):
    first, second = _files(mustc[0]), _files(mustc[1])
    assert first.keys() == second.keys() and first == second


# ---- CoVoST-mini ----


@pytest.mark.parametrize("lang", ["de", "es"])
def test_covost_layout(covost, lang):
    root = covost[0] / lang
    validated = read_tsv(root / "validated.tsv")
    rows = read_tsv(root / f"covost_v2.{lang}_en.tsv")
    assert _lines(root / "validated.tsv")[0].split("\t") == VALIDATED_HEADER
    assert _lines(root / f"covost_v2.{lang}_en.tsv")[0].split("\t") == COVOST_HEADER
    assert _lines(root / f"text-only.{lang}_en.tsv")[0].split("\t") == ["sentence", "translation"]
    assert [r["path"] for r in validated] == [r["path"] for r in rows]
    assert sorted(p.name for p in (root / "clips").iterdir()) == sorted(r["path"] for r in rows)
    splits = [r["split"] for r in rows]
    assert (splits.count("train"), splits.count("train_covost"), splits.count("dev"), splits.count("test")) == (
        9,
        3,
        4,
        4,
    )
    for row in rows:
        assert re.fullmatch(rf"common_voice_{lang}_\d{{8}}\.mp3", row["path"])
        assert re.fullmatch(r"[0-9a-f]{128}", row["client_id"])
        assert row["sentence"] and row["translation"]
    wave, sr = sf.read(root / "clips" / rows[0]["path"], dtype="float32", always_2d=True)
    assert sr == 48000 and wave.shape[1] == 1 and wave.shape[0] > sr


@pytest.mark.parametrize("lang", ["de", "es"])
def test_covost_splits_and_text_only_share_no_sentence(covost, lang):
    root = covost[0] / lang
    rows = read_tsv(root / f"covost_v2.{lang}_en.tsv")
    text_only = read_tsv(root / f"text-only.{lang}_en.tsv")
    for side in ("sentence", "translation"):
        parts = [{r[side] for r in rows if r["split"].startswith(s)} for s in ("train", "dev", "test")]
        parts.append({r[side] for r in text_only})
        assert sum(len(p) for p in parts) == len(set().union(*parts))
    assert len(text_only) == covost[2]["directions"][lang]["text_only_pairs"] > 0


def test_covost_same_seed_same_files(covost):
    first, second = _files(covost[0]), _files(covost[1])
    assert first.keys() == second.keys() and first == second


# ---- pieces ----


def test_split_pool_is_disjoint_seeded_and_sized():
    pool = list(range(1000))
    text_only, splits = split_pool(pool, "small", seed=3, stream=0)
    assert len(text_only) == 120
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [480, 200, 200]
    assert len(set(text_only).union(*splits.values())) == 1000
    full_text, full = split_pool(pool, "full", seed=3, stream=0)
    assert full_text == text_only and [len(full[s]) for s in ("train", "dev", "test")] == [792, 44, 44]
    assert split_pool(pool, "small", seed=4, stream=0)[0] != text_only


def test_sizes_nest_split_by_split():
    """A model trained on a smaller size never sees a larger size's dev or test sentences, and back."""
    pool = list(range(20000))  # 17600 voiced; full holds out 880 for dev and 880 for test
    parts = {size: split_pool(pool, size, seed=1, stream=2)[1] for size in ("tiny", "small", "full")}
    assert [len(parts["full"][s]) for s in ("train", "dev", "test")] == [15840, 880, 880]
    assert [len(parts["small"][s]) for s in ("train", "dev", "test")] == [2000, 200, 200]
    for smaller, larger in (("tiny", "small"), ("small", "full")):
        for split in ("train", "dev", "test"):
            assert set(parts[smaller][split]) <= set(parts[larger][split]), (smaller, larger, split)
    seen_in_training = set(parts["full"]["train"])
    assert not seen_in_training & set(parts["small"]["dev"] + parts["small"]["test"] + parts["tiny"]["test"])


def test_talk_sizes_stay_in_bounds():
    rng = np.random.default_rng(0)
    sizes = talk_sizes(2000, 10, 40, rng)
    assert sum(sizes) == 2000 and all(10 <= s <= 40 for s in sizes)
    assert talk_sizes(12, 6, 6, rng) == [6, 6] and talk_sizes(4, 6, 6, rng) == [4]


def test_tsv_round_trip_keeps_quotes_and_backslashes(tmp_path):
    rows = [('He said "no" twice.', "back\\slash", "tab\there")]
    write_tsv(tmp_path / "t.tsv", ("a", "b", "c"), rows)
    assert '"no"' in (tmp_path / "t.tsv").read_text(encoding="utf-8")
    assert [tuple(r.values()) for r in read_tsv(tmp_path / "t.tsv")] == rows


def test_dictionary_sentence_filter():
    assert is_dictionary_sentence("The cat sat on the mat.")
    assert not is_dictionary_sentence("The cat sat on the mat")  # no final punctuation
    assert not is_dictionary_sentence("Too short here.")
    assert not is_dictionary_sentence("to give sth. to sb. at once.")
    assert not is_dictionary_sentence("The cat {f} sat on the mat.")
    assert not is_dictionary_sentence("The cat sat on the mat [Br.].")


def test_diatheke_parsing_drops_headings_tags_and_drop_capitals():
    output = (
        "Book 1:1: FIRST WORDS of <G1234> the verse,\n"
        "and its second line.\n"
        "A heading line.\n"
        "  Book 1:2: Another verse here.\n"
        "(module)\n"
        "Book 1:3: after the end marker\n"
    )
    verses = parse_diatheke(output, "module")
    assert list(verses) == ["Book 1:1", "Book 1:2"]
    assert clean_verse(verses["Book 1:1"]) == "First words of the verse, and its second line."
    assert clean_verse("Title of a psalm. OPENING words here", first_of_psalm=True) == "Opening words here"


def test_a_failed_sentence_is_counted_with_its_reason(tmp_path, monkeypatch):
    def fake_tts(speaker: Speaker, text: str, sample_rate: int, workdir: Path) -> np.ndarray:
        if "fails" in text:
            raise TTSError("espeak-ng exit 1: test failure")
        return (0.5 * np.sin(np.arange(sample_rate) * 0.1)).astype(np.float32)

    monkeypatch.setattr(mustc_builder, "synthesize", fake_tts)
    pairs = (Pair("This one speaks.", "Dieser spricht."), Pair("This one fails.", "Dieser nicht."))
    job = TalkJob(7, Speaker(VOICES["en"][0], 155, 50), pairs, tmp_path / "ted_7.wav", seed=0)
    result = voice_talk(job)
    assert [pair for _, _, pair in result.items] == [pairs[0]]
    assert result.failures == [
        {
            "talk": "ted_7",
            "sentence": "This one fails.",
            "voice": "espeak-ng:en-us:s155:p50",
            "reason": "espeak-ng exit 1: test failure",
        }
    ]
    assert sf.info(tmp_path / "ted_7.wav").frames / 16000 == pytest.approx(result.seconds)


def test_missing_tool_names_the_debian_package(tmp_path, monkeypatch):
    import speechmt_corpora.voices as voices

    monkeypatch.setattr(voices.shutil, "which", lambda tool: None if tool == "pico2wave" else "/bin/true")
    monkeypatch.setattr(voices, "VOICES", {"en": (voices.Voice("pico2wave", "en-US", "female", "libttspico-utils"),)})
    with pytest.raises(SynthError, match="install the Debian package libttspico-utils"):
        check_voices("en", tmp_path)


def test_bad_arguments_and_occupied_folder(tmp_path):
    with pytest.raises(ValueError, match="corpus"):
        build_mini_corpus("librispeech", "tiny", tmp_path)
    with pytest.raises(ValueError, match="size"):
        build_mini_corpus("mustc", "huge", tmp_path)
    (tmp_path / "en-de").mkdir()
    (tmp_path / "en-de" / "old.txt").write_text("x")
    with pytest.raises(SynthError, match="not empty"):
        build_mini_corpus("mustc", "tiny", tmp_path)


def test_a_finished_build_is_kept_and_another_refused(mustc, capsys):
    root, _, summary = mustc
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*.wav")}
    assert build_mini_corpus("mustc", "tiny", root, seed=0) == summary
    assert "already built" in capsys.readouterr().err
    assert before == {p: p.stat().st_mtime_ns for p in root.rglob("*.wav")}
    with pytest.raises(SynthError, match="not empty"):
        build_mini_corpus("mustc", "small", root, seed=0)


# ---- extra MT text ----


def test_phrases_lose_notes_labels_and_placeholders():
    from speechmt_corpora.mt_text import clean_phrase

    assert clean_phrase("abseiling equipment [Br.]; rappelling equipment [Am.] (climbing)") == "abseiling equipment"
    assert clean_phrase("die Ausscheidungsphase {f} [sport]") == "die Ausscheidungsphase"
    assert clean_phrase("Abseitsfalle {f} [sport]") == ""  # one word: a dictionary entry, not a phrase
    assert clean_phrase("to play sb. off-side") == "" and clean_phrase("jdn. ins Abseits laufen lassen") == ""
    assert clean_phrase("to get caught/find oneself caught") == ""  # alternatives inside a phrase


def _used_keys(texts) -> set[str]:
    from speechmt_corpora.mt_text import key

    return {key(t) for t in texts if t.strip()}


def _mt_keys(out: Path) -> set[str]:
    from speechmt.data.manifest import read_manifest

    records = read_manifest(out / "train.jsonl")
    assert all(r.audio == "" and r.n_frames == 0 for r in records)
    return _used_keys([r.src_text for r in records] + [r.tgt_text for r in records])


def test_mustc_extra_mt_text_holds_no_corpus_sentence(mustc, tmp_path):
    from speechmt_corpora.mt_text import build_mt_text

    root = mustc[0]
    summary = build_mt_text("mustc", root, tmp_path / "mt")
    corpus = _used_keys(line for p in (root / "en-de" / "data").glob("*/txt/*.[ed][ne]") for line in _lines(p))
    assert {p.name for p in (root / "en-de" / "data").glob("*/txt/*.[ed][ne]")} >= {"dev.en", "tst-COMMON.de"}
    mt = _mt_keys(tmp_path / "mt")
    assert not mt & corpus and summary["excluded_as_corpus_sentences"] >= len(corpus) // 2 > 0
    assert summary["pairs"] > 50000 and summary["pair"] == "en-de"
    assert json.loads((tmp_path / "mt" / "mt_text_summary.json").read_text())["pairs"] == summary["pairs"]


@pytest.mark.parametrize("lang", ["de", "es"])
def test_covost_extra_mt_text_holds_no_corpus_sentence(covost, tmp_path, lang):
    from speechmt_corpora.mt_text import build_mt_text, covost_sentences

    summary = build_mt_text("covost2", covost[0], tmp_path / "mt", lang)
    corpus = covost_sentences(covost[0], lang)
    assert corpus and not _mt_keys(tmp_path / "mt") & corpus and summary["pair"] == f"{lang}-en"
    assert summary["pairs"] > 1000 and summary["excluded_as_corpus_sentences"] > 0


def test_synth_mt_command_writes_beside_the_corpus(mustc, tmp_path, capsys):
    import shutil as sh

    from speechmt.cli import main

    root = tmp_path / "corpus"
    sh.copytree(mustc[0], root)
    assert main(["synth-mt", "--corpus", "mustc", "--root", str(root)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["out"] == str(root / "en-de" / "mt-text") and (root / "en-de" / "mt-text" / "train.jsonl").is_file()
    assert main(["synth-mt", "--corpus", "mustc", "--root", str(tmp_path / "none")]) == 2
    assert "no MuST-C en-de/data/<split>/txt/<split>.<lang> files to exclude" in capsys.readouterr().err


def test_voice_counts_add_up_over_talks_of_one_speaker():
    """Several talks share a speaker label in a full corpus; each talk's segments count (the summary once kept
    only one talk's count per label)."""
    from speechmt_corpora.mustc import TalkResult, voice_counts

    pair = Pair("One.", "Eins.")
    results = [
        TalkResult(1, "pico2wave:en-US:r100", items=[(0.5, 1.0, pair)] * 3),
        TalkResult(2, "pico2wave:en-US:r100", items=[(0.5, 1.0, pair)] * 2),
        TalkResult(3, "espeak-ng:en-us:s155:p50", items=[(0.5, 1.0, pair)]),
    ]
    assert voice_counts(results) == {"pico2wave:en-US:r100": 5, "espeak-ng:en-us:s155:p50": 1}
