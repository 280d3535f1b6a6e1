"""XSTNet's shared encoder: one stack for both paths, the <audio> prefix, masking, and training by stages."""

import math

import pytest
import torch

from speechmt import load_model, translate
from speechmt.checkpoint import load_checkpoint
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.models import build_model, preset
from speechmt.models.translator import Translator
from speechmt.tasks import Stage, TaskData
from speechmt.training.builders import load_tokenizers, model_config_for
from speechmt.training.run import run_training, seed_everything
from tests.helpers import tiny_config

FEATS, LENGTHS = torch.randn(2, 64, 80), torch.tensor([64, 36])
TOKENS, TOKEN_LENGTHS = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]]), torch.tensor([5, 3])


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
            semantic={"kind": "xstnet", "options": {"layers": 2, **options}},
        )
    ).eval()


def test_both_paths_run_one_shared_stack():
    model = _model()
    shared = model.semantic
    with torch.no_grad():
        speech, shrunk = model.encode_speech(FEATS, LENGTHS), model.shrink(model.speech_encoder(FEATS, LENGTHS))
        text, embedded = model.encode_text(TOKENS, TOKEN_LENGTHS), model.text_encoder(TOKENS, TOKEN_LENGTHS)
        tagged = torch.cat([shared.audio.expand(2, 1, -1), shared.positions(shrunk.x)], dim=1)
        expected_speech, _ = shared.stack(tagged, shrunk.lengths + 1)
        expected_text, _ = shared.stack(embedded.x, TOKEN_LENGTHS)
    assert speech.x.shape == (2, 5, 64) and speech.lengths.tolist() == [5, 4]  # frames 16, 9 -> 4, 3 -> + <audio>
    assert torch.allclose(speech.x, expected_speech) and torch.equal(text.x, expected_text)
    assert text.lengths.tolist() == [5, 3] and not speech.x[1, 4:].any() and not text.x[1, 3:].any()
    own = {n for n, _ in model.named_parameters() if n.startswith("semantic.")}
    assert own == {"semantic.audio"} | {f"semantic.stack.{n}" for n, _ in shared.stack.named_parameters()}
    assert not any(n.startswith("text_encoder.encoder") for n, _ in model.named_parameters())


def test_identity_init_without_the_audio_tag_hands_the_decoder_the_acoustic_states_unchanged():
    model = _model(init="identity", audio_tag=False)
    with torch.no_grad():
        speech, shrunk = model.encode_speech(FEATS, LENGTHS), model.shrink(model.speech_encoder(FEATS, LENGTHS))
        text, embedded = model.encode_text(TOKENS, TOKEN_LENGTHS), model.text_encoder(TOKENS, TOKEN_LENGTHS)
    assert torch.equal(speech.lengths, shrunk.lengths) and speech.lengths.tolist() == [4, 3]
    for i, n in enumerate(shrunk.lengths.tolist()):
        assert torch.equal(speech.x[i, :n], shrunk.x[i, :n])
    assert torch.equal(text.x, embedded.x.masked_fill(~(torch.arange(5) < TOKEN_LENGTHS[:, None])[..., None], 0.0))
    with pytest.raises(ValueError, match="semantic xstnet init must be one of random, identity, got 'ones'"):
        _model(init="ones")


def test_segments_start_at_zero_so_identity_init_stays_exact_and_add_one_vector_per_modality():
    """segments: true: a learned vector per modality (row 0 speech, row 1 source text) added before the
    stack; zero at first, so the identity-initialised model still hands the decoder the acoustic states."""
    model = _model(init="identity", audio_tag=False, segments=True)
    weight = model.semantic.segments.weight
    assert weight.shape == (2, 64) and not weight.any() and weight.requires_grad
    assert "semantic.segments.weight" in dict(model.named_parameters())
    assert _model().semantic.segments is None  # off by default: older checkpoints load unchanged
    with torch.no_grad():
        speech, shrunk = model.encode_speech(FEATS, LENGTHS), model.shrink(model.speech_encoder(FEATS, LENGTHS))
        text, embedded = model.encode_text(TOKENS, TOKEN_LENGTHS), model.text_encoder(TOKENS, TOKEN_LENGTHS)
        for i, n in enumerate(shrunk.lengths.tolist()):
            assert torch.equal(speech.x[i, :n], shrunk.x[i, :n])
        weight.copy_(torch.randn(2, 64))
        moved_speech, moved_text = model.encode_speech(FEATS, LENGTHS), model.encode_text(TOKENS, TOKEN_LENGTHS)
    for i, n in enumerate(shrunk.lengths.tolist()):  # the identity stack: the input + the modality's vector
        assert torch.allclose(moved_speech.x[i, :n], shrunk.x[i, :n] + weight[0], atol=1e-6)
    for i, n in enumerate(TOKEN_LENGTHS.tolist()):
        assert torch.equal(text.x[i, :n], embedded.x[i, :n])
        assert torch.allclose(moved_text.x[i, :n], embedded.x[i, :n] + weight[1], atol=1e-6)
    with pytest.raises(ValueError, match="semantic xstnet segments must be true or false, got 'yes'"):
        _model(segments="yes")


