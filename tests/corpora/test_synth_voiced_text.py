"""MT pairs voiced into a new MuST-C split: exclusion of dev and test sentences, seeded sampling, the layout,
unique talk names, failures counted, and preparation with the released splits.

The pairs written here are this file's own sentences; the corpus is MuST-C-mini tiny, built at run time.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from speechmt.audio import read_audio
from speechmt.data.manifest import Record, read_split, write_manifest
from speechmt_corpora import SynthError, build_mini_corpus
from speechmt_corpora import mustc as mustc_builder
from speechmt_corpora.text import Pair
from speechmt_corpora.voiced_text import choose, next_talk_id, voice_text_pairs
from tests.corpora.test_synth import NEEDS, YAML_LINE

OWN_PAIRS = [
    Pair("The red bicycle stands in the garden.", "Das rote Fahrrad steht im Garten."),
    Pair("We are reading a long letter.", "Wir lesen einen langen Brief."),
    Pair("good morning", "guten Morgen"),
    Pair("Where is the old station?", "Wo ist der alte Bahnhof?"),
    Pair("My sister plays the piano.", "Meine Schwester spielt Klavier."),
]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _manifest(path: Path, pairs: list[Pair]) -> Path:
    write_manifest(
        path,
        [
            Record(
                id=f"mt_{i}",
                audio="",
                offset=0.0,
                duration=0.0,
                n_frames=0,
                src_text=p.src,
                tgt_text=p.tgt,
                speaker="",
                src_lang="en",
                tgt_lang="de",
            )
            for i, p in enumerate(pairs)
        ],
    )
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MuST-C-mini tiny (seed 0); skips when a system tool or the dictionary is absent."""
    missing = [tool for tool, _ in NEEDS["mustc"] if shutil.which(tool) is None]
    if missing or not Path("/usr/share/trans/de-en").is_file():
        pytest.skip(f"needs {', '.join(missing) or 'trans-de-en'}")
    root = tmp_path_factory.mktemp("mustc_tiny")
    build_mini_corpus("mustc", "tiny", root, seed=0, jobs=2)
    return root


