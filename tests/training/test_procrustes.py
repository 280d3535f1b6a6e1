"""Procrustes initialisation of the speech encoder's projection (speechmt.training.procrustes): a known rotation
recovered after iterative normalisation, the Linear's affine form, and the hook changing the projection alone."""

import numpy as np
import pytest
import torch

from speechmt.checks import ConfigError
from speechmt.config import ExperimentConfig, load_config
from speechmt.data.dataset import Example
from speechmt.decoding.transcribe import SEARCH
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.tasks.objectives import ObjectiveSettings
from speechmt.training.procrustes import first_batches, fit_least_squares, fit_map, init_projection, set_linear
from speechmt.training.run import procrustes_at_start
from tests.lm_helpers import LM_RESOLVED
from tests.whisper_helpers import tiny_whisper_dir


def random_rotation(d: int, rng) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def test_a_known_rotation_is_recovered_after_normalisation():
    rng = np.random.default_rng(0)
    w = random_rotation(16, rng)
    x = rng.standard_normal((2000, 16)) + 3.0  # off centre: the normalisation centres it
    y = x @ w + 1e-5 * rng.standard_normal((2000, 16))
    m = fit_map(x, y)
    assert np.abs(m.w - w).max() < 1e-3
    assert np.abs(m(x) - y).max() < 1e-3


def test_the_linear_takes_the_affine_form_of_the_map():
    rng = np.random.default_rng(1)
    w = np.linalg.qr(rng.standard_normal((12, 8)))[0].T  # (8, 12): orthonormal rows
    x = rng.standard_normal((500, 8)) * 0.5 + 2.0
    y = 2.5 * (x - x.mean(0)) @ w + 7.0  # a scaled isometry into a wider space, shifted
    linear = torch.nn.Linear(8, 12).double()
    set_linear(linear, fit_map(x, y))
    np.testing.assert_allclose(linear(torch.from_numpy(x)).detach().numpy(), y, atol=1e-6)
    with pytest.raises(ValueError, match="does not fit Linear"):
        set_linear(torch.nn.Linear(12, 8), fit_map(x, y))


def test_least_squares_recovers_any_affine_map_where_the_orthogonal_one_cannot():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((10, 6))  # neither orthogonal nor a scaled isometry
    x = rng.standard_normal((3000, 10)) * np.linspace(0.5, 2.0, 10) + 1.5
    y = x @ w - 4.0
    m = fit_least_squares(x, y, ridge=1e-9)
    np.testing.assert_allclose(m.w, w, atol=1e-5)
    np.testing.assert_allclose(m(x), y, atol=1e-5)
    assert m.scale == 1.0
    orthogonal = fit_map(x, y)
    assert np.abs(orthogonal(x) - y).mean() > 100 * np.abs(m(x) - y).mean()
    linear = torch.nn.Linear(10, 6).double()
    set_linear(linear, m)
    np.testing.assert_allclose(linear(torch.from_numpy(x)).detach().numpy(), y, atol=1e-5)


def test_the_ridge_shrinks_the_map_by_its_known_factor():
    # x with identity covariance (orthonormal centred columns x sqrt(n)): X'X = n I, so w = n / (n + lam) w_true,
    # lam = ridge x n
    rng = np.random.default_rng(4)
    q = np.linalg.qr(rng.standard_normal((400, 5)) - 0)[0]
    q = q - q.mean(0)
    q = np.linalg.qr(q)[0] * np.sqrt(400)
    w = rng.standard_normal((5, 3))
    m = fit_least_squares(q, q @ w, ridge=0.25)
    gram_mean = np.trace(q.T @ (q - q.mean(0))) / 5
    np.testing.assert_allclose(m.w, gram_mean / (gram_mean + 0.25 * gram_mean) * w, atol=1e-8)
    with pytest.raises(ValueError, match="at least 2"):
        fit_least_squares(q[:1], q[:1] @ w)


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_procrustes"))


def tiny_model(whisper_dir):
    torch.manual_seed(0)
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir)},
        d_model=48,
        n_heads=4,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=50,
        src_vocab_size=20,
        ctc=True,
        text_encoder={"layers": 1},
        dropout=0.0,
    )
    return build_model(cfg, transcription=SEARCH)


