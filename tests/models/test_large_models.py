"""Large pretrained parts: frozen and LoRA base weights in bfloat16 with what trains in float32, activation
checkpointing (the same gradients), the text model of a multimodal checkpoint, and the LM families users pick, each a
tiny random model saved to a folder."""

import json
import math
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig, preset
from speechmt.models.delta import base_reference, load_model_state, model_state
from speechmt.models.encoders import EncoderOutput
from speechmt.models.memory import CheckpointedDecoderLayer, parameter_bytes
from tests.whisper_helpers import tiny_whisper_dir

VOCAB = tuple(range(4, 40))  # the LM ids of the trimmed output vocabulary
PROMPT = (2, 10, 11)
RESOLVED = {"decoder.vocab": list(VOCAB), "decoder.prompt": list(PROMPT)}  # what a run derives for the LM decoder
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
COMMON = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
ARCHITECTURES = {  # name: (config class, causal LM class, fields beyond COMMON)
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
        ),
    ),
    "qwen2.5": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=8)),
    "llama3": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=16)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
}


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_large"), d_model=24)


def save_lm(folder, name: str):
    """A tiny random causal LM of family `name` (ARCHITECTURES) saved to `folder`."""
    import transformers

    config_class, model_class, fields = ARCHITECTURES[name]
    torch.manual_seed(0)
    getattr(transformers, model_class)(getattr(transformers, config_class)(**COMMON, **fields)).save_pretrained(folder)
    return folder


def save_multimodal_gemma3(folder):
    """A tiny random Gemma3ForConditionalGeneration (Gemma 3 4B-27B's architecture: a SigLIP vision tower, a
    projector and a Gemma 3 text model) saved to `folder`; returns the model."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = dict(COMMON, **ARCHITECTURES["gemma3"][2])
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=4
    )
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(
        Gemma3Config(
            text_config=text,
            vision_config=vision,
            mm_tokens_per_image=4,
            boi_token_index=61,
            eoi_token_index=62,
            image_token_index=63,
        )
    )
    model.save_pretrained(folder)
    return model


def lm_translator(lm_path, **decoder):
    """A tiny conv-encoder model with the LM at lm_path as its decoder (decoder fields `decoder`), no dropout."""
    torch.manual_seed(0)
    return build_model(
        preset(
            "tiny",
            n_heads=2,
            **NO_DROPOUT,
            decoder=dict(kind="lm", name_or_path=str(lm_path), **decoder),
        ),
        resolved=RESOLVED,
    )


def whisper_lm(whisper_dir, lm_dir, base_dtype: str = "bfloat16", lora: str = "lora"):
    """A frozen Whisper encoder (24 wide, projected to the LM's 32) and the LM decoder under `lora` (a fine-tuning
    mode), both with frozen weights in `base_dtype`."""
    torch.manual_seed(0)
    return build_model(
        ModelConfig(
            encoder=dict(kind="whisper", name_or_path=str(whisper_dir), finetune="frozen", base_dtype=base_dtype),
            decoder=dict(kind="lm", name_or_path=str(lm_dir), finetune=lora, base_dtype=base_dtype),
            n_heads=2,
            lora=dict(rank=4, targets=("q_proj", "v_proj")),
            **NO_DROPOUT,
        ),
        resolved=RESOLVED,
    )


def speech_batch(n_mels: int = 80, seed: int = 1):
    """(log-mel features (2, 40, n_mels), lengths (2,), decoder inputs (2, 5), targets (2, 5))."""
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, len(VOCAB), (2, 5), generator=g)
    inputs = torch.cat([targets.new_zeros(2, 1), targets[:, :-1]], dim=1)
    return torch.randn(2, 40, n_mels, generator=g), torch.tensor([40, 28]), inputs, targets


def st_loss(model, batch) -> torch.Tensor:
    """Cross-entropy of the decoder's logits on `batch` (speech_batch), in float32."""
    feats, lengths, inputs, targets = batch
    logits = model.decode(inputs, model.encode_speech(feats, lengths))
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def test_a_bf16_base_keeps_frozen_weights_in_bf16_trains_float32_and_halves_their_bytes(whisper_dir, lm_dir):
    model = whisper_lm(whisper_dir, lm_dir)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    trained = dict((n, p) for n, p in model.named_parameters() if p.requires_grad)
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert {p.dtype for p in trained.values()} == {torch.float32}
    assert {n.split(".")[0] for n in trained} == {"speech_encoder", "decoder"}  # the projection, the adapters
    assert all(".lora_" in n for n in trained if n.startswith("decoder."))
    assert all(n.startswith("speech_encoder.proj.") for n in trained if n.startswith("speech_encoder."))
    reference = whisper_lm(whisper_dir, lm_dir, "float32")
    assert parameter_bytes(model, trainable=False) * 2 == parameter_bytes(reference, trainable=False)
    assert parameter_bytes(model, trainable=True) == parameter_bytes(reference, trainable=True)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())

    model.train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = st_loss(model, speech_batch())
    loss.backward()
    assert torch.isfinite(loss) and loss.item() > 0
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in trained.values())
    assert all(p.grad is None for p in frozen)
    torch.optim.Adam(trained.values(), lr=1e-2).step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {n for n, p in trained.items() if p.grad.abs().sum() > 0} and changed


