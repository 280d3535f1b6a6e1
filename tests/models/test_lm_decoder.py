"""A causal LM as the decoder: the sequence it reads, padding, the trimmed output layer, cached steps,
search, and the LM tokenizer's prompts and trimmed vocabulary. A tiny random Gemma 3 saved to a folder."""

import dataclasses

import pytest
import torch

from speechmt.decoding.search import DecodeOptions, beam_search, greedy_search
from speechmt.models.build import build_model
from speechmt.models.config import preset
from speechmt.models.encoders import EncoderOutput
from speechmt.tasks.objectives import shift_right
from speechmt.tokenizers.lm import LMTokenizer, language_name
from speechmt.tokenizers.sentencepiece import UnknownTagError
from tests.lm_helpers import lm_resolved

TARGETS = ["Das Wetter ist heute schön.", "Bitte öffne das Fenster.", "Der Zug fährt um neun Uhr ab."]


@pytest.fixture(scope="module")
def tok(lm_dir):
    return LMTokenizer.trimmed(str(lm_dir), TARGETS, ["<de>", "<en>"])


def lm_model(lm_dir, tok, finetune="full", **kw):
    torch.manual_seed(0)
    cfg = preset(
        "tiny",
        n_heads=2,
        decoder=dict(kind="lm", name_or_path=str(lm_dir), finetune=finetune),
        dropout=0.0,
        **kw,
    )
    return build_model(cfg, resolved=lm_resolved(tok)).eval()


def batch_targets(tok, texts, tag="<de>"):
    ids = [tok.encode(t, lang_tag=tag) for t in texts]
    out = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for i, x in enumerate(ids):
        out[i, : len(x)] = torch.tensor(x)
    return out, torch.tensor([len(x) for x in ids])


def memory(lengths, dim=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), max(lengths), dim, generator=g)
    lengths = torch.tensor(lengths)
    x = x.masked_fill((torch.arange(x.size(1))[None] >= lengths[:, None])[..., None], 0.0)
    return EncoderOutput(x, lengths)


def test_tokenizer_trims_to_the_targets_and_round_trips(tok, lm_dir):
    full = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    assert tok.config.vocab[:4] == (0, 1, full.lm.start, 3)  # pad, eos, line break (start), unk
    used = (
        {i for t in TARGETS for i in full.text_ids(" " + t)}
        | set(full.text_ids("German:"))
        | set(full.text_ids("English:"))
    )
    assert set(tok.config.vocab[4:]) == used and len(tok) == 4 + len(used)
    for text in TARGETS:
        ids = tok.encode(text, lang_tag="<de>")
        assert ids[-1] == tok.eos_id and tok.decode(ids) == text
        assert tok.to_lm_ids(ids[:-1]) == full.text_ids("German:") + full.text_ids(" " + text)
    assert full.encode("Das Wetter") == full.text_ids(" Das Wetter")  # source: no eos, no tag
    assert set(tok.encode("Xylophon qqq", add_eos=False)) <= set(range(len(tok)))


def test_task_prompts_name_the_languages(tok, lm_dir):
    full = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    assert tok.to_lm_ids(tok.prefix_ids("<de>")) == full.text_ids("German:")
    assert tok.to_lm_ids(tok.prefix_ids("<en>")) == full.text_ids("English:")  # asr targets
    assert tok.prompt_ids("en") == (2, *full.text_ids("English:"))  # <bos> first
    assert language_name("zh-CN") == "Chinese" and language_name("<sv-SE>") == "Swedish"
    with pytest.raises(UnknownTagError):
        tok.prefix_ids("<xx>")
    assert tok.suppress_ids == (tok.unk_id,) or set(tok.suppress_ids) >= {tok.unk_id}


def test_the_lm_reads_prompt_source_and_target_with_its_own_positions(lm_dir, tok):
    """The decoder's logits equal the HF LM's on the sequence it builds by hand, row by row."""
    model = lm_model(lm_dir, tok)
    dec = model.decoder
    enc = memory([5, 3])
    tgt, _ = batch_targets(tok, TARGETS[:2])
    inputs = shift_right(tgt, tok.bos_id)
    logits = model.decode(inputs, enc)  # (2, U, V')
    for b in range(2):
        n = int(enc.lengths[b])
        emb = torch.cat([dec.embed(dec.prompt), enc.x[b, :n], dec.embed(dec.vocab[inputs[b]])])[None]
        ref = dec.lm(inputs_embeds=emb).logits[0, -inputs.size(1) :]  # the LM's full output layer
        assert torch.allclose(logits[b], ref[:, dec.vocab], atol=1e-5)  # trimmed head == full head's rows


