import dataclasses

import numpy as np
import pytest
import torch
from transformers import Wav2Vec2FeatureExtractor

from speechmt.audio import read_audio
from speechmt.data.dataset import AudioInput, SpeechDataset, collate
from speechmt.data.manifest import read_manifest, write_manifest
from speechmt.frontend.waveform import WaveformConfig, WaveformFrontend, normalize_waveform, waveform_input
from speechmt.tokenizers.sentencepiece import Tokenizer
from speechmt.training.builders import build_dataset, load_tokenizers
from tests.helpers import tiny_config


def test_normalisation_equals_the_hf_feature_extractor():
    wave = np.random.default_rng(0).normal(0.3, 0.05, 12345).astype(np.float32)
    fe = Wav2Vec2FeatureExtractor(do_normalize=True)
    expected = fe(wave, sampling_rate=16000, return_tensors="np").input_values[0]
    ours = normalize_waveform(wave)
    assert ours.dtype == np.float32 and np.abs(ours - expected).max() < 1e-5
    assert abs(float(ours.mean())) < 1e-5 and abs(float(ours.std()) - 1) < 1e-3
    raw = waveform_input(wave, WaveformConfig(do_normalize=False))
    assert torch.equal(raw, torch.from_numpy(wave))


def test_only_16_khz():
    with pytest.raises(ValueError, match="must be 16000 Hz; the feature extractor says 8000 Hz"):
        WaveformConfig(sample_rate=8000)


def test_dataset_reads_each_utterance_slice(tiny_data):
    tok = Tokenizer.load(tiny_data / "spm.model")
    ds = SpeechDataset.from_audio(
        tiny_data, "train", WaveformFrontend(), src_tokenizer=tok, tgt_tokenizer=tok, src_tag="<en>", tgt_tag="<de>"
    )
    records = read_manifest(tiny_data / "train.jsonl")
    assert len(ds) == 6 and ds.sizes.tolist() == [r.n_frames for r in records] == [150, 240, 134, 207, 170, 162]
    for i in (0, 1, 5):
        r, ex = records[i], ds[i]
        wave = read_audio(r.audio, r.offset, r.duration)
        assert ex.id == r.id and ex.feats.shape == (len(wave),)
        assert abs(len(wave) - round(r.duration * 16000)) <= 1
        assert torch.allclose(ex.feats, torch.from_numpy(normalize_waveform(wave)))
        assert tok.decode(ex.tgt_ids[1:].tolist()) == r.tgt_text and ex.tgt_ids[0] == tok.tag_id("<de>")
        assert ex.src_ids[0] == tok.tag_id("<en>")
    batch = collate([ds[0], ds[1]], tok.pad_id)
    assert batch.feats.shape == (2, int(batch.feat_lengths.max())) and batch.feat_lengths.tolist() == [
        len(ds[0].feats),
        len(ds[1].feats),
    ]
    assert torch.all(batch.feats[0, len(ds[0].feats) :] == 0)


def test_relative_audio_paths_are_read_from_the_manifest_folder(tiny_data, tmp_path):
    records = read_manifest(tiny_data / "train.jsonl")[:2]
    (tmp_path / "audio").mkdir()
    moved = []
    for r in records:
        target = tmp_path / "audio" / f"{r.id}.wav"
        target.write_bytes(open(r.audio, "rb").read())
        moved.append(dataclasses.replace(r, audio=f"audio/{r.id}.wav"))
    write_manifest(tmp_path / "train.jsonl", moved)
    ds = SpeechDataset.from_audio(tmp_path, "train", WaveformFrontend(WaveformConfig(do_normalize=False)))
    assert torch.equal(
        ds[1].feats, torch.from_numpy(read_audio(records[1].audio, records[1].offset, records[1].duration))
    )
    assert ds[1].src_ids is None and ds[1].tgt_ids is None


def test_build_dataset_gives_waveforms_for_a_wav2vec2_model(tiny_data, tmp_path):
    cfg = tiny_config(tiny_data, tmp_path, ctc_weight=0.3)
    cfg.model = dataclasses.replace(cfg.model, encoder={"kind": "wav2vec2", "hf_config": {"hidden_size": 64}})
    toks = load_tokenizers(cfg.data)
    ds = build_dataset(cfg, "dev", toks, None, train=True)
    assert isinstance(ds.source, AudioInput) and ds.source.frontend == WaveformFrontend(WaveformConfig())
    ex = ds[0]
    assert ex.feats.dim() == 1 and ex.src_ids is not None and ex.tgt_ids is not None
    cfg.train.task = "asr"
    ds = build_dataset(cfg, "dev", toks, WaveformFrontend(WaveformConfig(do_normalize=False)), train=False)
    # asr: the decoder target (tgt) is the tagged transcript; CTC reads the untagged transcript (src)
    assert ds.source.frontend.config.do_normalize is False and ds[0].tgt_ids[0] == toks.src.tag_id("<en>")
    assert ds[0].src_ids.tolist() == ds[0].tgt_ids[1:].tolist()


def test_the_training_builder_augments_the_training_split_only(tiny_data, tmp_path):
    """data.augment_noise reaches the training split's waveforms through build_dataset; dev stays clean."""
    cfg = tiny_config(tiny_data, tmp_path, ctc_weight=0.3)
    cfg.model = dataclasses.replace(cfg.model, encoder={"kind": "wav2vec2", "hf_config": {"hidden_size": 64}})
    cfg.data = dataclasses.replace(cfg.data, augment_noise=1.0, augment_noise_snr=(10.0, 10.0))
    toks, plain = load_tokenizers(cfg.data), WaveformFrontend(WaveformConfig(do_normalize=False))
    clean = build_dataset(cfg, "dev", toks, plain, train=False)[0].feats
    noisy = build_dataset(cfg, "dev", toks, plain, train=True)[0].feats
    assert noisy.shape == clean.shape and not torch.equal(noisy, clean)
    snr = 10 * torch.log10(clean.pow(2).sum() / (noisy - clean).pow(2).sum())
    assert abs(float(snr) - 10.0) < 0.5
