"""A held-out voice: MuST-C-mini tiny built with `hold_out_voice="kal"` voices no train, dev or tst-COMMON talk
with flite's kal and every talk of tst-kal (tst-COMMON's sentences again); synth-tts keeps it out too; BLEU per
voice of an evaluation, and of a benchmark's system, pools the seen voices against it; a voice the build does
not use added afterwards (`synth --unseen-voice`)."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechmt.cli.main import main
from speechmt.data.manifest import Record, write_manifest
from speechmt.evaluation.benchmark import ids_digest
from speechmt_corpora import SynthError, build_mini_corpus
from speechmt_corpora.common import split_pool
from speechmt_corpora.mustc import TALK_VOICES, add_unseen_voice, plan_talks, read_talks
from speechmt_corpora.text import Pair
from speechmt_corpora.voice_scores import (
    Scored,
    held_out_voice,
    read_benchmark,
    read_evaluation,
    scores_by_voice,
    talk_voices,
    voice_of,
)
from speechmt_corpora.voiced_text import corpus_held_out_voice, plan
from speechmt_corpora.voices import VOICES, find_voice, other_voices

SPLITS = ("train", "dev", "tst-COMMON", "tst-kal")
TOOLS = ("espeak-ng", "pico2wave", "mbrola", "flite")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """MuST-C-mini tiny (seed 0) with kal held out; skips when a system tool or the dictionary is absent."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or not Path("/usr/share/trans/de-en").is_file():
        pytest.skip(f"needs {', '.join(missing) or 'trans-de-en'}")
    root = tmp_path_factory.mktemp("mustc_kal")
    return root, build_mini_corpus("mustc", "tiny", root, seed=0, jobs=2, hold_out_voice="kal")


def _voices(root: Path, split: str) -> dict[str, str]:
    lines = (root / "en-de" / "data" / split / TALK_VOICES).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "wav\tvoice"
    return dict(line.split("\t") for line in lines[1:])


def _lines(root: Path, split: str, suffix: str) -> list[str]:
    return (root / "en-de" / "data" / split / "txt" / f"{split}.{suffix}").read_text(encoding="utf-8").splitlines()


def test_the_held_out_voice_speaks_its_test_split_only(corpus):
    root, summary = corpus
    talks = {split: _voices(root, split) for split in SPLITS}
    for split in ("train", "dev", "tst-COMMON"):
        assert talks[split] and not any(v.startswith("flite:kal:") for v in talks[split].values()), split
    assert len(talks["tst-kal"]) == len(talks["tst-COMMON"]) == 1
    assert all(v.startswith("flite:kal:") for v in talks["tst-kal"].values())
    wavs = [set(t) for t in talks.values()]
    assert sum(map(len, wavs)) == len(set().union(*wavs)) == 5  # talk names stay unique: ted_1 .. ted_5
    for split in SPLITS:  # every talk of the yaml is listed, and its wav is there
        yaml_wavs = {re.search(r"wav: (\S+)\}", line)[1] for line in _lines(root, split, "yaml")}
        assert yaml_wavs == set(talks[split])
        assert all(sf.info(root / "en-de" / "data" / split / "wav" / w).samplerate == 16000 for w in yaml_wavs)
    for lang in ("en", "de"):  # the same sentences as tst-COMMON, in the same order
        assert _lines(root, "tst-kal", lang) == _lines(root, "tst-COMMON", lang)
        assert len(_lines(root, "tst-kal", lang)) == 4


def test_the_summary_counts_the_held_out_split(corpus):
    root, summary = corpus
    assert summary["hold_out_voice"] == "flite:kal" == held_out_voice(root)
    assert summary["sentences"] == {"train": 12, "dev": 4, "tst-COMMON": 4, "tst-kal": 4}
    assert summary["splits"]["tst-kal"]["talks"] == 1 and summary["failures"] == []
    kal = {k: n for k, n in summary["voices"].items() if k.startswith("flite:kal:")}
    assert sum(kal.values()) == 4 and sum(summary["voices"].values()) == 24
    assert json.loads((root / "synth_summary.json").read_text())["hold_out_voice"] == "flite:kal"


