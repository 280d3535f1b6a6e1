"""The Whisper tokenizer wrapper: prefix, round trips, ids never generated, state dict."""

import pytest

from speechmt.tokenizers.sentencepiece import UnknownTagError
from speechmt.tokenizers.whisper import WhisperTokenizer, WhisperTokenizerConfig, language_token
from tests.whisper_helpers import LANGUAGES, tiny_whisper_tokenizer_json


@pytest.fixture(scope="module")
def tok():
    return WhisperTokenizer(tiny_whisper_tokenizer_json())


def test_special_ids_follow_whispers_layout(tok):
    n = len(tok)
    base = n - 12  # eot, sot, 4 languages, translate, transcribe, startoflm, startofprev, nospeech, notimestamps
    assert (tok.eos_id, tok.bos_id) == (base, base + 1)
    assert [tok.tag_id(f"<|{lang}|>") for lang in LANGUAGES] == [base + 2, base + 3, base + 4, base + 5]
    assert (tok.task_id, tok.pad_id, tok.no_timestamps_id) == (base + 7, base + 10, base + 11)
    assert tok.suppress_ids == tuple(range(base + 1, n))


def test_targets_carry_the_prefix_and_round_trip(tok):
    ids = tok.encode("die katze sitzt", lang_tag="<|de|>")
    assert ids[:3] == [tok.tag_id("<|de|>"), tok.task_id, tok.no_timestamps_id] and ids[-1] == tok.eos_id
    assert tok.decode(ids) == "die katze sitzt"
    assert tok.decode(ids[3:-1] + [tok.eos_id] + ids[3:5]) == "die katze sitzt"  # stops at eos
    assert tok.encode("hello", add_eos=False) == tok.encode("hello")[:-1]
    assert tok.pieces("hello world")[0].startswith("Ġ")  # Whisper's leading space


def test_translate_task_and_state_round_trip(tok):
    tr = WhisperTokenizer(tiny_whisper_tokenizer_json(), WhisperTokenizerConfig("translate"))
    base = len(tok) - 12
    assert tr.prefix_ids("<|de|>") == (base + 3, base + 6, base + 11)  # <|de|> <|translate|> <|notimestamps|>
    again = WhisperTokenizer.from_state_dict(tr.state_dict())
    assert again.config.task == "translate" and again.encode("hello world") == tr.encode("hello world")


def test_unknown_language_and_bad_task(tok):
    with pytest.raises(UnknownTagError, match="unknown Whisper language token"):
        tok.tag_id("<|xx|>")
    with pytest.raises(UnknownTagError):
        tok.tag_id("<|transcribe|>")
    with pytest.raises(ValueError, match="unknown Whisper task"):
        WhisperTokenizerConfig("summarise")
    assert language_token("zh-CN") == "<|zh|>" and language_token("sv-SE") == "<|sv|>"
