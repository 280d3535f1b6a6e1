"""StreamLAAL: re-segmentation of a stream's words to reference segments, and the per-segment LAAL against
values computed by hand."""

import pytest

from speechmt.evaluation.latency import length_adaptive_average_lagging
from speechmt.evaluation.stream_latency import normalise, resegment, stream_laal

REFS = ["Das ist gut.", "Ich gehe nach Hause.", "Ja"]


def test_a_perfect_hypothesis_gives_each_word_its_own_segment():
    words = " ".join(REFS).split()
    assert resegment(words, REFS) == [[0, 1, 2], [3, 4, 5, 6], [7]]


def test_case_and_punctuation_do_not_steer_the_alignment():
    assert normalise("Hause.") == "hause" and normalise("„Ja“,") == "ja" and normalise("...") == "..."
    words = "das ist gut ich gehe nach hause ja".split()  # no capitals, no full stops
    assert resegment(words, REFS) == [[0, 1, 2], [3, 4, 5, 6], [7]]


def test_inserted_words_join_the_segment_of_the_word_before_them():
    refs = ["a b c", "d e"]
    assert resegment("a b X c d e".split(), refs) == [[0, 1, 2, 3], [4, 5]]  # inside segment 1
    assert resegment("a b c X d e".split(), refs) == [[0, 1, 2, 3], [4, 5]]  # between segments: the earlier
    assert resegment("a b c d X e".split(), refs) == [[0, 1, 2], [3, 4, 5]]
    assert resegment("X a b c d e".split(), refs) == [[0, 1, 2, 3], [4, 5]]  # before every word: the first


def test_deleted_and_substituted_words():
    assert resegment("a c d e".split(), ["a b c", "d e"]) == [[0, 1], [2, 3]]  # b missing
    assert resegment("a b e f".split(), ["a b", "c d", "e f"]) == [[0, 1], [], [2, 3]]  # a whole segment missing
    assert resegment("a b Y Z e".split(), ["a b c", "d e"]) == [[0, 1, 2], [3, 4]]  # c -> Y, d -> Z
    # a tie (substitute x for a and delete b, or delete a and substitute x for b): the later reference word
    assert resegment(["x"], ["a", "b"]) == [[], [0]]


def test_a_long_stream_is_resegmented_exactly():
    refs = [" ".join(f"w{k}_{n}" for n in range(20)) for k in range(100)]  # 2000 words
    words = " ".join(refs).split()
    del words[450]  # the 11th word of segment 22
    out = resegment(words, refs)
    assert [len(s) for s in out] == [20] * 22 + [19] + [20] * 77
    assert sorted(i for s in out for i in s) == list(range(len(words)))


def test_two_segment_stream_by_hand():
    segments = [(0.0, 2000.0, "a b"), (2300.0, 3000.0, "c d e")]
    words = "a b c d e".split()
    delays = [1500.0, 2300.0, 3300.0, 4800.0, 5600.0]
    elapsed = [1700.0, 2600.0, 3600.0, 5200.0, 6100.0]
    out = stream_laal(words, delays, elapsed, segments)
    # segment 1: |X| = 2000, |Y| = 2, rate 1000: 1500 + (2300 - 1000) = 2800, tau = 2 (2300 >= 2000): 1400
    # segment 2, delays from 2300: 1000, 2500, 3300; |X| = 3000, |Y| = 3, rate 1000:
    #   1000 + (2500 - 1000) + (3300 - 2000) = 3800, tau = 3: 1266.67; mean (1400 + 1266.67) / 2
    assert out["StreamLAAL"] == pytest.approx((1400 + 3800 / 3) / 2)
    # CA, segment 1: 1700 + (2600 - 1000) = 3300 over 2: 1650
    # segment 2 from 2300: 1300, 2900, 3800: 1300 + 1900 + 1800 = 5000 over 3 (3800 >= 3000 ends it)
    assert out["StreamLAAL_CA"] == pytest.approx((1650 + 5000 / 3) / 2)
    assert (out["n"], out["skipped"]) == (2, 0)


def test_one_segment_stream_is_plain_laal():
    delays = [900.0, 1800.0, 2500.0, 3900.0, 4000.0]
    elapsed = [1000.0, 2100.0, 2900.0, 4500.0, 4700.0]
    words = "a b extra c d".split()  # 5 output words for a 4-word reference: |Y| = 5
    out = stream_laal(words, delays, elapsed, [(0.0, 4000.0, "a b c d")])
    assert out["StreamLAAL"] == pytest.approx(length_adaptive_average_lagging(delays, 4000.0, 4))
    assert out["StreamLAAL_CA"] == pytest.approx(length_adaptive_average_lagging(elapsed, 4000.0, 4))
    # by hand: rate 4000 / 5 = 800: 900 + 1000 + 900 + 1500 + 800 = 5100 over 5
    assert out["StreamLAAL"] == pytest.approx(1020.0)


def test_delays_count_from_the_segment_start():
    out = stream_laal(["c"], [5600.0], [5900.0], [(5000.0, 2000.0, "c")])
    assert out["StreamLAAL"] == pytest.approx(600.0)
    assert out["StreamLAAL_CA"] == pytest.approx(900.0)


def test_the_reference_word_count_sets_the_rate():
    # 2 output words for a 4-word reference of 4000 ms: rate 1000, 1000 + (2000 - 1000) over 2 (not rate 2000: 500)
    out = stream_laal(["a", "b"], [1000.0, 2000.0], [1000.0, 2000.0], [(0.0, 4000.0, "a b c d")])
    assert out["StreamLAAL"] == pytest.approx(1000.0)


def test_the_aware_variant_reads_elapsed():
    words, delays, segments = ["a", "b"], [1000.0, 2000.0], [(0.0, 2000.0, "a b")]
    same = stream_laal(words, delays, delays, segments)
    assert same["StreamLAAL_CA"] == same["StreamLAAL"] == pytest.approx(1000.0)
    slower = stream_laal(words, delays, [1500.0, 3000.0], segments)  # 1500 + (3000 - 1000) over 2
    assert slower["StreamLAAL"] == pytest.approx(1000.0) and slower["StreamLAAL_CA"] == pytest.approx(1750.0)


def test_segments_without_words_are_skipped():
    segments = [(0.0, 1000.0, "a"), (1300.0, 1000.0, "b"), (2600.0, 1000.0, "c")]
    out = stream_laal(["a", "c"], [500.0, 3000.0], [500.0, 3000.0], segments)
    # segment 1: 500; segment 3: 3000 - 2600 = 400; segment 2 has no word
    assert out == {"StreamLAAL": pytest.approx(450.0), "StreamLAAL_CA": pytest.approx(450.0), "n": 2, "skipped": 1}
    empty = stream_laal([], [], [], segments)
    assert empty == {"StreamLAAL": None, "StreamLAAL_CA": None, "n": 0, "skipped": 3}


def test_every_word_needs_its_delays():
    with pytest.raises(ValueError, match="one each per word"):
        stream_laal(["a", "b"], [1000.0], [1000.0, 2000.0], [(0.0, 2000.0, "a b")])
