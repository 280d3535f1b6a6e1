import pytest
import torch

from speechmt.models import EncoderOutput, build_model, preset

V = 40


def _setup(batch=3):
    model = build_model(
        preset(
            "tiny", tgt_vocab_size=V, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, tie_embeddings=False
        )
    ).eval()
    lengths = torch.tensor([9, 5, 2])[:batch]
    x = torch.randn(batch, 9, 64).masked_fill(torch.arange(9)[None, :, None] >= lengths[:, None, None], 0.0)
    return model, EncoderOutput(x, lengths), torch.randint(4, V, (batch, 12))


@torch.no_grad()
def test_logits_shape():
    model, enc, tokens = _setup()
    assert model.decode(tokens, enc).shape == (3, 12, V)


@torch.no_grad()
def test_cached_steps_equal_full_recomputation():
    model, enc, tokens = _setup()
    full = model.decode(tokens, enc)  # (3, 12, V)
    cache = model.new_cache()
    steps = [model.decode(tokens[:, :2], enc, cache)]  # bos + tag, then 10 single steps
    for t in range(2, 12):
        steps.append(model.decode(tokens[:, t : t + 1], enc, cache))
    assert cache.offset == 12
    assert len(steps) == 11
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5


@torch.no_grad()
def test_cached_chunks_equal_full_recomputation():
    model, enc, tokens = _setup()
    full = model.decode(tokens, enc)
    cache = model.new_cache()
    chunks = [model.decode(tokens[:, a:b], enc, cache) for a, b in [(0, 3), (3, 7), (7, 8), (8, 12)]]
    assert (torch.cat(chunks, dim=1) - full).abs().max() < 1e-5


@torch.no_grad()
def test_cross_attention_projected_once():
    model, enc, tokens = _setup()
    cache = model.new_cache()
    model.decode(tokens[:, :1], enc, cache)
    first = cache.layers[0].cross_kv
    model.decode(tokens[:, 1:2], enc, cache)
    assert cache.layers[0].cross_kv is first
    assert all(t.is_contiguous() for t in first)  # read at every step: stored contiguous
    assert cache.layers[0].self_kv[0].shape == (3, 2, 2, 32)  # (B, H, t, D/H)


@torch.no_grad()
def test_reorder_equals_decoding_reordered_batch():
    model, enc, tokens = _setup()
    cache = model.new_cache()
    model.decode(tokens[:, :4], enc, cache)
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    enc2, tokens2 = enc.select(index), tokens[index]
    steps = [model.decode(tokens2[:, t : t + 1], enc2, cache) for t in range(4, 8)]
    full = model.decode(tokens2[:, :8], enc2)
    assert (torch.cat(steps, dim=1) - full[:, 4:]).abs().max() < 1e-5


@torch.no_grad()
def test_reorder_without_cross_keeps_cross_kv():
    model, enc, tokens = _setup()
    cache = model.new_cache()
    model.decode(tokens[:, :2], enc, cache)
    cross = cache.layers[1].cross_kv
    cache.reorder(torch.tensor([1, 1, 0]), cross=False)
    assert cache.layers[1].cross_kv is cross
    assert torch.equal(cache.layers[1].self_kv[0][0], cache.layers[1].self_kv[0][1])


@torch.no_grad()
def test_padding_does_not_leak():
    model, enc, tokens = _setup()
    enc.x[1, 5:] = 7.0  # garbage in padded memory frames must not matter
    full = model.decode(tokens, enc)
    for i in range(3):
        n = int(enc.lengths[i])
        alone = model.decode(tokens[i : i + 1, :7], EncoderOutput(enc.x[i : i + 1, :n], enc.lengths[i : i + 1]))
        assert (alone[0] - full[i, :7]).abs().max() < 1e-5  # shorter target: right padding is invisible too


def test_tied_and_untied_output_projection():
    tied = build_model(preset("tiny", tgt_vocab_size=V)).decoder
    assert tied.output.weight.data_ptr() == tied.embed.weight.data_ptr()
    untied = build_model(preset("tiny", tgt_vocab_size=V, tie_embeddings=False)).decoder
    assert untied.output.weight.data_ptr() != untied.embed.weight.data_ptr()
    assert tied.output.bias is None


@torch.no_grad()
def test_grouped_rows_share_memory_rows():
    """As beam search decodes: one row per utterance first, then K rows per memory row (group K), then
    utterances leave; the logits equal those of full recomputation with the memory copied per row."""
    model, enc, _ = _setup()
    k = 2
    tokens = torch.randint(4, V, (3 * k, 8), generator=torch.Generator().manual_seed(1))
    tokens[:, :2] = tokens[::k, :2].repeat_interleave(k, dim=0)  # the rows of one utterance share a start
    full = model.decode(tokens, enc.select(torch.arange(3).repeat_interleave(k)))
    cache = model.new_cache()
    first = model.decode(tokens[::k, :2], enc, cache)
    cache.regroup(torch.arange(3).repeat_interleave(k), None, k)
    steps = [model.decode(tokens[:, t : t + 1], enc, cache) for t in range(2, 5)]
    assert cache.layers[0].cross_kv[0].shape == (3, 2, 9, 32)  # (N, H, S, D/H): one row per utterance
    assert (first - full[::k, :2]).abs().max() < 1e-5
    assert (torch.cat(steps, dim=1) - full[:, 2:5]).abs().max() < 1e-5
    kept = torch.tensor([2, 0])  # utterance 1 leaves
    cache.regroup((kept[:, None] * k + torch.arange(k)).flatten(), kept, k)
    rows = torch.tensor([4, 5, 0, 1])
    steps = [model.decode(tokens[rows, t : t + 1], enc.select(kept), cache) for t in range(5, 8)]
    assert (torch.cat(steps, dim=1) - full[rows, 5:8]).abs().max() < 1e-5
    with pytest.raises(ValueError, match="group is 2"):
        cache.reorder(torch.tensor([0, 1]))
