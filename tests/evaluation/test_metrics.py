import pytest
import sacrebleu

from speechmt.evaluation.metrics import Score, bleu, cer, chrf, normalize_for_wer, wer

HYPS = ["Das ist ein kleiner Test.", "Wir übersetzen Sprache direkt in Text!", "Hallo Welt"]
REFS = ["Das ist ein kleiner Test.", "Wir übersetzen gesprochene Sprache in Text.", "Hallo, Welt."]


def test_bleu_of_identical_text_is_100():
    score = bleu(REFS, REFS)
    assert isinstance(score, Score) and score.name == "BLEU"
    assert score.score == pytest.approx(100.0)
    assert score.details["bp"] == pytest.approx(1.0)
    assert score.details["precisions"] == pytest.approx([100.0] * 4)


def test_bleu_equals_sacrebleu_corpus_bleu():
    score = bleu(HYPS, REFS)
    reference = sacrebleu.corpus_bleu(HYPS, [REFS])
    assert 0.0 < score.score < 100.0
    assert score.score == pytest.approx(reference.score, abs=1e-12)
    assert score.details["sys_len"] == reference.sys_len and score.details["ref_len"] == reference.ref_len
    assert score.details["precisions"] == pytest.approx(reference.precisions)


def test_bleu_signature_names_tokenizer_and_case():
    assert "tok:13a" in bleu(HYPS, REFS).signature
    assert "case:mixed" in bleu(HYPS, REFS).signature
    assert "nrefs:1" in bleu(HYPS, REFS).signature
    lowered = bleu(["das ist ein kleiner test"], ["Das ist ein kleiner Test"], lowercase=True)
    assert "case:lc" in lowered.signature and lowered.score == pytest.approx(100.0)
    assert "tok:intl" in bleu(HYPS, REFS, tokenize="intl").signature


def test_chrf_equals_sacrebleu_with_signature():
    score = chrf(HYPS, REFS)
    assert score.name == "chrF"
    assert score.score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score, abs=1e-12)
    assert "case:mixed" in score.signature and "nc:6" in score.signature
    assert chrf(REFS, REFS).score == pytest.approx(100.0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello, World!", "hello world"),
        ("It's 5 o'clock.", "it's 5 o'clock"),  # punctuation inside a token stays, as in fairseq
        ("An e-mail costs 3.5 dollars -- really?!", "an e-mail costs 3.5 dollars really"),
        ("U.S.A.", "u s a"),  # 13a splits the periods off, then they are dropped
        ('He said: "Fine" (twice)', "he said fine twice"),
        ("  Many   spaces\there ", "many spaces here"),
        ("¿Qué? ¡Sí!", "¿qué ¡sí"),  # 13a does not split off ¿ and ¡, so they stay (as in fairseq)
        ("Price: $5 ♪", "price $ 5 ♪"),  # symbols (category S) are kept
        ("...", ""),
    ],
)
def test_normalize_for_wer(text, expected):
    assert normalize_for_wer(text) == expected


def test_wer_of_one_substitution_and_one_deletion_over_six_words():
    score = wer(["the dog sat on the"], ["the cat sat on the mat"])
    assert score.name == "WER"
    assert score.score == pytest.approx(100.0 * 2 / 6)
    assert f"{score.score:.2f}" == "33.33"
    d = score.details
    assert (d["substitutions"], d["deletions"], d["insertions"], d["hits"], d["ref_units"]) == (1, 1, 0, 4, 6)


def test_wer_normalises_case_and_punctuation_by_default():
    assert wer(["hello world"], ["Hello, World!"]).score == 0.0
    raw = wer(["hello world"], ["Hello, World!"], normalize=False)
    assert raw.score == pytest.approx(100.0)
    assert "tok:13a|case:lc|punct:removed" in wer(["a"], ["a"]).signature
    assert "tok:none|case:mixed|punct:kept" in raw.signature


def test_wer_is_corpus_level_over_reference_words():
    score = wer(["a b c", "x"], ["a b c d", "y z"])  # 1 deletion + 1 substitution + 1 deletion over 6 words
    assert score.score == pytest.approx(100.0 * 3 / 6)


def test_cer_known_value():
    score = cer(["sitting"], ["kitten"])  # 2 substitutions + 1 insertion over 6 characters
    assert score.name == "CER"
    assert score.score == pytest.approx(50.0)
    assert (score.details["substitutions"], score.details["insertions"], score.details["ref_units"]) == (2, 1, 6)
    assert cer(["ab"], ["a b"]).score == pytest.approx(100.0 / 3)  # spaces are characters


def test_empty_references_are_counted_not_dropped():
    score = wer(["a b", "x y"], ["a b", "..."])  # "..." is empty once punctuation is removed
    assert score.details["empty_refs"] == 1
    assert score.details["insertions"] == 2
    assert score.score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="all 2 references are empty"):
        wer(["a", "b"], ["", "!"])
    with pytest.raises(ValueError, match="references are empty"):
        cer(["a"], [""])


@pytest.mark.parametrize("metric", [bleu, chrf, wer, cer])
def test_mismatched_lengths_raise(metric):
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        metric(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no sentences"):
        metric([], [])
