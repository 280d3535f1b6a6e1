"""Losses with known values: fairseq's label-smoothed cross entropy (by hand, and from torch's own label
smoothing), the CTC targets, CTC against torch's and against alignments counted by hand, and the teacher
distance."""

import math

import pytest
import torch
import torch.nn.functional as F

from speechmt.tasks.losses import contrastive_loss, ctc_loss, distance_loss, label_smoothed_nll_loss, strip_specials

PAD, BLANK = 0, 4  # the tokenizer layout: pad 0, blank 4


def _fairseq_from_torch(logits, target, eps, pad_id):
    """The reference: torch spreads its label_smoothing e over all V classes, the true one included,
    (1 - e) nll + e/V sum_V(-log p); fairseq spreads eps over the V - 1 others, (1 - eps - eps/(V-1)) nll +
    eps/(V-1) sum_V(-log p). The two are equal with e = eps V / (V - 1)."""
    V = logits.size(-1)
    return F.cross_entropy(
        logits.reshape(-1, V),
        target.reshape(-1),
        ignore_index=pad_id,
        reduction="sum",
        label_smoothing=eps * V / (V - 1),
    )


def test_label_smoothing_by_hand():
    # V = 4, one sentence of two tokens and a pad (pad_id 0). Token 1: uniform logits, target 2, so
    # -log p = log 4 for every class. Token 2: p = (.1, .2, .3, .4), target 3.
    logits = torch.log(torch.tensor([[[1.0, 1.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]]]))
    target = torch.tensor([[2, 3, PAD]])
    loss, nll = label_smoothed_nll_loss(logits, target, epsilon=0.3, pad_id=PAD)
    # nll = log 4 + log(1/.4) = log 10; sum_V(-log p) = 4 log 4 + log(1/(.1 * .2 * .3 * .4));
    # eps/(V-1) = 0.1, so loss = (1 - 0.3 - 0.1) log 10 + 0.1 (log 256 + log(1/.0024)) = 2.5392974...
    expected_nll = math.log(10.0)
    expected = 0.6 * math.log(10.0) + 0.1 * (math.log(256.0) + math.log(1 / 0.0024))
    assert expected == pytest.approx(2.5392974, abs=1e-7)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_label_smoothing_is_cross_entropy_on_fairseq_target_distribution():
    # the same loss as cross entropy against q = 1 - eps on the target, eps/(V-1) on each other class
    torch.manual_seed(1)
    logits, target, eps = torch.randn(2, 3, 6), torch.tensor([[1, 5, 2], [3, 0, 0]]), 0.2
    q = torch.full((2, 3, 6), eps / 5).scatter_(-1, target[..., None], 1 - eps)
    keep = target != PAD
    expected = -(q * F.log_softmax(logits, -1)).sum(-1)[keep].sum()
    loss, _ = label_smoothed_nll_loss(logits, target, eps, PAD)
    assert torch.allclose(loss, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("eps", [0.05, 0.1, 0.3])
def test_label_smoothing_matches_torch_cross_entropy(eps):
    torch.manual_seed(0)
    B, U, V = 3, 7, 11
    logits = 3 * torch.randn(B, U, V)
    target = torch.randint(1, V, (B, U))
    target[0, 5:] = PAD
    target[2, 2:] = PAD
    loss, nll = label_smoothed_nll_loss(logits, target, eps, PAD)
    assert torch.allclose(loss, _fairseq_from_torch(logits, target, eps, PAD), rtol=1e-5, atol=0)
    expected_nll = F.nll_loss(
        F.log_softmax(logits, -1).reshape(-1, V), target.reshape(-1), ignore_index=PAD, reduction="sum"
    )
    assert torch.allclose(nll, expected_nll, rtol=1e-6, atol=0)


def test_pads_are_excluded_and_eps_zero_is_the_nll():
    torch.manual_seed(2)
    logits, target = torch.randn(2, 5, 9), torch.randint(1, 8, (2, 5))  # ids 1..7
    target[1, 3:] = PAD
    loss, nll = label_smoothed_nll_loss(logits, target, 0.1, PAD)
    changed = logits.clone()
    changed[1, 3:] = 100 * torch.randn(2, 9)  # whatever is predicted at pads
    assert torch.equal(label_smoothed_nll_loss(changed, target, 0.1, PAD)[0], loss)
    # the same as the two sentences' real tokens alone
    alone = (
        label_smoothed_nll_loss(logits[:1], target[:1], 0.1, PAD)[0]
        + label_smoothed_nll_loss(logits[1:, :3], target[1:, :3], 0.1, PAD)[0]
    )
    assert torch.allclose(loss, alone, rtol=1e-6, atol=0)
    # pad_id is what is skipped, whatever its value
    other = target.masked_fill(target == PAD, 8)
    assert torch.equal(label_smoothed_nll_loss(logits, other, 0.1, pad_id=8)[0], loss)
    loss0, nll0 = label_smoothed_nll_loss(logits, target, 0.0, PAD)
    assert torch.equal(loss0, nll0) and torch.equal(nll0, nll)


def test_all_pad_targets_give_zero():
    loss, nll = label_smoothed_nll_loss(torch.randn(1, 3, 5), torch.zeros(1, 3, dtype=torch.long), 0.1, PAD)
    assert loss.item() == 0.0 and nll.item() == 0.0


def test_half_precision_logits_are_scored_in_float32():
    torch.manual_seed(3)
    logits, target = torch.randn(2, 4, 8), torch.randint(1, 8, (2, 4))
    loss16, _ = label_smoothed_nll_loss(logits.bfloat16(), target, 0.1, PAD)
    loss32, _ = label_smoothed_nll_loss(logits.bfloat16().float(), target, 0.1, PAD)
    assert loss16.dtype == torch.float32 and torch.equal(loss16, loss32)


def test_strip_specials_known_values():
    # ids below 5 are specials (pad 0, unk 1, bos 2, eos 3, blank 4); row 0 has 3 real positions, the
    # text id 8 after them is padding and must go too
    tokens = torch.tensor([[5, 7, 2, 8, 0], [1, 9, 3, 6, 8]])
    targets, lengths = strip_specials(tokens, torch.tensor([3, 5]), first_text_id=5)
    assert targets.tolist() == [5, 7, 9, 6, 8] and lengths.tolist() == [2, 3]
    targets, lengths = strip_specials(tokens, torch.tensor([3, 5]), first_text_id=7)  # tags up to 6
    assert targets.tolist() == [7, 9, 8] and lengths.tolist() == [1, 2]
    targets, lengths = strip_specials(tokens, torch.tensor([0, 2]), first_text_id=5)
    assert targets.tolist() == [9] and lengths.tolist() == [0, 1]


def test_ctc_loss_counts_alignments():
    # uniform logits over V = 5 (blank 4): every frame label has p = 1/5, so the loss is
    # -log(number of alignments / 5^T)
    def loss(T, target):
        return ctc_loss(
            torch.zeros(1, T, 5), torch.tensor([T]), torch.tensor(target), torch.tensor([len(target)]), BLANK
        ).item()

    assert loss(1, [2]) == pytest.approx(math.log(5))
    assert loss(2, [2]) == pytest.approx(math.log(25 / 3))  # 2 2, _ 2, 2 _
    assert loss(3, [2, 2]) == pytest.approx(3 * math.log(5))  # 2 _ 2 only: a repeat needs a blank between
    assert loss(3, [1, 2]) == pytest.approx(math.log(125 / 5))  # 1 1 2, 1 2 2, _ 1 2, 1 _ 2, 1 2 _
    assert loss(2, [2, 2]) == 0.0  # infeasible: zero, not inf (zero_infinity)
    assert loss(1, [1, 2]) == 0.0


def test_ctc_loss_matches_torch_and_sums_over_the_batch():
    torch.manual_seed(4)
    logits = 2 * torch.randn(3, 8, 6)
    logit_lengths = torch.tensor([8, 5, 2])
    targets, target_lengths = torch.tensor([1, 2, 2, 3, 5, 1, 1, 3, 3]), torch.tensor([4, 2, 3])  # third infeasible
    got = ctc_loss(logits, logit_lengths, targets, target_lengths, blank_id=BLANK)
    lp = F.log_softmax(logits, -1).transpose(0, 1)
    each = F.ctc_loss(lp, targets, logit_lengths, target_lengths, blank=BLANK, reduction="none")
    assert math.isinf(each[2].item())
    assert torch.allclose(got, each[:2].sum(), rtol=1e-6, atol=0)
    assert got.item() > 0
    logits.requires_grad_(True)
    ctc_loss(logits, logit_lengths, targets, target_lengths, blank_id=BLANK).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[2].abs().max().item() == 0.0


def test_distance_loss_is_zero_for_equal_states_and_skips_padding():
    states, lengths = torch.randn(2, 3, 4), torch.tensor([3, 2])
    assert distance_loss(states, states.clone(), lengths).item() == 0.0
    assert abs(distance_loss(states, states.clone(), lengths, "cosine").item()) < 1e-6
    other = states.clone()
    other[1, 2] += 100.0  # a padded position: ignored
    assert distance_loss(states, other, lengths).item() == 0.0


def test_distance_loss_hand_computed_values():
    pred = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 0.0], [9.0, 9.0]]])
    target = torch.tensor([[[0.0, 0.0], [3.0, 2.0]], [[0.0, 1.0], [0.0, 0.0]]])
    lengths = torch.tensor([2, 1])
    # mse: mean over channels per position, summed: (1 + 4) / 2 + (0 + 4) / 2 + (1 + 1) / 2 = 2.5 + 2 + 1
    assert distance_loss(pred, target, lengths, "mse").item() == pytest.approx(5.5)
    # cosine: 1 - cos; [1,2] vs 0 has cos 0 (torch's eps), [3,4] vs [3,2]: 17 / (5 sqrt 13), [1,0] vs [0,1]: 0
    expected = 1.0 + (1.0 - 17.0 / (5.0 * 13**0.5)) + 1.0
    assert distance_loss(pred, target, lengths, "cosine").item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="unknown distance 'l1'"):
        distance_loss(pred, target, lengths, "l1")


