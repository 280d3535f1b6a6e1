"""Several MuST-C targets and CoVoST 2 directions prepared into one folder, on fake corpora in the released
layouts (copies of the committed replicas with other languages' texts)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from speechmt.cli import main
from speechmt.data.covost2 import covost_directions, prepare_covost2
from speechmt.data.features import FeatureStore
from speechmt.data.manifest import read_manifest
from speechmt.data.mustc import prepare_mustc
from speechmt.data.prepare import PrepareConfig, PrepareError

CFG = PrepareConfig(jobs=1)
REPO = Path(__file__).resolve().parents[2]

FR = {
    "train": [
        "Nous construisons un outil de traduction de la parole.",
        "Il fait beau aujourd'hui.",
        "Ouvre la fenêtre, s'il te plaît.",
        "Mon frère joue de la guitare tous les soirs.",
        "Le train part à neuf heures.",
    ],  # one segment fewer than en-de: another segmentation
    "dev": ["Où est la gare la plus proche ?", ""],  # an empty line: skipped, counted under en-fr
    "tst-COMMON": ["Le café est meilleur le matin.", "Les enfants jouent dehors."],
}


@pytest.fixture
def mustc3(mustc_root, tmp_path) -> Path:
    """MuST-C with en-de (the replica) and en-fr (the same talks, French, train cut by one segment)."""
    root = tmp_path / "mustc"
    shutil.copytree(mustc_root, root)
    shutil.copytree(root / "en-de", root / "en-fr")
    for split, lines in FR.items():
        txt = root / "en-fr/data" / split / "txt"
        (txt / f"{split}.de").unlink()
        n = len(lines)
        for name in (f"{split}.yaml", f"{split}.en"):
            kept = (txt / name).read_text().splitlines()[:n]
            (txt / name).write_text("\n".join(kept) + "\n")
        (txt / f"{split}.fr").write_text("\n".join(lines) + "\n")
    return root


def _kept(summary: dict) -> dict[str, int]:
    return {s: v["kept"] for s, v in summary["splits"].items()}


def test_mustc_two_targets_into_one_folder(mustc3, tmp_path):
    out = tmp_path / "out"
    summary = prepare_mustc(mustc3, out, ["de", "fr"], cfg=CFG)
    assert _kept(summary) == {
        "train": 11,
        "dev_en-de": 2,
        "tst-COMMON_en-de": 2,
        "dev_en-fr": 1,
        "tst-COMMON_en-fr": 2,
        "dev": 3,
    }
    train = read_manifest(out / "train.jsonl")
    assert [r.id for r in train[:3]] == ["ted_1_0@en-de", "ted_1_1@en-de", "ted_1_2@en-de"]
    assert [r.id for r in train[6:]] == [
        "ted_1_0@en-fr",
        "ted_1_1@en-fr",
        "ted_1_2@en-fr",
        "ted_2_0@en-fr",
        "ted_2_1@en-fr",
    ]
    assert [(r.src_lang, r.tgt_lang) for r in train] == [("en", "de")] * 6 + [("en", "fr")] * 5
    # ted_1's yaml lists its second segment first: ted_1_0 is offset 0.25 in both pairs
    assert train[6].src_text == "The weather is lovely today." and train[6].tgt_text == "Il fait beau aujourd'hui."
    assert train[0].tgt_text == "Das Wetter ist heute schön."
    assert len({r.id for r in train}) == 11
    fr_test = read_manifest(out / "tst-COMMON_en-fr.jsonl")
    assert [(r.id, r.tgt_lang) for r in fr_test] == [("ted_4_0@en-fr", "fr"), ("ted_4_1@en-fr", "fr")]
    assert fr_test[1].tgt_text == "Les enfants jouent dehors."
    dev = read_manifest(out / "dev.jsonl")
    assert [r.id for r in dev] == ["ted_3_0@en-de", "ted_3_1@en-de", "ted_3_0@en-fr"]

    d = summary["directions"]
    assert list(d) == ["en-de", "en-fr"]
    assert {s: v["kept"] for s, v in d["en-de"].items()} == {"train": 6, "dev_en-de": 2, "tst-COMMON_en-de": 2}
    assert {s: v["kept"] for s, v in d["en-fr"].items()} == {"train": 5, "dev_en-fr": 1, "tst-COMMON_en-fr": 2}
    assert d["en-fr"]["dev_en-fr"]["items"] == 2 and d["en-fr"]["dev_en-fr"]["skipped"] == {"missing text": 1}
    assert summary["splits"]["dev_en-fr"]["skipped_items"][0]["id"] == "ted_3_1@en-fr"
    hours = summary["splits"]["train"]["hours"]
    assert d["en-de"]["train"]["hours"] + d["en-fr"]["train"]["hours"] == pytest.approx(hours)
    assert d["en-de"]["train"]["frames"] == sum(r.n_frames for r in train[:6])
    assert summary["directions"] == json.loads((out / "prepare_summary.json").read_text())["directions"]
    assert summary["splits_of_direction"]["en-fr"] == {
        "train": "train",
        "dev": "dev_en-fr",
        "tst-COMMON": "tst-COMMON_en-fr",
    }
    assert summary["tgt_langs"] == ["de", "fr"] and summary["src_langs"] == ["en"]


def test_the_union_dev_copies_the_features(mustc3, tmp_path):
    prepare_mustc(mustc3, tmp_path, ["de", "fr"], cfg=PrepareConfig(jobs=1, store_dtype="float32"))
    dev, de, fr = (FeatureStore(tmp_path / "fbank80" / s) for s in ("dev", "dev_en-de", "dev_en-fr"))
    assert len(dev) == 3
    assert np.array_equal(dev["ted_3_1@en-de"], de["ted_3_1@en-de"])
    assert np.array_equal(dev["ted_3_0@en-fr"], fr["ted_3_0@en-fr"])
    train = FeatureStore(tmp_path / "fbank80" / "train")
    with np.load(tmp_path / "global_cmvn.npz") as cmvn:  # over the one training split, both pairs
        assert int(cmvn["count"]) == int(train.lengths.sum())
    # the same segment of the same talk read for two pairs gives the same features
    assert np.array_equal(train["ted_1_0@en-de"], train["ted_1_0@en-fr"])


def test_one_target_keeps_todays_names(mustc3, tmp_path):
    summary = prepare_mustc(mustc3, tmp_path / "a", ["de"], cfg=CFG)
    assert _kept(summary) == {"train": 6, "dev": 2, "tst-COMMON": 2}
    assert "directions" not in summary and summary["tgt_lang"] == "de"
    assert read_manifest(tmp_path / "a/train.jsonl")[0].id == "ted_1_0"
    prepare_mustc(mustc3, tmp_path / "b", "de", cfg=CFG)
    for name in ("train.jsonl", "dev.jsonl", "fbank80/train.bin", "train.summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_rerun_resumes_and_other_directions_are_refused(mustc3, tmp_path, capsys):
    prepare_mustc(mustc3, tmp_path, ["de", "fr"], cfg=CFG)
    before = (tmp_path / "fbank80/train.bin").stat().st_mtime_ns
    summary = prepare_mustc(mustc3, tmp_path, ["de", "fr"], cfg=CFG)
    assert "train: already prepared" in capsys.readouterr().out
    assert (tmp_path / "fbank80/train.bin").stat().st_mtime_ns == before
    assert summary["directions"]["en-fr"]["train"]["kept"] == 5 and summary["splits"]["dev"]["kept"] == 3
    with pytest.raises(PrepareError, match=r"train holds en-de, en-fr, not en-fr; .* --overwrite"):
        prepare_mustc(mustc3, tmp_path, ["fr", "fr"], cfg=CFG)  # one target (the list's duplicates dropped)
    prepare_mustc(mustc3, tmp_path / "single", "de", cfg=CFG)
    with pytest.raises(PrepareError, match="train holds one direction, not en-de, en-fr"):
        prepare_mustc(mustc3, tmp_path / "single", ["de", "fr"], cfg=CFG)
    summary = prepare_mustc(mustc3, tmp_path, ["fr"], cfg=PrepareConfig(jobs=1, overwrite=True))
    assert summary["splits"]["train"]["kept"] == 5 and "directions" not in summary


def test_a_missing_pair_is_a_clear_error(mustc3, tmp_path):
    with pytest.raises(PrepareError, match="no en-es/data folder"):
        prepare_mustc(mustc3, tmp_path, ["de", "es"], cfg=CFG)


@pytest.fixture
def covost3(covost_root, tmp_path) -> Path:
    """CoVoST 2 with de->en (the replica), es->en (three of its clips renamed, Spanish sentences) and en->de,
    en->ca (the same English clips in two translation tables)."""
    root = tmp_path / "covost"
    shutil.copytree(covost_root, root)
    es = [
        ("10000001", "Hace buen tiempo hoy.", "The weather is nice today.", "train"),
        ("10000004", "Mi hermano toca la guitarra.", "My brother plays the guitar.", "dev"),
        ("10000005", "El tren sale a las nueve.", "The train leaves at nine.", "test"),
    ]
    en = [
        ("10000001", "The weather is lovely today.", "Das Wetter ist heute schön.", "Fa bon temps avui.", "train"),
        ("10000002", "Please open the window.", "Bitte öffne das Fenster.", "Obre la finestra.", "train"),
        ("10000005", "The train leaves at nine.", "Der Zug fährt um neun.", "El tren surt a les nou.", "test"),
    ]
    for lang, rows in (("es", es), ("en", en)):
        (root / lang / "clips").mkdir(parents=True)
        validated = ["client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccent"]
        for row in rows:
            clip = f"common_voice_{lang}_{row[0]}.mp3"
            shutil.copy(root / "de/clips" / f"common_voice_de_{row[0]}.mp3", root / lang / "clips" / clip)
            validated.append(f"client_{lang}\t{clip}\t{row[1]}\t2\t0\t\t\t")
        (root / lang / "validated.tsv").write_text("\n".join(validated) + "\n")
    head = "path\tsentence\ttranslation\tclient_id\tsplit"
    (root / "es/covost_v2.es_en.tsv").write_text(
        "\n".join([head] + [f"common_voice_es_{c}.mp3\t{s}\t{t}\tclient_es\t{sp}" for c, s, t, sp in es]) + "\n"
    )
    for k, tgt in ((2, "de"), (3, "ca")):
        (root / f"en/covost_v2.en_{tgt}.tsv").write_text(
            "\n".join([head] + [f"common_voice_en_{r[0]}.mp3\t{r[1]}\t{r[k]}\tclient_en\t{r[4]}" for r in en]) + "\n"
        )
    return root


def test_covost_two_sources_into_english(covost3, tmp_path):
    summary = prepare_covost2(covost3, tmp_path, ["de", "es"], "en", cfg=CFG)
    assert _kept(summary) == {"train": 5, "dev_de-en": 1, "test_de-en": 2, "dev_es-en": 1, "test_es-en": 1, "dev": 2}
    train = read_manifest(tmp_path / "train.jsonl")
    assert [r.id for r in train] == [f"common_voice_de_1000000{i}@de-en" for i in (1, 2, 3, 7)] + [
        "common_voice_es_10000001@es-en"
    ]
    assert [(r.src_lang, r.tgt_lang) for r in train] == [("de", "en")] * 4 + [("es", "en")]
    assert train[4].src_text == "Hace buen tiempo hoy." and train[4].speaker == "client_es"
    test = read_manifest(tmp_path / "test_es-en.jsonl")
    assert [(r.id, r.tgt_text) for r in test] == [("common_voice_es_10000005@es-en", "The train leaves at nine.")]
    d = summary["directions"]
    assert {s: v["kept"] for s, v in d["es-en"].items()} == {"train": 1, "dev_es-en": 1, "test_es-en": 1}
    assert {s: v["kept"] for s, v in d["de-en"].items()} == {"train": 4, "dev_de-en": 1, "test_de-en": 2}
    assert summary["src_langs"] == ["de", "es"] and summary["tgt_langs"] == ["en"]


def test_covost_english_into_two_targets_from_the_same_clips(covost3, tmp_path):
    summary = prepare_covost2(covost3, tmp_path, "en", ["de", "ca"], cfg=CFG)
    assert _kept(summary) == {"train": 4, "dev_en-de": 0, "test_en-de": 1, "dev_en-ca": 0, "test_en-ca": 1, "dev": 0}
    train = read_manifest(tmp_path / "train.jsonl")
    assert [r.id for r in train] == [
        "common_voice_en_10000001@en-de",
        "common_voice_en_10000002@en-de",
        "common_voice_en_10000001@en-ca",
        "common_voice_en_10000002@en-ca",
    ]
    assert [r.tgt_text for r in train[::2]] == ["Das Wetter ist heute schön.", "Fa bon temps avui."]
    assert {s: v["kept"] for s, v in summary["directions"]["en-ca"].items()} == {
        "train": 2,
        "dev_en-ca": 0,
        "test_en-ca": 1,
    }


def test_covost_directions():
    assert covost_directions(["de", "es"], "en") == [("de", "en"), ("es", "en")]
    assert covost_directions("en", ["de", "en", "ca"]) == [("en", "de"), ("en", "ca")]
    assert covost_directions("de", "en") == [("de", "en")]
    with pytest.raises(PrepareError, match="never translated into itself"):
        covost_directions("en", ["en"])


def test_cli_several_targets(mustc3, covost3, tmp_path, capsys):
    assert (
        main(
            [
                "data",
                "prepare",
                "mustc",
                "--root",
                str(mustc3),
                "--tgt-langs",
                "de fr",
                "--out",
                str(tmp_path / "m"),
                "--jobs",
                "1",
                "--splits",
                "dev",
                "tst-COMMON",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "direction en-fr:" in out and "dev_en-fr" in out
    assert sorted(p.name for p in (tmp_path / "m").glob("*.jsonl")) == [
        "dev.jsonl",
        "dev_en-de.jsonl",
        "dev_en-fr.jsonl",
        "tst-COMMON_en-de.jsonl",
        "tst-COMMON_en-fr.jsonl",
    ]
    assert (
        main(
            [
                "data",
                "prepare",
                "covost2",
                "--root",
                str(covost3),
                "--src-langs",
                "de",
                "es",
                "--tgt-lang",
                "en",
                "--out",
                str(tmp_path / "c"),
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "c/prepare_summary.json").read_text())["directions"]["es-en"]["train"]["kept"] == 1
    capsys.readouterr()
    for argv, message in (
        (["mustc", "--tgt-lang", "de", "--tgt-langs", "fr"], "not allowed with argument"),
        (["mustc"], "one of the arguments --tgt-lang --tgt-langs is required"),
        (["mustc", "--tgt-langs", "de f!r"], "invalid language list 'de f!r'"),
    ):
        assert main(["data", "prepare", *argv[:1], "--root", str(mustc3), "--out", str(tmp_path / "x"), *argv[1:]]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


@pytest.mark.slow
def test_recipe_prepares_several_targets(mustc3, tmp_path):
    env = {"SPEECHMT": str(Path(sys.executable).parent / "speechmt"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [
            "bash",
            str(REPO / "recipes/mustc/run.sh"),
            "--root",
            str(mustc3),
            "--tgt-langs",
            "de fr",
            "--data",
            str(tmp_path),
            "--stop-stage",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "prepare_summary.json").read_text())
    assert summary["directions"]["en-fr"]["train"]["kept"] == 5 and "tst-COMMON_en-de" in summary["splits"]


@pytest.mark.slow
def test_covost_recipe_prepares_several_sources(covost3, tmp_path):
    env = {"SPEECHMT": str(Path(sys.executable).parent / "speechmt"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [
            "bash",
            str(REPO / "recipes/covost2/run.sh"),
            "--root",
            str(covost3),
            "--src-langs",
            "de es",
            "--data",
            str(tmp_path),
            "--stop-stage",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "done (stages 1..2)" in res.stdout  # several sources go on to one model's vocabulary (stage 2)
    summary = json.loads((tmp_path / "prepare_summary.json").read_text())
    assert list(summary["directions"]) == ["de-en", "es-en"] and summary["splits"]["test_es-en"]["kept"] == 1
    from speechmt.tokenizers.sentencepiece import Tokenizer

    (vocab,) = tmp_path.glob("spm_st_*.model")
    assert {"<de>", "<es>", "<en>"} <= set(Tokenizer.load(vocab).config.lang_tags)