def test_a_bf16_base_runs_outside_autocast_where_nothing_mixes(whisper_dir, lm_dir):
    """Frozen Whisper and a LoRA LM in bf16 run in float32 code too (the encoder cache builds so): logits close to
    the float32 base's."""
    feats, lengths, inputs, _ = speech_batch()
    with torch.no_grad():
        half, full = (whisper_lm(whisper_dir, lm_dir, dtype).eval() for dtype in ("bfloat16", "float32"))
        logits = [m.decode(inputs, m.encode_speech(feats, lengths)).float() for m in (half, full)]
    assert logits[0].shape == (2, 5, len(VOCAB))
    assert torch.allclose(logits[0], logits[1], atol=0.1) and not torch.equal(logits[0], logits[1])


def test_a_delta_checkpoint_on_a_bf16_base_reloads_exactly_and_knows_its_base(whisper_dir, lm_dir, tmp_path):
    model = whisper_lm(whisper_dir, lm_dir)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    base = base_reference(model)
    assert base["sources"] == [str(whisper_dir), str(lm_dir)]
    path = tmp_path / "delta.safetensors"
    state = {"model": model_state(model, base), "model_config": asdict(model.config), "base": base}
    save_checkpoint(path, {**state, "resolved": model.resolved})  # the LM decoder's vocabulary and prompt
    ckpt = load_checkpoint(path)
    assert {v.dtype for v in ckpt["model"].values()} == {torch.float32}  # the trained tensors only
    again = build_model(ModelConfig.from_dict(ckpt["model_config"]), resolved=ckpt["resolved"])
    assert base_reference(again)["sha256"] == base["sha256"]  # the base rebuilds to the same bytes
    load_model_state(again, ckpt["model"], ckpt["base"], path)
    feats, lengths, inputs, _ = speech_batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = [m.eval().decode(inputs, m.encode_speech(feats, lengths)) for m in (model, again)]
    assert torch.equal(out[0], out[1])
    float_base = whisper_lm(whisper_dir, lm_dir, "float32")  # another base: its weights are not bf16's
    with pytest.raises(CheckpointError, match="has other weights here"):
        load_model_state(float_base, ckpt["model"], ckpt["base"], path)


def gradients(model, batch, calls_of) -> tuple[dict[str, torch.Tensor], int]:
    """({name: gradient} after one backward of st_loss in train mode, forward calls of the module `calls_of`)."""
    calls = []
    handle = calls_of(model).register_forward_hook(lambda *_: calls.append(1))
    model.train()
    st_loss(model, batch).backward()
    handle.remove()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, len(calls)


def assert_same_gradients(build, calls_of, batch) -> None:
    """Gradients with checkpointing equal those without (1e-5), and the checkpointed layer ran twice."""
    (plain, once), (checkpointed, twice) = (gradients(build(on), batch, calls_of) for on in (False, True))
    assert (once, twice) == (1, 2)  # the forward, then its recomputation in the backward pass
    assert plain.keys() == checkpointed.keys() and len(plain) > 10
    assert all(torch.allclose(plain[n], checkpointed[n], atol=1e-5) for n in plain)


