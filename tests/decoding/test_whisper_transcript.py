"""Task asr of a model whose speech encoder is whisper_asr (a cascade's ASR and bridge) is Whisper's own transcript:
the ASR's search (speechmt.decoding.transcribe) decoded by Whisper's tokenizer.json, through load_model +
translate, `speechmt evaluate --task asr` and the cascade; a model on another encoder still refuses a task it was
not trained for. A tiny random Whisper and a tiny random Gemma-architecture LM, trained for one update on the
committed corpus. The random Whisper writes the same transcript for every clip ("i i i ..."): these tests check the
known answer and the plumbing, not hearing."""

import json
import shutil

import jiwer
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

import speechmt
from speechmt.audio import read_audio
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.cli import main
from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.decoding.cascade import cascade_translate, load_cascade, translate_texts
from speechmt.decoding.transcribe import beam_tokens, greedy_transcript
from speechmt.decoding.translate import load_model, translate
from speechmt.evaluation.metrics import normalize_for_wer
from speechmt.models.encoders.whisper_handover import piece_bytes
from tests.conftest import ASSETS
from tests.lm_helpers import tiny_lm_dir, train_whisper_lm
from tests.whisper_helpers import tiny_whisper_dir

WAVS = [ASSETS / f"mustc/en-de/data/{split}/wav/ted_{i}.wav" for split, i in (("dev", 3), ("train", 1), ("train", 2))]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm_wt"), hidden=48)


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_wt"), d_model=32, seed=5)  # writes "i i i ..."


@pytest.fixture(scope="module")
def wasr(tiny_data, lm_dir, whisper_dir, tmp_path_factory):
    """A whisper_asr + LM model trained for ST and MT (its bundle names no asr tag)."""
    return train_whisper_lm(tiny_data, lm_dir, whisper_dir, "whisper_asr", tmp_path_factory.mktemp("wt_wasr"), mt=True)


def _whisper_texts(lm, whisper_dir, waves):
    """Each wave's transcript by hand: the ASR's greedy search (speechmt.decoding.transcribe) on the model's front end,
    one wave at a time, its ids decoded by Whisper's tokenizer.json (and, the same, by their bytes)."""
    asr, tok = lm.model.speech_encoder, Tokenizer.from_file(str(whisper_dir / "tokenizer.json"))
    texts = []
    for wave in waves:
        mels, lengths = collate_sequences([lm.frontend(wave)])
        with torch.no_grad():
            (ids,) = greedy_transcript(asr, *asr.encoder.states(mels, lengths)).ids
        text = tok.decode(ids).strip()
        assert (
            text
            and text
            == b"".join(piece_bytes([tok.id_to_token(i) for i in ids])).decode("utf-8", errors="replace").strip()
        )
        texts.append(text)
    return texts


def test_task_asr_of_a_whisper_asr_model_is_whisper_own_transcript(wasr, whisper_dir):
    assert "asr" not in load_checkpoint(wasr)["decoder_tags"]
    lm = load_model(wasr, task="asr")
    assert lm.whisper_transcript and lm.tag is None and lm.task == "asr"
    expected = _whisper_texts(lm, whisper_dir, [read_audio(str(w)) for w in WAVS])
    batch = translate(lm, WAVS, beam=3, nbest=2)
    assert [r.text for r in batch] == expected
    assert [r.nbest for r in batch] == [[t] for t in expected]  # the decoder's n-best does not apply
    assert [translate(lm, [w])[0].text for w in WAVS] == expected  # a batch gets what each gets alone
    assert [r.text for r in speechmt.translate(str(wasr), WAVS[:1], task="asr")] == expected[:1]
    assert load_model(wasr).whisper_transcript is False  # its own task (st) runs the decoder


def test_a_whisper_asr_decoder_trained_for_asr_still_gives_whisper_transcript(wasr, tmp_path):
    ckpt = load_checkpoint(wasr)
    tagged = tmp_path / "asr_tag.safetensors"
    save_checkpoint(tagged, {**ckpt, "decoder_tags": {**ckpt["decoder_tags"], "asr": "English:"}})
    lm = load_model(tagged, task="asr")
    assert lm.whisper_transcript and lm.tag is None
    assert translate(lm, WAVS[:1])[0].text == translate(load_model(wasr, task="asr"), WAVS[:1])[0].text


