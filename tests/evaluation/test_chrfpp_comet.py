"""chrF++ beside BLEU and chrF (sacreBLEU's CHRF(word_order=2)); COMET only with the unbabel-comet package and a
model, and otherwise one line that says why it was skipped, never a number."""

import sys
import types

import pytest
from sacrebleu.metrics import CHRF

from speechmt.evaluation.benchmark import Benchmark, SystemResult
from speechmt.evaluation.benchmark_report import benchmark_markdown
from speechmt.evaluation.evaluate import score
from speechmt.evaluation.metrics import CometUnavailable, chrf_pp, comet, optional_comet

HYPS = ["Das ist ein kleiner Test.", "Wir übersetzen Sprache direkt in Text!", "Hallo Welt"]
REFS = ["Das ist ein kleiner Test.", "Wir übersetzen gesprochene Sprache in Text.", "Hallo, Welt."]
SRCS = ["This is a small test.", "We translate speech directly into text.", "Hello, world."]


def test_chrf_pp_equals_sacrebleu_with_word_bigrams():
    s = chrf_pp(HYPS, REFS)
    assert s.name == "chrF++" and s.score == pytest.approx(66.44035961864934, abs=1e-9)
    assert s.score == pytest.approx(CHRF(word_order=2).corpus_score(HYPS, [REFS]).score, abs=1e-12)
    assert "nw:2" in s.signature and s.details == {"beta": 2, "char_order": 6, "word_order": 2}
    assert chrf_pp(REFS, REFS).score == pytest.approx(100.0)


def test_translation_tasks_score_bleu_chrf_and_chrf_pp():
    assert list(score("st", HYPS, REFS)) == ["BLEU", "chrF", "chrF++"]
    assert list(score("asr", HYPS, REFS)) == ["WER", "CER"]


def test_comet_is_skipped_with_a_reason_without_model_or_package(monkeypatch):
    assert optional_comet(HYPS, REFS, SRCS, None) == (
        None,
        "COMET skipped: no COMET model given (--comet MODEL: a checkpoint, or a name to download)",
    )
    monkeypatch.setitem(sys.modules, "comet", None)  # import comet raises ImportError
    with pytest.raises(CometUnavailable, match="unbabel-comet package is not installed"):
        comet(HYPS, REFS, SRCS, "Unbabel/wmt22-comet-da")


def _fake_comet(scores: list[float], seen: dict) -> types.ModuleType:
    """A stand-in for the unbabel-comet package: its model gives `scores` and records what it was given."""
    module = types.ModuleType("comet")

    class Model:
        def predict(self, data, batch_size, gpus, progress_bar):
            seen["data"] = data
            return types.SimpleNamespace(scores=scores[: len(data)])

    def load_from_checkpoint(path):
        seen["path"] = path
        return Model()

    def download_model(name):
        raise RuntimeError("no network")

    module.load_from_checkpoint, module.download_model = load_from_checkpoint, download_model
    return module


def test_comet_averages_segment_scores_of_a_local_checkpoint(monkeypatch, tmp_path):
    seen: dict = {}
    monkeypatch.setitem(sys.modules, "comet", _fake_comet([0.5, 0.7, 0.9], seen))
    monkeypatch.setattr("importlib.metadata.version", lambda name: "2.2.0")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "model.ckpt").write_bytes(b"")
    s = comet(HYPS, REFS, SRCS, str(tmp_path))
    assert s.name == "COMET" and s.score == pytest.approx(70.0) and s.details["segments"] == 3
    assert seen["path"] == str(tmp_path / "checkpoints" / "model.ckpt")
    assert seen["data"][1] == {"src": SRCS[1], "mt": HYPS[1], "ref": REFS[1]}
    missing, why = optional_comet(HYPS, REFS, SRCS, "Unbabel/wmt22-comet-da")  # download fails: no number
    assert (
        missing is None and why == "COMET skipped: COMET model 'Unbabel/wmt22-comet-da' could not be used (no network)"
    )


def test_benchmark_table_has_a_chrf_pp_column():
    row = SystemResult(
        name="sys",
        kind="peer",
        source="p.json",
        task="st",
        params=None,
        n=3,
        metrics=score("st", HYPS, REFS),
        buckets=[],
        timed_utterances=3,
        decode_seconds=None,
        audio_seconds=None,
    )
    bench = Benchmark(
        data="d",
        split="tst",
        n=3,
        ids_sha256="0",
        edges=(),
        bucket_labels=[],
        bucket_counts=[],
        systems=[row],
        machine={"cpu_count": 2, "cpu": "x", "torch": "2", "commit": None},
    )
    lines = benchmark_markdown(bench).split("\n")
    head = next(line for line in lines if line.startswith("| system | task"))
    cells = lines[lines.index(head) + 2]
    columns = [c.strip() for c in head.split("|")]
    values = [c.strip() for c in cells.split("|")]
    assert values[columns.index("chrF++")] == f"{chrf_pp(HYPS, REFS).score:.2f}" == "66.44"
