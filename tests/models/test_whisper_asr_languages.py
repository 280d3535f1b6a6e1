"""A whisper_asr encoder of several source languages transcribes each utterance in its own: the language given, else
the one Whisper detects among the model's sources; each from Whisper's prompt with that language's token, checked
against transformers' WhisperForConditionalGeneration and against an encoder of that one language. A model of one
source keeps its prompt and its cache key. A tiny random multilingual Whisper (its generation config names the
language tokens)."""

import pytest
import torch

from speechmt.decoding.transcribe import SEARCH, language_logits
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.encoders.whisper_asr import whisper_asr_encoder_from_hf
from speechmt.models.hf_whisper import load_hf_whisper, whisper_asr_prompt, whisper_language_ids
from tests.lm_helpers import LM_RESOLVED, tiny_lm_dir
from tests.models.test_whisper_asr import _mels
from tests.whisper_helpers import tiny_whisper_dir

SOURCES = ("de", "en", "fr")


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_langs"), d_model=32, seed=3, multilingual=True)


@pytest.fixture(scope="module")
def hf(whisper_dir):
    return load_hf_whisper(str(whisper_dir), {}).eval()


@pytest.fixture(scope="module")
def ids(hf, whisper_dir):
    return whisper_language_ids(hf, str(whisper_dir), SOURCES)


@pytest.fixture(scope="module")
def several(hf, ids):
    """The encoder of a model of three sources (its prompt's language: en, asr_language's default)."""
    return whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, "en"), transcription=SEARCH, languages=ids).eval()


def _one(hf, several, lang):
    """An encoder of the one source `lang`, with `several`'s projection."""
    one = whisper_asr_encoder_from_hf(hf, 48, whisper_asr_prompt(hf, lang), transcription=SEARCH).eval()
    one.proj.load_state_dict(several.proj.state_dict())
    return one


def test_the_language_tokens_come_from_the_generation_config_or_else_the_tokenizer(hf, whisper_dir, ids):
    tokens = hf.generation_config.lang_to_id
    assert ids == {lang: tokens[f"<|{lang}|>"] for lang in SOURCES}
    assert len(set(ids.values())) == 3
    bare = load_hf_whisper("", hf.config.to_diff_dict(), pretrained=False)  # a model built from its config alone
    assert whisper_language_ids(bare, str(whisper_dir), ["fr", "de-CH"]) == {"fr": ids["fr"], "de-CH": ids["de"]}
    with pytest.raises(ValueError, match=r"^source language 'ja': not a language of this Whisper model \(<\|ja\|>\)$"):
        whisper_language_ids(hf, str(whisper_dir), ["en", "ja"])


@torch.no_grad()
def test_each_utterance_is_transcribed_from_the_prompt_of_its_given_language(hf, several):
    mels, lengths = _mels()
    given = ["de", "en", "fr"]
    states, n, found, spoken = several.heard(mels, lengths, languages=given)
    assert spoken == given
    start, _, transcribe, notimestamps = whisper_asr_prompt(hf, "en")
    for row, lang in enumerate(given):
        # the search transformers' Whisper runs from <|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>
        prompt = [start, several.languages[lang], transcribe, notimestamps]
        tokens = found[row]
        out = hf(
            input_features=mels[row : row + 1].transpose(1, 2),
            decoder_input_ids=torch.tensor([prompt + tokens]),
            output_hidden_states=True,
        )
        logits, hidden = out.logits[0], out.decoder_hidden_states[-1][0]
        for i, token in enumerate(tokens):
            step = logits[3 + i].clone()
            step[several.eos_id + 1 :] = float("-inf")
            if i == 0:
                step[[several.eos_id, 220]] = float("-inf")
            assert int(step.argmax()) == token
        torch.testing.assert_close(states[row, : len(tokens) + 1], hidden[3 : 4 + len(tokens)], atol=1e-4, rtol=1e-4)
        # what an encoder of that one language finds alone
        one = _one(hf, several, lang)
        alone, alone_n = one.states(mels[row : row + 1, : int(lengths[row])], lengths[row : row + 1])
        assert int(alone_n) == int(n[row])
        torch.testing.assert_close(states[row, : int(n[row])], alone[0], atol=1e-5, rtol=1e-5)
        assert one.transcripts(mels[row : row + 1], lengths[row : row + 1]) == [tokens]
    # the language changes what is heard: one clip in two languages
    twice, _ = several.states(mels[:1].repeat(2, 1, 1), lengths[:1].repeat(2), languages=["de", "fr"])
    assert (twice[0, 0] - twice[1, 0]).abs().max() > 1e-3
    assert several.transcripts(mels, lengths, ["de", "en", "fr"]) == found


