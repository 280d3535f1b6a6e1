"""MuST-C and CoVoST 2 preparation on the committed replicas of their layouts, and on broken copies."""

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from speechmt.audio import fbank, num_frames, read_audio
from speechmt.cli import main
from speechmt.data.covost2 import prepare_covost2
from speechmt.data.features import FeatureStore
from speechmt.data.manifest import read_manifest
from speechmt.data.mustc import prepare_mustc
from speechmt.data.prepare import PrepareConfig, PrepareError

CFG = PrepareConfig(jobs=1)
TRAIN_EN = [
    "The weather is lovely today.",
    "We are building a speech translation toolkit.",
    "Please open the window.",
    "My brother plays the guitar every evening.",
    "The train leaves at nine o'clock.",
    "She reads a book in the garden.",
]


def test_mustc_manifest_contents(mustc_root, tmp_path):
    summary = prepare_mustc(mustc_root, tmp_path, "de", cfg=CFG)
    train = read_manifest(tmp_path / "train.jsonl")
    # the yaml lists ted_1's first two segments out of offset order: ids follow offsets, not lines
    assert [r.id for r in train] == ["ted_1_0", "ted_1_1", "ted_1_2", "ted_2_0", "ted_2_1", "ted_2_2"]
    assert [r.src_text for r in train] == TRAIN_EN
    assert train[0].tgt_text == "Das Wetter ist heute schön."
    assert [r.offset for r in train[:3]] == [0.25, 2.024687, 4.69675]
    assert [r.duration for r in train[:3]] == [1.524687, 2.422063, 1.360562]
    assert [r.n_frames for r in train[:3]] == [150, 240, 134]
    assert all(r.n_frames == num_frames(round(r.duration * 16000)) for r in train)
    assert {r.speaker for r in train} == {"spk.1", "spk.2"}
    assert {(r.src_lang, r.tgt_lang) for r in train} == {("en", "de")}
    assert train[0].audio.endswith("mustc/en-de/data/train/wav/ted_1.wav")
    assert [r.id for r in read_manifest(tmp_path / "tst-COMMON.jsonl")] == ["ted_4_0", "ted_4_1"]
    assert {s: v["kept"] for s, v in summary["splits"].items()} == {"train": 6, "dev": 2, "tst-COMMON": 2}
    assert json.loads((tmp_path / "prepare_summary.json").read_text())["splits"]["train"]["skipped"] == {}


def test_feature_store_holds_the_segment_features(mustc_root, tmp_path):
    prepare_mustc(mustc_root, tmp_path, "de", cfg=PrepareConfig(jobs=1, store_dtype="float32"))
    store = FeatureStore(tmp_path / "fbank80" / "train")
    rec = read_manifest(tmp_path / "train.jsonl")[1]
    expected = fbank(read_audio(rec.audio, rec.offset, rec.duration))
    assert store[rec.id].shape == (rec.n_frames, 80)
    assert np.array_equal(store[rec.id], expected)
    assert len(store) == 6 and store.get(1).shape == (240, 80)
    with np.load(tmp_path / "global_cmvn.npz") as cmvn:
        frames = np.concatenate([store.get(i) for i in range(len(store))])
        assert (
            int(cmvn["count"])
            == frames.shape[0]
            == 150 + 240 + 134 + sum(r.n_frames for r in read_manifest(tmp_path / "train.jsonl")[3:])
        )
        assert np.allclose(cmvn["mean"], frames.mean(0), atol=1e-4)
        assert np.allclose(cmvn["std"], frames.std(0), atol=1e-4)


def test_two_processes_give_the_same_store(mustc_root, tmp_path):
    prepare_mustc(mustc_root, tmp_path / "a", "de", cfg=PrepareConfig(jobs=1))
    prepare_mustc(mustc_root, tmp_path / "b", "de", cfg=PrepareConfig(jobs=2))
    for split in ("train", "dev"):
        assert (tmp_path / "a" / f"{split}.jsonl").read_text() == (tmp_path / "b" / f"{split}.jsonl").read_text()
        assert (tmp_path / "a/fbank80" / f"{split}.bin").read_bytes() == (
            tmp_path / "b/fbank80" / f"{split}.bin"
        ).read_bytes()


def test_prepared_split_is_kept_unless_overwrite(mustc_root, tmp_path, capsys):
    prepare_mustc(mustc_root, tmp_path, "de", cfg=CFG)
    before = (tmp_path / "fbank80" / "train.bin").stat().st_mtime_ns
    prepare_mustc(mustc_root, tmp_path, "de", cfg=CFG)
    assert "already prepared" in capsys.readouterr().out
    assert (tmp_path / "fbank80" / "train.bin").stat().st_mtime_ns == before


@pytest.fixture
def broken_mustc(mustc_root, tmp_path):
    root = tmp_path / "mustc"
    shutil.copytree(mustc_root, root)
    txt = root / "en-de/data/train/txt"
    yaml_lines = (txt / "train.yaml").read_text().splitlines()
    yaml_lines[2] = "- {duration: abc, offset: 4.69675, rW: 4, uW: 0, speaker_id: spk.1, wav: ted_1.wav}"
    (txt / "train.yaml").write_text("\n".join(yaml_lines) + "\n")
    de = (txt / "train.de").read_text().splitlines()
    de[3] = ""
    (txt / "train.de").write_text("\n".join(de) + "\n")
    (root / "en-de/data/dev/wav/ted_3.wav").unlink()
    return root


