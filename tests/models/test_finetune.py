"""LoRA (peft) and LNA train exactly what they claim; merged LoRA equals the adapted model."""

import pytest
import torch

from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.finetune import LoraSettings, merge_lora, set_finetuning
from tests.whisper_helpers import tiny_whisper_dir


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_ft"))


def _train_steps(model, steps: int = 3) -> None:
    """A few Adam steps on a random decoding loss through the encoder and the decoder."""
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(1)
    mels, tokens = torch.randn(2, 40, 80), torch.randint(0, model.config.tgt_vocab_size, (2, 6))
    for _ in range(steps):
        enc = model.encode_speech(mels, torch.tensor([40, 30]))
        loss = model.decode(tokens, enc).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _changed(before: dict, model) -> set[str]:
    return {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}


@pytest.mark.parametrize(
    "encoder_mode, decoder_mode, trained",
    [
        ("lora", "lora", lambda k: ".lora_A." in k or ".lora_B." in k),
        ("lna", "lna", lambda k: any(s in k for s in ("norm", "layer_norm", "_proj.")) and "lora" not in k),
        ("frozen", "frozen", lambda k: False),
    ],
)
def test_only_what_the_mode_claims_trains_and_everything_else_is_bit_identical(
    whisper_dir, encoder_mode, decoder_mode, trained
):
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper_dir), "finetune": encoder_mode},
        decoder={"kind": "whisper", "finetune": decoder_mode},
        dropout=0.0,
        lora={"rank": 4},
    )
    model = build_model(cfg)
    names = {k for k, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    assert names == {k for k in model.state_dict() if trained(k)}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    if names:
        _train_steps(model)
    changed = _changed(before, model)
    assert changed <= names  # every other tensor is bit-identical
    assert bool(changed) == bool(names)  # and what may train did move
    assert {k for k in names if ".lora_B." in k} <= changed  # B starts at zero; every adapter left it


def test_lna_trains_layer_norms_and_attention_projections_only(whisper_dir):
    model = build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": str(whisper_dir), "finetune": "lna"},
            decoder={"kind": "whisper", "finetune": "lna"},
        )
    )
    trainable = [k for k, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(
        ("norm" in k) or any(f"attn.{p}" in k for p in ("q_proj", "k_proj", "v_proj", "out_proj")) for k in trainable
    )
    frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
    assert any("fc1" in k for k in frozen) and any("embed" in k for k in frozen) and any("conv1" in k for k in frozen)


@torch.no_grad()
def test_merged_lora_equals_the_adapted_model(whisper_dir):
    model = build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": str(whisper_dir)},
            decoder={"kind": "whisper", "finetune": "lora"},
            dropout=0.0,
            lora={"rank": 4},
        )
    ).eval()
    for name, p in model.named_parameters():
        if ".lora_B." in name:
            p.normal_(0, 0.1)  # a trained adapter
    mels, tokens = torch.randn(1, 30, 80), torch.randint(0, model.config.tgt_vocab_size, (1, 5))
    adapted = model.decode(tokens, model.encode_speech(mels, torch.tensor([30])))
    assert merge_lora(model) == 2 * (4 + 4 + 2)
    assert not any("lora" in k for k in model.state_dict())
    merged = model.decode(tokens, model.encode_speech(mels, torch.tensor([30])))
    torch.testing.assert_close(merged, adapted, atol=1e-4, rtol=1e-4)


def test_bad_lora_settings_and_unknown_mode_fail_clearly():
    with pytest.raises(ValueError, match=r"^bad LoRA settings: lora\.rank must be an integer >= 1, got 0$"):
        LoraSettings(rank=0)
    with pytest.raises(
        ValueError,
        match=r"lora\.dropout must be a finite number >= 0 and < 1, got 1\.0; "
        r"lora\.targets must name at least one Linear layer, got none$",
    ):
        LoraSettings(dropout=1.0, targets=())
    with pytest.raises(ValueError, match="unknown fine-tuning mode"):
        set_finetuning(torch.nn.Linear(2, 2), "most")
    with pytest.raises(ValueError, match="no Linear layer"):
        set_finetuning(torch.nn.Sequential(torch.nn.Linear(2, 2)), "lora", LoraSettings(targets=("q_proj",)))