def test_whisper_encoder_and_decoder_checkpointing_give_the_same_gradients(whisper_dir):
    def build(on: bool):
        torch.manual_seed(0)
        return build_model(
            ModelConfig(
                encoder=dict(kind="whisper", name_or_path=str(whisper_dir), gradient_checkpointing=on),
                decoder=dict(kind="whisper", gradient_checkpointing=on),
                **NO_DROPOUT,
            )
        )

    model = build(True)
    assert all(type(layer) is CheckpointedDecoderLayer for layer in model.decoder.layers)
    assert all(layer.gradient_checkpointing for layer in model.speech_encoder.model.layers)
    feats, lengths, inputs, targets = speech_batch()
    batch = (feats, lengths, inputs + 20, targets + 20)  # Whisper's text pieces
    assert_same_gradients(build, lambda m: m.speech_encoder.model.layers[0].fc1, batch)
    assert_same_gradients(build, lambda m: m.decoder.layers[1].ffn.fc1, batch)


def test_lm_decoder_checkpointing_gives_the_same_gradients(lm_dir):
    feats = torch.randn(2, 40, 80, generator=torch.Generator().manual_seed(3))
    batch = (feats, *speech_batch()[1:])
    assert_same_gradients(
        lambda on: lm_translator(lm_dir, gradient_checkpointing=on),
        lambda m: m.decoder.lm.model.layers[0].mlp.down_proj,
        batch,
    )


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_each_lm_family_is_a_decoder_whose_logits_are_its_own(name, tmp_path):
    model = lm_translator(save_lm(tmp_path / name, name)).eval()
    assert type(model.decoder.lm).__name__ == ARCHITECTURES[name][1] and model.config.d_model == 32
    _check_logits(model.decoder)


def test_the_text_model_of_a_multimodal_gemma3_loads_alone(tmp_path):
    multimodal = save_multimodal_gemma3(tmp_path / "gemma3-mm")
    model = lm_translator(tmp_path / "gemma3-mm", finetune="lora", base_dtype="bfloat16").eval()
    lm = model.decoder.lm
    assert (
        type(lm).__name__ == "Gemma3ForCausalLM" and model.resolved["decoder.hf_config"]["model_type"] == "gemma3_text"
    )
    assert not any("vision" in n or "multi_modal" in n for n in model.state_dict())
    assert lm.lm_head.weight is lm.model.embed_tokens.weight  # tied, as in the checkpoint
    expected = multimodal.model.language_model.state_dict()
    loaded = {k: v for k, v in lm.model.state_dict().items() if ".lora_" not in k}
    assert {k.replace(".base_layer", "") for k in loaded} == set(expected)
    assert all(torch.equal(v, expected[k.replace(".base_layer", "")].to(torch.bfloat16)) for k, v in loaded.items())
    float_model = lm_translator(tmp_path / "gemma3-mm").eval()
    assert all(torch.equal(v, float_model.decoder.lm.model.state_dict()[k]) for k, v in expected.items())
    _check_logits(float_model.decoder)


def _check_logits(decoder) -> None:
    """The decoder's logits (2, U, V') on [prompt | memory | target] equal the HF LM's own on that sequence."""
    g = torch.Generator().manual_seed(2)
    enc = EncoderOutput(torch.randn(2, 3, decoder.dim, generator=g), torch.tensor([3, 3]))
    tokens = torch.randint(0, len(VOCAB), (2, 4), generator=g)
    with torch.no_grad():
        logits = decoder(tokens, enc.x, enc.lengths)
        assert logits.shape == (2, 4, len(VOCAB))
        for b in range(2):
            emb = torch.cat([decoder.embed(decoder.prompt), enc.x[b], decoder.embed(decoder.vocab[tokens[b]])])
            ref = decoder.lm(inputs_embeds=emb[None]).logits[0, -4:, decoder.vocab]
            assert torch.allclose(logits[b], ref, atol=1e-5)


@pytest.mark.parametrize(
    "part, fields, message",
    [
        ("decoder", dict(kind="lm", name_or_path="x", base_dtype="int8"), "decoder.base_dtype must be one of"),
        (
            "decoder",
            dict(kind="lm", name_or_path="x", base_dtype="bfloat16"),
            "needs decoder.finetune frozen, lna or lora",
        ),
        (
            "decoder",
            dict(base_dtype="bfloat16", finetune="frozen"),
            "decoder.base_dtype: not an option of decoder 'transformer'",
        ),
        ("encoder", dict(kind="whisper", name_or_path="x", base_dtype="float16"), "needs encoder.finetune frozen"),
        (
            "encoder",
            dict(kind="wav2vec2", base_dtype="bfloat16", finetune="lora"),
            "encoder.base_dtype: not an option of encoder 'wav2vec2'",
        ),
        (
            "encoder",
            dict(kind="conv", gradient_checkpointing=True),
            "encoder.gradient_checkpointing: not an option of encoder 'conv'",
        ),
    ],
)
def test_bad_memory_options_say_what_is_wrong_in_one_line(part, fields, message):
    with pytest.raises(ValueError, match=message) as e:
        ModelConfig(**{part: fields})
    assert "\n" not in str(e.value)