def test_distance_loss_sends_gradients_to_the_student_only():
    pred = torch.randn(1, 2, 3, requires_grad=True)
    target = torch.randn(1, 2, 3, requires_grad=True)
    distance_loss(pred, target, torch.tensor([2])).backward()
    assert target.grad is None
    assert torch.allclose(pred.grad, 2 * (pred - target).detach() / 3)  # d/dp of mean over 3 channels


def _orthogonal_slots(b: int, m: int, d: int) -> torch.Tensor:
    """(b, m, d) memories whose m slots are orthogonal (random rotations of scaled basis vectors)."""
    q, _ = torch.linalg.qr(torch.randn(b, d, d))
    return q[:, :, :m].transpose(1, 2) * torch.rand(b, m, 1).add(0.5)


@pytest.mark.parametrize("t", [0.1, 0.5, 1.0])
def test_contrastive_loss_of_equal_orthogonal_slots_by_hand(t):
    m, speech = 4, _orthogonal_slots(3, 4, 8)
    # row i: cos 1 at its own slot, 0 at the others: -log(e^(1/t) / (e^(1/t) + m - 1)), m rows, 3 examples
    assert contrastive_loss(speech, speech.clone(), t).item() == pytest.approx(
        3 * m * math.log(1 + (m - 1) * math.exp(-1 / t)), rel=1e-5, abs=1e-5
    )  # float32 cosines: ~1e-7 off
    # every row's target at cos 0 and one other slot at cos 1 (a derangement): -log(1 / (e^(1/t) + m - 1))
    permuted = speech[:, [1, 2, 3, 0]]
    assert contrastive_loss(speech, permuted, t).item() == pytest.approx(
        3 * m * math.log(math.exp(1 / t) + m - 1), rel=1e-5
    )


