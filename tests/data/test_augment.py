"""Waveform augmentation: shapes, measured SNR, the telephone band's energy, reverberation's length and level,
seeded determinism in the dataset, and the configs that cannot augment (stored fbank, cached frozen states)."""

import numpy as np
import pytest
import soundfile as sf

from speechmt.config import ConfigError, ExperimentConfig
from speechmt.data.augment import (
    AugmentConfig,
    Augmenter,
    AugmentError,
    add_noise,
    augment_config,
    reverberate,
    snr_db,
    synthetic_rir,
    telephone,
)
from speechmt.data.dataset import AudioInput, SpeechDataset
from speechmt.data.manifest import Record
from speechmt.frontend.waveform import WaveformConfig, WaveformFrontend

SR = 16000


def speechlike(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """Harmonics of a wandering 120-200 Hz pitch under a syllable-rate envelope, plus a little broadband noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    f0 = 160 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    wave = sum(np.sin(k * phase) / k for k in range(1, 30)) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))
    return (0.1 * wave + 0.005 * rng.standard_normal(len(t))).astype(np.float32)


def band_energy(wave: np.ndarray, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(wave.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(wave), 1 / SR)
    return float(spectrum[(freqs >= low) & (freqs <= high)].sum())


@pytest.mark.parametrize("snr", [0.0, 5.0, 12.5, 30.0])
def test_noise_at_the_requested_snr(snr):
    wave, rng = speechlike(), np.random.default_rng(1)
    noisy = add_noise(wave, snr, rng)
    assert noisy.shape == wave.shape and noisy.dtype == np.float32
    assert snr_db(wave, noisy - wave) == pytest.approx(snr, abs=0.5)
    recorded = np.random.default_rng(2).standard_normal(SR // 3).astype(np.float32) * 0.3  # shorter: repeated
    noisy = add_noise(wave, snr, rng, recorded)
    assert snr_db(wave, noisy - wave) == pytest.approx(snr, abs=0.5)
    assert np.array_equal(add_noise(np.zeros(100, np.float32), snr, rng), np.zeros(100, np.float32))


def test_telephone_band_drops_energy_outside_300_3400_hz():
    wave = speechlike() + 0.05 * np.random.default_rng(3).standard_normal(2 * SR).astype(np.float32)
    phone = telephone(wave)
    assert phone.shape == wave.shape and phone.dtype == np.float32
    outside = lambda w: band_energy(w, 0, 300) + band_energy(w, 3400, SR / 2)  # noqa: E731
    assert 10 * np.log10(outside(phone) / outside(wave)) < -20
    assert 10 * np.log10(band_energy(phone, 400, 3300) / band_energy(wave, 400, 3300)) == pytest.approx(0, abs=1.5)


def test_reverberation_keeps_length_and_level(tmp_path):
    wave, rng = speechlike(), np.random.default_rng(4)
    rir = synthetic_rir(0.6, rng)
    assert len(rir) == int(0.6 * SR) and rir[0] == 1.0
    tail = rir[1:] ** 2
    assert tail[-len(tail) // 10 :].sum() < 1e-4 * tail[: len(tail) // 10].sum()  # -60 dB at RT60: decayed
    wet = reverberate(wave, rir)
    assert wet.shape == wave.shape and np.sqrt(np.mean(wet**2)) == pytest.approx(np.sqrt(np.mean(wave**2)), rel=1e-3)
    assert not np.allclose(wet, wave)
    delayed = np.zeros(200, np.float32)
    delayed[50] = 1.0  # a pure delay: the output starts at the direct path, so it is the input itself
    assert np.allclose(reverberate(wave, delayed), wave, atol=1e-5)
    sf.write(tmp_path / "room.wav", rir, SR)
    augmenter = Augmenter(AugmentConfig(reverb=1.0, rir_dir=str(tmp_path)))
    assert augmenter(wave, np.random.default_rng(0)).shape == wave.shape


def test_augmenter_is_seeded_and_reads_recordings(tmp_path):
    wave = speechlike(1.0)
    cfg = AugmentConfig(reverb=1.0, noise=1.0, noise_snr=(10.0, 10.0), telephone=1.0)
    a, b = Augmenter(cfg)(wave, np.random.default_rng(7)), Augmenter(cfg)(wave, np.random.default_rng(7))
    assert a.shape == wave.shape and np.array_equal(a, b)
    assert not np.array_equal(a, Augmenter(cfg)(wave, np.random.default_rng(8)))
    with pytest.raises(AugmentError, match="no noise files"):
        Augmenter(AugmentConfig(noise=1.0, noise_dir=str(tmp_path)))
    (tmp_path / "broken.wav").write_bytes(b"RIFF not really")
    noisy = Augmenter(AugmentConfig(noise=1.0, noise_snr=(5.0, 5.0), noise_dir=str(tmp_path)))
    with pytest.warns(UserWarning, match="broken.wav"):
        out = noisy(wave, np.random.default_rng(0))
    assert noisy.unreadable == [str(tmp_path / "broken.wav")] and snr_db(wave, out - wave) == pytest.approx(5, abs=0.5)


def test_dataset_augments_by_seed_epoch_and_index(tmp_path):
    sf.write(tmp_path / "a.wav", speechlike(1.0), SR)
    records = [
        Record(
            id=f"u{i}",
            audio="a.wav",
            offset=0.0,
            duration=1.0,
            n_frames=100,
            src_text="x",
            tgt_text="y",
            speaker="",
            src_lang="en",
            tgt_lang="de",
        )
        for i in range(2)
    ]
    raw = WaveformFrontend(WaveformConfig(do_normalize=False))
    clean = SpeechDataset(records, AudioInput(tmp_path, raw))
    noisy = SpeechDataset(
        records, AudioInput(tmp_path, raw, Augmenter(AugmentConfig(noise=1.0, noise_snr=(10.0, 10.0)))), seed=3
    )
    x, y = clean[0].feats.numpy(), noisy[0].feats.numpy()
    assert x.shape == y.shape and snr_db(x, y - x) == pytest.approx(10, abs=0.5)
    assert np.array_equal(noisy[0].feats, noisy[0].feats) and not np.array_equal(noisy[0].feats, noisy[1].feats)
    noisy.set_epoch(1)
    assert not np.array_equal(noisy[0].feats.numpy(), y)


def _config(**data) -> dict:
    return {"model": {"encoder": {"kind": "whisper", "finetune": "frozen"}}, "data": data}


def test_config_options_and_the_inputs_they_cannot_reach():
    cfg = ExperimentConfig.from_dict(_config(augment_noise=0.5, augment_noise_snr=[0, 10], cache_encoder=False))
    aug = augment_config(cfg.data)
    assert aug.noise == 0.5 and aug.noise_snr == (0.0, 10.0) and augment_config(ExperimentConfig().data) is None
    with pytest.raises(ConfigError, match="cached once from clean audio .*set data.cache_encoder false"):
        ExperimentConfig.from_dict(_config(augment_telephone=1.0))
    with pytest.raises(ConfigError, match="encoder 'conv' reads the fbank features stored by preparation"):
        ExperimentConfig.from_dict({"data": {"augment_reverb": 0.3}})
    with pytest.raises(ConfigError, match="augment_noise must be a probability from 0 to 1, got 2"):
        ExperimentConfig.from_dict(_config(augment_noise=2, cache_encoder=False))
    with pytest.raises(ConfigError, match=r"augment_noise_snr must be \[low, high\] dB"):
        ExperimentConfig.from_dict(_config(augment_noise_snr=[20, 5], cache_encoder=False))
