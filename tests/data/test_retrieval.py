"""Retrieval of similar translation pairs: BM25 scores against hand-computed values and the bm25s library, the
search's exclusions and order, the examples files `speechmt retrieve` writes, and the few-shot source text."""

import json
import math
import shutil

import pytest

from speechmt.data.manifest import ManifestError, Record, read_split, write_manifest
from speechmt.data.retrieval import (
    BM25,
    TranslationMemory,
    examples_path,
    read_examples,
    retrieve_splits,
    with_examples,
    words,
)
from speechmt.tokenizers.lm import few_shot_source

DOCS = [["the", "cat", "sat"], ["the", "dog", "sat", "sat"], ["a", "bird"]]


def _bm25(doc, query, docs, k1=1.5, b=0.75):
    """The Lucene BM25 formula, written out term by term."""
    avgdl = sum(map(len, docs)) / len(docs)
    total = 0.0
    for word in query:
        df = sum(word in d for d in docs)
        tf = doc.count(word)
        if df and tf:
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))
    return total


def test_bm25_scores_equal_the_formula_term_by_term():
    index = BM25(DOCS)
    for query in (["sat"], ["the", "dog"], ["bird", "cat", "sat"], ["sat", "sat"], ["unknown"]):
        got = index.scores([query])[0].tolist()
        assert got == pytest.approx([_bm25(d, query, DOCS) for d in DOCS], abs=1e-6), query
    # a hand-computed value: "dog" is in 1 of 3 documents, tf 1, |d| 4, avgdl 3
    assert index.scores([["dog"]])[0, 1].item() == pytest.approx(
        math.log(1 + 2.5 / 1.5) * 1 / (1 + 1.5 * (0.25 + 0.75 * 4 / 3)), abs=1e-6
    )


def test_bm25_scores_equal_the_bm25s_library():
    import bm25s  # a test dependency (pyproject: test)

    docs = [
        words(s)
        for s in (
            "The weather is lovely today.",
            "Please open the window.",
            "Open the door, please!",
            "The train leaves at nine o'clock.",
            "Where is the nearest train station?",
        )
    ]
    queries = [words(q) for q in ("Please open the train door.", "the the station", "weather today")]
    reference = bm25s.BM25(method="lucene")
    reference.index(docs, show_progress=False)
    found, scores = reference.retrieve(queries, k=len(docs), show_progress=False)
    mine = BM25(docs).scores(queries)
    for j in range(len(queries)):
        for i, s in zip(found[j], scores[j]):
            assert mine[j, int(i)].item() == pytest.approx(float(s), abs=1e-5)


PAIRS = [
    ("The cat sat on the mat.", "Die Katze saß auf der Matte."),
    ("The dog sat on the mat.", "Der Hund saß auf der Matte."),
    ("the cat sat on the mat", "die Katze saß auf der Matte"),  # the first one's source, other case and stops
    ("A bird sings.", "Ein Vogel singt."),
    ("A bird flies.", "Ein Vogel fliegt."),
]


def test_search_is_best_first_and_never_returns_the_query_itself_or_its_source_text():
    tm = TranslationMemory(PAIRS)
    (found,) = tm.search(["The cat sat on the mat."], k=3, own=[0])
    # pair 2 has the same source text (case and punctuation aside): never an example, like the query's own pair 0
    assert [e.index for e in found] == [1] and found[0].tgt == "Der Hund saß auf der Matte."
    (found,) = tm.search(["A bird sings loudly."], k=2)
    assert [e.index for e in found] == [3, 4] and found[0].score > found[1].score > 0


def test_search_returns_no_pair_without_a_shared_word_and_orders_ties_by_position():
    tm = TranslationMemory(PAIRS)
    assert tm.search(["Completely different words."], k=2) == [[]]
    (found,) = tm.search(["bird"], k=2)  # pairs 3 and 4 score the same
    assert [e.index for e in found] == [3, 4] and found[0].score == found[1].score
    with pytest.raises(ValueError, match="k must be >= 1"):
        tm.search(["bird"], k=0)


def test_few_shot_source_puts_the_best_example_next_to_the_source():
    text = few_shot_source(" Good night. ", [("Good morning.", "Guten Morgen."), ("Night.", "Nacht.")], "en", "de")
    assert text == "Night.\nGerman: Nacht.\nEnglish: Good morning.\nGerman: Guten Morgen.\nEnglish: Good night."
    assert few_shot_source("Hola.", [], "es", "en") == "Hola."


