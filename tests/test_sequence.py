"""Padded-sequence helpers: masks from lengths, row-wise concatenation."""

import torch

from speechmt.sequence import concat_padded, lengths_to_padding_mask


def test_padding_mask_marks_positions_at_or_past_each_length():
    mask = lengths_to_padding_mask(torch.tensor([2, 0, 3]), 4)
    assert mask.tolist() == [[False, False, True, True], [True] * 4, [False, False, False, True]]


def test_concat_padded_packs_each_rows_real_items_and_zero_pads_the_rest():
    torch.manual_seed(0)
    a, b = torch.randn(3, 4, 2), torch.randn(3, 5, 2)
    a_len, b_len = torch.tensor([4, 0, 2]), torch.tensor([1, 5, 3])
    x, lengths = concat_padded(a, a_len, b, b_len)
    assert lengths.tolist() == [5, 5, 5] and x.shape == (3, 5, 2)
    for row in range(3):  # the reference: a python concatenation per row
        want = torch.cat([a[row, : a_len[row]], b[row, : b_len[row]]])
        assert torch.equal(x[row, : len(want)], want)
        assert not x[row, len(want) :].any()
    x, lengths = concat_padded(a[:, :1], torch.tensor([1, 0, 0]), b[:, :2], torch.tensor([0, 2, 1]))
    assert lengths.tolist() == [1, 2, 1] and x.shape == (3, 2, 2)
    assert torch.equal(x[0, 0], a[0, 0]) and torch.equal(x[1], b[1, :2]) and not x[2, 1].any()
