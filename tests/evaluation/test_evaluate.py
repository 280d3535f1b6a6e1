"""decode_split's memory lengths (the decoder memory after any shrinking) and memory_per_target."""

import pytest
import torch

from speechmt.audio import CMVNConfig, FbankConfig
from speechmt.data.manifest import read_manifest
from speechmt.decoding.translate import LoadedModel
from speechmt.evaluation.evaluate import decode_split, memory_per_target
from speechmt.frontend import FbankFrontend
from speechmt.models import build_model, preset
from speechmt.tokenizers.sentencepiece import Tokenizer


def _loaded(tiny_data, **model) -> LoadedModel:
    tok = Tokenizer.load(tiny_data / "spm.model")
    net = build_model(preset("tiny", tgt_vocab_size=len(tok), src_vocab_size=len(tok), **model)).eval()
    return LoadedModel(net, tok, "<de>", FbankFrontend(FbankConfig(), CMVNConfig("utterance")), "st", "(test)",
                       torch.device("cpu"))


def _conv_out(n: int) -> int:
    """One stride-2 layer of kernel 5, padding 2."""
    return (n - 1) // 2 + 1


@pytest.mark.parametrize("shrink", ["none", "conv"])
def test_memory_lengths_follow_the_subsampling_and_the_shrink(tiny_data, shrink):
    lm = _loaded(tiny_data, shrink=shrink, shrink_channels=32)
    decoded = decode_split(lm, tiny_data, "train", lm.decode_options(beam=1, max_len_a=0, max_len_b=3))
    frames = [r.n_frames for r in read_manifest(tiny_data / "train.jsonl")]
    expected = [_conv_out(_conv_out(n)) for n in frames]  # the tiny preset's 2 stride-2 convs: 10 -> 40 ms
    if shrink == "conv":
        expected = [_conv_out(_conv_out(n)) for n in expected]  # 2 more: 160 ms
    assert decoded.memory_lengths == expected
    assert len(decoded.hyps) == len(frames) and decoded.seconds > 0


def test_memory_per_target_counts_pieces_plus_eos(tiny_data):
    lm = _loaded(tiny_data)
    refs = ["Hallo Welt", "ja"]
    targets = [len(lm.tokenizer.encode(r)) + 1 for r in refs]
    m = memory_per_target(lm, refs, [40, 10])
    assert m["mean_memory_length"] == 25.0
    assert m["mean_target_tokens"] == pytest.approx(sum(targets) / 2, abs=0.01)
    assert m["memory_per_target_token"] == pytest.approx((40 / targets[0] + 10 / targets[1]) / 2, abs=1e-3)