def test_a_run_on_a_bf16_base_saves_a_delta_that_decodes_after_loading(tiny_data, whisper_dir, lm_dir, tmp_path):
    """The trainer (train.precision bf16) with a frozen bf16 Whisper, a LoRA LM on a bf16 base and checkpointing:
    finite losses, a checkpoint of the float32 adapters and projection on the recorded base, decoded by load_model."""
    from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
    from speechmt.decoding.translate import load_model
    from speechmt.evaluation.evaluate import decode_split
    from speechmt.training.run import run_training

    model = ModelConfig(
        encoder=dict(kind="whisper", name_or_path=str(whisper_dir), finetune="frozen", base_dtype="bfloat16"),
        decoder=dict(
            kind="lm", name_or_path=str(lm_dir), finetune="lora", base_dtype="bfloat16", gradient_checkpointing=True
        ),
        n_heads=2,
        lora=dict(rank=4, targets=("q_proj", "v_proj")),
        **NO_DROPOUT,
    )
    cfg = ExperimentConfig(
        model=model,
        data=DataConfig(
            dir=str(tiny_data),
            spec_augment="",
            max_tokens=4000,
            max_sentences=4,
            src_lang="en",
            tgt_lang="de",
            lang_tag=True,
        ),
        train=TrainConfig(
            task="st",
            lr=1e-3,
            warmup_updates=1,
            max_updates=2,
            seed=1,
            precision="bf16",
            save_dir=str(tmp_path),
            save_interval_updates=2,
            keep_last=1,
            validate_interval_updates=2,
            log_interval=1,
            valid_decode=False,
        ),
    )
    run_training(cfg)
    path = tmp_path / "checkpoint_last.safetensors"
    ckpt = load_checkpoint(path)
    assert ckpt["base"]["sources"] == [str(whisper_dir), str(lm_dir)]
    assert {k.split(".")[0] for k in ckpt["model"]} == {"speech_encoder", "decoder"}
    assert {v.dtype for v in ckpt["model"].values()} == {torch.float32}
    losses = [
        json.loads(line)["loss"]
        for line in (tmp_path / "train_log.jsonl").read_text().splitlines()
        if json.loads(line).get("type") == "train"
    ]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    lm = load_model(path)
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}  # decoding casts to load_model's dtype
    decoded = decode_split(lm, tiny_data, "dev", lm.decode_options(beam=1, max_len_b=5), limit=2)
    assert len(decoded.hyps) == 2


def _memory_table():
    """benchmarks/memory_table.py as a module (registered: its dataclass needs that)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "memory_table.py"
    spec = importlib.util.spec_from_file_location("memory_table", path)
    module = sys.modules.setdefault("memory_table", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def test_the_memory_table_counts_the_published_sizes_on_the_meta_device():
    """Parameter counts of the written-out configs equal the published checkpoints' (safetensors totals), and a
    bf16 base with LoRA needs what its formula says."""
    table = _memory_table()
    sizes = {name: table.shape(name) for name in ("Whisper large-v3", "Gemma 3 270M", "Qwen2.5-7B", "Llama-3.1-8B")}
    assert {name: s.params for name, s in sizes.items()} == {
        "Whisper large-v3": 1_543_490_560,
        "Gemma 3 270M": 268_098_176,
        "Qwen2.5-7B": 7_615_616_512,
        "Llama-3.1-8B": 8_030_261_248,
    }
    llama = sizes["Llama-3.1-8B"]  # LoRA r16 on 7 projections of 32 layers: 16 (in + out) each
    assert llama.lora == 32 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 2 * (4096 + 14336) + (14336 + 4096))
    assert table.static_bytes(llama, "bf16 base + LoRA") == (
        2 * llama.params + 6 * llama.lora,
        4 * llama.lora,
        8 * llama.lora,
    )
    assert table.sequences(llama, "bf16 mixed", True) == 0 < table.sequences(llama, "bf16 base + LoRA", False)
