"""The front end: how a 16 kHz wave becomes a speech encoder's input, one object per kind: fbank + CMVN (the
conv encoder), the waveform (wav2vec2), Whisper's log-mel (Whisper). Each turns a wave into encoder input,
knows the shortest wave it makes input of (`min_samples`) and the longest its encoder takes (`max_seconds`),
and its checkpoint form (`state_dict`: the checkpoint's "features"; `frontend_from_state` reads it back)."""

from __future__ import annotations

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.frontend.fbank import FbankFrontend
from speechmt.frontend.waveform import WaveformConfig, WaveformFrontend
from speechmt.frontend.whisper_mel import WhisperMelConfig, WhisperMelFrontend

Frontend = FbankFrontend | WaveformFrontend | WhisperMelFrontend


def frontend_from_state(features: dict) -> Frontend:
    """The front end a checkpoint's "features" describe: Whisper's log-mel or the waveform when their settings
    are there (checkpoints before this room also hold fbank and CMVN beside them, unused), else fbank + CMVN."""
    if features.get("whisper_mel"):
        return WhisperMelFrontend(WhisperMelConfig.from_state(features["whisper_mel"]))
    if features.get("waveform"):
        return WaveformFrontend(WaveformConfig(**features["waveform"]))
    return FbankFrontend(FbankConfig(**features["fbank"]), CMVNConfig(**features["cmvn"]))