def test_padding_does_not_change_an_item(lm_dir, tok):
    model = lm_model(lm_dir, tok)
    enc = memory([6, 2, 4])
    tgt, _ = batch_targets(tok, TARGETS)
    inputs = shift_right(tgt, tok.bos_id)
    batch = model.decode(inputs, enc)
    for b in range(3):
        alone = model.decode(inputs[b : b + 1], enc.select(torch.tensor([b])))
        assert torch.allclose(alone, batch[b : b + 1], atol=1e-5)


def test_cached_steps_equal_a_full_forward(lm_dir, tok):
    model = lm_model(lm_dir, tok)
    enc = memory([4, 6])
    tgt, _ = batch_targets(tok, TARGETS[1:])
    inputs = shift_right(tgt, tok.bos_id)
    full = model.decode(inputs, enc)
    cache = model.new_cache()
    steps = [model.decode(inputs[:, :3], enc, cache)] + [
        model.decode(inputs[:, j : j + 1], enc, cache) for j in range(3, inputs.size(1))
    ]
    assert cache.offset == inputs.size(1)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_cache_reorder_keeps_the_chosen_rows(lm_dir, tok):
    model = lm_model(lm_dir, tok)
    enc = memory([4, 6])
    inputs = shift_right(batch_targets(tok, TARGETS[:2])[0], tok.bos_id)
    cache = model.new_cache()
    model.decode(inputs[:, :2], enc, cache)
    cache.reorder(torch.tensor([1, 0]))
    swapped = model.decode(inputs[[1, 0], 2:3], enc.select(torch.tensor([1, 0])), cache)
    assert torch.allclose(swapped, model.decode(inputs, enc)[[1, 0], 2:3], atol=1e-5)


def test_search_beam_one_is_greedy_and_an_item_alone_equals_it_in_a_batch(lm_dir, tok):
    model = lm_model(lm_dir, tok)
    enc = memory([5, 2, 7], seed=3)
    options = DecodeOptions(
        beam_size=1,
        prefix=tok.prefix_ids("<de>"),
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        suppress=tok.suppress_ids,
        max_len_b=8,
    )
    greedy = greedy_search(model, enc, options)
    assert [h[0].tokens for h in beam_search(model, enc, options)] == greedy
    beam = dataclasses.replace(options, beam_size=3, nbest=2)
    together = [[h.tokens for h in hyps] for hyps in beam_search(model, enc, beam)]
    for b in range(3):
        alone = beam_search(model, enc.select(torch.tensor([b])), beam)[0]
        assert [h.tokens for h in alone] == together[b]
    assert all(tok.unk_id not in t and tok.bos_id not in t for t in greedy)


def test_lora_trains_adapters_only_and_the_text_path_shares_the_lm_table(lm_dir, tok):
    model = lm_model(
        lm_dir,
        tok,
        finetune="lora",
        text_encoder=dict(embed_only=True, embeddings="lm"),
        src_vocab_size=10,
        lora=dict(rank=4, targets=["q_proj", "v_proj", "o_proj", "down_proj"]),
    )
    trained = {n for n, p in model.decoder.named_parameters() if p.requires_grad}
    assert trained and all(".lora_" in n for n in trained)
    assert model.text_encoder.embedding is model.decoder.embed
    src = torch.tensor([[5, 6, 7], [8, 9, 0]])
    out = model.encode_text(src, torch.tensor([3, 2]))
    assert torch.allclose(out.x[0], model.decoder.embed(src[0]))  # Gemma's scaled embeddings, no positions
    assert out.x[1, 2].abs().sum() == 0  # padding zero


