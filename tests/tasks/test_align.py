"""The align objectives (speechmt.tasks.align): zero when the two sides are equal, a value by hand, gradients only
where intended (text side detached unless anchored, frozen parts none)."""

import dataclasses

import pytest
import torch

from speechmt.data.dataset import Batch
from speechmt.decoding.transcribe import SEARCH
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig, preset
from speechmt.models.encoders import EncoderOutput
from speechmt.models.encoders.whisper_transcript import set_targets, unit_targets
from speechmt.tasks.align import (
    AlignConfig,
    frame_positions,
    pair_loss,
    span_weights,
    start_values,
    token_spans,
    transcript_units,
)
from speechmt.tasks.objectives import OBJECTIVES, ObjectiveSettings
from tests.lm_helpers import CTC_TRANSCRIPTS as TRANSCRIPTS
from tests.lm_helpers import LM_RESOLVED, certain_ctc
from tests.models.test_whisper_asr import _mels


def test_span_weights_and_pair_loss_by_hand():
    """Two tokens over 5 frames: frames 0-1 and 2-4; the frames reach states 0, 0, 1, -1 (none), 2."""
    positions = torch.tensor([[0, 0, 1, -1, 2]])
    weights = span_weights([[(0, 2), (2, 5)]], positions, width=3, size=3)
    assert weights.tolist() == [[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]]
    speech = torch.tensor([[[1.0, 0.0], [2.0, 2.0], [4.0, 0.0]]])  # states (1, 3, 2)
    words = weights @ speech  # token 0: (1, 0); token 1: mean of (2, 2) and (4, 0) = (3, 1)
    text = torch.tensor([[[0.0, 0.0], [3.0, 3.0], [9.0, 9.0]]])
    mask = weights.sum(-1) > 0
    # token 0: ((1 - 0)^2 + 0) / 2 = 0.5; token 1: (0 + (1 - 3)^2) / 2 = 2; token 2 has no frames: left out
    assert pair_loss(words, text, mask).item() == pytest.approx(2.5)
    # cosine: token 0 (1, 0) vs (0, 0): 1 - 0 = 1 (a zero vector has cosine 0); token 1 (3, 1) vs (3, 3):
    # 1 - 12 / (sqrt(10) sqrt(18)) = 1 - 2 / sqrt(5)
    assert pair_loss(words, text, mask, "cosine").item() == pytest.approx(1 + 1 - 2 / 5**0.5)
    assert pair_loss(words, 7 * words, mask, "cosine").item() == pytest.approx(0.0, abs=1e-6)  # blind to scale
    # scaled: the kept text vectors (0, 0), (3, 3) have channel RMS sqrt(4.5) each: 2.5 / 4.5
    assert pair_loss(words, text, mask, "scaled").item() == pytest.approx(2.5 / 4.5)
    big = torch.tensor([[[100.0, 1.0], [300.0, 2.0], [0.0, 0.0]]])  # a huge channel 0 weighs as much as channel 1
    off = big + torch.tensor([[[10.0, 0.0], [10.0, 0.0], [0.0, 0.0]]])  # channel 0 off by 10: 10 / rms 223.6
    assert pair_loss(off, big, mask, "scaled").item() == pytest.approx(2 * (10 / 50000**0.5) ** 2 / 2)


def test_uniform_spans_share_the_frames_and_refuse_too_few():
    spans = token_spans(
        None, torch.tensor([6, 2]), torch.tensor([[5, 6, 7], [5, 6, 7]]), torch.tensor([3, 3]), 4, "uniform"
    )
    assert spans == [[(0, 2), (2, 4), (4, 6)], None]


def test_transcript_units_keep_text_ids():
    src = torch.tensor([[7, 3, 9, 2, 0], [8, 6, 2, 0, 0]])
    keep, ids, counts = transcript_units(src, torch.tensor([4, 3]), first_text_id=5)
    assert keep.tolist() == [[True, False, True, False, False], [True, True, False, False, False]]
    assert ids.tolist() == [[7, 9], [8, 6]] and counts.tolist() == [2, 2]