def examples(n: int = 6) -> list[Example]:
    g = torch.Generator().manual_seed(2)
    return [
        Example(
            i,
            f"u{i}",
            feats=torch.randn(40 + 4 * i, 80, generator=g),
            src_ids=torch.randint(5, 20, (4 + i % 3,), generator=g),
            tgt_ids=torch.tensor([5, 6, 3]),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("units", ["ctc", "uniform"])
def test_the_hook_changes_the_projection_alone(whisper_dir, units):
    model = tiny_model(whisper_dir).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = init_projection(model, first_batches(examples(), 6, 0, torch.device("cpu"), size=4), 5, 4, units=units)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"speech_encoder.proj.weight", "speech_encoder.proj.bias"}
    assert stats["pairs"] == sum(4 + i % 3 for i in range(6))
    assert stats["cosine_after"] > stats["cosine_before"] and model.training


def test_the_least_squares_map_fits_the_pairs_closer_than_the_orthogonal_one(whisper_dir):
    def fitted(kind):
        model = tiny_model(whisper_dir)
        return init_projection(
            model, first_batches(examples(), 6, 0, torch.device("cpu"), size=4), 5, 4, units="uniform", kind=kind
        )

    orthogonal, least_squares = fitted("orthogonal"), fitted("least_squares")
    assert orthogonal["cosine_before"] == least_squares["cosine_before"]
    assert least_squares["cosine_after"] > orthogonal["cosine_after"]
    with pytest.raises(ValueError, match="unknown map 'rotation'"):
        fitted("rotation")
    with pytest.raises(ConfigError, match="init_map"):
        load_config(None, ["train.init_map=rotation"])


def test_the_run_hook_reads_the_first_speech_stream(whisper_dir):
    model = tiny_model(whisper_dir)
    cfg = ExperimentConfig.from_dict(
        {
            "train": {
                "init_procrustes": 3,
                "stages": [{"tasks": [{"task": "mt"}, {"task": "st", "objectives": {"ce": 1.0, "ctc": 0.3}}]}],
            }
        }
    )
    seen = []

    def data(spec, train):
        seen.append((spec.task, sorted(spec.objectives), train))
        return examples()

    stats = procrustes_at_start(cfg, model, data, ObjectiveSettings(), 0, torch.device("cpu"))
    assert seen == [("st", ["align", "ce", "ctc"], True)] and stats["pairs"] == 4 + 5 + 6


def test_a_model_without_a_projection_is_one_clear_error(whisper_dir):
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir)},
        d_model=32,
        n_heads=4,
        ffn_dim=64,
        decoder={"layers": 1},
        tgt_vocab_size=50,
        src_vocab_size=20,
        ctc=True,
        text_encoder={"layers": 1},
    )
    with pytest.raises(ValueError, match="needs a speech encoder with a projection"):
        init_projection(build_model(cfg, transcription=SEARCH), [], 5, 4)


# --- a whisper_asr encoder (asr_embed states): exact token pairs from its own search ---


@pytest.fixture(scope="module")
def asr_dirs(tmp_path_factory):
    from tests.lm_helpers import tiny_lm_dir

    root = tmp_path_factory.mktemp("tiny_asr_procrustes")
    return tiny_whisper_dir(root / "whisper", d_model=32), tiny_lm_dir(root / "lm", hidden=48)


def asr_model(dirs, embed: str = "states", state: str = "after"):
    torch.manual_seed(0)
    cfg = ModelConfig(
        encoder={
            "kind": "whisper_asr",
            "name_or_path": str(dirs[0]),
            "finetune": "frozen",
            "asr_embed": embed,
            "asr_state": state,
        },
        decoder={"kind": "lm", "name_or_path": str(dirs[1]), "finetune": "frozen"},
        n_heads=2,
    )
    return build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED).eval()


def asr_examples(n: int = 4) -> list[Example]:
    from speechmt.frontend.whisper_mel import WhisperMelConfig, whisper_log_mel

    rng = np.random.RandomState(3)
    waves = [
        (
            0.3 * np.sin(2 * np.pi * (150 + 90 * i) * np.arange(int((0.6 + 0.4 * i) * 16000)) / 16000)
            + 0.05 * rng.randn(int((0.6 + 0.4 * i) * 16000))
        ).astype(np.float32)
        for i in range(n)
    ]
    return [
        Example(
            i,
            f"u{i}",
            feats=whisper_log_mel(w, WhisperMelConfig(pad_seconds=10)),
            src_ids=torch.tensor([5, 6]),
            tgt_ids=torch.tensor([5, 6, 3]),
        )
        for i, w in enumerate(waves)
    ]


@torch.no_grad()
@pytest.mark.parametrize("state", ["after", "before", "both"])
def test_whisper_asr_pairs_are_each_transcript_token_state_and_the_lm_embedding_of_its_text(asr_dirs, state):
    from speechmt.training.procrustes import asr_pairs, whisper_asr_table

    model = asr_model(asr_dirs, state=state)
    asr = model.speech_encoder
    table = whisper_asr_table(model, str(asr_dirs[0]), str(asr_dirs[1]))
    batches = list(first_batches(asr_examples(), 4, 0, torch.device("cpu"), size=3))
    x, y = asr_pairs(asr, batches, table)
    want_x, want_y = [], []
    for batch in batches:
        states, lengths, ids = asr.search(batch.feats, batch.feat_lengths)
        for row, tokens in enumerate(ids):
            assert int(lengths[row]) == 1 + len(tokens)  # the prompt's last state first
            for t, token in enumerate(tokens):
                before, after = (torch.nn.functional.layer_norm(states[row, i], (32,)) for i in (t, t + 1))
                want_x.append({"after": after, "before": before, "both": torch.cat([before, after])}[state].numpy())
                lm_ids = table.pieces[token][table.pieces[token] >= 0]
                want_y.append(model.decoder.embed(lm_ids).mean(0).numpy())  # the piece's text, as the LM embeds it
    assert x.shape == (len(want_x), 64 if state == "both" else 32) and y.shape == (len(want_x), 48)
    np.testing.assert_allclose(x, np.stack(want_x), atol=1e-5)
    np.testing.assert_allclose(y, np.stack(want_y), atol=1e-5)


