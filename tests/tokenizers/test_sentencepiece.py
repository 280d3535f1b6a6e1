import os
import warnings
from dataclasses import replace

import pytest
import torch

from speechmt.tokenizers.sentencepiece import (
    Tokenizer,
    TokenizerConfig,
    UnknownTagError,
    config_path,
    train_tokenizer,
)

EN = [
    "the weather was cold and grey this morning",
    "she opened the window to let the fresh air in",
    "we walked along the river until the sun went down",
    "my brother repairs old bicycles in his garage",
    "the library closes at eight on weekdays",
    "please write your name at the top of the page",
    "a small boat drifted slowly across the lake",
    "they cooked soup with carrots onions and potatoes",
    "the children laughed when the dog chased its tail",
    "our train was delayed by almost forty minutes",
    "he forgot his umbrella and got completely wet",
    "the museum shows paintings from many centuries",
    "could you tell me the way to the station",
    "the old clock in the kitchen stopped at noon",
    "farmers harvest the wheat at the end of summer",
    "i would like a cup of tea with lemon please",
    "the teacher explained the problem twice",
    "snow covered the roofs of the quiet village",
    "the market sells fresh fish every friday",
    "nobody knew who had left the door open",
]
DE = [
    "das wetter war heute morgen kalt und grau",
    "sie öffnete das fenster um frische luft hereinzulassen",
    "wir gingen am fluss entlang bis die sonne unterging",
    "mein bruder repariert alte fahrräder in seiner garage",
    "die bibliothek schließt an wochentagen um acht",
    "bitte schreiben sie ihren namen oben auf die seite",
    "ein kleines boot trieb langsam über den see",
    "sie kochten suppe mit karotten zwiebeln und kartoffeln",
    "die kinder lachten als der hund seinen schwanz jagte",
    "unser zug hatte fast vierzig minuten verspätung",
    "er vergaß seinen schirm und wurde völlig nass",
    "das museum zeigt gemälde aus vielen jahrhunderten",
    "können sie mir den weg zum bahnhof sagen",
    "die alte uhr in der küche blieb mittags stehen",
    "die bauern ernten den weizen am ende des sommers",
    "ich hätte gern eine tasse tee mit zitrone",
    "der lehrer erklärte die aufgabe zweimal",
    "schnee bedeckte die dächer des stillen dorfes",
    "der markt verkauft jeden freitag frischen fisch",
    "niemand wusste wer die tür offen gelassen hatte",
]
TAGS = ("<en>", "<de>", "<audio>")


def config(**kw) -> TokenizerConfig:
    return TokenizerConfig(**{"vocab_size": 150, "lang_tags": TAGS, **kw})


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(EN + DE, config())


def test_special_ids_and_tags_in_order(tok):
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.blank_id) == (0, 1, 2, 3, 4)
    assert [tok.id_to_piece(i) for i in range(8)] == ["<pad>", "<unk>", "<s>", "</s>", "<blank>", *TAGS]
    assert [tok.tag_id(t) for t in TAGS] == [5, 6, 7]
    assert len(tok) == 150


def test_unknown_tag_names_tag_and_known_tags(tok):
    with pytest.raises(UnknownTagError) as e:
        tok.tag_id("<fr>")
    assert str(e.value) == "unknown language tag '<fr>'; known tags: <en>, <de>, <audio>"
    assert isinstance(e.value, KeyError)


def test_tag_inside_text_is_one_id(tok):
    text = "<de>wir gingen am fluss entlang"
    ids = tok.encode(text, add_eos=False)
    assert tok.pieces(text)[:2] == ["▁", "<de>"]  # SentencePiece's dummy prefix comes first
    assert ids[1] == 6 and ids.count(6) == 1
    assert "<de>" in tok.pieces("the lake <de> der see")
    mid = tok.encode("the lake<audio>der see", add_eos=False)
    assert mid.count(7) == 1 and all(i > 7 for i in mid if i != 7)


def test_encode_adds_tag_and_eos(tok):
    body = tok.encode("the old clock", add_eos=False)
    assert tok.encode("the old clock") == body + [3]
    assert tok.encode("the old clock", lang_tag="<en>") == [5] + body + [3]
    assert tok.encode_batch(["the old clock", EN[0]], lang_tag="<en>") == [
        [5] + body + [3],
        tok.encode(EN[0], lang_tag="<en>"),
    ]


def test_round_trip_on_training_sentences(tok):
    for text in EN + DE:
        ids = tok.encode(text)
        assert tok.unk_id not in ids
        assert tok.decode(ids) == text


