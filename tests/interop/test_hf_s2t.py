"""import-hf: tiny random Hugging Face Speech2Text models, converted and checked against transformers itself.

Everything is read from local directories, so the tests run offline (HF_HUB_OFFLINE=1 or not)."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from transformers import (
    GenerationConfig,
    Speech2TextConfig,
    Speech2TextFeatureExtractor,
    Speech2TextForConditionalGeneration,
    Speech2TextTokenizer,
)

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.checkpoint import load_checkpoint
from speechmt.cli import main
from speechmt.decoding.search import beam_search
from speechmt.decoding.translate import LoadedModel, load_model, translate
from speechmt.interop import HFImportError
from speechmt.interop.hf_s2t import NEVER, convert_tokenizer, fbank_frontend, import_hf_s2t, model_config, vocab_order

SENTENCES = [
    "the cat sat on the warm mat",
    "a small dog ran across the park",
    "we translate speech into text",
    "the weather is nice today",
    "she reads a book every night",
    "they walked to the market at dawn",
    "this model is very small",
    "children play in the garden after school",
    "he drinks black coffee",
    "birds sing in the tall trees",
    "i like green apples and red pears",
    "the train leaves at noon",
    "my sister paints the old house",
    "rain falls on the quiet river",
    "our teacher speaks three languages",
    "the museum opens on sunday",
    "please close the window",
    "music fills the empty hall",
]
TAGS = tuple(f"<lang:{x}>" for x in ("pt", "fr", "ru", "nl", "ro", "it", "es", "de"))  # HF's "mustc" codes
BOS, PAD, EOS, UNK = 0, 1, 2, 3  # HF's (fairseq's) special ids
MAX_NEW = 40  # generated tokens before EOS


@dataclass
class Converted:
    hf: Speech2TextForConditionalGeneration
    tok: Speech2TextTokenizer
    lm: LoadedModel
    hf_ids: list  # our id -> HF id (None for <blank>)
    path: Path

    def ours(self, hf_ids: list[int]) -> list[int]:
        inverse = {h: o for o, h in enumerate(self.hf_ids) if h is not None}
        return [inverse[i] for i in hf_ids]

    def columns(self) -> tuple[list[int], list[int]]:
        """Matching logit columns: (ours, HF's)."""
        pairs = [(o, h) for o, h in enumerate(self.hf_ids) if h is not None]
        return [o for o, _ in pairs], [h for _, h in pairs]


def hf_tokenizer(
    out: Path,
    tags: tuple[str, ...] = (),
    tgt_lang: str | None = None,
    model_type: str = "unigram",
    vocab_size: int = 60,
) -> Speech2TextTokenizer:
    """A HF Speech2Text tokenizer as fairseq's s2t recipes make them: SentencePiece ids = dictionary ids."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES),
        model_prefix=str(out / "sp"),
        vocab_size=vocab_size,
        model_type=model_type,
        bos_id=BOS,
        pad_id=PAD,
        eos_id=EOS,
        unk_id=UNK,
        user_defined_symbols=list(tags),
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(out / "sp.model"))
    (out / "vocab.json").write_text(json.dumps({sp.id_to_piece(i): i for i in range(len(sp))}))
    return Speech2TextTokenizer(
        str(out / "vocab.json"), str(out / "sp.model"), lang_codes="mustc" if tags else None, tgt_lang=tgt_lang
    )


def save_hf_model(out: Path, tags: tuple[str, ...] = (), tgt_lang: str | None = None, tied: bool = False) -> Path:
    """A tiny random HF Speech2Text model with its tokenizer (fairseq's layout) and feature extractor.

    Weights are drawn wide (init_std 0.2) so that scores are far apart compared with float rounding, and
    the EOS output row points along the decoder positions 10.., so EOS grows likely from about the eighth
    token and every beam hypothesis ends well before MAX_NEW (where HF and fairseq differ, see below).
    """
    out.mkdir(parents=True)
    tok = hf_tokenizer(out, tags, tgt_lang)
    tok.save_pretrained(out / "hf")
    Speech2TextFeatureExtractor().save_pretrained(out / "hf")
    config = Speech2TextConfig(
        vocab_size=len(tok.encoder),
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        conv_channels=64,
        max_source_positions=1000,
        max_target_positions=100,
        dropout=0.0,
        init_std=0.2,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    model = Speech2TextForConditionalGeneration(config).eval()
    with torch.no_grad():
        direction = model.model.decoder.embed_positions.weights[10:64].sum(0)
        model.lm_head.weight[EOS] = 15 * direction / direction.norm()
    model.save_pretrained(out / "hf")
    return out / "hf"


def convert(root: Path, **hf_options) -> Converted:
    hf_dir = save_hf_model(root / "src", **hf_options)
    path = import_hf_s2t(hf_dir, root / "model.safetensors")
    hf_ids = load_checkpoint(path)["imported_from"]["hf_ids"]
    return Converted(
        Speech2TextForConditionalGeneration.from_pretrained(hf_dir).eval(),
        Speech2TextTokenizer.from_pretrained(hf_dir),
        load_model(path),
        hf_ids,
        path,
    )


@pytest.fixture(scope="module")
def bilingual(tmp_path_factory) -> Converted:
    return convert(tmp_path_factory.mktemp("hf_s2t"))


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory) -> Converted:
    return convert(tmp_path_factory.mktemp("hf_s2t_multi"), tags=TAGS, tgt_lang="fr", tied=True)


def random_features(lengths: list[int], seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 80, generator=generator) for n in lengths]


def padded(feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.zeros(len(feats), max(len(f) for f in feats), 80)
    for i, f in enumerate(feats):
        x[i, : len(f)] = f
    return x, torch.tensor([len(f) for f in feats])


def hf_beam(
    hf: Speech2TextForConditionalGeneration, feats: torch.Tensor, **options
) -> tuple[list[list[int]], list[float]]:
    """HF's beam search set as fairseq's and ours: 5 beams, 5 finished hypotheses end it (early_stopping),
    score / length (EOS counted), nothing else; pad and <s> banned and EOS not first, as our search does.
    Returns the 5 finished hypotheses, best first, without the start token, each up to its EOS; their scores."""
    settings = dict(
        num_beams=5,
        num_return_sequences=5,
        max_length=MAX_NEW + 2,
        min_new_tokens=1,
        length_penalty=1.0,
        early_stopping=True,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
        do_sample=False,
        suppress_tokens=[PAD, BOS],
        decoder_start_token_id=EOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        bos_token_id=BOS,
        return_dict_in_generate=True,
        output_scores=True,
    )
    settings.update(options)
    with torch.no_grad():
        out = hf.generate(input_features=feats[None], generation_config=GenerationConfig(**settings))
    hyps = [row[1:] for row in out.sequences.tolist()]
    assert all(EOS in h for h in hyps), "a hypothesis reached the maximum length: the test model must end earlier"
    return [h[: h.index(EOS) + 1] for h in hyps], out.sequences_scores.tolist()


def test_logits_equal_hf(bilingual):
    feats = torch.stack(random_features([60, 60, 60]))
    hf_inputs = torch.randint(4, len(bilingual.tok), (3, 7), generator=torch.Generator().manual_seed(2))
    hf_inputs[:, 0] = EOS  # the start token
    ours_inputs = torch.tensor([bilingual.ours(row) for row in hf_inputs.tolist()])
    with torch.no_grad():
        ref = bilingual.hf(input_features=feats, decoder_input_ids=hf_inputs).logits
        enc = bilingual.lm.model.encode_speech(feats, torch.tensor([60, 60, 60]))
        got = bilingual.lm.model.decode(ours_inputs, enc)
    ours, theirs = bilingual.columns()
    assert (got[..., ours] - ref[..., theirs]).abs().max() <= 1e-4
    log_probs = got.log_softmax(-1)  # over our whole vocabulary, <blank> included
    assert (log_probs[..., ours] - ref.log_softmax(-1)[..., theirs]).abs().max() <= 1e-4
    assert torch.all(log_probs[..., 4] < NEVER / 2)


def test_padded_batch_lengths_and_states_equal_hf(bilingual):
    """Lengths as HF's attention masks give them. States are compared with HF's run on each utterance
    alone: in a padded batch HF (as fairseq) lets the first conv's output at padded frames into the second
    conv, which moves its last frames (by up to ~1.4 here); speechmt zeroes padding between the convs."""
    feats = random_features([37, 50, 64, 81, 100])
    x, lengths = padded(feats)
    mask = (torch.arange(x.size(1))[None] < lengths[:, None]).long()
    with torch.no_grad():
        enc = bilingual.lm.model.encode_speech(x, lengths)
        hf_states = bilingual.hf.model.encoder(x, attention_mask=mask).last_hidden_state
        hf_mask = bilingual.hf.model._get_feature_vector_attention_mask(hf_states.size(1), mask)
        assert enc.lengths.tolist() == hf_mask.sum(-1).tolist() == [10, 13, 16, 21, 25]
        inputs = torch.tensor([[EOS, 9, 10, 11]])
        ours, theirs = bilingual.columns()
        for i, f in enumerate(feats):
            alone = bilingual.hf(input_features=f[None], decoder_input_ids=inputs)
            n = int(enc.lengths[i])
            assert (enc.x[i, :n] - alone.encoder_last_hidden_state[0]).abs().max() <= 1e-4
            logits = bilingual.lm.model.decode(
                torch.tensor([bilingual.ours(inputs[0].tolist())]), enc.select(torch.tensor([i]))
            )
            assert (logits[0][:, ours] - alone.logits[0][:, theirs]).abs().max() <= 1e-4


def test_beam_search_equals_hf_generate(bilingual):
    """Batched beam search (beam 5) against HF generate, one utterance at a time: the same best hypothesis
    with the same score. The other four may differ: when more hypotheses end in one step than there are
    free places, fairseq (and speechmt) keep the first K to end, HF the K best scores so far, so HF's
    n-best scores are never below ours (the best is the same either way)."""
    feats = random_features([30, 47, 64, 81, 98, 115, 132, 149], seed=3)
    x, lengths = padded(feats)
    options = bilingual.lm.decode_options(beam=5, max_len_b=MAX_NEW, nbest=5)
    with torch.no_grad():
        results = beam_search(bilingual.lm.model, bilingual.lm.model.encode_speech(x, lengths), options)
    found = []
    for f, hyps in zip(feats, results):
        theirs, scores = hf_beam(bilingual.hf, f)
        ours = [bilingual.hf_ids[t] for t in hyps[0].tokens] + [EOS]
        assert ours == theirs[0] and abs(hyps[0].normalized_score - scores[0]) <= 1e-4
        assert all(hf_score >= h.normalized_score - 1e-4 for h, hf_score in zip(hyps, scores))
        # HF strips the decoded text (a final "▁" piece leaves a space in SentencePiece's), as translate() does
        text = bilingual.tok.decode(theirs[0], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert bilingual.lm.tokenizer.decode(hyps[0].tokens).strip() == text
        found.append(len(ours))
    assert len(set(found)) >= 3, f"hypothesis lengths {found}: the test needs varied ones"


def test_tokenizer_gives_hf_pieces_and_ids(bilingual):
    tok, hf_tok = bilingual.lm.tokenizer, bilingual.tok
    assert [tok.id_to_piece(i) for i in range(5)] == ["<pad>", "<unk>", "<s>", "</s>", "<blank>"]
    assert len(tok) == len(hf_tok) + 1
    for text in ["the cat sat on the warm mat", "a teacher paints three trees", "Zebras quietly hum, okay?"]:
        assert tok.pieces(text) == hf_tok.tokenize(text)
        ids = tok.encode(text)
        assert [bilingual.hf_ids[i] for i in ids] == hf_tok(text).input_ids
    text = "our sister reads music in the garden"
    assert tok.decode(tok.encode(text)) == hf_tok.decode(hf_tok(text).input_ids, skip_special_tokens=True) == text


def test_bpe_tokenizer_and_pieces_missing_from_vocab_json(tmp_path):
    hf_tok = hf_tokenizer(tmp_path, model_type="bpe", vocab_size=70)
    hf_ids, pieces, tags = vocab_order(Speech2TextConfig(vocab_size=70), hf_tok)
    tok = convert_tokenizer(hf_tok, hf_ids, pieces, tags)
    assert tok.config.model_type == "bpe" and len(tok) == 71
    for text in ["the cat sat on the warm mat", "our teacher paints three old trees", "Zebras hum, okay?"]:
        assert tok.pieces(text) == hf_tok.tokenize(text)
        assert [hf_ids[i] for i in tok.encode(text)] == hf_tok(text).input_ids
    vocab = json.loads((tmp_path / "vocab.json").read_text())
    del vocab[pieces[40]]  # HF would encode that piece as <unk>; a SentencePiece model cannot
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    hf_tok = Speech2TextTokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "sp.model"))
    message = f"1 SentencePiece pieces are not in vocab.json (e.g. '{pieces[40]}')"
    with pytest.raises(HFImportError, match=re.escape(message)):
        convert_tokenizer(hf_tok, *vocab_order(Speech2TextConfig(vocab_size=70), hf_tok))


def test_checkpoint_loads_and_translates_like_hf(bilingual):
    lm = bilingual.lm
    assert (lm.frontend.settings, lm.tag, lm.task, lm.decoder_start) == (
        (FbankConfig(), CMVNConfig("utterance")),
        None,
        "st",
        "eos",
    )
    assert lm.decode_options().start_id == lm.tokenizer.eos_id == 3
    rng = np.random.default_rng(0)
    t = np.arange(24000) / 16000
    wave = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    [result] = translate(lm, [wave], beam=5, max_len_b=MAX_NEW)
    feats = Speech2TextFeatureExtractor.from_pretrained(bilingual.path.parent / "src" / "hf")(
        wave, sampling_rate=16000, return_tensors="pt"
    )["input_features"][0]
    best = hf_beam(bilingual.hf, feats)[0][0]
    assert result.text and result.text == bilingual.tok.decode(
        best, skip_special_tokens=True, clean_up_tokenization_spaces=False
    )


def test_multilingual_model_gets_its_language_tag(multilingual, tmp_path):
    lm, hf_ids = multilingual.lm, multilingual.hf_ids
    assert lm.tokenizer.config.lang_tags == TAGS and lm.tokenizer.tag_id("<lang:fr>") == 6
    assert lm.tag == "<lang:fr>" and lm.decode_options().prefix == (6,)
    assert lm.model.decoder.output.weight is lm.model.decoder.embed.weight  # HF ties them here
    assert multilingual.tok.convert_ids_to_tokens(hf_ids[6]) == "<lang:fr>"
    feats = random_features([70, 90, 110], seed=4)
    x, lengths = padded(feats)
    options = lm.decode_options(beam=5, max_len_b=MAX_NEW, len_penalty=0.0)
    with torch.no_grad():
        results = beam_search(lm.model, lm.model.encode_speech(x, lengths), options)
    fr = hf_ids[6]
    for f, hyps in zip(feats, results):
        # HF forces the tag as a generated token scored 0 and counts it in the length (and in
        # min_new_tokens); speechmt feeds it as a prefix and does not: the scores divided by the length
        # differ, so compare plain sums of log-probabilities (len_penalty 0).
        theirs = hf_beam(multilingual.hf, f, forced_bos_token_id=fr, length_penalty=0.0, min_new_tokens=2)[0][0]
        assert [fr] + [hf_ids[t] for t in hyps[0].tokens] + [EOS] == theirs
    hf_dir = multilingual.path.parent / "src" / "hf"
    assert load_model(import_hf_s2t(hf_dir, tmp_path / "de.safetensors", tgt_lang="de")).tag == "<lang:de>"
    with pytest.raises(HFImportError, match="no language tag <lang:xx>"):
        import_hf_s2t(hf_dir, tmp_path / "xx.safetensors", tgt_lang="xx")


def test_not_a_speech2text_model_fails_with_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    with pytest.raises(HFImportError) as e:
        import_hf_s2t(tmp_path / "empty", tmp_path / "x.safetensors")
    assert str(e.value).startswith(f"{tmp_path / 'empty'}: not a Hugging Face Speech2Text model")
    assert "\n" not in str(e.value)
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(HFImportError, match="not a Hugging Face Speech2Text model \\(model_type 'bert'\\)"):
        import_hf_s2t(tmp_path / "bert", tmp_path / "x.safetensors")
    assert main(["import", "hf", str(tmp_path / "empty"), "--out", str(tmp_path / "x.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speechmt: error: ") and err.count("\n") == 1
    assert not (tmp_path / "x.safetensors").exists()


def test_unsupported_settings_are_refused():
    with pytest.raises(HFImportError, match="activation 'gelu'"):
        model_config(Speech2TextConfig(activation_function="gelu"), 10001)
    with pytest.raises(HFImportError, match="sampling_rate 8000.*mean-only or variance-only CMVN"):
        fbank_frontend(Speech2TextFeatureExtractor(sampling_rate=8000, normalize_vars=False), 80)
    frontend = fbank_frontend(Speech2TextFeatureExtractor(do_ceptral_normalize=False), 80)
    assert frontend.settings == (FbankConfig(), CMVNConfig("none"))