# --- on the CTC bridge into a tiny LM: a certain CTC makes the speech path the text path ---


def certain_batch(model, src):
    """A batch of the transcripts and the encoder output of a CTC certain of them (their tokens' frames)."""
    ids = [src.encode(t) for t in TRANSCRIPTS]
    raw = certain_ctc(model, ids)
    frames, enc = raw.lengths, model.shrink(raw)
    tokens = torch.nn.utils.rnn.pad_sequence([torch.tensor(x) for x in ids], batch_first=True)
    batch = Batch(
        ids=["a", "b"],
        feats=torch.zeros(2, 1, 1),
        feat_lengths=frames,
        src=tokens,
        src_lengths=torch.tensor([len(x) for x in ids]),
    )
    return batch, enc


@pytest.mark.parametrize("name", ["align", "align_sentence"])
@pytest.mark.parametrize("layer,distance", [(0, "mse"), (1, "mse"), (2, "mse"), (0, "cosine"), (2, "scaled")])
def test_zero_when_the_speech_path_is_the_text_path(bridge, name, layer, distance):
    model, src = bridge
    batch, enc = certain_batch(model, src)
    settings = ObjectiveSettings(first_text_id=0, align=AlignConfig(layer=layer, distance=distance))
    loss, stats = OBJECTIVES[name].loss(model, batch, enc, settings)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    if name == "align":
        assert stats["pairs"].item() == int(batch.src_lengths.sum())  # every token paired
        moved = EncoderOutput(enc.x + 0.1, enc.lengths, enc.ctc_logits, enc.ctc_lengths)
        assert OBJECTIVES[name].loss(model, batch, moved, settings)[0].item() > 1e-4


def test_the_frames_reach_their_ctc_segments(bridge):
    model, src = bridge
    _, enc = certain_batch(model, src)
    positions = frame_positions(model.shrink, enc.ctc_logits, enc.ctc_lengths, enc.lengths)
    assert positions[0, :7].tolist() == [-1, 0, 0, -1, 1, 1, -1]  # blank, label, label, blank, ...


# --- gradients on a tiny conv model with a text encoder ---


@pytest.fixture()
def conv_model():
    torch.manual_seed(0)
    return build_model(preset("tiny", ctc=True, src_vocab_size=20, text_encoder=dict(layers=1), dropout=0.0)).eval()


def speech_batch():
    torch.manual_seed(1)
    return Batch(
        ids=["a", "b"],
        feats=torch.randn(2, 64, 80),
        feat_lengths=torch.tensor([64, 48]),
        src=torch.tensor([[5, 9, 7, 3], [8, 6, 3, 0]]),
        src_lengths=torch.tensor([4, 3]),
    )


def grads(model, name, cfg):
    batch = speech_batch()
    enc = model.encode_speech(batch.feats, batch.feat_lengths)
    loss, _ = OBJECTIVES[name].loss(model, batch, enc, ObjectiveSettings(align=cfg))
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}, loss


@pytest.mark.parametrize("name", ["align", "align_sentence"])
def test_a_detached_text_side_gets_no_gradient(conv_model, name):
    conv_model.speech_encoder.subsampler.requires_grad_(False)  # a frozen part
    g, loss = grads(conv_model, name, AlignConfig())
    assert loss.item() > 0
    assert any(v is not None and v.abs().sum() > 0 for n, v in g.items() if n.startswith("speech_encoder.encoder."))
    assert all(v is None for n, v in g.items() if n.startswith(("text_encoder.", "speech_encoder.subsampler.")))
    assert all(v is None for n, v in g.items() if n.startswith("decoder."))