def test_decode_drops_specials_and_stops_at_eos(tok):
    body = tok.encode("the old clock", add_eos=False)
    ids = [2, 4] + body[:1] + [0, 4] + body[1:] + [3] + tok.encode("snow", add_eos=False) + [0, 0]
    assert tok.decode(ids) == "the old clock"
    assert tok.decode(torch.tensor([6] + body + [3])) == "<de> the old clock"
    assert tok.decode([6] + body, strip_tags=True) == "the old clock"


def test_bytes_and_state_dict_round_trip(tok):
    texts = EN + DE + ["a completely unseen sentence with xylophones"]
    for other in (Tokenizer.from_bytes(tok.to_bytes()), Tokenizer.from_state_dict(tok.state_dict())):
        assert other.config == tok.config
        assert other.encode_batch(texts, lang_tag="<de>") == tok.encode_batch(texts, lang_tag="<de>")
    with pytest.raises(ValueError, match="magic"):
        Tokenizer.from_bytes(b"not a tokenizer")


def test_save_load(tok, tmp_path):
    path = tmp_path / "spm" / "joint.model"
    tok.save(path)
    assert sorted(os.listdir(path.parent)) == ["joint.json", "joint.model"]
    loaded = Tokenizer.load(path)
    assert loaded.to_bytes() == tok.to_bytes()
    config_path(path).unlink()
    with pytest.raises(FileNotFoundError, match="joint.json"):
        Tokenizer.load(path)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_both_model_types_train(model_type):
    t = train_tokenizer(EN + DE, config(model_type=model_type, vocab_size=200))
    assert len(t) == 200
    assert all(t.decode(t.encode(s)) == s for s in EN + DE)


def test_determinism():
    for model_type in ("unigram", "bpe"):
        a = train_tokenizer(EN + DE, config(model_type=model_type))
        b = train_tokenizer(iter(EN + DE), config(model_type=model_type))
        assert a.to_bytes() == b.to_bytes()


def test_sampled_training_is_seeded():
    corpus = [f"{a} {b}" for a in EN for b in DE]
    cfg = config(input_sentence_size=120)
    assert train_tokenizer(corpus, cfg).to_bytes() == train_tokenizer(corpus, cfg).to_bytes()
    assert train_tokenizer(corpus, cfg).to_bytes() != train_tokenizer(corpus, replace(cfg, seed=1)).to_bytes()


def test_small_corpus_gives_smaller_vocab_with_warning():
    with pytest.warns(UserWarning, match=r"^3 sentences cannot fill vocab_size 8000; the tokenizer has \d+"):
        t = train_tokenizer(EN[:3], config(vocab_size=8000))
    assert 8 < len(t) < 8000 and t.config.vocab_size == len(t)
    assert all(t.decode(t.encode(s)) == s for s in EN[:3])


def test_vocab_below_alphabet_is_one_clear_line():
    with pytest.raises(ValueError) as e:
        train_tokenizer(EN, config(vocab_size=12))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("tokenizer training failed on 20 sentences with vocab_size 12: Vocabulary size is smaller")


def test_config_validation_and_dict_round_trip(tok):
    with pytest.raises(ValueError, match="unknown model_type"):
        TokenizerConfig(model_type="word")
    with pytest.raises(ValueError, match="repeat"):
        TokenizerConfig(lang_tags=("<en>", "<en>"))
    with pytest.raises(ValueError, match="reserved"):
        TokenizerConfig(lang_tags=("<blank>",))
    with pytest.raises(ValueError, match="above 100"):
        TokenizerConfig(input_sentence_size=50)
    assert TokenizerConfig(**{**tok.state_dict()["config"], "lang_tags": list(TAGS)}) == tok.config


def test_lowercasing_rule_keeps_tags():
    t = train_tokenizer(EN, config(normalization_rule_name="nmt_nfkc_cf", vocab_size=100))
    assert t.encode("The OLD Clock", lang_tag="<en>") == t.encode("the old clock", lang_tag="<en>")
    assert t.encode("<de>THE", add_eos=False)[1] == 6


def test_no_files_left_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_tokenizer(EN + DE, config())
    assert os.listdir(tmp_path) == []


def test_a_character_vocabulary_has_one_piece_per_character_and_says_its_size():
    """CoVoST 2's X->En recipe: a char model, its size what the corpus holds (not the requested cap)."""
    texts = ["hallo welt", "guten tag, Welt!"]
    tok = train_tokenizer(texts, TokenizerConfig(model_type="char", vocab_size=1000, lang_tags=("<en>",)))
    characters = set("".join(texts).replace(" ", ""))
    assert len(tok) == tok.config.vocab_size == len(characters) + 1 + 6  # + "▁", the 5 specials and the tag
    ids = tok.encode("hallo")
    assert len(ids) == len("hallo") + 2  # "▁h" is two pieces: "▁" and "h"; eos last
    assert tok.decode(ids) == "hallo"