@pytest.mark.parametrize("state", ["after", "both"])
def test_whisper_asr_procrustes_sets_the_projection_alone_to_the_fitted_map(asr_dirs, state):
    from speechmt.training.procrustes import asr_pairs, whisper_asr_table

    model = asr_model(asr_dirs, state=state)
    table = whisper_asr_table(model, str(asr_dirs[0]), str(asr_dirs[1]))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = init_projection(model, first_batches(asr_examples(), 4, 0, torch.device("cpu"), size=3), 5, 4, table=table)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}
    assert changed == {"speech_encoder.proj.weight", "speech_encoder.proj.bias"}
    x, y = asr_pairs(model.speech_encoder, first_batches(asr_examples(), 4, 0, torch.device("cpu")), table)
    assert stats["pairs"] == len(x) and stats["cosine_after"] > stats["cosine_before"]
    with torch.no_grad():
        mapped = model.speech_encoder.proj(torch.from_numpy(x)).double().numpy()
    np.testing.assert_allclose(mapped, fit_map(x, y)(x), atol=1e-4)


@torch.no_grad()
def test_whisper_asr_pairs_from_cached_states_are_the_live_searchs(asr_dirs):
    import dataclasses

    from speechmt.training.procrustes import asr_pairs, whisper_asr_table

    model = asr_model(asr_dirs, state="both")
    asr = model.speech_encoder
    table = whisper_asr_table(model, str(asr_dirs[0]), str(asr_dirs[1]))
    live = list(first_batches(asr_examples(), 4, 0, torch.device("cpu"), size=2))
    cached = []
    for batch in live:  # what the encoder cache hands training: the states, stored in float16
        states, lengths = asr.states(batch.feats, batch.feat_lengths)
        cached.append(dataclasses.replace(batch, feats=states.half().float(), feat_lengths=lengths, precomputed=True))
    x, y = asr_pairs(asr, live, table)
    cx, cy = asr_pairs(asr, cached, table)
    assert cx.shape == x.shape and cy.shape == y.shape and len(x) > 4
    np.testing.assert_array_equal(cy, y)  # the same tokens, read off the cached states
    np.testing.assert_allclose(cx, x, atol=2e-2)  # float16's rounding, normalised


def test_whisper_asr_procrustes_reads_the_first_speech_stream_and_refuses_other_hand_overs(asr_dirs):
    from speechmt.training.procrustes import whisper_asr_table

    model = asr_model(asr_dirs)
    cfg = ExperimentConfig.from_dict(
        {
            "model": {
                "encoder": {"kind": "whisper_asr", "name_or_path": str(asr_dirs[0]), "finetune": "frozen"},
                "decoder": {"kind": "lm", "name_or_path": str(asr_dirs[1])},
            },
            "train": {"init_procrustes": 2, "stages": [{"tasks": [{"task": "st"}]}]},
        }
    )
    seen = []

    def data(spec, train):
        seen.append((spec.task, train))
        return asr_examples()

    stats = procrustes_at_start(cfg, model, data, ObjectiveSettings(), 0, torch.device("cpu"))
    assert seen == [("st", True)] and stats["pairs"] > 0  # the first 2 utterances' transcripts
    soft = asr_model(asr_dirs, "lm")
    with pytest.raises(ValueError, match="asr_embed states only"):
        init_projection(
            soft,
            first_batches(asr_examples(), 2, 0, torch.device("cpu")),
            5,
            4,
            table=whisper_asr_table(soft, str(asr_dirs[0]), str(asr_dirs[1])),
        )


@pytest.mark.parametrize(
    "model, message",
    [
        ({"asr_embed": "lm"}, "needs model.encoder.asr_embed states"),
        ({"asr_embed": "states", "decoder": "transformer"}, "needs decoder kind lm"),
        (
            {"asr_embed": "states", "asr_beam": 2},
            "init_procrustes on encoder whisper_asr reads each token off the state "
            "before it .*asr_beam is 2: set it to 1",
        ),
    ],
)
def test_whisper_asr_procrustes_settings_are_checked_with_the_config(model, message):
    from speechmt.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        ExperimentConfig.from_dict(
            {
                "model": {
                    "encoder": {
                        "kind": "whisper_asr",
                        "name_or_path": "whisper-base",
                        "finetune": "frozen",
                        "asr_embed": model["asr_embed"],
                        "asr_beam": model.get("asr_beam", 1),
                    },
                    "decoder": {"kind": "lm", "name_or_path": "gemma-3-270m"}
                    if model.get("decoder", "lm") == "lm"
                    else {"kind": model["decoder"]},
                },
                "train": {"init_procrustes": 100},
            }
        )