def test_a_rebuild_keeps_the_same_hold_out_and_refuses_another(corpus, capsys):
    root, summary = corpus
    assert build_mini_corpus("mustc", "tiny", root, seed=0, hold_out_voice="flite:kal") == summary
    with pytest.raises(SynthError, match="already exists"):
        build_mini_corpus("mustc", "tiny", root, seed=0)
    with pytest.raises(SynthError, match="already exists"):
        build_mini_corpus("mustc", "tiny", root, seed=0, hold_out_voice="slt")


def test_voice_names_and_the_draws_without_a_hold_out():
    assert find_voice("en", "kal") == find_voice("en", "flite:kal") != find_voice("en", "kal16")
    with pytest.raises(SynthError, match="voice 'nobody': no such en voice; one of espeak-ng:en-us, "):
        find_voice("en", "nobody")
    assert len(other_voices("en", find_voice("en", "kal"))) == len(VOICES["en"]) - 1 == 16
    pairs = [Pair(f"s{i}", f"t{i}") for i in range(300)]
    _, splits = split_pool(pairs, "tiny", 0, 0)
    every = plan_talks(splits, "tiny", 0, Path("x"))  # as builds before the option: the same draws
    assert every == plan_talks(splits, "tiny", 0, Path("x"), VOICES["en"])


def test_synth_tts_keeps_the_corpus_held_out_voice(corpus):
    root, _ = corpus
    held = corpus_held_out_voice(root)
    assert held == find_voice("en", "kal")
    talks = plan([Pair(f"s{i}", f"t{i}") for i in range(2000)], 9, Path("w"), 0, other_voices("en", held))
    labels = {t.speaker.voice.name for t in talks}
    assert len(talks) >= 50 and "kal" not in labels and {"kal16", "slt"} <= labels


def test_hold_out_is_for_mustc_only(tmp_path, capsys):
    assert main(["data", "synth", "covost2", "--size", "tiny", "--out", str(tmp_path), "--hold-out-voice", "kal"]) == 2
    assert "argument --hold-out-voice: for corpus mustc only, not covost2" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mustc corpus only"):
        build_mini_corpus("covost2", "tiny", tmp_path, hold_out_voice="kal")


def _rows(root: Path, split: str, hyp) -> list[Scored]:
    (wav,) = _voices(root, split)
    return [Scored(f"{Path(wav).stem}_{i}", ref, hyp(ref)) for i, ref in enumerate(_lines(root, split, "de"))]


def test_bleu_per_voice_seen_against_held_out(corpus, tmp_path):
    root, _ = corpus
    speakers = talk_voices(root / "en-de")
    assert voice_of(speakers["ted_5"]) == "flite:kal" and len(speakers) == 5
    seen = _rows(root, "tst-COMMON", lambda ref: ref)
    exact = scores_by_voice(seen + _rows(root, "tst-kal", lambda ref: ref), speakers, "flite:kal")
    assert exact["seen"] == {"n": 4, "bleu": 100.0, "chrf": 100.0} and exact["held_out"]["n"] == 4
    assert exact["held_out_over_seen_bleu"] == 1.0
    (seen_voice,) = [v for v, s in exact["voices"].items() if s["seen"]]
    assert exact["voices"][seen_voice]["n"] == 4 and exact["voices"]["flite:kal"]["seen"] is False
    wrong = scores_by_voice(seen + _rows(root, "tst-kal", lambda ref: "nichts"), speakers, "flite:kal")
    assert wrong["held_out"]["bleu"] == 0.0 and wrong["held_out_over_seen_bleu"] == 0.0
    # the same rows read back from an evaluation folder
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "results.tsv").write_text("id\tref\thyp\n" + "".join(f"{r.id}\t{r.ref}\t{r.hyp}\n" for r in seen))
    assert read_evaluation(folder) == seen
    with pytest.raises(SynthError, match="ted_99 is in no talk_voices.tsv"):
        scores_by_voice([Scored("ted_99_0", "a", "a")], speakers, None)


