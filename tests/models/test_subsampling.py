import pytest
import torch

from speechmt.models.subsampling import Conv1dSubsampler, Conv2dSubsampler, conv_output_lengths

LENGTHS = torch.arange(1, 201)


def _four_x(lengths: torch.Tensor) -> torch.Tensor:
    return ((lengths - 1) // 2) // 2 + 1  # ((L - 1) // 2 + 1 - 1) // 2 + 1


def test_conv_output_lengths_formula():
    assert conv_output_lengths(torch.tensor([1, 2, 3, 9, 10]), 5).tolist() == [1, 1, 2, 5, 5]
    assert conv_output_lengths(torch.tensor([1, 2, 3, 9, 10]), 4).tolist() == [1, 2, 2, 5, 6]
    assert torch.equal(conv_output_lengths(conv_output_lengths(LENGTHS, 5), 5), _four_x(LENGTHS))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Conv1dSubsampler(12, 16, 8, (5, 5)),
        lambda: Conv1dSubsampler(12, 16, 8, (3, 4, 7)),
        lambda: Conv2dSubsampler(12, 4, 8),
    ],
    ids=["conv1d", "conv1d-3-layers", "conv2d"],
)
def test_lengths_match_real_outputs(make):
    sub = make().eval()
    with torch.no_grad():
        for n in LENGTHS.tolist():
            out, lengths = sub(torch.randn(1, n, 12), torch.tensor([n]))
            assert out.shape == (1, int(lengths), 8), n
        _, batch_lengths = sub(torch.randn(200, 200, 12), LENGTHS)
    assert torch.equal(batch_lengths, sub.output_lengths(LENGTHS))
    if len(sub.convs) == 2:
        assert torch.equal(batch_lengths, _four_x(LENGTHS))


@pytest.mark.parametrize(
    "make", [lambda: Conv1dSubsampler(12, 16, 8), lambda: Conv2dSubsampler(12, 4, 8)], ids=["conv1d", "conv2d"]
)
def test_padding_does_not_leak(make):
    sub = make().eval()
    lengths = torch.tensor([37, 20, 9, 1])
    x = torch.randn(4, 37, 12) * 5  # padded frames hold large random values on purpose
    out, out_lengths = sub(x, lengths)
    assert out.shape == (4, 10, 8) and out_lengths.tolist() == [10, 5, 3, 1]
    for i, n in enumerate(lengths.tolist()):
        alone, alone_lengths = sub(x[i : i + 1, :n], lengths[i : i + 1])
        assert alone_lengths.item() == out_lengths[i].item()
        assert (alone[0] - out[i, : out_lengths[i]]).abs().max() < 1e-5


def test_conv1d_channels_and_parameters():
    sub = Conv1dSubsampler(80, 1024, 256, (5, 5))
    assert [(c.in_channels, c.out_channels) for c in sub.convs] == [(80, 1024), (512, 512)]
    assert sum(p.numel() for p in sub.parameters()) == 80 * 1024 * 5 + 1024 + 512 * 512 * 5 + 512


def test_conv2d_flattens_channels_by_frequency():
    sub = Conv2dSubsampler(80, 32, 64)
    assert sub.out.in_features == 32 * 20  # 80 -> 40 -> 20 frequency bins