def test_contrastive_loss_is_least_for_equal_distinct_slots():
    speech = _orthogonal_slots(2, 6, 16)
    best = contrastive_loss(speech, speech, 0.1).item()
    same = speech[:, :1].expand(-1, 6, -1)  # equal memories whose slots are all alike: chance, log m per slot
    assert contrastive_loss(same, same, 0.1).item() == pytest.approx(2 * 6 * math.log(6), rel=1e-5)
    for other in (speech + 0.3 * torch.randn_like(speech), speech[:, [0, 2, 1, 3, 4, 5]], torch.randn(2, 6, 16)):
        assert contrastive_loss(speech, other, 0.1).item() > best + 1e-3
    assert best == pytest.approx(2 * 6 * math.log(1 + 5 * math.exp(-10)), abs=1e-5) and best < 1e-2


def test_contrastive_loss_matches_a_loop_and_reaches_both_memories():
    speech = torch.randn(2, 5, 7, requires_grad=True)
    text = torch.randn(2, 5, 7, requires_grad=True)
    loss = contrastive_loss(speech, text, 0.2)
    expected = sum(
        -F.log_softmax(torch.stack([F.cosine_similarity(speech[b, i], text[b, j], dim=0) / 0.2 for j in range(5)]), 0)[
            i
        ]
        for b in range(2)
        for i in range(5)
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    assert speech.grad.abs().sum() > 0 and text.grad.abs().sum() > 0
    assert contrastive_loss(speech.half(), text.half(), 0.2).dtype == torch.float32
