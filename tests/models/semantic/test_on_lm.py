"""The four semantic layers in front of a language-model decoder, behind the CTC bridge (issue 33, part 4): each
builds at the LM's width between the shrink and the LM, one update on a fixed batch of its own objectives lowers
their loss, a delta checkpoint (LoRA in the LM) gives back identical logits and hypotheses, and the layers that
start as the identity start exactly as the plain bridge. A tiny conv encoder and the tiny random Gemma 3."""

from dataclasses import asdict

import pytest
import torch

from speechmt.checkpoint import load_checkpoint, save_checkpoint
from speechmt.data.dataset import Batch
from speechmt.decoding.search import DecodeOptions, greedy_search
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.delta import base_reference, load_model_state, model_state
from speechmt.models.semantic import ChimeraMemory, LUTSemanticEncoder, XSTNetEncoder
from speechmt.tasks.objectives import OBJECTIVES, ObjectiveSettings
from speechmt.tasks.tasks import task_losses
from tests.lm_helpers import CTC_TRANSCRIPTS, ctc_bridge_model

LORA = {"rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj"]}
VARIANTS = {  # semantic config, its class, the objectives of its st stream (mt: ce)
    "xstnet": (dict(kind="xstnet", options=dict(layers=1, init="identity")), XSTNetEncoder, ("ce", "ctc")),
    "lut": (
        dict(kind="lut", options=dict(layers=1, init="identity", teacher="lm", teacher_layer=1)),
        LUTSemanticEncoder,
        ("ce", "ctc", "distance"),
    ),
    "chimera": (dict(kind="chimera", options=dict(memory=4, layers=1)), ChimeraMemory, ("ce", "ctc", "contrastive")),
    "fat-st": (
        dict(kind="xstnet", options=dict(layers=1, init="identity", audio_tag=False, segments=True)),
        XSTNetEncoder,
        ("ce", "ctc", "fat_bridge"),
    ),
}
SETTINGS = ObjectiveSettings(label_smoothing=0.0, first_text_id=0)


def bridge_with(lm_dir, semantic: dict | None = None):
    overrides = {"decoder": {"finetune": "lora"}, "lora": LORA}
    return ctc_bridge_model(lm_dir, **overrides, **({"semantic": semantic} if semantic else {}))


@pytest.fixture(scope="module")
def batch(lm_dir):
    _, src = bridge_with(lm_dir)
    ids = [torch.tensor(src.encode(t)) for t in CTC_TRANSCRIPTS]
    feats = torch.randn(2, 48, 80, generator=torch.Generator().manual_seed(3))
    feats[1, 40:] = 0.0
    return Batch(
        ids=["a", "b"],
        feats=feats,
        feat_lengths=torch.tensor([48, 40]),
        src=torch.nn.utils.rnn.pad_sequence(ids, batch_first=True),
        src_lengths=torch.tensor([len(x) for x in ids]),
        tgt=torch.tensor([[5, 6, 7, 3], [6, 5, 3, 0]]),
        tgt_lengths=torch.tensor([4, 3]),
    )


def loss_of(model, batch, objectives) -> torch.Tensor:
    """The fixed batch's loss: its st stream's objectives and the mt stream's CE, each over its normaliser
    (the fat_bridge masks drawn from a fixed seed)."""
    torch.manual_seed(7)
    total = 0.0
    for task, names in (("st", objectives), ("mt", ("ce",))):
        for name, (loss, _) in task_losses(model, batch, task, names, SETTINGS).items():
            total = total + loss / max(OBJECTIVES[name].normaliser(batch), 1)
    return total


