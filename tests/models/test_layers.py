import math

import torch

from speechmt.sequence import lengths_to_padding_mask
from speechmt.models.layers import (
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    TransformerEncoderLayer,
    causal_mask,
    embedding,
    key_padding_mask,
    transformer_encoder,
    zero_residual_branches,
)


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
    assert key_padding_mask(torch.tensor([2, 3]), 4).tolist() == [[[[True, True, False, False]]],
                                                                   [[[True, True, True, False]]]]
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
    assert stack.layers[0].attn.q_proj.weight.grad.abs().sum() > 0 and stack.layers[1].ffn.fc1.weight.grad.abs().sum() > 0
    assert not torch.allclose(out[0], x[0])


def test_positions_start_at_position_offset():
    x = torch.zeros(2, 3, 8)
    shifted = SinusoidalPositionalEncoding(8, position_offset=2)(x, offset=1)  # positions 3, 4, 5
    assert torch.equal(shifted, SinusoidalPositionalEncoding(8)(x, offset=3))
