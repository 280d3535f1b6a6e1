import numpy as np
import pytest
import soundfile as sf
import torch

from speechmt.audio import (
    AudioError,
    CMVNConfig,
    CMVNStats,
    Fbank,
    FbankConfig,
    SpecAugmentConfig,
    apply_cmvn,
    fbank,
    mel_banks,
    num_frames,
    read_audio,
    resample,
    spec_augment,
    utterance_cmvn,
)

SPEECH = "mustc/en-de/data/train/wav/ted_1.wav"


def _reference(kaldi, wave: np.ndarray, dtype=torch.float64) -> np.ndarray:
    x = torch.from_numpy(wave).to(dtype)[None] * 32768
    return kaldi.fbank(x, num_mel_bins=80, dither=0.0).float().numpy()


@pytest.mark.parametrize("n", [0, 399, 400, 401, 559, 560, 16000, 123457])
def test_num_frames_known_values(n):
    expected = {0: 0, 399: 0, 400: 1, 401: 1, 559: 1, 560: 2, 16000: 98, 123457: 770}[n]
    assert num_frames(n) == expected
    assert int(num_frames(torch.tensor([n]))[0]) == expected


def test_mel_banks_equal_torchaudio(kaldi):
    ref, _ = kaldi.get_mel_banks(80, 512, 16000.0, 20.0, 0.0, 100.0, -500.0, 1.0)
    ours = mel_banks(FbankConfig())
    assert ours.shape == (80, 257)
    assert np.abs(ours[:, :256] - ref.double().numpy()).max() < 5e-5  # torchaudio computes in float32
    assert not ours[:, 256].any()


def test_fbank_matches_torchaudio_on_speech(kaldi):
    from tests.conftest import ASSETS

    wave = read_audio(ASSETS / SPEECH)
    ours = fbank(wave)
    ref = _reference(kaldi, wave)
    assert ours.shape == ref.shape == (num_frames(len(wave)), 80)
    # torchaudio's own float32 path loses ~1e-2 on near-silent bins (DC removal in float32); the same
    # algorithm in float64 is the exact reference.
    assert np.abs(ours - ref).max() <= 1e-3


@pytest.mark.parametrize("n", [400, 401, 1000, 16000 * 3 + 77])
def test_fbank_matches_torchaudio_float32_on_noise(kaldi, n):
    wave = (np.random.default_rng(n).standard_normal(n) * 0.1).astype(np.float32)
    ours = fbank(wave)
    assert ours.shape == (num_frames(n), 80)
    assert np.abs(ours - _reference(kaldi, wave, torch.float32)).max() <= 1e-3
    assert np.abs(ours - _reference(kaldi, wave)).max() <= 1e-3


def test_fbank_of_silence_is_log_epsilon(kaldi):
    wave = np.zeros(16000, np.float32)
    assert np.array_equal(fbank(wave), _reference(kaldi, wave))


def test_batched_fbank_equals_single():
    rng = np.random.default_rng(1)
    waves = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (16000, 8123, 400)]
    batch = torch.zeros(3, 16000)
    for i, w in enumerate(waves):
        batch[i, : len(w)] = torch.from_numpy(w)
    feats, lengths = Fbank().eval()(batch, torch.tensor([len(w) for w in waves]))
    assert feats.shape == (3, 98, 80)
    assert lengths.tolist() == [98, 49, 1]
    for i, w in enumerate(waves):
        single = fbank(w)
        assert np.abs(feats[i, : lengths[i]].numpy() - single).max() < 1e-4
        assert not feats[i, lengths[i] :].any()


def test_dither_only_in_training():
    module = Fbank(FbankConfig(dither=1.0))
    wave = torch.zeros(1, 4000)
    assert torch.equal(module.eval()(wave)[0], module.eval()(wave)[0])
    assert not torch.equal(module.train()(wave)[0], module.train()(wave)[0])


def test_utterance_cmvn_zero_mean_unit_variance():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(200, 80)).astype(np.float32)
    y = utterance_cmvn(x)
    assert np.abs(y.mean(0)).max() < 1e-5
    assert np.abs(y.std(0) - 1).max() < 1e-4
    yt = utterance_cmvn(torch.from_numpy(x))
    assert torch.allclose(yt, torch.from_numpy(y), atol=1e-5)


def test_global_cmvn_stats_merge_equal_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1, 2, (50, 80)), rng.normal(-1, 3, (70, 80))
    s1, s2 = CMVNStats(), CMVNStats()
    s1.update(a)
    s2.update(b)
    s1.merge(s2)
    mean, std = s1.mean_std()
    both = np.concatenate([a, b])
    assert s1.count == 120
    assert np.allclose(mean, both.mean(0), atol=1e-5) and np.allclose(std, both.std(0), atol=1e-5)
    cfg = CMVNConfig("global", tuple(mean.tolist()), tuple(std.tolist()))
    out = apply_cmvn(torch.from_numpy(both).float(), cfg)
    assert torch.allclose(out.mean(0), torch.zeros(80), atol=1e-4)
    with pytest.raises(ValueError, match="empty"):
        CMVNStats().mean_std()


def _masked(out: torch.Tensor, value: float) -> tuple[int, int]:
    eq = out == value
    return int(eq.all(0).sum()), int(eq.all(1).sum())


