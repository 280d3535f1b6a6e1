"""Chimera's shared semantic memory: M learned queries that read the states and never each other, the same
memory for speech and text, the contrastive objective, and a tiny Chimera trained MT then ST + MT +
contrastive that decodes."""

import json
import math

import pytest
import torch

from speechmt import load_model, translate
from speechmt.cli import main
from speechmt.data.dataset import Batch
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.models import build_model, preset
from speechmt.models.encoders.base import EncoderOutput
from speechmt.models.translator import Translator
from speechmt.tasks import Stage, TaskData
from speechmt.tasks.losses import contrastive_loss
from speechmt.tasks.objectives import OBJECTIVES, ObjectiveSettings
from speechmt.training.run import run_training
from tests.helpers import tiny_config

FEATS, LENGTHS = torch.randn(2, 160, 80), torch.tensor([160, 60])  # shrunk to 10 and 4 frames
TOKENS, TOKEN_LENGTHS = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]]), torch.tensor([5, 3])
M = 6


def _model(**options) -> Translator:
    return build_model(
        preset(
            "tiny",
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            tgt_vocab_size=20,
            src_vocab_size=12,
            shrink={"kind": "conv", "channels": 32},
            text_encoder={"embed_only": True},
            semantic={"kind": "chimera", "options": {"memory": M, "layers": 2, **options}},
        )
    ).eval()