def test_the_transcript_follows_the_encoders_beam(wasr, whisper_dir):
    lm = load_model(wasr, task="asr")
    asr = lm.model.speech_encoder
    asr.beam = 3  # as encoder.asr_beam 3 builds it
    waves = [np.zeros(16000, np.float32), np.sin(np.linspace(0, 900, 24000)).astype(np.float32) * 0.3]
    mels, lengths = collate_sequences([lm.frontend(w) for w in waves])
    with torch.no_grad():
        ids = beam_tokens(asr, *asr.encoder.states(mels, lengths))
    tok = Tokenizer.from_file(str(whisper_dir / "tokenizer.json"))
    assert [r.text for r in translate(lm, waves)] == [tok.decode(i).strip() for i in ids]


def test_evaluate_task_asr_scores_whisper_transcripts_by_wer(wasr, whisper_dir, tiny_data, tmp_path, capsys):
    out = tmp_path / "ev"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(wasr),
                "--task",
                "asr",
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--out",
                str(out),
                "--beam",
                "2",
            ]
        )
        == 0
    )
    assert "WER = " in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    records = read_manifest(tiny_data / "dev.jsonl")
    lm = load_model(wasr, task="asr")
    hyps = _whisper_texts(lm, whisper_dir, [record_audio(r, tiny_data) for r in records])
    refs = [r.src_text for r in records]
    assert (out / "hyps.txt").read_text().splitlines() == hyps
    assert (out / "refs.txt").read_text().splitlines() == refs
    expected = 100 * jiwer.wer([normalize_for_wer(r) for r in refs], [normalize_for_wer(h) for h in hyps])
    assert report["metrics"]["WER"]["score"] == pytest.approx(expected, abs=1e-9) and expected > 0
    assert report["extra"]["task"] == "asr" and report["extra"]["decode"] == {"whisper_asr_beam": 1}


def test_one_whisper_asr_model_is_both_models_of_a_cascade(wasr, whisper_dir, tiny_data, tmp_path, capsys):
    asr, mt = load_cascade(wasr, wasr)
    assert (asr.task, asr.whisper_transcript, mt.task, mt.whisper_transcript) == ("asr", True, "mt", False)
    expected = _whisper_texts(asr, whisper_dir, [read_audio(str(w)) for w in WAVS[:2]])
    results = cascade_translate(asr, mt, WAVS[:2], beam=2, max_len_b=4)
    assert [r.transcript for r in results] == expected
    assert [r.text for r in results] == translate_texts(mt, expected, mt.decode_options(2, max_len_b=4))
    out = tmp_path / "ev"
    assert (
        main(
            [
                "evaluate",
                "--cascade",
                str(wasr),
                str(wasr),
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--beam",
                "2",
                "--max-len-b",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    records = read_manifest(tiny_data / "dev.jsonl")
    hyps = _whisper_texts(asr, whisper_dir, [record_audio(r, tiny_data) for r in records])
    wer = 100 * jiwer.wer([normalize_for_wer(r.src_text) for r in records], [normalize_for_wer(h) for h in hyps])
    report = json.loads((out / "report.json").read_text())
    assert report["extra"]["asr_wer"] == round(wer, 2)
    assert [line.split("\t")[-1] for line in (out / "results.tsv").read_text().splitlines()[1:]] == hyps


def test_a_missing_whisper_tokenizer_is_one_line_naming_it(wasr, whisper_dir, tmp_path):
    moved = tmp_path / "tokenizer.json"
    shutil.move(whisper_dir / "tokenizer.json", moved)
    try:
        with pytest.raises(FileNotFoundError) as e:
            load_model(wasr, task="asr")
    finally:
        shutil.move(moved, whisper_dir / "tokenizer.json")
    assert str(e.value) == f"{whisper_dir}: no tokenizer.json in {whisper_dir} (task asr reads it)"


def test_another_encoder_not_trained_for_asr_still_refuses_it(tiny_data, lm_dir, whisper_dir, tmp_path, capsys):
    path = train_whisper_lm(tiny_data, lm_dir, whisper_dir, "whisper", tmp_path / "whisper_lm")
    with pytest.raises(CheckpointError) as e:
        load_model(path, task="asr")
    assert str(e.value) == f"{path}: not trained for task 'asr'; it does st"
    assert main(["translate", str(WAVS[0]), "--model", str(path), "--task", "asr"]) == 2
    assert capsys.readouterr().err == f"speechmt: error: {path}: not trained for task 'asr'; it does st\n"


def test_whisper_own_transcript_is_not_streamed(wasr):
    from speechmt.decoding.simultaneous import SimultaneousError, simultaneous_translate

    with pytest.raises(
        SimultaneousError,
        match=r"whisper_asr model is Whisper's transcript of the whole input; it is "
        r"not streamed$",
    ):
        next(simultaneous_translate(load_model(wasr, task="asr"), [np.zeros(16000, np.float32)]))