@pytest.mark.parametrize("policy,n_masks", [("lb", 1), ("ld", 2)])
def test_spec_augment_policies(policy, n_masks):
    cfg = SpecAugmentConfig.policy(policy)
    assert (cfg.freq_mask_n, cfg.freq_mask_f, cfg.time_mask_n, cfg.time_mask_t) == (n_masks, 27, n_masks, 100)
    x = torch.randn(500, 80)
    widths_f, widths_t = [], []
    for seed in range(50):
        out = spec_augment(
            x, SpecAugmentConfig(**{**cfg.__dict__, "mask_value": 0.0}), torch.Generator().manual_seed(seed)
        )
        f, t = _masked(out, 0.0)
        widths_f.append(f)
        widths_t.append(t)
        untouched = out != 0.0
        assert torch.equal(out[untouched], x[untouched])
    assert max(widths_f) <= n_masks * 26 and max(widths_t) <= n_masks * 99
    assert min(widths_f) >= 0 and sum(widths_f) > 0 and sum(widths_t) > 0
    a = spec_augment(x, cfg, torch.Generator().manual_seed(3))
    b = spec_augment(x, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert float(x.mean()) in a  # default mask value: the utterance mean


def test_spec_augment_time_mask_bounded_by_p():
    cfg = SpecAugmentConfig(freq_mask_n=0, time_mask_n=1, time_mask_t=100, time_mask_p=0.1, mask_value=0.0)
    x = torch.randn(50, 80)
    for seed in range(30):
        assert _masked(spec_augment(x, cfg, torch.Generator().manual_seed(seed)), 0.0)[1] < 5


def test_resample_keeps_a_sine():
    t = np.arange(44100) / 44100
    y = resample(np.sin(2 * np.pi * 1000 * t).astype(np.float32), 44100, 16000)
    assert y.shape == (16000,)
    ref = np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000)
    assert np.abs(y[100:-100] - ref[100:-100]).max() < 1e-3


def test_read_slice_equals_full_read(tmp_path):
    wave = (np.random.default_rng(0).standard_normal(16000 * 3) * 0.1).astype(np.float32)
    sf.write(tmp_path / "a.wav", wave, 16000, subtype="FLOAT")
    full = read_audio(tmp_path / "a.wav")
    part = read_audio(tmp_path / "a.wav", offset=1.25, duration=0.5)
    assert np.array_equal(full, wave)
    assert np.array_equal(part, wave[20000:28000])
    assert np.array_equal(read_audio(tmp_path / "a.wav", offset=2.5), wave[40000:])


def test_stereo_44k_is_downmixed_and_resampled(tmp_path):
    t = np.arange(44100 * 2) / 44100
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    stereo = np.stack([left, left], axis=1).astype(np.float32)
    sf.write(tmp_path / "s.wav", stereo, 44100, subtype="PCM_16")
    sf.write(tmp_path / "m.wav", left.astype(np.float32), 44100, subtype="PCM_16")
    y = read_audio(tmp_path / "s.wav")
    assert y.shape == (32000,)
    assert np.array_equal(y, read_audio(tmp_path / "m.wav"))


@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_compressed_formats_read(tmp_path, fmt, subtype):
    t = np.arange(48000) / 48000
    sf.write(
        tmp_path / f"x.{fmt.lower()}",
        (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32),
        48000,
        format=fmt,
        subtype=subtype,
    )
    y = read_audio(tmp_path / f"x.{fmt.lower()}")
    assert abs(len(y) - 16000) < 1200  # mp3 adds encoder delay and padding
    assert 0.2 < np.abs(y).max() < 0.4


def _bad_inputs(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_bytes(b"this is not audio at all\n" * 40)
    sf.write(tmp_path / "good.wav", np.zeros(1600, np.float32) + 0.1, 16000)
    corrupt = (tmp_path / "good.wav").read_bytes()[:30]
    (tmp_path / "corrupt.wav").write_bytes(corrupt)
    nan = np.full(1600, 0.1, np.float32)
    nan[100] = np.nan
    sf.write(tmp_path / "nan.wav", nan, 16000, subtype="FLOAT")
    return {
        "missing.wav": ("missing audio", "not found"),
        "empty.wav": ("empty audio", "empty file"),
        "text.wav": ("unreadable audio", "cannot decode"),
        "corrupt.wav": ("unreadable audio", "cannot decode"),
        "nan.wav": ("non-finite samples", "NaN"),
    }


def test_bad_inputs_raise_one_clear_error(tmp_path):
    for name, (reason, words) in _bad_inputs(tmp_path).items():
        with pytest.raises(AudioError, match=words) as info:
            read_audio(tmp_path / name)
        assert info.value.reason == reason
        assert str(tmp_path / name) in str(info.value) and "\n" not in str(info.value)


def test_slice_past_end_is_an_error(tmp_path):
    sf.write(tmp_path / "a.wav", np.full(16000, 0.1, np.float32), 16000)
    with pytest.raises(AudioError, match="past the end") as info:
        read_audio(tmp_path / "a.wav", offset=0.5, duration=1.0)
    assert info.value.reason == "segment outside audio"
    with pytest.raises(AudioError, match="past the end"):
        read_audio(tmp_path / "a.wav", offset=2.0, duration=0.5)


def test_a_damaged_mp3_is_one_line_naming_the_file_without_decoder_chatter(tmp_path, capfd):
    """libmpg123 prints "Note: ... resync" on stderr and libsndfile then says "File does not exist" of the
    file: the error says what it is, once, and nothing else reaches stderr."""
    from speechmt.audio import audio_info
    from speechmt.cli import main
    from speechmt.decoding.segment import iter_file_segments

    path = tmp_path / "talk.mp3"
    path.write_bytes(b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(5000))  # a tag and no MPEG frames
    expected = f"{path}: cannot decode audio (not audio in a format libsndfile reads, or damaged)"
    for read in (read_audio, audio_info, lambda p: next(iter_file_segments(p))):
        with pytest.raises(AudioError) as e:
            read(path)
        assert str(e.value) == expected
    assert capfd.readouterr().err == ""
    assert main(["translate", str(path)]) == 1
    captured = capfd.readouterr()
    assert captured.err == f"speechmt: error: {expected}\n" and captured.out == ""
