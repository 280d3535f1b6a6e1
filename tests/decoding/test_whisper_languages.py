"""A whisper_asr model of several sources, loaded and run as users do: `speechmt translate` and the API transcribe
each clip in the source language given (--src-lang, or the one source of the target asked), else in the one Whisper
detects, and report it; evaluate gives each utterance its record's language. A tiny random multilingual Whisper and a
tiny random LM trained for one update, its bundle given the directions of a model of several sources."""

import json

import pytest
import torch

import speechmt
from speechmt.audio import read_audio
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.cli import main
from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import read_manifest
from speechmt.decoding.transcribe import detect_language
from speechmt.decoding.translate import decode_heard, in_direction, load_model
from speechmt.models.hf_whisper import load_hf_whisper
from tests.conftest import ASSETS
from tests.lm_helpers import tiny_lm_dir, train_whisper_lm
from tests.whisper_helpers import LANGUAGES, tiny_whisper_dir

WAVS = [ASSETS / f"mustc/en-de/data/{split}/wav/ted_{i}.wav" for split, i in (("dev", 3), ("train", 1), ("train", 2))]
DIRECTIONS = {"en-de": "<de>", "de-en": "<en>", "fr-en": "<en>"}


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_wl"), d_model=32, seed=3, multilingual=True)


@pytest.fixture(scope="module")
def several(tiny_data, whisper_dir, tmp_path_factory):
    """A whisper_asr + LM checkpoint whose bundle knows en-de, de-en and fr-en (sources en, de, fr) and, as one
    trained before the sources were resolved, no "encoder.asr_languages"."""
    lm = tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm_wl"), hidden=48)
    path = train_whisper_lm(tiny_data, lm, whisper_dir, "whisper_asr", tmp_path_factory.mktemp("wl"))
    ckpt = load_checkpoint(path)
    assert "encoder.asr_languages" not in ckpt.get("resolved", {})
    out = path.with_name("several.safetensors")
    save_checkpoint(out, {**ckpt, "directions": {"st": DIRECTIONS}})
    return out


@torch.no_grad()
def test_detection_is_the_argmax_of_whisper_first_step_over_the_language_tokens(whisper_dir):
    """openai/whisper's detect_language: one step from <|startoftranscript|>, the language tokens' argmax, among
    all of them or among those allowed."""
    from speechmt.decoding.transcribe import SEARCH
    from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel
    from speechmt.models.encoders.whisper_asr import whisper_asr_encoder_from_hf
    from speechmt.models.hf_whisper import whisper_asr_prompt

    hf = load_hf_whisper(str(whisper_dir), {}).eval()
    asr = whisper_asr_encoder_from_hf(hf, 16, whisper_asr_prompt(hf, "en"), transcription=SEARCH).eval()
    mels, lengths = collate_sequences(
        [whisper_log_mel(read_audio(str(w)), WhisperMelConfig(pad_seconds=30)) for w in WAVS]
    )
    memory, memory_lengths = asr.encoder.states(mels, lengths)
    logits = hf(input_features=mels.transpose(1, 2), decoder_input_ids=torch.full((3, 1), asr.prompt[0])).logits[:, 0]
    tokens = torch.tensor([hf.generation_config.lang_to_id[f"<|{lang}|>"] for lang in LANGUAGES])
    best = logits[:, tokens].argmax(-1)
    assert torch.equal(detect_language(asr, memory, memory_lengths, tokens), best)
    for drop in range(len(LANGUAGES)):  # the allowed ones alone: the detected language taken out, the next
        kept = torch.cat([tokens[:drop], tokens[drop + 1 :]])
        assert torch.equal(detect_language(asr, memory, memory_lengths, kept), logits[:, kept].argmax(-1))
    assert any(not torch.equal(logits[:, torch.cat([tokens[:d], tokens[d + 1 :]])].argmax(-1), best) for d in range(4))


def test_translate_detects_each_clip_language_without_src_lang_and_reports_it(several, capsys):
    lm = load_model(several)
    encoder = lm.model.speech_encoder
    assert lm.hears_source and lm.src_lang is None and set(encoder.languages) == {"en", "de", "fr"}
    waves = [read_audio(str(w)) for w in WAVS]
    x, lengths = collate_sequences([lm.frontend(w) for w in waves])
    # a clip is heard among the sources of the directions into the target written: en alone into de (the first)
    assert lm.tag == "<de>" and lm.sources() == ("en",)
    results = speechmt.translate(lm, WAVS, beam=1, max_len_b=3)
    assert [r.src_lang for r in results] == ["en"] * 3
    # a target several sources share is no refusal: its one tag, the source heard among them (de, fr; not en)
    detected = encoder.heard(x, lengths, among=("de", "fr"))[3]
    assert set(detected) <= {"de", "fr"} and in_direction(lm, tgt_lang="en").sources() == ("de", "fr")
    en = speechmt.translate(several, WAVS, beam=1, max_len_b=3, tgt_lang="en")
    assert [r.src_lang for r in en] == detected
    # the source given is the one transcribed in, for every clip
    given = speechmt.translate(lm, WAVS, beam=1, max_len_b=3, src_lang="fr", tgt_lang="en")
    assert [r.src_lang for r in given] == ["fr"] * 3
    fr = in_direction(lm, "fr", "en")
    texts, _, heard = decode_heard(fr, [lm.frontend(w) for w in waves], fr.decode_options(1, max_len_b=3))
    assert heard == ["fr"] * 3 and [r.text for r in given] == [t[0] for t in texts]
    assert (fr.src_lang, fr.tag, in_direction(lm, tgt_lang="de").src_lang) == ("fr", "<en>", "en")
    with pytest.raises(CheckpointError, match="it knows en-de, de-en, fr-en"):
        in_direction(lm, "fr", "de")
    assert main(["translate", str(WAVS[0]), "--model", str(several), "--format", "json", "--max-len-b", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["src_lang"] == "en"
    assert main(["translate", str(WAVS[0]), "--model", str(several), "--format", "json", "--src-lang", "de"]) == 0
    assert json.loads(capsys.readouterr().out)["src_lang"] == "de"


def test_evaluate_transcribes_each_utterance_in_its_record_language(several, tiny_data, monkeypatch):
    import speechmt.evaluation.evaluate as ev

    lm = load_model(several)
    records = read_manifest(tiny_data / "dev.jsonl")[:2]
    seen = []
    real = ev.decode_inputs
    monkeypatch.setattr(ev, "decode_inputs", lambda *a: seen.append(a[3]) or real(*a))
    ev._decode_batch(lm, records, None, [0, 1], tiny_data, lm.decode_options(1, max_len_b=2))
    assert seen == [["en", "en"]]