def _split_model(whisper_dir, mode: str, frozen_layers: int = 1):
    return build_model(
        ModelConfig(
            encoder={
                "kind": "whisper",
                "name_or_path": str(whisper_dir),
                "finetune": mode,
                "frozen_layers": frozen_layers,
            },
            decoder={"kind": "whisper", "finetune": "frozen"},
            dropout=0.0,
            lora={"rank": 4},
        )
    )


@pytest.mark.parametrize(
    "mode, trained",
    [
        ("lora", lambda k: ".layers.1." in k and ".lora_" in k),
        ("lna", lambda k: (".layers.1." in k and ("norm" in k or "_proj." in k)) or "_encoder.model.layer_norm." in k),
        ("full", lambda k: ".layers.1." in k or "_encoder.model.layer_norm." in k),
    ],
)
def test_frozen_layers_train_only_the_layers_above_and_keep_the_rest_bit_identical(whisper_dir, mode, trained):
    """encoder.frozen_layers 1 of the tiny Whisper's 2: the convolutions, positions and layer 0 never move."""
    model = _split_model(whisper_dir, mode)
    names = {k for k, p in model.named_parameters() if p.requires_grad}
    assert names and names == {k for k, _ in model.named_parameters() if k.startswith("speech_encoder.") and trained(k)}
    assert model.speech_encoder.split == 1 and model.speech_encoder.states_frozen()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _train_steps(model)
    changed = _changed(before, model)
    assert changed and changed <= names
    assert not any(".layers.0." in k or ".conv" in k or "embed_positions" in k for k in changed)


@torch.no_grad()
def test_split_encoder_runs_the_same_computation_as_the_whole_one(whisper_dir):
    """states (conv + layer 0) then project (layer 1 + LayerNorm) == the unsplit encoder, batch and padding
    included; LoRA's B starts at zero, so both equal the base encoder."""
    split, whole = _split_model(whisper_dir, "lora").eval(), _split_model(whisper_dir, "lora", 0).eval()
    assert whole.speech_encoder.split == 2 and split.speech_encoder.states_name == "layer.0"
    mels, lengths = torch.randn(2, 40, 80), torch.tensor([40, 26])
    states, n = split.speech_encoder.states(mels, lengths)
    record = {}
    whole.speech_encoder.states(mels, lengths, record)
    torch.testing.assert_close(states[1, : int(n[1])], record["layer.0"][0][1, :13])
    assert torch.equal(n, torch.tensor([20, 13])) and not states[1, 13:].any()
    out = split.speech_encoder.project(states, n)
    ref = whole.speech_encoder(mels, lengths)
    torch.testing.assert_close(out.x, ref.x, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(split.speech_encoder(mels, lengths).x, ref.x, atol=1e-5, rtol=1e-5)


def test_bad_frozen_layers_fail_clearly(whisper_dir):
    with pytest.raises(ValueError, match=r"encoder\.frozen_layers must be an integer >= 0, got -1"):
        ModelConfig(encoder={"kind": "whisper", "frozen_layers": -1})
    with pytest.raises(ValueError, match="encoder.frozen_layers: not an option of encoder 'wav2vec2'"):
        ModelConfig(encoder={"kind": "wav2vec2", "frozen_layers": 2})
    with pytest.raises(ValueError, match="needs encoder.finetune full, lna or lora"):
        ModelConfig(encoder={"kind": "whisper", "finetune": "frozen", "frozen_layers": 2})
    with pytest.raises(ValueError, match="frozen_layers 2 leaves none of the Whisper encoder's 2 layers"):
        _split_model(whisper_dir, "lora", 2)
