"""Whisper encoder and decoder: equal to transformers' modules, trimmed vs 30 s input, batch invariance."""

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.decoder import DecoderCache
from speechmt.models.encoders.whisper import whisper_output_lengths
from speechmt.models.hf_whisper import load_hf_whisper
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper"))


@pytest.fixture(scope="module")
def hf(whisper_dir):
    return load_hf_whisper(str(whisper_dir), {}).eval()


@pytest.fixture(scope="module")
def model(whisper_dir):
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir)}, decoder={"kind": "whisper"}, dropout=0.0
    )
    return build_model(cfg).eval()


def _waves(seconds=(1.3, 0.7, 2.05), seed=0):
    rng = np.random.RandomState(seed)
    t = [np.arange(int(s * 16000)) / 16000 for s in seconds]
    return [
        (0.3 * np.sin(2 * np.pi * (200 + 100 * i) * x) + 0.05 * rng.randn(len(x))).astype(np.float32)
        for i, x in enumerate(t)
    ]


def _reference_states(hf, mel: torch.Tensor) -> torch.Tensor:
    """One utterance (T, n_mels) through HF's submodules with positions sliced: the trimmed reference."""
    enc = hf.model.encoder
    x = F.gelu(enc.conv2(F.gelu(enc.conv1(mel.T[None])))).transpose(1, 2)
    x = x + enc.embed_positions.weight[: x.size(1)]
    for layer in enc.layers:
        x = layer(x, None)
    return enc.layer_norm(x)[0]


@torch.no_grad()
def test_trimmed_encoder_equals_hf_modules_per_utterance_inside_a_padded_batch(hf, model):
    mels = [whisper_log_mel(w) for w in _waves()]
    lengths = torch.tensor([len(m) for m in mels])
    x = torch.nn.utils.rnn.pad_sequence(mels, batch_first=True)
    states, out_lengths = model.speech_encoder.states(x, lengths)
    assert lengths.tolist() == [130, 70, 205]
    assert out_lengths.tolist() == [65, 35, 103] == whisper_output_lengths(lengths).tolist()
    assert states.shape == (3, 103, 32)
    for i, mel in enumerate(mels):
        ref = _reference_states(hf, mel)
        assert ref.shape == (out_lengths[i], 32)
        torch.testing.assert_close(states[i, : out_lengths[i]], ref, atol=1e-5, rtol=1e-5)
        assert states[i, out_lengths[i] :].abs().max() == 0 if out_lengths[i] < 103 else True


@torch.no_grad()
def test_30s_padded_input_equals_hf_whisper_encoder_and_differs_from_trimmed(hf, model):
    (wave,) = _waves((1.3,))
    padded = whisper_log_mel(wave, WhisperMelConfig(pad_seconds=30))
    assert padded.shape == (3000, 80)
    trimmed = whisper_log_mel(wave)
    torch.testing.assert_close(padded[: len(trimmed) - 1], trimmed[:-1])  # only the last frame's window differs
    ours, n = model.speech_encoder.states(padded[None], torch.tensor([3000]))
    theirs = hf.model.encoder(padded.T[None]).last_hidden_state
    assert ours.shape == theirs.shape == (1, 1500, 32) and n.item() == 1500
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    short, _ = model.speech_encoder.states(trimmed[None], torch.tensor([len(trimmed)]))
    # the documented difference: with 30 s input every frame also attends to the padding
    assert short.shape == (1, 65, 32)
    assert (short[0] - ours[0, :65]).abs().max() > 1e-3


@torch.no_grad()
def test_whisper_decoder_logits_equal_hf_and_cached_steps_equal_full(hf, model):
    torch.manual_seed(0)
    memory = torch.randn(2, 7, 32)
    lengths = torch.tensor([7, 7])
    tokens = torch.randint(0, model.config.tgt_vocab_size, (2, 5))
    ours = model.decoder(tokens, memory, lengths)
    theirs = hf.model.decoder(input_ids=tokens, encoder_hidden_states=memory).last_hidden_state
    torch.testing.assert_close(ours, hf.proj_out(theirs), atol=1e-5, rtol=1e-5)
    cache = DecoderCache.empty(len(model.decoder.layers))
    steps = [model.decoder(tokens[:, i : i + 1], memory, lengths, cache) for i in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), ours, atol=1e-5, rtol=1e-5)
    assert model.config.d_model == 32 and model.config.pad_id == 0  # pad is set from the tokenizer by builders


def test_encoder_width_is_projected_to_a_transformer_decoder(whisper_dir):
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir)},
        d_model=48,
        n_heads=4,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=50,
    )
    model = build_model(cfg).eval()
    out = model.encode_speech(torch.zeros(1, 40, 80), torch.tensor([40]))
    assert out.x.shape == (1, 20, 48) and out.lengths.tolist() == [20]
    assert model.speech_encoder.proj.weight.shape == (48, 32)


def test_too_long_input_and_bad_options_fail_with_one_line(model, whisper_dir):
    with pytest.raises(ValueError, match="longer than the Whisper encoder's 30 s window"):
        model.speech_encoder.states(torch.zeros(1, 3002, 80), torch.tensor([3002]))
    with pytest.raises(ValueError, match="expects 80 mel bins"):
        model.speech_encoder.states(torch.zeros(1, 10, 128), torch.tensor([10]))
    with pytest.raises(ValueError, match="exclude each other"):  # the flat flags of older configs
        ModelConfig.from_dict(
            dict(encoder="whisper", encoder_name_or_path=str(whisper_dir), freeze_encoder=True, encoder_lora=True)
        )
    with pytest.raises(ValueError, match="unknown encoder.finetune 'most'"):
        ModelConfig(encoder={"kind": "whisper", "name_or_path": str(whisper_dir), "finetune": "most"})
    with pytest.raises(ValueError, match="unknown decoder.finetune 'half'"):
        ModelConfig(
            encoder={"name_or_path": str(whisper_dir), "kind": "whisper"},
            decoder={"kind": "whisper", "finetune": "half"},
        )
    with pytest.raises(FileNotFoundError, match="cannot load a Whisper model"):
        moved = replace(model.config.encoder, name_or_path=str(whisper_dir / "nowhere"))
        build_model(replace(model.config, encoder=moved))