def test_an_anchored_text_side_trains_and_starts_at_its_start(conv_model):
    g, _ = grads(conv_model, "align", AlignConfig(text="anchor", anchor_weight=2.0))
    assert any(v is not None and v.abs().sum() > 0 for n, v in g.items() if n.startswith("text_encoder."))
    batch, settings = speech_batch(), ObjectiveSettings(align=AlignConfig(text="anchor"))
    enc = conv_model.encode_speech(batch.feats, batch.feat_lengths)
    assert OBJECTIVES["align"].loss(conv_model, batch, enc, settings)[1]["anchor"].item() == 0.0  # at its start
    with torch.no_grad():
        for p in conv_model.text_encoder.parameters():
            p.add_(0.05)
    before = [p.clone() for p in conv_model.text_encoder.parameters()]
    anchor = OBJECTIVES["align"].loss(conv_model, batch, enc, settings)[1]["anchor"]
    assert anchor.item() > 0  # moved away from its start
    assert all(torch.equal(a, b) for a, b in zip(before, conv_model.text_encoder.parameters()))  # weights put back


def test_start_values_are_copied_once():
    layer = torch.nn.Linear(2, 2)
    start = {n: v.clone() for n, v in start_values(layer).items()}
    with torch.no_grad():
        layer.weight.add_(1.0)
    assert all(torch.equal(v, start[n]) for n, v in start_values(layer).items())


def test_an_mt_batch_is_one_clear_error(conv_model):
    batch = Batch(ids=["a"], src=torch.tensor([[5, 6, 3]]), src_lengths=torch.tensor([3]))
    enc = conv_model.encode_text(batch.src, batch.src_lengths)
    with pytest.raises(ValueError, match="need audio batches"):
        OBJECTIVES["align"].loss(conv_model, batch, enc, ObjectiveSettings())


def test_config_checks():
    with pytest.raises(ValueError, match="text must be one of detach, anchor"):
        AlignConfig(text="free")
    with pytest.raises(ValueError, match="layer must be an integer >= 0"):
        AlignConfig(layer=-1)
    with pytest.raises(ValueError, match="distance must be one of mse, cosine, scaled"):
        AlignConfig(distance="l1")


# --- a whisper_asr encoder (asr_embed states): Whisper's own tokens against the LM's embeddings of their text ---


@pytest.fixture(scope="module")
def asr_model(tmp_path_factory):
    from speechmt.models.hf_whisper import whisper_lm_table
    from tests.lm_helpers import tiny_lm_dir
    from tests.whisper_helpers import tiny_whisper_dir

    whisper = tiny_whisper_dir(tmp_path_factory.mktemp("align_whisper"), d_model=32)
    lm = tiny_lm_dir(tmp_path_factory.mktemp("align_lm"), hidden=48)
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(
            encoder={"kind": "whisper_asr", "name_or_path": str(whisper), "finetune": "frozen", "asr_state": "both"},
            text_encoder={"embed_only": True, "embeddings": "lm"},
            decoder={"kind": "lm", "name_or_path": str(lm), "finetune": "lora"},
            n_heads=2,
            src_vocab_size=64,
        ),
        transcription=SEARCH,
        resolved=LM_RESOLVED,
    ).eval()
    table = whisper_lm_table(str(whisper), str(lm), model.speech_encoder.eos_id, model.decoder)
    return model, table


def asr_batch(model):
    """Three clips' cached states (the search's output) with a stand-in transcript each; and the search's tokens."""
    states, lengths, ids = model.speech_encoder.search(*_mels())
    batch = Batch(
        ids=["a", "b", "c"],
        feats=states,
        feat_lengths=lengths,
        src=torch.tensor([[5, 6, 3]] * 3),
        src_lengths=torch.tensor([3, 3, 3]),
        precomputed=True,
    )
    return batch, ids