def test_a_benchmark_system_reads_in_manifest_order(tmp_path):
    records = [
        Record(f"ted_{t}_{i}", "a.wav", 0.0, 1.0, 0, "en", f"ref {t} {i}", "spk", "en", "de")
        for t in (1, 2)
        for i in range(2)
    ]
    write_manifest(tmp_path / "tst-COMMON.jsonl", records)
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "benchmark.json").write_text(
        json.dumps(
            {
                "data": str(tmp_path),
                "split": "tst-COMMON",
                "n": 3,
                "ids_sha256": ids_digest([r.id for r in records[:3]]),
                "systems": [{"name": "all-data lm-st"}],
            }
        )
    )
    (bench / "hyp.all-data-lm-st.txt").write_text("h0\nh1\nh2\n")
    rows = read_benchmark(bench, "all-data lm-st")
    assert [(r.id, r.ref, r.hyp) for r in rows] == [
        ("ted_1_0", "ref 1 0", "h0"),
        ("ted_1_1", "ref 1 1", "h1"),
        ("ted_2_0", "ref 2 0", "h2"),
    ]
    with pytest.raises(SynthError, match="no hypotheses of system 'corpus-only lm-st'"):
        read_benchmark(bench, "corpus-only lm-st")
    scores = scores_by_voice(rows, {"ted_1": "flite:kal:r90:p88", "ted_2": "espeak-ng:en-us:s140:p35"}, "flite:kal")
    assert scores["voices"]["flite:kal"]["n"] == 2 and scores["seen"]["n"] == 1
    assert np.isclose(scores["held_out"]["bleu"], 0.0)


def test_an_unseen_voice_is_added_to_a_finished_build(corpus, capsys):
    root, _ = corpus
    before = json.loads((root / "synth_summary.json").read_text())
    used = {voice_of(label) for label in before["voices"]}
    voice = next(v for v in VOICES["en"] if v.engine == "flite" and f"flite:{v.name}" not in used)
    split = f"tst-{voice.name}"
    assert main(["data", "synth", "mustc", "--size", "tiny", "--out", str(root), "--unseen-voice", voice.name]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["split"] == split and printed["voice"] == f"flite:{voice.name}" and printed["sentences"] == 4
    for lang in ("en", "de"):  # tst-COMMON's sentences, in its order, talk by talk
        assert _lines(root, split, lang) == _lines(root, "tst-COMMON", lang)
    talks = _voices(root, split)
    assert len(talks) == 1 and all(v.startswith(f"flite:{voice.name}:") for v in talks.values())
    assert set(talks).isdisjoint(set().union(*(_voices(root, s) for s in SPLITS)))  # a new talk number
    assert [len(p) for _, p in read_talks(root / "en-de" / "data" / split, split)] == [4]
    after = json.loads((root / "synth_summary.json").read_text())
    assert after["unseen_voices"] == {split: f"flite:{voice.name}"} and after["sentences"][split] == 4
    assert sum(after["voices"].values()) == sum(before["voices"].values()) + 4
    assert after["hold_out_voice"] == before["hold_out_voice"]  # the build's own hold-out unchanged
    wav = next((root / "en-de" / "data" / split / "wav").iterdir())
    stamp = wav.stat().st_mtime_ns
    assert add_unseen_voice(root, voice.name) == (split, after) and wav.stat().st_mtime_ns == stamp  # kept
    seen = voice_of(next(iter(_voices(root, "train").values()))).split(":")[1]
    with pytest.raises(SynthError, match="already speaks with it .*an unseen voice must speak none of its talks"):
        add_unseen_voice(root, seen)
    with pytest.raises(SynthError, match="voice flite:kal: .* already speaks with it"):
        add_unseen_voice(root, "kal")  # the build's own held-out voice: refused, its split tst-kal untouched
    assert _lines(root, "tst-kal", "en") == _lines(root, "tst-COMMON", "en")
    with pytest.raises(SynthError, match="no finished MuST-C-mini build"):
        add_unseen_voice(root / "nothing", "kal")


def test_unseen_voice_options_are_checked(tmp_path, capsys):
    assert main(["data", "synth", "covost2", "--out", str(tmp_path), "--unseen-voice", "kal"]) == 2
    assert capsys.readouterr().err.strip() == (
        "speechmt data synth: error: argument --unseen-voice: for corpus mustc only, not covost2"
    )
    assert (
        main(["data", "synth", "mustc", "--out", str(tmp_path), "--unseen-voice", "kal", "--hold-out-voice", "slt"])
        == 2
    )
    assert "argument --unseen-voice: adds to a finished build" in capsys.readouterr().err