def _records(texts: list[tuple[str, str]], prefix: str) -> list[Record]:
    return [Record(f"{prefix}_{i}", "", 0.0, 0.0, 0, s, t, "", "en", "de") for i, (s, t) in enumerate(texts)]


@pytest.fixture
def data_dir(tmp_path):
    write_manifest(tmp_path / "train.jsonl", _records(PAIRS[:2] + PAIRS[3:], "train"))
    write_manifest(tmp_path / "mt-text" / "train.jsonl", _records([PAIRS[2], ("a red bird", "ein roter Vogel")], "mt"))
    write_manifest(
        tmp_path / "test.jsonl",
        _records(
            [("The bird sat on the mat.", "Der Vogel saß auf der Matte."), ("Nothing in common here", "Nichts")], "test"
        ),
    )
    return tmp_path


def test_retrieve_writes_one_line_per_utterance_beside_each_split_and_counts_the_short_ones(data_dir):
    summary = retrieve_splits(data_dir, ["train", "mt-text/train", "test"], ["train", "mt-text/train"], k=2)
    assert summary["memory_pairs"] == 6 and summary["memory"] == {"train": 4, "mt-text/train": 2}
    assert examples_path(data_dir, "mt-text/train") == data_dir / "mt-text" / "examples" / "train.jsonl"
    lines = [json.loads(x) for x in examples_path(data_dir, "test").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["test_0", "test_1"] and lines[1]["examples"] == []
    assert [s for s, _, _ in lines[0]["examples"]][0] in ("The cat sat on the mat.", "The dog sat on the mat.")
    assert summary["splits"]["test"] == {
        "utterances": 2,
        "fewer_than_k": 1,
        "leave_one_out": False,
        "mean_score": summary["splits"]["test"]["mean_score"],
    }
    train = [json.loads(x) for x in examples_path(data_dir, "train").read_text().splitlines()]
    # leave-one-out: "The cat sat..." (train_0) never gets itself, nor the mt-text pair with its source text
    assert all(s != "The cat sat on the mat." and s != "the cat sat on the mat" for s, _, _ in train[0]["examples"])
    written = json.loads((data_dir / "examples" / "train.summary.json").read_text())
    assert summary["splits"]["train"]["leave_one_out"] and written["k"] == 2 and written["split"] == "train"
    retrieve_splits(data_dir, ["test"], ["train"], k=1)  # a later run for another split keeps train's summary
    assert json.loads((data_dir / "examples" / "train.summary.json").read_text()) == written


def test_with_examples_composes_the_first_k_and_missing_examples_are_one_line_errors(data_dir):
    retrieve_splits(data_dir, ["test"], ["train"], k=2)
    records = read_split(data_dir, "test")
    examples = read_examples(data_dir, "test", records)
    composed = with_examples(records, data_dir, "test", k=1)
    assert composed[0].src_text == few_shot_source(records[0].src_text, examples[0][:1], "en", "de")
    assert composed[1].src_text == records[1].src_text and composed[0].tgt_text == records[0].tgt_text
    with pytest.raises(ManifestError, match=r"no retrieved examples for split 'train'.*speechmt data retrieve"):
        read_examples(data_dir, "train", read_split(data_dir, "train"))
    shutil.copy(data_dir / "train.jsonl", data_dir / "test.jsonl")
    with pytest.raises(
        ManifestError, match=r"no examples for 4 utterances of split 'test' \(train_0, train_1, train_2, \.\.\.\)"
    ):
        with_examples(read_split(data_dir, "test"), data_dir, "test", k=1)


def test_a_memory_is_a_manifest_a_folder_or_a_name_under_speechmt_home(data_dir, tmp_path, monkeypatch):
    from speechmt.data.retrieval import memory_from_manifests, memory_manifest

    monkeypatch.setenv("SPEECHMT_HOME", str(tmp_path / "home"))
    manifest = data_dir / "train.jsonl"
    folder = tmp_path / "home" / "tm"
    folder.mkdir(parents=True)
    shutil.copy(manifest, folder / "memory.jsonl")
    assert memory_manifest(manifest) == manifest
    assert memory_manifest(folder) == memory_manifest("tm") == folder / "memory.jsonl"
    pairs = [(r.src_text, r.tgt_text) for r in read_split(data_dir, "train")]
    assert memory_from_manifests(["tm", manifest]).pairs == pairs + pairs
    with pytest.raises(ManifestError, match=r"^none.jsonl: no such manifest for the translation memory$"):
        memory_manifest("none.jsonl")
    with pytest.raises(
        ManifestError,
        match=r"^other: no translation memory of that name \(.*home/other/memory.jsonl "
        r"not found\); build it with `speechmt data synth-memory --out .*home/other`$",
    ):
        memory_manifest("other")


def test_distractors_replace_the_drawn_utterances_examples_from_the_other_memory(data_dir, tmp_path):
    from speechmt.data.retrieval import Distractors

    other = tmp_path / "other.jsonl"
    write_manifest(
        other,
        _records(
            [
                ("The cat menu of the mat program", "Das Katzenmenü des Mattenprogramms"),
                ("Unrelated words only", "Nur fremde Wörter"),
            ],
            "oth",
        ),
    )
    every = Distractors((str(other),), rate=1.0)
    summary = retrieve_splits(data_dir, ["test"], ["train"], k=2, distract=every)
    lines = [json.loads(x) for x in examples_path(data_dir, "test").read_text().splitlines()]
    # every utterance drawn: its examples come from the other memory only, by BM25 there ("bird sat on the mat" shares
    # "the", "mat" with the cat menu, nothing with "Unrelated words only"), and are marked
    assert lines[0]["examples"][0][:2] == ["The cat menu of the mat program", "Das Katzenmenü des Mattenprogramms"]
    assert len(lines[0]["examples"]) == 1 and all(x["distract"] for x in lines)
    assert summary["splits"]["test"]["distracted"] == 2 and summary["distract"]["memory_pairs"] == 2
    assert json.loads((data_dir / "examples" / "test.summary.json").read_text())["distract"]["rate"] == 1.0
    # a rate draws a stable share, the same utterances in every run and independent of the other utterances
    some = Distractors((str(other),), rate=0.3, seed=7)
    ids = [f"utt_{i}" for i in range(2000)]
    drawn = [some.drawn("train", i) for i in ids]
    assert 0.27 < sum(drawn) / len(ids) < 0.33 and drawn == [some.drawn("train", i) for i in ids]
    assert drawn != [Distractors((str(other),), rate=0.3, seed=8).drawn("train", i) for i in ids]
    # the undrawn keep the split's own memory and no mark
    retrieve_splits(data_dir, ["test"], ["train"], k=2, distract=Distractors((str(other),), rate=1e-9))
    assert all("distract" not in json.loads(x) for x in examples_path(data_dir, "test").read_text().splitlines())
    with pytest.raises(ValueError, match=r"rate must be in \(0, 1\]; got 1.5"):
        Distractors((str(other),), rate=1.5)


def test_distractors_after_a_skip_are_the_memorys_next_best(data_dir):
    from speechmt.data.retrieval import Distractors, TranslationMemory

    train = data_dir / "train.jsonl"
    retrieve_splits(data_dir, ["test"], ["train"], k=3)
    best = [json.loads(x)["examples"] for x in examples_path(data_dir, "test").read_text().splitlines()]
    retrieve_splits(data_dir, ["test"], ["train"], k=2, distract=Distractors((str(train),), rate=1.0, skip=1))
    skipped = [json.loads(x)["examples"] for x in examples_path(data_dir, "test").read_text().splitlines()]
    assert len(best[0]) == 3 and skipped[0] == best[0][1:3] and skipped[1] == []
    pairs = [(r.src_text, r.tgt_text) for r in read_split(data_dir, "train")]
    assert [e.src for e in TranslationMemory(pairs).search(["The bird sat on the mat."], 3)[0]] == [
        s for s, _, _ in best[0]
    ]


def test_retrieve_cli_refuses_a_distract_rate_without_a_memory(data_dir, capsys):
    from speechmt.cli.main import main

    assert main(["data", "retrieve", "--data", str(data_dir), "--splits", "test", "--distract-rate", "0.5"]) == 2
    assert capsys.readouterr().err.strip().endswith("error: --distract-rate needs --distract")
    assert main(["data", "retrieve", "--data", str(data_dir), "--splits", "test", "--distract-skip", "4"]) == 2
    assert capsys.readouterr().err.strip().endswith("error: --distract-skip needs --distract")
    assert main(["data", "retrieve", "--data", str(data_dir), "--splits", "test", "--distract", "none.jsonl"]) == 2
    assert capsys.readouterr().err.strip() == "speechmt: error: none.jsonl: no such manifest for the translation memory"
