"""AL and LAAL against values computed by hand on small delay sequences (SimulEval's definitions), and word
delays from commits."""

import pytest

from speechmt.evaluation.latency import (
    Delays,
    average_lagging,
    corpus_latency,
    length_adaptive_average_lagging,
    word_delays,
)


def test_ideal_policy_lags_by_one_step():
    # |X| = 4000 ms, |Y| = 4 words, one word per second: each d_i - (i-1) * 1000 = 1000
    assert average_lagging([1000, 2000, 3000, 4000], 4000, 4) == pytest.approx(1000.0)
    assert length_adaptive_average_lagging([1000, 2000, 3000, 4000], 4000, 4) == pytest.approx(1000.0)


def test_over_generation_is_rewarded_by_al_but_not_by_laal():
    delays = [500, 1000, 1500, 2000, 2500, 3000]  # 6 output words for a 3-word reference, |X| = 3000
    # AL: rate |X|/|Y| = 1000: 500 + 0 - 500 - 1000 - 1500 - 2000 = -4500 over tau = 6
    assert average_lagging(delays, 3000, 3) == pytest.approx(-750.0)
    # LAAL: rate |X|/max(|Y|, |Y*|) = 500: 500 every word
    assert length_adaptive_average_lagging(delays, 3000, 3) == pytest.approx(500.0)


def test_tau_stops_at_the_first_word_written_after_the_whole_source():
    delays = [2500, 2500, 3000, 3000]  # |X| = 3000, reference 2 words, 4 output words
    # AL rate 1500: 2500 + (2500 - 1500) + (3000 - 3000), tau = 3
    assert average_lagging(delays, 3000, 2) == pytest.approx(3500 / 3)
    # LAAL rate 750: 2500 + (2500 - 750) + (3000 - 1500), tau = 3
    assert length_adaptive_average_lagging(delays, 3000, 2) == pytest.approx(5750 / 3)
    assert average_lagging([3500, 3600], 3000, 2) == 3500  # the first word after the source ended: d_1


def test_without_a_reference_the_output_length_counts():
    assert average_lagging([1000, 3000], 3000) == pytest.approx((1000 + 3000 - 1500) / 2)


def test_corpus_latency_means_and_skips_empty_outputs():
    items = [
        Delays((1000.0, 2000.0, 3000.0, 4000.0), (1200.0, 2500.0, 3600.0, 4800.0), 4000.0, 4),
        Delays((500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0), (500.0,) * 6, 3000.0, 3),
        Delays((), (), 2000.0, 5),
    ]
    out = corpus_latency(items)
    assert out["n"] == 2 and out["skipped"] == 1
    assert out["AL"] == pytest.approx((1000 - 750) / 2) and out["LAAL"] == pytest.approx((1000 + 500) / 2)
    # computation-aware, first item: 1200 + (2500 - 1000) + (3600 - 2000) + (4800 - 3000) = 6100 over 4 (tau = 4)
    # second: all 500 ms: AL 500 + (500 - 1000) + ... = sum(500 - 1000 i) for i < 6 = 3000 - 15000 = -12000 / 6
    assert out["AL_CA"] == pytest.approx((6100 / 4 - 2000) / 2)
    # LAAL second: rate 500: sum(500 - 500 i) = 3000 - 7500 = -4500 / 6 = -750
    assert out["LAAL_CA"] == pytest.approx((6100 / 4 - 750) / 2)
    assert corpus_latency([Delays((), (), 1000.0)]) == {
        "n": 0,
        "skipped": 1,
        "AL": None,
        "LAAL": None,
        "AL_CA": None,
        "LAAL_CA": None,
    }


def test_a_word_is_written_once_text_follows_it_or_at_the_end():
    events = [
        ("Das", 1200.0, 1300.0),
        ("Das W", 1600.0, 1800.0),
        ("Das Wetter", 2000.0, 2300.0),
        ("Das Wetter ist heute schön.", 2441.0, 2900.0),
    ]
    delays, elapsed = word_delays(events)
    assert delays == [1600.0, 2441.0, 2441.0, 2441.0, 2441.0]
    assert elapsed == [1800.0, 2900.0, 2900.0, 2900.0, 2900.0]
    assert word_delays([("Das ", 500.0, 600.0)], final=False) == ([500.0], [600.0])
    assert word_delays([]) == ([], [])


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="no delays"):
        average_lagging([], 1000, 3)
    with pytest.raises(ValueError, match="source_length must be positive"):
        average_lagging([100], 0, 3)
