"""The front ends: a wave in, encoder input out; their shortest and longest input; their checkpoint form."""

from dataclasses import asdict

import numpy as np
import pytest
import torch

from speechmt.audio import CMVNConfig, FbankConfig, apply_cmvn, fbank
from speechmt.frontend import (
    FbankFrontend,
    WaveformConfig,
    WaveformFrontend,
    WhisperMelConfig,
    WhisperMelFrontend,
    frontend_from_state,
)
from speechmt.frontend.waveform import normalize_waveform
from speechmt.frontend.whisper_mel import whisper_log_mel

WAVE = np.sin(np.arange(16000) / 16000 * 2 * np.pi * 440).astype(np.float32) * 0.3


def test_each_front_end_makes_what_its_function_makes():
    cmvn = CMVNConfig("utterance")
    assert torch.equal(FbankFrontend(FbankConfig(), cmvn)(WAVE), apply_cmvn(torch.from_numpy(fbank(WAVE)), cmvn))
    assert torch.equal(WaveformFrontend()(WAVE), torch.from_numpy(normalize_waveform(WAVE)))
    assert torch.equal(WhisperMelFrontend()(WAVE), whisper_log_mel(WAVE, WhisperMelConfig()))
    assert FbankFrontend()(WAVE).shape == (98, 80) and WhisperMelFrontend()(WAVE).shape == (100, 80)


@pytest.mark.parametrize(
    "frontend, shortest", [(FbankFrontend(), 400), (WaveformFrontend(), 400), (WhisperMelFrontend(), 201)]
)
def test_the_shortest_input_is_the_shortest_that_makes_a_frame(frontend, shortest):
    assert frontend.min_samples == shortest
    assert len(frontend(WAVE[:shortest])) >= 1
    if frontend.name != "waveform":  # the waveform itself has any length; wav2vec2's convolutions need 400
        assert len(frontend(WAVE[: shortest - 1])) == 0


def test_wav2vec2s_convolutions_make_no_frame_of_a_shorter_wave():
    from speechmt.models.encoders.wav2vec2 import conv_output_lengths

    kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
    n = conv_output_lengths(torch.tensor([399, 400]), kernels, strides).tolist()
    assert n == [0, 1] and WaveformFrontend.min_samples == 400


def test_only_whisper_has_a_longest_input():
    assert (FbankFrontend.max_seconds, WaveformFrontend.max_seconds, WhisperMelFrontend.max_seconds) == (
        None,
        None,
        30.0,
    )


@pytest.mark.parametrize(
    "frontend",
    [
        FbankFrontend(FbankConfig(num_mel_bins=40), CMVNConfig("global", (1.0,), (2.0,))),
        WaveformFrontend(WaveformConfig(do_normalize=False)),
        WhisperMelFrontend(WhisperMelConfig(128, pad_seconds=30)),
    ],
)
def test_the_checkpoint_form_reads_back(frontend):
    assert frontend_from_state(frontend.state_dict()) == frontend


def test_features_of_older_checkpoints_read_as_their_front_end():
    """Before the front-end room, every checkpoint held fbank and CMVN beside the waveform or log-mel settings."""
    old = {"fbank": asdict(FbankConfig()), "cmvn": asdict(CMVNConfig("global", (0.5,), (2.0,)))}
    assert frontend_from_state(old) == FbankFrontend(FbankConfig(), CMVNConfig("global", (0.5,), (2.0,)))
    assert frontend_from_state({**old, "waveform": asdict(WaveformConfig())}) == WaveformFrontend()
    assert frontend_from_state({**old, "whisper_mel": asdict(WhisperMelConfig(80))}) == WhisperMelFrontend()


def test_whisper_features_padded_to_a_shorter_window_are_the_first_frames_of_the_30_s_ones():
    padded = {s: whisper_log_mel(WAVE, WhisperMelConfig(pad_seconds=s)) for s in (30, 15, 10.5)}
    assert [len(padded[s]) for s in (30, 15, 10.5)] == [3000, 1500, 1050]
    torch.testing.assert_close(padded[15], padded[30][:1500], atol=1e-6, rtol=0)
    torch.testing.assert_close(padded[10.5], padded[30][:1050], atol=1e-6, rtol=0)
    long = np.tile(WAVE, 12)  # 12 s: longer than a 10 s window keeps its length
    assert len(whisper_log_mel(long, WhisperMelConfig(pad_seconds=10))) == 1200


def test_whisper_features_of_checkpoints_from_before_the_window_read_as_30_s_or_none():
    old = {"n_mels": 80, "sample_rate": 16000, "n_fft": 400, "hop_length": 160}
    assert frontend_from_state({"whisper_mel": {**old, "pad_to_30s": True}}).config.pad_seconds == 30
    assert frontend_from_state({"whisper_mel": {**old, "pad_to_30s": False}}).config.pad_seconds == 0
    with pytest.raises(ValueError, match="pad to 0 \\(none\\) to 30 seconds; got 31"):
        WhisperMelConfig(pad_seconds=31)