def test_an_utterance_alone_equals_it_in_a_padded_batch():
    model = _model()
    with torch.no_grad():
        batch = model.encode_speech(FEATS, LENGTHS)
        alone = model.encode_speech(FEATS[1:, :36], LENGTHS[1:])
    assert alone.lengths.tolist() == [4] and torch.allclose(batch.x[1, :4], alone.x[0], atol=1e-5)


def test_states_name_the_shared_layers_and_options_are_checked():
    states = _model().states(FEATS, LENGTHS)
    assert [n for n in states if n.startswith("speech.semantic.")] == [
        "speech.semantic.tagged",
        "speech.semantic.layer.0",
        "speech.semantic.layer.1",
        "speech.semantic.out",
    ]
    no_tag = _model(audio_tag=False)
    assert no_tag.semantic.audio is None and no_tag.encode_speech(FEATS, LENGTHS).lengths.tolist() == [4, 3]
    with pytest.raises(ValueError, match="semantic xstnet layers must be an integer >= 1, got 0"):
        _model(layers=0)
    with pytest.raises(ValueError, match="semantic xstnet options: .*unexpected keyword argument 'heads'"):
        _model(heads=2)


def test_progressive_training_mt_then_st_asr_mt_decodes(tiny_data, tmp_path):
    """XSTNet's schedule on the tiny corpus: MT first, then ST + ASR + MT; one checkpoint translates audio."""
    cfg = tiny_config(tiny_data, tmp_path, max_updates=8, valid_decode=False, save_interval_updates=4)
    cfg.model = preset(
        "tiny",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        shrink={"kind": "conv", "channels": 32},
        text_encoder={"embed_only": True},
        semantic={"kind": "xstnet", "options": {"layers": 1}},
    )
    cfg.train.stages = [
        Stage("mt", [TaskData("mt")], updates=4),
        Stage("all", [TaskData("st"), TaskData("asr"), TaskData("mt")]),
    ]
    state = run_training(cfg)
    assert state.step == 8 and state.stage == 1
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    assert lm.model.config.semantic.kind == "xstnet" and math.isfinite(state.best_loss)
    (result,) = translate(lm, [record_audio(read_manifest(tiny_data / "dev.jsonl")[0], tiny_data)], beam=2)
    assert isinstance(result.text, str) and len(result.nbest) == 1


def test_one_update_trains_the_shared_stack_on_both_modalities(tiny_data, tmp_path):
    """mix together: one update holds an ST and an MT batch; the <audio> prefix (speech only) and the token
    embeddings (text only) both move in that update, and so does the shared stack."""
    cfg = tiny_config(
        tiny_data,
        tmp_path,
        max_updates=1,
        valid_decode=False,
        save_interval_updates=1,
        validate_interval_updates=100,
        log_interval=1,
    )
    cfg.model = preset(
        "tiny",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        text_encoder={"embed_only": True},
        semantic={"kind": "xstnet", "options": {"layers": 1}},
    )
    cfg.train.stages = [Stage("st+mt", [TaskData("st"), TaskData("mt")])]
    seed_everything(cfg.train.seed)
    before = build_model(model_config_for(cfg, load_tokenizers(cfg.data))).state_dict()
    run_training(cfg)
    after = load_checkpoint(tmp_path / "checkpoint_1.safetensors")["model"]
    moved = {k for k in before if not torch.equal(before[k], after[k].to(before[k].dtype))}
    assert {"semantic.audio", "text_encoder.embedding.weight", "semantic.stack.layers.0.ffn.fc1.weight"} <= moved
    log = (tmp_path / "train_log.jsonl").read_text()
    assert '"st_ce":' in log and '"mt_ce":' in log