def test_mustc_bad_inputs_are_counted_and_nothing_else_lost(broken_mustc, tmp_path):
    summary = prepare_mustc(broken_mustc, tmp_path / "out", "de", cfg=PrepareConfig(jobs=1, max_frames=200))
    train = summary["splits"]["train"]
    assert train["items"] == 6 and train["kept"] == 3
    assert train["skipped"] == {"malformed row": 1, "missing text": 1, "too long": 1}
    details = {s["reason"]: s["detail"] for s in train["skipped_items"]}
    assert "train.yaml:3: malformed segment" in details["malformed row"]
    assert "train.de:4: empty line for ted_2_0" in details["missing text"]
    assert summary["splits"]["dev"]["skipped"] == {"missing audio": 2}
    assert summary["splits"]["tst-COMMON"]["kept"] == 2  # max_frames filters training splits only
    assert [r.id for r in read_manifest(tmp_path / "out/train.jsonl")] == ["ted_1_0", "ted_2_1", "ted_2_2"]


def test_mustc_misaligned_text_is_a_clear_error(mustc_root, tmp_path):
    root = tmp_path / "mustc"
    shutil.copytree(mustc_root, root)
    en = root / "en-de/data/dev/txt/dev.en"
    en.write_text(en.read_text() + "One line too many.\n")
    with pytest.raises(PrepareError, match=r"dev\.en: 3 lines but .*dev\.yaml has 2 segments"):
        prepare_mustc(root, tmp_path / "out", "de", cfg=CFG)


def test_covost_manifest_contents(covost_root, tmp_path):
    summary = prepare_covost2(covost_root, tmp_path, "de", "en", cfg=CFG)
    train = read_manifest(tmp_path / "train.jsonl")
    assert [r.id for r in train] == [f"common_voice_de_1000000{i}" for i in (1, 2, 3, 7)]  # train + train_covost
    assert train[3].src_text == 'Er sagte "Hallo" zu mir.' and train[3].tgt_text == 'He said "hello" to me.'
    assert [r.speaker for r in train] == ["client_b", "client_a", "client_b", "client_b"]
    assert {(r.src_lang, r.tgt_lang) for r in train} == {("de", "en")}
    assert all(r.offset == 0.0 and r.n_frames == num_frames(round(r.duration * 16000)) for r in train)
    assert [r.id for r in read_manifest(tmp_path / "test.jsonl")] == [
        "common_voice_de_10000005",
        "common_voice_de_10000006",
    ]
    assert {s: v["kept"] for s, v in summary["splits"].items()} == {"train": 4, "dev": 1, "test": 2}


@pytest.fixture
def broken_covost(covost_root, tmp_path):
    root = tmp_path / "covost"
    shutil.copytree(covost_root, root)
    clips = root / "de/clips"
    (clips / "common_voice_de_10000001.mp3").write_bytes((clips / "common_voice_de_10000001.mp3").read_bytes()[:40])
    (clips / "common_voice_de_10000002.mp3").write_bytes(b"")
    (clips / "common_voice_de_10000003.mp3").write_bytes(b"no audio here, just text\n" * 50)
    (clips / "common_voice_de_10000004.mp3").unlink()
    t = np.arange(44100) / 44100
    sf.write(
        clips / "common_voice_de_10000005.mp3",
        np.stack([np.sin(2 * np.pi * 300 * t)] * 2, 1) * 0.3,
        44100,
        format="MP3",
    )  # stereo 44.1 kHz: usable
    nan = np.full(16000, 0.1, np.float32)
    nan[5] = np.nan
    sf.write(clips / "common_voice_de_10000006.wav", nan, 16000, subtype="FLOAT")
    table = root / "de/covost_v2.de_en.tsv"
    rows = table.read_text().replace("10000006.mp3", "10000006.wav").splitlines()
    rows.append("common_voice_de_10000008.mp3\tZu viele\tFelder\thier\tclient_a\ttrain")
    rows.append("common_voice_de_10000009.mp3\tNicht validiert.\tNot validated.\tclient_a\ttest")
    table.write_text("\n".join(rows) + "\n")
    validated = root / "de/validated.tsv"
    validated.write_text(validated.read_text().replace("10000006.mp3", "10000006.wav"))
    return root


def test_covost_bad_inputs_are_counted_and_nothing_else_lost(broken_covost, tmp_path):
    summary = prepare_covost2(broken_covost, tmp_path / "out", "de", "en", cfg=CFG)
    s = summary["splits"]
    assert s["train"]["skipped"] == {"unreadable audio": 2, "empty audio": 1, "malformed row": 1}
    assert s["dev"]["skipped"] == {"missing audio": 1}
    assert s["test"]["skipped"] == {"non-finite samples": 1, "missing transcript": 1}
    assert [r.id for r in read_manifest(tmp_path / "out/train.jsonl")] == ["common_voice_de_10000007"]
    assert [r.id for r in read_manifest(tmp_path / "out/test.jsonl")] == ["common_voice_de_10000005"]
    malformed = next(x for x in s["train"]["skipped_items"] if x["reason"] == "malformed row")
    assert "covost_v2.de_en.tsv:9: malformed row (6 fields, header has 5)" in malformed["detail"]
    for item in s["train"]["skipped_items"] + s["test"]["skipped_items"]:
        assert item["id"] and "\n" not in item["detail"]


def test_cli_prepare_and_clear_error(mustc_root, tmp_path, capsys):
    assert (
        main(
            [
                "data",
                "prepare",
                "mustc",
                "--root",
                str(mustc_root),
                "--tgt-lang",
                "de",
                "--out",
                str(tmp_path),
                "--jobs",
                "1",
                "--splits",
                "dev",
            ]
        )
        == 0
    )
    assert "dev" in capsys.readouterr().out and (tmp_path / "dev.jsonl").exists()
    assert (
        main(
            [
                "data",
                "prepare",
                "mustc",
                "--root",
                str(tmp_path / "nowhere"),
                "--tgt-lang",
                "de",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("speechmt: error:") and "no en-de/data folder" in err and "\n" not in err
