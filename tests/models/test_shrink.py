import pytest
import torch
import torch.nn.functional as F

from speechmt.data.dataset import Batch
from speechmt.models import EncoderOutput, ModelConfig, build_model, preset
from speechmt.models.shrink import ConvShrink, CTCShrink, ctc_segments, merge_segments
from speechmt.models.subsampling import conv_output_lengths
from speechmt.tasks import ObjectiveSettings, task_losses
from tests.helpers import flat_model_config

BLANK = 4
# hand-made CTC argmax labels (blank 4); frames at or past the lengths hold non-blank labels on purpose
LABELS = torch.tensor(
    [
        [5, 5, 4, 6, 6, 6, 4, 4, 5, 5],  # runs 5 | 6 6 6 | 5 5
        [7, 4, 7, 7, 5, 8, 8, 8, 8, 8],  # length 5: 7 | 7 7 | 5 (a blank splits the repeat)
        [4, 4, 4, 4, 9, 9, 9, 9, 9, 9],  # length 4: all blank
        [6, 6, 6, 6, 6, 6, 6, 6, 6, 6],
    ]
)  # one run
LENGTHS = torch.tensor([10, 5, 4, 10])


def _states() -> torch.Tensor:
    """x[b, t] = (100 b + t, -(100 b + t)): means and first frames are easy to read off."""
    v = (torch.arange(4)[:, None] * 100 + torch.arange(10)[None, :]).float()
    return torch.stack([v, -v], dim=-1)


def test_ctc_segments_of_hand_made_labels():
    segments, counts = ctc_segments(F.one_hot(LABELS, 10).float(), LENGTHS, BLANK)
    assert segments.tolist() == [
        [0, 0, -1, 1, 1, 1, -1, -1, 2, 2],
        [0, -1, 1, 1, 2, -1, -1, -1, -1, -1],
        [-1] * 10,
        [0] * 10,
    ]
    assert counts.tolist() == [3, 3, 0, 1]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("mean", [[0.5, 4.0, 8.5], [100.0, 102.5, 104.0], [201.5, 0.0, 0.0], [304.5, 0.0, 0.0]]),
        ("first", [[0.0, 3.0, 8.0], [100.0, 102.0, 104.0], [200.0, 0.0, 0.0], [300.0, 0.0, 0.0]]),
    ],
)
def test_ctc_shrink_means_firsts_lengths_and_all_blank_rows(mode, expected):
    x = _states()
    enc = EncoderOutput(x, LENGTHS, F.one_hot(LABELS, 10).float() * 5)
    out = CTCShrink(BLANK, mode)(enc)
    assert out.x.shape == (4, 3, 2) and out.lengths.tolist() == [3, 3, 1, 1]
    assert out.x[..., 0].tolist() == expected
    assert torch.equal(out.x[..., 1], -out.x[..., 0])
    # the CTC logits stay at the acoustic resolution, with their own lengths, for the CTC loss
    assert out.ctc_logits is enc.ctc_logits and out.ctc_lengths.tolist() == LENGTHS.tolist()


def _reference(x: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor, mode: str) -> list[torch.Tensor]:
    """A plain loop over utterances and frames: the vectors each utterance shrinks to."""
    result = []
    for b in range(len(x)):
        runs: list[list[int]] = []
        previous = BLANK
        for t in range(int(lengths[b])):
            label = int(labels[b, t])
            if label != BLANK:
                if label != previous:
                    runs.append([])
                runs[-1].append(t)
            previous = label
        runs = runs or [list(range(int(lengths[b])))]
        pick = (lambda r: x[b, r].mean(0)) if mode == "mean" else (lambda r: x[b, r[0]])  # noqa: B023 (used at once)
        result.append(torch.stack([pick(r) for r in runs]))
    return result


@pytest.mark.parametrize("mode", ["mean", "first"])
def test_ctc_shrink_equals_a_loop_on_random_labels(mode):
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        B, T = int(torch.randint(1, 6, (1,), generator=gen)), int(torch.randint(1, 30, (1,), generator=gen))
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        labels = torch.randint(4, 8, (B, T), generator=gen)  # blank 4 and three labels: long runs and repeats
        x = torch.randn(B, T, 3, generator=gen)
        out = CTCShrink(BLANK, mode)(EncoderOutput(x, lengths, F.one_hot(labels, 8).float()))
        for b, want in enumerate(_reference(x, labels, lengths, mode)):
            assert int(out.lengths[b]) == len(want)
            assert torch.allclose(out.x[b, : len(want)], want, atol=1e-6)
            assert torch.all(out.x[b, len(want) :] == 0)