def _reference(memory, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The memory written out with plain tensor ops, one utterance at a time over its real frames only:
    per layer q += out(softmax_heads(Wq LN(q) . Wk s / sqrt(d)) Wv s); q += ffn(LN(q)); s = LN(states)."""
    out = []
    for b in range(x.size(0)):
        s = memory.states_norm(x[b, : lengths[b]])  # (T_b, D)
        q = memory.queries
        for layer in memory.layers:
            a = layer.attn
            h, d = a.n_heads, q.size(-1) // a.n_heads
            qh = a.q_proj(layer.attn_norm(q)).view(-1, h, d).transpose(0, 1)  # (H, M, d)
            kh, vh = (p(s).view(-1, h, d).transpose(0, 1) for p in (a.k_proj, a.v_proj))  # (H, T_b, d)
            weights = torch.softmax(qh @ kh.transpose(1, 2) / math.sqrt(d), dim=-1)  # (H, M, T_b)
            q = q + a.out_proj((weights @ vh).transpose(0, 1).reshape(q.shape))
            q = q + layer.ffn(layer.ffn_norm(q))
        out.append(memory.norm(q))
    return torch.stack(out)


def test_speech_and_text_give_a_memory_of_m_slots_by_the_same_layers():
    model = _model()
    memory = model.semantic
    with torch.no_grad():
        speech, shrunk = model.encode_speech(FEATS, LENGTHS), model.shrink(model.speech_encoder(FEATS, LENGTHS))
        text, embedded = model.encode_text(TOKENS, TOKEN_LENGTHS), model.text_encoder(TOKENS, TOKEN_LENGTHS)
        longer = model.encode_text(torch.randint(5, 12, (2, 9)), torch.tensor([9, 7]))
        expected_speech = _reference(memory, memory.positions(shrunk.x), shrunk.lengths)
        expected_text = _reference(memory, embedded.x, TOKEN_LENGTHS)
    assert shrunk.lengths.tolist() == [10, 4]  # speech 10 and 4 frames, text 5 and 3 (and 9 and 7) tokens: M out
    for out in (speech, text, longer):
        assert out.x.shape == (2, M, 64) and out.lengths.tolist() == [M, M]
    assert torch.allclose(speech.x, expected_speech, atol=1e-5) and torch.allclose(text.x, expected_text, atol=1e-5)
    own = {n for n, _ in model.named_parameters() if n.startswith("semantic.")}
    assert {"semantic.queries", "semantic.states_norm.weight", "semantic.norm.weight"} <= own
    assert not any("self" in n or n.startswith("semantic.shared") for n in own)
    names = [n for n in model.states(FEATS, LENGTHS) if n.startswith(("speech.semantic", "speech.out"))]
    assert names == ["speech.semantic.layer.0", "speech.semantic.layer.1", "speech.semantic.out", "speech.out"]


def test_queries_do_not_attend_to_each_other():
    """Every attention of the memory has the states as its keys and one key mask for all queries, and a
    query's initial embedding changes its own slot only, on both paths and through every layer."""
    torch.manual_seed(0)  # the model and the perturbation: the same in any test order
    model = _model(layers=3)
    calls = []
    hooks = [
        layer.attn.register_forward_hook(lambda mod, args, out: calls.append(args)) for layer in model.semantic.layers
    ]
    with torch.no_grad():
        shrunk = model.shrink(model.speech_encoder(FEATS, LENGTHS))
        before = model.encode_speech(FEATS, LENGTHS).x, model.encode_text(TOKENS, TOKEN_LENGTHS).x
    for h in hooks:
        h.remove()
    assert len(calls) == 6
    for queries, keys, mask in calls:
        assert queries.shape[1] == M and keys.shape[1] in (shrunk.x.size(1), TOKENS.size(1)) and keys.shape[1] != M
        lengths = shrunk.lengths if keys.shape[1] == shrunk.x.size(1) else TOKEN_LENGTHS
        assert mask.shape == (2, 1, 1, keys.shape[1])  # broadcast over heads and queries: no query-query term
        assert torch.equal(mask[:, 0, 0], torch.arange(keys.shape[1])[None] < lengths[:, None])
    j = 2
    with torch.no_grad():
        model.semantic.queries[j] += torch.randn(64)
        after = model.encode_speech(FEATS, LENGTHS).x, model.encode_text(TOKENS, TOKEN_LENGTHS).x
    others = [i for i in range(M) if i != j]
    for b, a in zip(before, after):
        # other slots unchanged up to float rounding (a GEMM need not give bit-equal rows when one row changes)
        # and slot j moved in every item (a row norm: one element of a moved row may change by little)
        assert torch.allclose(b[:, others], a[:, others], rtol=0, atol=1e-5)
        assert (b[:, j] - a[:, j]).norm(dim=-1).min() > 0.1


@pytest.mark.parametrize("shared_layers", [0, 1])
def test_padded_frames_do_not_matter(shared_layers):
    memory = _model(shared_layers=shared_layers).semantic
    x, lengths = torch.randn(2, 7, 64), torch.tensor([7, 4])
    perturbed = x.clone()
    perturbed[1, 4:] = 1e3
    with torch.no_grad():
        for path in (memory.speech, memory.text):
            batch = path(EncoderOutput(x, lengths)).x
            assert torch.equal(batch, path(EncoderOutput(perturbed, lengths)).x)
            alone = path(EncoderOutput(x[1:, :4], lengths[1:])).x
            assert torch.allclose(batch[1], alone[0], atol=1e-5)
    assert (memory.shared is not None) == bool(shared_layers)


def test_shared_layers_run_first_on_both_paths_and_options_are_checked():
    model = _model(shared_layers=2, heads=4)
    assert len(model.semantic.shared.layers) == 2 and model.semantic.layers[0].attn.n_heads == 4
    with torch.no_grad():
        states = model.states(TOKENS, TOKEN_LENGTHS, "text")
        shared, _ = model.semantic.shared(model.text_encoder(TOKENS, TOKEN_LENGTHS).x, TOKEN_LENGTHS)
    assert [n for n in states if n.startswith("text.semantic.")] == [
        "text.semantic.shared.layer.0",
        "text.semantic.shared.layer.1",
        "text.semantic.shared.out",
        "text.semantic.layer.0",
        "text.semantic.layer.1",
        "text.semantic.out",
    ]
    assert torch.equal(states["text.semantic.shared.out"][0], shared)
    assert _model().semantic.temperature == 0.1 and _model().semantic.queries.shape == (M, 64)
    for options, message in [
        ({"memory": 0}, "semantic chimera memory must be an integer >= 1, got 0"),
        ({"layers": 0}, "semantic chimera layers must be an integer >= 1, got 0"),
        ({"shared_layers": -1}, "semantic chimera shared_layers must be an integer >= 0, got -1"),
        ({"temperature": 0}, "semantic chimera temperature must be a finite number > 0, got 0"),
        ({"heads": 3}, "semantic chimera heads 3 do not divide d_model 64"),
        ({"slots": 3}, "semantic chimera options: .*unexpected keyword argument 'slots'"),
    ]:
        with pytest.raises(ValueError, match=message):
            _model(**options)


def test_contrastive_objective_reads_the_transcript_through_the_same_memory_and_trains_both_paths():
    model = _model(temperature=0.5).train()
    tgt, tgt_lengths = torch.tensor([[5, 6, 3], [7, 3, 0]]), torch.tensor([3, 2])
    batch = Batch(
        ids=["a", "b"],
        feats=FEATS,
        feat_lengths=LENGTHS,
        src=TOKENS,
        src_lengths=TOKEN_LENGTHS,
        tgt=tgt,
        tgt_lengths=tgt_lengths,
    )
    objective = OBJECTIVES["contrastive"]
    assert objective.reads_transcript and objective.normaliser(batch) == 5  # target tokens, as CE
    enc = model.encode_speech(FEATS, LENGTHS)
    loss, stats = objective.loss(model, batch, enc, ObjectiveSettings())
    expected = contrastive_loss(enc.x, model.encode_text(TOKENS, TOKEN_LENGTHS).x, 0.5)
    assert stats == {} and loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert 0 < loss.item() < 2 * M * math.log(M) * 1.5  # 2 examples x M slots, near chance at the start
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    for name in (
        "speech_encoder.encoder.layers.0.ffn.fc1.weight",
        "shrink.convs.convs.0.weight",  # speech only
        "text_encoder.embedding.weight",  # text only
        "semantic.queries",
        "semantic.layers.1.ffn.fc2.weight",
    ):  # shared
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
    with pytest.raises(ValueError, match="needs a memory semantic layer"):
        objective.loss(build_model(preset("tiny", tgt_vocab_size=20)), batch, enc, ObjectiveSettings())
    text_batch = Batch(ids=["a", "b"], src=TOKENS, src_lengths=TOKEN_LENGTHS, tgt=tgt, tgt_lengths=tgt_lengths)
    with pytest.raises(ValueError, match="audio batches"):
        objective.loss(model, text_batch, model.encode_text(TOKENS, TOKEN_LENGTHS), ObjectiveSettings())


def test_tiny_chimera_trains_mt_then_st_mt_contrastive_and_decodes(tiny_data, tmp_path):
    """Chimera's schedule on the tiny corpus: MT first, then ST + MT + contrastive (its weight ramped over 2
    updates); one checkpoint translates audio."""
    cfg = tiny_config(
        tiny_data,
        tmp_path,
        max_updates=7,
        valid_decode=False,
        save_interval_updates=7,
        validate_interval_updates=7,
        log_interval=1,
    )
    cfg.model = preset(
        "tiny",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        shrink={"kind": "conv", "channels": 32},
        text_encoder={"embed_only": True},
        semantic={"kind": "chimera", "options": {"memory": 8, "layers": 2}},
    )
    cfg.train.stages = [
        Stage("mt", [TaskData("mt")], updates=3),
        Stage(
            "st+mt+contrastive",
            [TaskData("st", {"ce": 1.0, "contrastive": 1.0}, ramp={"contrastive": 2}), TaskData("mt")],
        ),
    ]
    state = run_training(cfg)
    assert state.step == 7 and state.stage == 1 and math.isfinite(state.best_loss)
    log = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    train = [r for r in log if r["type"] == "train"]
    assert "st_contrastive" not in train[2] and {"st_ce", "st_contrastive", "mt_ce"} <= set(train[3])
    ramp = [0.5, 1.0, 1.0, 1.0]  # the contrastive weight at the stage's updates 0..3
    for r, w in zip(train[3:], ramp):
        assert r["loss"] == pytest.approx(r["st_ce"] + w * r["st_contrastive"] + r["mt_ce"], rel=1e-6)
    valid = [r for r in log if r["type"] == "valid"][-1]
    assert valid["valid_loss"] == pytest.approx(
        valid["valid_st_ce"] + valid["valid_st_contrastive"] + valid["valid_mt_ce"], rel=1e-6
    )
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    assert lm.model.config.semantic.kind == "chimera" and lm.model.semantic.queries.shape == (8, 64)
    (result,) = translate(lm, [record_audio(read_manifest(tiny_data / "dev.jsonl")[0], tiny_data)], beam=2)
    assert isinstance(result.text, str) and len(result.nbest) == 1
    # recipe stage 12 also scores the checkpoint's text MT, through the same memory
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(tmp_path / "checkpoint_last.safetensors"),
                "--task",
                "mt",
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--out",
                str(tmp_path / "ev"),
                "--beam",
                "2",
                "--max-len-b",
                "4",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["extra"]["task"] == "mt"
    print(
        "contrastive per target token:",
        [round(r["st_contrastive"], 4) for r in train[3:]],
        "valid:",
        round(valid["valid_st_contrastive"], 4),
    )