def test_examples_before_the_speech_are_read_as_the_lms_text_then_the_speech(lm_dir, tok):
    """Translator.prefixed: the LM reads prompt, each row's prefix ids as its own text, then the row's speech
    vectors, then the target; equal to the HF LM on that sequence built by hand, and a row alone as in a batch."""
    model = lm_model(lm_dir, tok, text_encoder=dict(embed_only=True, embeddings="lm"), src_vocab_size=10)
    dec, enc = model.decoder, memory([4, 2], seed=5)
    prefix, prefix_lengths = torch.tensor([[5, 6, 7], [8, 0, 0]]), torch.tensor([3, 1])
    out = model.prefixed(enc, prefix, prefix_lengths)
    assert out.lengths.tolist() == [7, 3] and out.x.shape[:2] == (2, 7)
    tgt, _ = batch_targets(tok, TARGETS[:2])
    inputs = shift_right(tgt, tok.bos_id)
    logits = model.decode(inputs, out)
    for b in range(2):
        p, n = int(prefix_lengths[b]), int(enc.lengths[b])
        emb = torch.cat(
            [dec.embed(dec.prompt), dec.embed(prefix[b, :p]), enc.x[b, :n], dec.embed(dec.vocab[inputs[b]])]
        )
        ref = dec.lm(inputs_embeds=emb[None]).logits[0, -inputs.size(1) :, dec.vocab]
        assert torch.allclose(logits[b], ref, atol=1e-5)
        alone = model.prefixed(enc.select(torch.tensor([b])), prefix[b : b + 1, :p], prefix_lengths[b : b + 1])
        assert torch.allclose(model.decode(inputs[b : b + 1], alone)[0], logits[b], atol=1e-5)


def test_config_errors_name_the_lm_options(lm_dir, tok):
    with pytest.raises(ValueError, match="decoder 'lm' needs decoder.name_or_path"):
        preset("tiny", decoder=dict(kind="lm"))
    with pytest.raises(ValueError, match="text_encoder.embeddings lm needs decoder 'lm'"):
        preset("tiny", text_encoder=dict(embed_only=True, embeddings="lm"))
    with pytest.raises(ValueError, match="decoder.examples needs text_encoder.embed_only with embeddings lm"):
        preset("tiny", decoder=dict(kind="lm", name_or_path=str(lm_dir), examples=2))
    with pytest.raises(ValueError, match=r"decoder.memory \('ding-en-de'\) needs decoder.examples > 0"):
        preset("tiny", decoder=dict(kind="lm", name_or_path=str(lm_dir), memory="ding-en-de"))
    with pytest.raises(ValueError, match="decoder.vocab"):
        build_model(
            preset("tiny", n_heads=2, decoder=dict(kind="lm", name_or_path=str(lm_dir))),
            resolved={"decoder.prompt": [2]},
        )


def test_lna_trains_the_lms_norms_and_attention_projections(lm_dir, tok):
    model = lm_model(lm_dir, tok, finetune="lna")
    trained = {n for n, p in model.decoder.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith("norm.weight") or ".self_attn." in n for n in trained), sorted(trained)
    assert any(".self_attn.o_proj." in n for n in trained) and any("input_layernorm" in n for n in trained)
    assert not any("mlp" in n or "embed" in n for n in trained)


@torch.no_grad()
def test_logits_of_a_sliced_batch_equal_the_rows_products(lm_dir, tok):
    dec = lm_model(lm_dir, tok, finetune="frozen").decoder
    hidden = torch.randn(3, 5, dec.lm.config.hidden_size)[:, 1:4]  # not contiguous: a slice of positions
    logits = dec.logits(hidden)
    head = dec.lm.get_output_embeddings().weight[dec.vocab]
    ref = torch.einsum("btd,vd->btv", hidden, head)
    if dec.softcap:
        ref = torch.tanh(ref / dec.softcap) * dec.softcap
    assert logits.shape == (3, 3, len(dec.vocab))
    assert (logits - ref).abs().max() < 1e-4


def test_the_trimmed_head_is_gathered_once_and_again_after_the_weights_change(lm_dir, tok):
    model = lm_model(lm_dir, tok, finetune="lora", lora=dict(rank=4, targets=["q_proj"]))
    dec = model.decoder
    first = dec.head_weight()
    assert dec.head_weight() is first  # the LM's table is frozen: reused
    with torch.no_grad():
        dec.lm.get_output_embeddings().weight.mul_(2.0)  # in place, as an optimiser or load_state_dict writes
    assert torch.allclose(dec.head_weight(), 2 * first)
