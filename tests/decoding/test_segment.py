import time

import numpy as np
import pytest
import soundfile as sf

from speechmt.decoding.segment import (
    SegmentConfig,
    find_segments,
    frame_energy_db,
    iter_file_segments,
)

SR = 16000
HOP = SR // 100  # 10 ms


def tone(seconds: float, freq: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(seconds * SR))) / SR
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def build(parts: list[tuple[str, float]], noise: float = 1e-4, seed: int = 0):
    """A signal of ("tone" | "pause", seconds) parts over a noise floor; returns it and the pauses' sample spans."""
    pieces, pauses, pos = [], [], 0
    for kind, seconds in parts:
        piece = tone(seconds) if kind == "tone" else np.zeros(int(round(seconds * SR)), np.float32)
        if kind == "pause":
            pauses.append((pos, pos + len(piece)))
        pieces.append(piece)
        pos += len(piece)
    wave = np.concatenate(pieces)
    wave += np.random.default_rng(seed).normal(0.0, noise, len(wave)).astype(np.float32)
    return wave, pauses


def check_cover(wave: np.ndarray, segments: list[tuple[int, int]], cfg: SegmentConfig) -> None:
    assert segments[0][0] == 0 and segments[-1][1] == len(wave)
    assert all(e1 == s2 for (_, e1), (s2, _) in zip(segments, segments[1:]))
    assert all(0 < e - s <= cfg.max_seconds * SR for s, e in segments)
    assert np.array_equal(np.concatenate([wave[s:e] for s, e in segments]), wave)


def in_a_pause(cut: int, pauses: list[tuple[int, int]], tolerance: int = HOP) -> bool:
    return any(a - tolerance <= cut <= b + tolerance for a, b in pauses)


def test_cuts_land_inside_pauses_and_cover_the_signal():
    rng = np.random.default_rng(1)
    parts = []
    for _ in range(20):
        parts += [("tone", rng.uniform(2.0, 7.0)), ("pause", rng.uniform(0.3, 1.0))]
    wave, pauses = build(parts)
    cfg = SegmentConfig(max_seconds=10.0)
    segments = find_segments(wave, SR, cfg)
    check_cover(wave, segments, cfg)
    assert len(segments) > 5
    cuts = [s for s, _ in segments[1:]]
    assert all(in_a_pause(c, pauses) for c in cuts), (cuts, pauses)
    assert all(e - s >= cfg.min_seconds * SR for s, e in segments[:-1])


def test_the_longest_pause_in_the_window_is_chosen():
    wave, pauses = build(
        [("tone", 3.0), ("pause", 0.3), ("tone", 5.0), ("pause", 1.0), ("tone", 3.0), ("pause", 0.4), ("tone", 12.0)]
    )
    segments = find_segments(wave, SR, SegmentConfig(max_seconds=15.0))
    a, b = pauses[1]  # the 1 s pause from 8.3 s to 9.3 s
    assert a <= segments[0][1] <= b


def test_cut_is_at_the_lowest_energy_point_of_the_pause():
    wave, pauses = build([("tone", 6.0), ("pause", 0.8), ("tone", 6.0)], noise=1e-3)
    a, _ = pauses[0]
    dip = a + int(0.5 * SR)  # 50 ms of digital silence 500 ms into the pause
    wave[dip : dip + int(0.05 * SR)] = 0.0
    segments = find_segments(wave, SR, SegmentConfig(max_seconds=10.0))
    assert len(segments) == 2
    assert dip <= segments[0][1] <= dip + int(0.05 * SR)


def test_pauses_shorter_than_min_seconds_from_the_start_are_not_used():
    wave, pauses = build([("tone", 0.5), ("pause", 1.0), ("tone", 8.0), ("pause", 0.3), ("tone", 8.0)])
    segments = find_segments(wave, SR, SegmentConfig(max_seconds=15.0, min_seconds=2.0))
    a, b = pauses[1]
    assert a <= segments[0][1] <= b


def test_a_pause_across_the_window_end_is_cut_within_the_window():
    wave, pauses = build([("tone", 9.7), ("pause", 0.8), ("tone", 5.0)])
    cfg = SegmentConfig(max_seconds=10.0)
    segments = find_segments(wave, SR, cfg)
    check_cover(wave, segments, cfg)
    assert pauses[0][0] <= segments[0][1] <= 10 * SR


