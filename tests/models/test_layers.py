import math

import pytest
import torch
import torch.nn.functional as F

from speechmt.models import layers
from speechmt.models.layers import (
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    TransformerEncoderLayer,
    _few_query_attention,
    causal_mask,
    embedding,
    key_padding_mask,
    transformer_encoder,
    zero_residual_branches,
)
from speechmt.sequence import lengths_to_padding_mask


def test_positions_known_values_and_offset():
    pe = SinusoidalPositionalEncoding(8)
    table = pe.table(10)
    assert table.shape == (10, 8)
    assert torch.equal(table[0], torch.tensor([0.0, 0, 0, 0, 1, 1, 1, 1]))
    freq = 10000 ** (-1 / 3)  # channel 1 of 4 sin channels: 10000^(-i / (D/2 - 1))
    assert math.isclose(table[7, 1].item(), math.sin(7 * freq), abs_tol=1e-6)
    assert math.isclose(table[7, 5].item(), math.cos(7 * freq), abs_tol=1e-6)
    assert torch.allclose(pe.table(4, offset=6), table[6:], atol=1e-6)
    x = torch.zeros(2, 3, 8)
    assert torch.allclose(pe(x, offset=2), table[2:5].expand(2, 3, 8))
    assert SinusoidalPositionalEncoding(7).table(3).shape == (3, 7)


def test_masks():
    assert key_padding_mask(torch.tensor([2, 3]), 4).tolist() == [
        [[[True, True, False, False]]],
        [[[True, True, True, False]]],
    ]
    assert causal_mask(3, 0, torch.device("cpu")).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert causal_mask(2, 2, torch.device("cpu")).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_embedding_init():
    emb = embedding(100, 64, pad_id=0)
    assert torch.all(emb.weight[0] == 0)
    assert abs(emb.weight[1:].std().item() - 64**-0.5) < 0.01


def test_attention_matches_naive_softmax_with_padding():
    attn = MultiHeadAttention(16, 4).eval()
    x, memory, lengths = torch.randn(3, 5, 16), torch.randn(3, 7, 16), torch.tensor([7, 4, 1])
    out = attn(x, memory, key_padding_mask(lengths, 7))
    q = attn.q_proj(x).view(3, 5, 4, 4).transpose(1, 2)
    k = attn.k_proj(memory).view(3, 7, 4, 4).transpose(1, 2)
    v = attn.v_proj(memory).view(3, 7, 4, 4).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / 2.0  # sqrt(D/H) = 2
    scores = scores.masked_fill(lengths_to_padding_mask(lengths)[:, None, None, :], float("-inf"))
    ref = attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(3, 5, 16))
    assert out.shape == (3, 5, 16)
    assert (out - ref).abs().max() < 1e-5


def test_few_query_attention_equals_the_fused_kernel():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 2, 16), torch.randn(3, 4, 7, 16), torch.randn(3, 4, 7, 16)
    mask = key_padding_mask(torch.tensor([7, 4, 0]), 7)  # row 2 may attend to no key
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = _few_query_attention(q, k, v, mask)
    assert out.shape == (3, 4, 2, 16)
    assert (out - ref).abs().max() < 1e-6
    assert torch.equal(out[2], torch.zeros(4, 2, 16))  # zeros, as the fused kernel gives
    assert (_few_query_attention(q, k, v, None) - F.scaled_dot_product_attention(q, k, v)).abs().max() < 1e-6
    bf = _few_query_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert bf.dtype == torch.bfloat16 and (bf.float() - ref).abs().max() < 0.05


@pytest.mark.parametrize(
    "training, n_queries, few",
    [(False, 1, True), (False, layers.FEW_QUERIES, True), (False, layers.FEW_QUERIES + 1, False), (True, 1, False)],
)
def test_attention_takes_the_few_query_path_out_of_training_only(monkeypatch, training, n_queries, few):
    calls = []
    monkeypatch.setattr(layers, "_few_query_attention", lambda *a: calls.append(a) or _few_query_attention(*a))
    attn = MultiHeadAttention(16, 4).train(training)
    out = attn(torch.randn(2, n_queries, 16), torch.randn(2, 5, 16), key_padding_mask(torch.tensor([5, 3]), 5))
    assert out.shape == (2, n_queries, 16)
    assert len(calls) == int(few)


@torch.no_grad()
def test_one_query_at_a_time_equals_all_queries_at_once():
    attn = MultiHeadAttention(16, 4).eval()
    n = layers.FEW_QUERIES + 4  # all at once: the fused kernel; one at a time: the few-query products
    x, memory, mask = torch.randn(3, n, 16), torch.randn(3, 9, 16), key_padding_mask(torch.tensor([9, 4, 1]), 9)
    whole = attn(x, memory, mask)
    single = torch.cat([attn(x[:, i : i + 1], memory, mask) for i in range(n)], dim=1)
    assert (whole - single).abs().max() < 1e-5


def test_encoder_layer_padding_does_not_leak():
    layer = TransformerEncoderLayer(16, 2, 32).eval()
    lengths = torch.tensor([6, 3, 1])
    x = torch.randn(3, 6, 16)  # padded frames hold random values on purpose
    out, out_lengths = layer(x, lengths)
    assert out.shape == x.shape and torch.equal(out_lengths, lengths)
    for i, n in enumerate(lengths.tolist()):
        alone, _ = layer(x[i : i + 1, :n], lengths[i : i + 1])
        assert (alone[0] - out[i, :n]).abs().max() < 1e-5


def test_encoder_stack_zeroes_padding():
    stack = transformer_encoder(2, 16, 2, 32).eval()
    lengths = torch.tensor([5, 2])
    out, out_lengths = stack(torch.randn(2, 5, 16), lengths)
    assert torch.equal(out_lengths, lengths)
    assert torch.all(out[1, 2:] == 0) and torch.all(out[1, :2] != 0)
    assert len(stack.layers) == 2


def test_zeroed_residual_branches_make_the_stack_the_identity_and_still_learn():
    torch.manual_seed(0)
    stack = zero_residual_branches(transformer_encoder(2, 16, 2, 32, final_norm=False))
    x, lengths = torch.randn(2, 5, 16, requires_grad=True), torch.tensor([5, 2])
    out, _ = stack(x, lengths)
    assert torch.equal(out[0], x[0]) and torch.equal(out[1, :2], x[1, :2]) and not out[1, 2:].any()
    (out * torch.randn_like(out)).sum().backward()
    grads = {n: p.grad for n, p in stack.named_parameters()}
    assert grads["layers.0.attn.out_proj.weight"].abs().sum() > 0 and grads["layers.1.ffn.fc2.weight"].abs().sum() > 0
    assert not grads["layers.0.attn.q_proj.weight"].any() and not grads["layers.1.ffn.fc1.weight"].any()
    with torch.no_grad():  # once the output projections move, the rest of each layer gets gradients
        for layer in stack.layers:
            layer.attn.out_proj.weight.normal_(0, 0.1)
            layer.ffn.fc2.weight.normal_(0, 0.1)
    stack.zero_grad()
    out, _ = stack(x, lengths)
    out.sum().backward()
    assert (
        stack.layers[0].attn.q_proj.weight.grad.abs().sum() > 0 and stack.layers[1].ffn.fc1.weight.grad.abs().sum() > 0
    )
    assert not torch.allclose(out[0], x[0])


def test_positions_start_at_position_offset():
    x = torch.zeros(2, 3, 8)
    shifted = SinusoidalPositionalEncoding(8, position_offset=2)(x, offset=1)  # positions 3, 4, 5
    assert torch.equal(shifted, SinusoidalPositionalEncoding(8)(x, offset=3))
