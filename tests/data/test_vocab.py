"""`speechmt vocab`'s training on manifest texts (speechmt.data.vocab)."""

import pytest

from speechmt.data.manifest import Record, write_manifest
from speechmt.data.vocab import train_from_manifests
from speechmt.tokenizers.sentencepiece import train_tokenizer
from tests.tokenizers.test_sentencepiece import DE, EN, config


def write_pair(tmp_path) -> list:
    recs = [
        Record(f"utt{i}", f"a{i}.wav", 0.0, 1.0, 100, en, de, "spk", "en", "de")
        for i, (en, de) in enumerate(zip(EN, DE))
    ]
    paths = [tmp_path / "train.jsonl", tmp_path / "dev.jsonl"]
    assert write_manifest(paths[0], recs[:14]) == 14
    assert write_manifest(paths[1], recs[14:]) == 6
    return paths


@pytest.mark.parametrize(
    "fields, texts", [(("src_text",), EN), (("tgt_text",), DE), (("src_text", "tgt_text"), EN + DE)]
)
def test_train_from_manifests_covers_texts(tmp_path, fields, texts):
    t = train_from_manifests(write_pair(tmp_path), fields, config(vocab_size=100))
    assert len(t) == 100
    for text in texts:
        assert t.unk_id not in t.encode(text)
    assert train_tokenizer(texts, config(vocab_size=100)).to_bytes() == t.to_bytes()


def test_src_only_vocab_has_unk_on_target(tmp_path):
    t = train_from_manifests(write_pair(tmp_path), ("src_text",), config(vocab_size=100))
    assert t.unk_id in t.encode("schließt öffnete")


def test_bad_field_is_refused(tmp_path):
    with pytest.raises(ValueError, match="text fields must be among"):
        train_from_manifests(write_pair(tmp_path), ("speaker",), config())