def test_whisper_asr_tokens_pair_with_the_lm_embeddings_of_their_text(asr_model):
    model, table = asr_model
    asr, settings = model.speech_encoder, ObjectiveSettings(align=AlignConfig())
    batch, ids = asr_batch(model)
    with pytest.raises(ValueError, match="no table of the LM's embeddings"):
        unit_targets(asr, batch.feats, batch.feat_lengths)
    set_targets(asr, table)
    targets = unit_targets(asr, batch.feats, batch.feat_lengths)  # the search's own tokens, padded zero
    assert targets.shape == (3, max(len(i) for i in ids), 48)
    for row, tokens in enumerate(ids):
        torch.testing.assert_close(targets[row, : len(tokens)], table(torch.tensor(tokens)))
        assert targets[row, len(tokens) :].abs().sum() == 0
    enc = model.encode_speech(batch.feats, batch.feat_lengths, precomputed=True)
    loss, stats = OBJECTIVES["align"].loss(model, batch, enc, settings)
    want = sum((enc.x[r, t] - targets[r, t]).pow(2).mean() for r, row in enumerate(ids) for t in range(len(row)))
    assert loss.item() == pytest.approx(want.item(), rel=1e-5) and loss.item() > 0
    assert stats["pairs"].item() == sum(len(i) for i in ids)
    exact = type(enc)(targets, enc.lengths)  # the projection writing exactly the LM's embeddings
    assert OBJECTIVES["align"].loss(model, batch, exact, settings)[0].item() == pytest.approx(0.0, abs=1e-9)
    mels, mel_lengths = _mels()
    live = dataclasses.replace(batch, feats=mels, feat_lengths=mel_lengths, precomputed=False)  # searched again
    assert OBJECTIVES["align"].loss(model, live, enc, settings)[0].item() == pytest.approx(loss.item(), rel=1e-5)
    model.zero_grad(set_to_none=True)
    loss.backward()  # only the projection trains: the LM's embeddings are the fixed target
    trained = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert trained == {"speech_encoder.proj.weight", "speech_encoder.proj.bias"}


def test_whisper_asr_alignment_is_one_clear_error_where_it_does_not_apply(asr_model):
    model, table = asr_model
    batch, _ = asr_batch(model)
    enc = model.encode_speech(batch.feats, batch.feat_lengths, precomputed=True)
    with pytest.raises(ValueError, match="meet the LM's embeddings of their text at layer 0 only"):
        OBJECTIVES["align"].loss(model, batch, enc, ObjectiveSettings(align=AlignConfig(layer=1)))
    soft = build_model(
        dataclasses.replace(
            model.config, encoder=dataclasses.replace(model.config.encoder, asr_embed="lm", asr_state="after")
        ),
        resolved=model.resolved,
    )
    with pytest.raises(ValueError, match="with asr_embed lm the LM reads those embeddings already"):
        set_targets(soft.speech_encoder, table)
    asr = model.speech_encoder
    asr.beam = 2
    try:
        with pytest.raises(ValueError, match="asr_beam is 2: set it to 1"):
            unit_targets(asr, batch.feats, batch.feat_lengths)
    finally:
        asr.beam = 1


@pytest.mark.parametrize(
    "encoder, train, message",
    [
        ({"asr_embed": "lm"}, {}, "the align objective on encoder whisper_asr needs model.encoder.asr_embed states"),
        (
            {},
            {"align": {"layer": 2}},
            "train.align.layer 2: a whisper_asr encoder's tokens meet the LM's embeddings of "
            "their text at layer 0 only",
        ),
        ({"asr_beam": 3}, {}, "model.encoder.asr_beam is 3: set it to 1"),
    ],
)
def test_whisper_asr_alignment_settings_are_checked_with_the_config(encoder, train, message):
    from speechmt.config import ConfigError, ExperimentConfig

    def config(encoder, train):
        return ExperimentConfig.from_dict(
            {
                "model": {
                    "encoder": {
                        "kind": "whisper_asr",
                        "name_or_path": "whisper-base",
                        "finetune": "frozen",
                        "asr_embed": "states",
                        **encoder,
                    },
                    "decoder": {"kind": "lm", "name_or_path": "gemma-3-270m"},
                },
                "train": {**train, "stages": [{"tasks": [{"task": "st", "objectives": {"ce": 1.0, "align": 1.0}}]}]},
            }
        )

    with pytest.raises(ConfigError, match=message):
        config(encoder, train)
    assert config({}, {}).train.stages[0].tasks[0].objectives == {"ce": 1.0, "align": 1.0}
