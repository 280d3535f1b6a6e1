"""Cached encoder states equal the live encoder; the key follows the weights and the front end."""

import pytest
import torch

from speechmt.data.encoder_cache import cache_key, cached_split
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    folder = tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_cache"))
    return build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": str(folder), "finetune": "frozen"}, decoder={"kind": "whisper"}
        )
    ).speech_encoder


def test_cache_equals_the_live_encoder_within_float16(tiny_data, encoder):
    records = read_manifest(tiny_data / "train.jsonl")
    mel = WhisperMelConfig()
    inputs = lambda i: whisper_log_mel(record_audio(records[i], tiny_data), mel)  # noqa: E731
    store = cached_split(tiny_data, "train", encoder, mel, inputs, records)
    assert sorted(store.ids) == sorted(r.id for r in records)
    encoder.eval()
    with torch.no_grad():
        for i, r in enumerate(records):
            x = inputs(i)
            live, n = encoder.states(x[None], torch.tensor([len(x)]))
            cached = torch.from_numpy(store[r.id])
            assert cached.shape == (int(n), 32)
            torch.testing.assert_close(cached, live[0], atol=2e-3, rtol=1e-3)  # float16 storage
    again = cached_split(tiny_data, "train", encoder, mel, lambda i: 1 / 0, records)  # read, not recomputed
    assert again.ids == store.ids


def test_key_changes_with_weights_and_front_end(encoder):
    key, description = cache_key(encoder, WhisperMelConfig())
    assert len(key) == 16 and description["frontend"]["n_mels"] == 80
    assert cache_key(encoder, WhisperMelConfig(pad_seconds=30))[0] != key
    with torch.no_grad():
        encoder.model.layer_norm.bias.add_(1e-3)
    try:
        assert cache_key(encoder, WhisperMelConfig())[0] != key
    finally:
        with torch.no_grad():
            encoder.model.layer_norm.bias.sub_(1e-3)


def test_key_ignores_generation_settings(encoder):
    """A model folder saved with or without a generation config computes the same states: same key."""
    key = cache_key(encoder, WhisperMelConfig())[0]
    config = encoder.model.config
    saved = {k: getattr(config, k, None) for k in ("suppress_tokens", "begin_suppress_tokens")}
    try:
        config.suppress_tokens, config.begin_suppress_tokens = [1, 2, 7], [220, 50257]
        assert cache_key(encoder, WhisperMelConfig())[0] == key
        config.encoder_layerdrop = 0.5  # not generation: part of the key
        assert cache_key(encoder, WhisperMelConfig())[0] != key
    finally:
        config.encoder_layerdrop = 0.0
        for k, v in saved.items():
            setattr(config, k, v)


@pytest.fixture(scope="module")
def split_encoder(tmp_path_factory):
    """The same tiny Whisper with layer 0 frozen and LoRA in layer 1: `states` stops after layer 0."""
    folder = tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_cache_split"))
    return build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": str(folder), "finetune": "lora", "frozen_layers": 1},
            decoder={"kind": "whisper"},
            lora={"rank": 4},
        )
    ).speech_encoder


def test_a_split_encoder_caches_its_frozen_bottom_layers(tiny_data, split_encoder, encoder):
    records = read_manifest(tiny_data / "dev.jsonl")
    mel = WhisperMelConfig()
    inputs = lambda i: whisper_log_mel(record_audio(records[i], tiny_data), mel)  # noqa: E731
    store = cached_split(tiny_data, "dev", split_encoder, mel, inputs, records)
    split_encoder.eval()
    with torch.no_grad():
        for i, r in enumerate(records[:4]):
            x = inputs(i)
            record = {}
            split_encoder.states(x[None], torch.tensor([len(x)]), record)
            assert set(record) == {"conv", "layer.0"}  # layer 1 and the LayerNorm are not cached
            torch.testing.assert_close(torch.from_numpy(store[r.id]), record["layer.0"][0][0], atol=2e-3, rtol=1e-3)
    key, description = cache_key(split_encoder, mel)
    assert description["layers"] == 1 and key != cache_key(encoder, mel)[0]


def test_the_split_key_follows_the_frozen_layers_only(split_encoder):
    key = cache_key(split_encoder, WhisperMelConfig())[0]
    layers = split_encoder.model.layers
    with torch.no_grad():
        layers[1].fc1.lora_A.default.weight.add_(1.0)  # the trained adapter: not in the key
        layers[1].fc1.base_layer.bias.add_(1.0)  # nor layer 1 itself, which runs above the cache
        assert cache_key(split_encoder, WhisperMelConfig())[0] == key
        layers[0].fc1.bias.add_(1e-3)
        try:
            assert cache_key(split_encoder, WhisperMelConfig())[0] != key
        finally:
            layers[0].fc1.bias.sub_(1e-3)
            layers[1].fc1.base_layer.bias.sub_(1.0)
            layers[1].fc1.lora_A.default.weight.sub_(1.0)


def test_a_whisper_asr_cache_of_several_sources_holds_each_utterance_in_its_record_language(tiny_data, tmp_path):
    """Each entry is the search in its record's src_lang (a record naming none: the language Whisper detects); the
    key holds the sources, so a model of one source never reads it."""
    import dataclasses

    from speechmt.decoding.transcribe import SEARCH
    from speechmt.models.encoders.whisper_asr import whisper_asr_encoder_from_hf
    from speechmt.models.hf_whisper import load_hf_whisper, whisper_asr_prompt, whisper_language_ids

    folder = tiny_whisper_dir(tmp_path / "whisper", multilingual=True)
    hf = load_hf_whisper(str(folder), {}).eval()
    prompt = whisper_asr_prompt(hf, "en")
    several = whisper_asr_encoder_from_hf(
        hf, 16, prompt, transcription=SEARCH, languages=whisper_language_ids(hf, str(folder), ["de", "en", "fr"])
    ).eval()
    one = whisper_asr_encoder_from_hf(hf, 16, prompt, transcription=SEARCH).eval()
    records = [
        dataclasses.replace(r, src_lang=lang)
        for r, lang in zip(read_manifest(tiny_data / "train.jsonl"), ["fr", "", "de", "en"])
    ]
    mel = WhisperMelConfig(pad_seconds=10)
    inputs = lambda i: whisper_log_mel(record_audio(records[i], tiny_data), mel)  # noqa: E731
    store = cached_split(tiny_data, "langs", several, mel, inputs, records)
    assert cache_key(several, mel)[0] != cache_key(one, mel)[0]
    with torch.no_grad():
        for i, r in enumerate(records):
            x = inputs(i)
            live, n, _, heard = several.heard(x[None], torch.tensor([len(x)]), languages=[r.src_lang])
            assert heard[0] == (r.src_lang or several.heard(x[None], torch.tensor([len(x)]))[3][0])
            torch.testing.assert_close(torch.from_numpy(store[r.id]), live[0, : int(n)], atol=2e-3, rtol=1e-3)