@pytest.fixture(scope="module")
def voiced(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The corpus plus train-tts voiced from OWN_PAIRS, a test sentence, a dev translation and an empty side."""
    root = tmp_path_factory.mktemp("voiced") / "corpus"
    shutil.copytree(corpus, root)
    data = root / "en-de" / "data"
    test_en = _lines(data / "tst-COMMON" / "txt" / "tst-COMMON.en")[0]
    dev_de = _lines(data / "dev" / "txt" / "dev.de")[1]
    pairs = (
        OWN_PAIRS[:2]
        + [
            Pair(test_en.upper(), "Irgendein Satz."),
            Pair("Some sentence.", f" {dev_de} "),
            Pair("Nothing on the other side.", ""),
        ]
        + OWN_PAIRS[2:]
    )
    text = _manifest(root / "pairs.jsonl", pairs)
    return root, voice_text_pairs(root, text, "train-tts", seed=0, jobs=2)


def test_corpus_sentences_and_empty_sides_are_left_out_and_counted(voiced):
    root, summary = voiced
    txt = root / "en-de" / "data" / "train-tts" / "txt"
    assert sorted(zip(_lines(txt / "train-tts.en"), _lines(txt / "train-tts.de"))) == sorted(OWN_PAIRS)
    assert summary["dropped"] == {"a dev or test sentence": 2, "empty side": 1}
    assert summary["pairs_read"] == 8 and summary["sentences"] == 5 and summary["failed"] == 0
    saved = json.loads((root / "en-de" / "data" / "train-tts" / "voiced_text_summary.json").read_text())
    assert saved["dropped"] == summary["dropped"] and saved["speech_seconds"] == summary["speech_seconds"] > 0


def test_the_split_has_the_mustc_layout_and_new_talk_names(voiced):
    root, _ = voiced
    data = root / "en-de" / "data"
    lines = _lines(data / "train-tts" / "txt" / "train-tts.yaml")
    items = yaml.load("\n".join(lines), Loader=yaml.BaseLoader)
    assert len(items) == 5 and all(YAML_LINE.match(line) for line in lines)
    corpus_talks = {p.name for s in ("train", "dev", "tst-COMMON") for p in (data / s / "wav").iterdir()}
    corpus_max = max(int(name[4:-4]) for name in corpus_talks)
    for item, sentence in zip(items, _lines(data / "train-tts" / "txt" / "train-tts.en")):
        assert int(item["wav"][4:-4]) > corpus_max and int(item["rW"]) == len(sentence.split())
        info = sf.info(data / "train-tts" / "wav" / item["wav"])
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        speech = read_audio(data / "train-tts" / "wav" / item["wav"], float(item["offset"]), float(item["duration"]))
        assert np.sqrt(np.mean(speech**2)) > 0.02
    assert next_talk_id(data) == max(int(item["wav"][4:-4]) for item in items) + 1


def test_prepare_takes_the_voiced_split_as_training_data(voiced, tmp_path):
    from speechmt.data.mustc import prepare_mustc, present_splits
    from speechmt.data.prepare import PrepareConfig

    root, summary = voiced
    assert present_splits(root / "en-de" / "data") == ("train", "dev", "tst-COMMON", "train-tts")
    prepared = prepare_mustc(root, tmp_path, "de", cfg=PrepareConfig(jobs=1))
    assert prepared["splits"]["train-tts"]["kept"] == 5
    records = read_split(tmp_path, "train-tts")
    assert sorted((r.src_text, r.tgt_text) for r in records) == sorted(OWN_PAIRS)
    assert sum(r.duration for r in records) == pytest.approx(summary["speech_seconds"], abs=0.01)
    with (
        np.load(tmp_path / "global_cmvn.npz") as g,
        np.load(tmp_path / "train.cmvn.npz") as t,
        np.load(tmp_path / "train-tts.cmvn.npz") as v,
    ):
        assert int(g["count"]) == int(t["count"]) + int(v["count"]) > int(t["count"])


def test_a_seeded_sample_keeps_file_order():
    pairs = [Pair(f"sentence {i}", f"Satz {i}") for i in range(50)]
    a, dropped = choose(pairs, {"sentence 3", "satz 7"}, limit=10, seed=4)
    assert choose(pairs, {"sentence 3", "satz 7"}, limit=10, seed=4)[0] == a
    assert len(a) == 10 and a == sorted(a, key=lambda p: int(p.src.split()[1]))
    assert not {"sentence 3", "sentence 7"} & {p.src for p in a}
    assert dropped == {"a dev or test sentence": 2, "beyond the limit": 38}
    assert choose(pairs, set(), limit=10, seed=5)[0] != a
    assert choose(pairs, set(), limit=0, seed=0) == (pairs, {})


def test_a_failed_sentence_is_counted_not_dropped(corpus, tmp_path, monkeypatch):
    def fake_tts(speaker, text: str, sample_rate: int, workdir: Path) -> np.ndarray:
        if text.startswith("good"):
            raise mustc_builder.TTSError("espeak-ng exit 1: test failure")
        return (0.5 * np.sin(np.arange(sample_rate // 2) * 0.1)).astype(np.float32)

    monkeypatch.setattr(mustc_builder, "synthesize", fake_tts)
    root = tmp_path / "corpus"
    shutil.copytree(corpus, root)
    summary = voice_text_pairs(root, _manifest(tmp_path / "p.jsonl", OWN_PAIRS), "train-x", jobs=1)
    assert summary["sentences"] == 4 and summary["failed"] == 1
    assert summary["failure_reasons"] == {"espeak-ng exit 1: test failure": 1}
    assert [f["sentence"] for f in summary["failures"]] == ["good morning"]
    assert len(_lines(root / "en-de" / "data" / "train-x" / "txt" / "train-x.de")) == 4


def test_bad_input_gets_one_line(corpus, tmp_path, capsys):
    from speechmt.cli import main

    root = tmp_path / "corpus"
    shutil.copytree(corpus, root)
    text = _manifest(tmp_path / "p.jsonl", OWN_PAIRS[:1])
    assert main(["synth-tts", "--root", str(root), "--text", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: no such manifest" in capsys.readouterr().err
    assert main(["synth-tts", "--root", str(tmp_path / "nothing"), "--text", str(text)]) == 2
    assert "no en-de/data folder" in capsys.readouterr().err
    assert main(["synth-tts", "--root", str(root), "--text", str(text), "--split", "tst-COMMON"]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert main(["synth-tts", "--root", str(root), "--text", str(text), "--split", "../up"]) == 2
    assert "split name '../up'" in capsys.readouterr().err
    assert main(["synth-tts", "--root", str(root), "--text", str(text), "--split", "train-one"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 1
    assert voice_text_pairs(root, text, "train-two", jobs=1)["sentences"] == 1  # training splits may share pairs
    test_pair = Pair(_lines(root / "en-de" / "data" / "dev" / "txt" / "dev.en")[0], "Ein Satz.")
    with pytest.raises(SynthError, match="no pair left to voice"):
        voice_text_pairs(root, _manifest(tmp_path / "q.jsonl", [test_pair]), "train-three")
    assert not (root / "en-de" / "data" / "train-three").exists()


def test_phrases_and_short_pairs_can_be_left_out():
    from speechmt_corpora.voiced_text import is_sentence

    assert is_sentence("Where is it?") and is_sentence('He said "go!"') and is_sentence("Er sagte „Nein.“")
    assert not is_sentence("the old station") and not is_sentence("to be or not to be;")
    kept, dropped = choose(
        OWN_PAIRS + [Pair("a very long phrase without an end", "eine lange Wendung")],
        set(),
        limit=0,
        seed=0,
        min_words=4,
        sentences=True,
    )
    assert kept == [p for p in OWN_PAIRS if p.src != "good morning"]
    assert dropped == {"fewer than 4 words": 1, "not a sentence": 1}