def st_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        enc = model.encode_speech(batch.feats, batch.feat_lengths)
        return model.decode(batch.tgt, enc)


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_layer_builds_learns_and_reloads_exactly_in_front_of_the_lm(lm_dir, batch, variant, tmp_path):
    semantic, cls, objectives = VARIANTS[variant]
    model, _ = bridge_with(lm_dir, semantic)
    assert isinstance(model.semantic, cls) and model.config.d_model == 32  # the LM's width
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = loss_of(model, batch, objectives)
    before.backward()
    assert all(p.grad is not None for p in model.semantic.parameters() if p.requires_grad) or variant == "fat-st"
    torch.optim.Adam(trainable, lr=3e-3).step()
    model.zero_grad(set_to_none=True)
    after = loss_of(model, batch, objectives)
    assert after.item() < before.item() - 1e-3, (before.item(), after.item())

    model.eval()
    base = base_reference(model)
    assert base is not None and any(k.startswith("semantic.") for k in model_state(model, base))
    path = tmp_path / "c.safetensors"
    state = {"model": model_state(model, base), "model_config": asdict(model.config), "base": base}
    save_checkpoint(path, {**state, "resolved": model.resolved})  # the LM decoder's vocabulary and prompt
    ckpt = load_checkpoint(path)
    again = build_model(ModelConfig.from_dict(ckpt["model_config"]), resolved=ckpt["resolved"])
    load_model_state(again, ckpt["model"], ckpt["base"], path)
    again.eval()
    assert torch.equal(st_logits(model, batch), st_logits(again, batch))
    options = DecodeOptions(beam_size=1, max_len_b=6, eos_id=3)
    hyps = [greedy_search(m, m.encode_speech(batch.feats, batch.feat_lengths), options) for m in (model, again)]
    assert hyps[0] == hyps[1] and len(hyps[0]) == 2


@pytest.mark.parametrize("variant", ["lut", "fat-st"])
def test_identity_starts_equal_the_plain_bridge(lm_dir, batch, variant):
    plain, _ = bridge_with(lm_dir)
    model, _ = bridge_with(lm_dir, VARIANTS[variant][0])
    model.load_state_dict(plain.state_dict(), strict=False)
    torch.testing.assert_close(st_logits(model, batch), st_logits(plain, batch))
    with torch.no_grad():
        text = [m.encode_text(batch.src, batch.src_lengths).x for m in (model, plain)]
    torch.testing.assert_close(text[0], text[1])


def test_text_from_the_lm_table_gets_the_speech_paths_positions(lm_dir, batch):
    """The LM's table adds no positions: a layer that gives speech sinusoidal positions gives the text them too,
    so a Chimera memory of a reordered transcript differs (it would not without positions)."""
    model, _ = bridge_with(lm_dir, VARIANTS["chimera"][0])
    src = batch.src[:1, : int(batch.src_lengths[0])]
    with torch.no_grad():
        a = model.encode_text(src, batch.src_lengths[:1]).x
        b = model.encode_text(src.flip(1), batch.src_lengths[:1]).x
    assert a.shape == (1, 4, 32) and (a - b).abs().max() > 1e-3
    assert (
        model.semantic.text_positions and bridge_with(lm_dir, VARIANTS["xstnet"][0])[0].semantic.text_positions is False
    )


def test_the_lm_teacher_reads_the_lms_own_states(lm_dir, batch):
    """LUT's teacher lm: queries are the LM's input embeddings of the transcript, targets its layer-1 states
    of [prompt | transcript]; no BERT, the LM's width."""
    from speechmt.tasks.align import lm_hidden
    from speechmt.tasks.objectives import lm_teacher_states

    model, _ = bridge_with(lm_dir, VARIANTS["lut"][0])
    queries, target, lengths = lm_teacher_states(model, batch.src, batch.src_lengths, 1)
    embedded = model.decoder.embed(batch.src)
    torch.testing.assert_close(queries, embedded)
    torch.testing.assert_close(target, lm_hidden(model.decoder, embedded, batch.src_lengths, 1))
    assert model.semantic.query.in_features == 32 and lengths.tolist() == batch.src_lengths.tolist()
    with pytest.raises(ValueError, match="teacher lm needs decoder 'lm'"):
        build_model(ModelConfig(tgt_vocab_size=10, semantic=VARIANTS["lut"][0]))
