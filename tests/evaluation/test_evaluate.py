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
    return LoadedModel(
        net, tok, "<de>", FbankFrontend(FbankConfig(), CMVNConfig("utterance")), "st", "(test)", torch.device("cpu")
    )


def _conv_out(n: int) -> int:
    """One stride-2 layer of kernel 5, padding 2."""
    return (n - 1) // 2 + 1


@pytest.mark.parametrize("shrink", ["none", "conv"])
def test_memory_lengths_follow_the_subsampling_and_the_shrink(tiny_data, shrink):
    lm = _loaded(tiny_data, shrink={"kind": shrink, **({"channels": 32} if shrink == "conv" else {})})
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


def _copy_with_texts(tiny_data, tmp_path, changes: dict[int, dict]):
    """The tiny data in tmp_path with record i of train.jsonl changed by changes[i]."""
    import json
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    lines = (data / "train.jsonl").read_text().splitlines()
    for i, change in changes.items():
        lines[i] = json.dumps({**json.loads(lines[i]), **change}, ensure_ascii=False)
    (data / "train.jsonl").write_text("\n".join(lines) + "\n")
    return data


@pytest.mark.parametrize("field", ["tgt_text", "src_text"])
def test_a_text_with_a_line_break_stops_evaluation_before_any_decoding(tiny_data, tmp_path, monkeypatch, field):
    import speechmt.evaluation.evaluate as ev
    from speechmt.data.manifest import ManifestError

    data = _copy_with_texts(tiny_data, tmp_path, {1: {field: "zwei\nZeilen"}})
    monkeypatch.setattr(ev, "_decode_batch", lambda *a: pytest.fail("decoded before the texts were checked"))
    lm = _loaded(tiny_data)
    with pytest.raises(
        ManifestError,
        match=rf"train.jsonl: utterance '.*': its {field} holds a line break or tab "
        r"\('zwei\\nZeilen'\); the report's files are one utterance a line",
    ):
        decode_split(lm, data, "train", lm.decode_options(beam=1, max_len_b=3))


def test_a_hypothesis_with_line_breaks_or_tabs_is_written_as_one_line(tiny_data, tmp_path, monkeypatch):
    import speechmt.evaluation.evaluate as ev
    from speechmt.evaluation.report import EvalReport, write_report

    monkeypatch.setattr(
        ev, "_decode_batch", lambda lm, records, store, idx, *a: (["a\nb\tc\r"] * len(idx), [1] * len(idx))
    )
    lm = _loaded(tiny_data)
    decoded = decode_split(lm, tiny_data, "train", lm.decode_options(beam=1, max_len_b=3))
    assert set(decoded.hyps) == {"a b c "}
    refs = [r.tgt_text for r in decoded.records]
    write_report(
        EvalReport("m", "d", "train", len(refs), {}, {}),
        tmp_path / "out",
        decoded.hyps,
        refs,
        [r.id for r in decoded.records],
    )
    assert (tmp_path / "out/hyps.txt").read_text().splitlines() == decoded.hyps