@pytest.mark.parametrize("mode", ["mean", "first"])
def test_gradients_reach_the_merged_frames(mode):
    x = _states().requires_grad_(True)
    out = CTCShrink(BLANK, mode)(EncoderOutput(x, LENGTHS, F.one_hot(LABELS, 10).float()))
    out.x[..., 0].sum().backward()
    grad = x.grad[..., 0]
    if mode == "mean":  # each frame of a run of n frames gets 1/n; blank and padded frames nothing
        expected = [
            [0.5, 0.5, 0, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0.5, 0.5],
            [1, 0, 0.5, 0.5, 1, 0, 0, 0, 0, 0],
            [0.25] * 4 + [0] * 6,
            [0.1] * 10,
        ]
    else:  # the first frame of each run
        expected = [[1, 0, 0, 1, 0, 0, 0, 0, 1, 0], [1, 0, 1, 0, 1, 0, 0, 0, 0, 0], [1] + [0] * 9, [1] + [0] * 9]
    assert torch.allclose(grad, torch.tensor(expected, dtype=torch.float))


def test_merge_segments_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="unknown shrink mode 'max'"):
        merge_segments(_states(), *ctc_segments(F.one_hot(LABELS, 10).float(), LENGTHS, BLANK), LENGTHS, "max")


def test_conv_shrink_lengths_equal_real_output_lengths():
    shrink = ConvShrink(8, 16, (5, 5)).eval()
    for n in range(1, 60):
        enc = shrink(EncoderOutput(torch.randn(1, n, 8), torch.tensor([n])))
        expected = conv_output_lengths(conv_output_lengths(torch.tensor([n]), 5), 5)
        assert enc.x.size(1) == int(enc.lengths) == int(expected) == int(shrink.output_lengths(torch.tensor([n])))
        assert int(enc.lengths) == -(-n // 4)  # ceil(n / 4)


def test_conv_shrink_pads_and_batches_like_single_utterances():
    shrink = ConvShrink(8, 16).eval()
    lengths = torch.tensor([37, 20, 3])
    x = torch.randn(3, 37, 8)  # padded frames hold random values on purpose
    with torch.no_grad():
        batch = shrink(EncoderOutput(x, lengths))
        assert batch.lengths.tolist() == [10, 5, 1] and batch.x.shape == (3, 10, 8)
        for i, n in enumerate(lengths.tolist()):
            alone = shrink(EncoderOutput(x[i : i + 1, :n], lengths[i : i + 1]))
            m = int(alone.lengths)
            assert torch.allclose(alone.x[0], batch.x[i, :m], atol=1e-5) and torch.all(batch.x[i, m:] == 0)


def _tiny(**overrides):
    return build_model(
        preset("tiny", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, tgt_vocab_size=20, **overrides)
    )


@pytest.mark.parametrize("kind", ["conv", "ctc"])
def test_translator_shrinks_and_gradients_reach_the_encoder(kind):
    model = _tiny(src_vocab_size=12, ctc=True, shrink={"kind": kind, **({"channels": 32} if kind == "conv" else {})})
    feats, lengths = torch.randn(3, 64, 80), torch.tensor([64, 40, 9])
    enc = model.encode_speech(feats, lengths)
    acoustic = torch.tensor([16, 10, 3])
    assert enc.ctc_logits.shape == (3, 16, 12) and enc.ctc_lengths.tolist() == acoustic.tolist()
    picked = enc.select(torch.tensor([2, 0]))  # as beam search expands a batch
    assert picked.ctc_lengths.tolist() == [3, 16] and picked.lengths.tolist() == enc.lengths[[2, 0]].tolist()
    if kind == "conv":
        assert enc.lengths.tolist() == [4, 3, 1]
    else:  # one vector per CTC segment of the (random) head, at least one
        segments, counts = ctc_segments(enc.ctc_logits, acoustic, BLANK)
        assert enc.lengths.tolist() == counts.clamp(min=1).tolist()
    batch = Batch(
        ids=["a", "b", "c"],
        feats=feats,
        feat_lengths=lengths,
        src=torch.randint(5, 12, (3, 4)),
        src_lengths=torch.tensor([4, 3, 2]),
        tgt=torch.randint(5, 20, (3, 5)),
        tgt_lengths=torch.tensor([5, 5, 5]),
    )
    losses = task_losses(model, batch, "st", ["ce", "ctc"], ObjectiveSettings())
    assert (
        torch.isfinite(losses["ce"][0]) and float(losses["ctc"][0].detach()) > 0
    )  # CTC on the acoustic states' lengths
    loss, _ = task_losses(model, batch, "st", ["ce"], ObjectiveSettings())["ce"]  # the decoder's loss alone
    loss.backward()
    first_conv = model.speech_encoder.subsampler.convs[0].weight
    assert first_conv.grad is not None and first_conv.grad.abs().sum() > 0
    if kind == "ctc":  # argmax is not differentiable: the decoder's loss does not train the CTC head
        assert model.ctc_head.weight.grad is None or model.ctc_head.weight.grad.abs().sum() == 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(shrink="pool"), "unknown shrink 'pool'"),
        (dict(shrink="ctc", shrink_mode="max"), r"unknown shrink\.mode 'max'"),
        (dict(shrink={"kind": "conv", "kernel": 0}), r"shrink\.kernel must be an integer >= 1, got 0"),
        (
            dict(shrink={"kind": "ctc", "kernel": 3}),
            r"^bad ModelConfig: shrink\.kernel: not an option of shrink 'ctc' \(its "
            r"options: embed, mode\)$",
        ),
    ],
)
def test_shrink_config_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        preset("tiny", **overrides)