def test_no_pause_is_cut_hard_at_max_seconds():
    wave = np.random.default_rng(0).uniform(-0.5, 0.5, 50 * SR).astype(np.float32)
    cfg = SegmentConfig(max_seconds=20.0)
    segments = find_segments(wave, SR, cfg)
    assert segments == [(0, 20 * SR), (20 * SR, 40 * SR), (40 * SR, 50 * SR)]


def test_short_and_empty_inputs():
    wave, _ = build([("tone", 2.0), ("pause", 0.5), ("tone", 2.0)])
    assert find_segments(wave, SR) == [(0, len(wave))]
    assert find_segments(np.zeros(100, np.float32), SR) == [(0, 100)]
    assert find_segments(np.zeros(0, np.float32), SR) == []
    assert find_segments(np.zeros(20 * SR, np.float32), SR) == [(0, 20 * SR)]


def test_energy_of_known_frames():
    wave = np.concatenate([np.full(400, 0.1, np.float32), np.zeros(800, np.float32)])
    energy = frame_energy_db(wave, SR)  # 25 ms frames (400 samples) every 10 ms (160 samples)
    assert energy.shape == (1 + (1200 - 400) // 160,)
    assert energy[0] == pytest.approx(-20.0, abs=1e-4)  # mean square 0.01
    assert energy[-1] == -100.0  # floor for digital silence


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="mono"):
        find_segments(np.zeros((2, 100), np.float32), SR)
    with pytest.raises(ValueError, match="min_seconds < max_seconds"):
        SegmentConfig(max_seconds=1.0, min_seconds=2.0)
    with pytest.raises(ValueError, match="positive"):
        SegmentConfig(hop_ms=0.0)


def test_one_hour_is_segmented_in_a_few_seconds():
    rng = np.random.default_rng(2)
    block = SR // 10  # 100 ms blocks: tone or pause
    runs = []
    while sum(runs) < 36000:
        runs += [int(rng.integers(10, 80)), int(rng.integers(2, 15))]  # 1-8 s of tone, 0.2-1.5 s of pause
    levels = np.concatenate([np.full(r, 0.5 if i % 2 == 0 else 0.0, np.float32) for i, r in enumerate(runs)])[:36000]
    t = np.arange(block) / SR
    wave = np.multiply.outer(levels, np.sin(2 * np.pi * 400 * t).astype(np.float32))  # (36000, block)
    wave += rng.normal(0.0, 1e-4, block).astype(np.float32)
    wave = wave.reshape(-1)
    assert len(wave) == 3600 * SR
    cfg = SegmentConfig()
    start = time.perf_counter()
    segments = find_segments(wave, SR, cfg)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"{elapsed:.2f} s for one hour"
    check_cover(wave, segments, cfg)
    cuts = np.array([s for s, _ in segments[1:]])
    assert np.all(levels[cuts // block] == 0.0)  # every cut is in a pause


def test_file_segments_equal_array_segments(tmp_path):
    wave, _ = build([("tone", 7.0), ("pause", 0.5), ("tone", 9.0), ("pause", 0.7), ("tone", 8.0)])
    path = tmp_path / "talk.wav"
    sf.write(path, wave, SR, subtype="FLOAT")
    cfg = SegmentConfig(max_seconds=10.0)
    from_file = list(iter_file_segments(path, cfg))
    assert [(s.start, s.end) for s in from_file] == find_segments(wave, SR, cfg)
    assert all(s.sample_rate == SR and s.wave.dtype == np.float32 for s in from_file)
    assert np.array_equal(np.concatenate([s.wave for s in from_file]), wave)
    assert from_file[1].start_seconds == pytest.approx(from_file[0].end / SR)


def test_file_channels_are_averaged(tmp_path):
    wave, _ = build([("tone", 12.0), ("pause", 0.5), ("tone", 12.0)])
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([wave, wave], axis=1), SR, subtype="FLOAT")
    segments = list(iter_file_segments(path))
    assert [(s.start, s.end) for s in segments] == find_segments(wave, SR)
    assert np.array_equal(np.concatenate([s.wave for s in segments]), wave)