@torch.no_grad()
def test_an_utterance_without_a_language_is_transcribed_in_the_one_whisper_detects_among_the_sources(hf, several):
    mels, lengths = _mels()
    logits = hf(input_features=mels.transpose(1, 2), decoder_input_ids=torch.full((3, 1), several.prompt[0])).logits
    expected = [SOURCES[i] for i in logits[:, 0, list(several.languages.values())].argmax(-1).tolist()]
    states, n, found, spoken = several.heard(mels, lengths)
    assert spoken == expected
    given_states, given_n, given_found, _ = several.heard(mels, lengths, languages=expected)
    assert found == given_found and torch.equal(n, given_n) and torch.equal(states, given_states)
    # a row given its language keeps it; the others ("" or None) are detected
    other = "fr" if expected[1] == "de" else "de"
    _, _, _, spoken = several.heard(mels, lengths, languages=[None, other, ""])
    assert spoken == [expected[0], other, expected[2]]
    # detection reads only the model's sources: the argmax over their tokens alone
    for sources in (("de", "fr"), ("en", "fr"), ("de", "en")):
        tokens = [several.languages[s] for s in sources]
        fewer = whisper_asr_encoder_from_hf(
            hf, 48, several.prompt, transcription=SEARCH, languages=dict(zip(sources, tokens))
        ).eval()
        assert fewer.heard(mels, lengths)[3] == [sources[i] for i in logits[:, 0, tokens].argmax(-1).tolist()]
        # or the encoder's own, narrowed per call to the sources of the directions into one target
        assert several.heard(mels, lengths, among=sources)[3] == fewer.heard(mels, lengths)[3]
        assert several.heard_transcripts(mels, lengths, among=sources)[1] == fewer.heard(mels, lengths)[3]
    memory, memory_lengths = several.encoder.states(mels, lengths)
    torch.testing.assert_close(
        language_logits(several, memory, memory_lengths, torch.tensor(list(several.languages.values()))),
        logits[:, 0, list(several.languages.values())],
        atol=1e-4,
        rtol=1e-4,
    )


def test_a_language_the_model_does_not_hear_is_one_line(several):
    mels, lengths = _mels((1.0,))
    with pytest.raises(ValueError, match=r"^source language es: this model transcribes de, en, fr only$"):
        several.states(mels, lengths, languages=["es"])
    with pytest.raises(ValueError, match=r"^2 source languages for a batch of 1$"):
        several.states(mels, lengths, languages=["de", "en"])


@torch.no_grad()
def test_a_model_of_one_source_reads_no_language_and_keeps_its_prompt_and_cache_key(hf, several):
    one = _one(hf, several, "en")
    mels, lengths = _mels()
    states, n, found, spoken = one.heard(mels, lengths, languages=["de", "fr", "en"])  # a record's src_lang: unread
    assert spoken == ["", "", ""]
    plain, plain_n = one.states(mels, lengths)
    assert torch.equal(states, plain) and torch.equal(n, plain_n)
    assert set(one.states_part()) == set(several.states_part()) - {"languages"}
    assert several.states_part()["languages"].tolist() == list(several.languages.values())
    assert torch.equal(one.states_part()["prompt"], several.states_part()["prompt"])


def test_a_build_resolves_the_run_sources_into_their_tokens_and_reads_them_back(whisper_dir, ids, tmp_path):
    lm = tiny_lm_dir(tmp_path / "lm", hidden=48)
    cfg = ModelConfig(
        encoder={"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        decoder={"kind": "lm", "name_or_path": str(lm), "finetune": "frozen"},
        n_heads=2,
    )
    model = build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED | {"encoder.asr_languages": ["fr", "de"]})
    prompt = list(model.speech_encoder.prompt)
    assert model.resolved["encoder.asr_languages"] == {"de": ids["de"], "fr": ids["fr"]}
    assert model.resolved["encoder.asr_prompt"] == prompt and len(prompt) == 4
    assert model.speech_encoder.languages == {"de": ids["de"], "fr": ids["fr"]}
    again = build_model(model.config, pretrained=False, transcription=SEARCH, resolved=model.resolved)
    assert again.speech_encoder.languages == model.speech_encoder.languages
    one = build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED)
    assert one.speech_encoder.languages == {} and "encoder.asr_languages" not in one.resolved
    assert list(one.speech_encoder.prompt) == prompt


def test_several_sources_need_a_whisper_with_language_tokens(hf):
    with pytest.raises(ValueError, match="needs a prompt with a language token"):
        whisper_asr_encoder_from_hf(hf, 48, (hf.config.decoder_start_token_id,), languages={"de": 3})