def test_ctc_shrink_needs_the_ctc_head():
    with pytest.raises(ValueError, match="shrink 'ctc' needs the CTC head"):
        build_model(preset("tiny", shrink="ctc"))


def test_configs_from_before_shrinking_and_wav2vec2_build_the_same_model():
    cfg = preset("tiny", src_vocab_size=12, ctc=True)
    new_fields = {
        "encoder",
        "encoder_name_or_path",
        "encoder_hf_config",
        "freeze_feature_extractor",
        "freeze_encoder",
        "lna_finetune",
        "encoder_layerdrop",
        "mask_time_prob",
        "mask_time_length",
        "gradient_checkpointing",
        "shrink",
        "shrink_channels",
        "shrink_kernel",
        "shrink_mode",
    }
    flat = flat_model_config(cfg)  # as checkpoints stored it before the nesting
    old = {k: v for k, v in flat.items() if k not in new_fields}  # a checkpoint's dict of before
    assert len(old) == len(flat) - len(new_fields)
    again = ModelConfig.from_dict(old)
    assert again == cfg and (again.encoder.kind, again.shrink.kind) == ("conv", "none")
    a, b = build_model(cfg), build_model(again)
    assert list(a.state_dict()) == list(b.state_dict()) and a.shrink is None
    assert not any(k.startswith("shrink.") for k in a.state_dict())
    b.load_state_dict(a.state_dict())


def test_the_recipe_config_and_its_ctc_requirement(tiny_data):
    from speechmt.config import ConfigError, load_config
    from speechmt.tokenizers.pair import Tokenizers
    from speechmt.tokenizers.sentencepiece import Tokenizer
    from speechmt.training.builders import model_config_for
    from tests.conftest import ASSETS

    path = ASSETS.parents[1] / "research/mustc/conf/st_conv_ctcshrink_mini.yaml"
    cfg = load_config(path)
    assert (cfg.model.shrink.kind, cfg.model.shrink.mode, cfg.train.ctc_weight) == ("ctc", "mean", 0.3)
    tok = Tokenizer.load(tiny_data / "spm.model")
    model = build_model(model_config_for(cfg, Tokenizers(tok, tok)))
    assert isinstance(model.shrink, CTCShrink) and model.ctc_head.out_features == len(tok)
    cfg = load_config(path, ["train.ctc_weight=0"])
    with pytest.raises(ConfigError, match="model.shrink.kind ctc merges frames by the CTC head's labels"):
        model_config_for(cfg, Tokenizers(tok, tok))
