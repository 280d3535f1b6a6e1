"""GPU memory of training each pretrained model speechmt builds on, per strategy, from a count on the meta device
(the published configs' architectures built with no weight allocated), and which strategy fits one 80 GB GPU and
which fits on 8. Writes docs/memory.md (a few seconds).

    python benchmarks/memory_table.py [--out docs/memory.md]

The configs are the published config.json numbers (Hugging Face hub, URLs in PUBLISHED), written out here because
the development machines are offline; the count uses transformers' own modules, so tied tables count once and a
Gemma 3 4B-27B is its text model (speechmt loads that alone: speechmt.models.lm_decoder.text_causal_lm).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

GIB = 2**30
BUDGET = 72 * GIB  # an 80 GB GPU (80 GiB) less ~10% for the CUDA context, kernels' workspace and fragmentation
GPUS = 8
LORA_RANK = 16
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "out_proj", "gate_proj", "up_proj", "down_proj", "fc1", "fc2")
SPEECH_FRAMES, TARGET_TOKENS, LM_TOKENS = 1500, 128, 512  # a 30 s window; a sentence; prompt + source + target
TRIMMED_VOCAB = 32_000  # an LM decoder's output rows (speechmt trims them to the targets' tokens)

WHISPER = "https://huggingface.co/openai/whisper-{}/blob/main/config.json"
GEMMA = "https://huggingface.co/google/gemma-3-{}-pt/blob/main/config.json"
WHISPER_BASE = dict(vocab_size=51865, num_mel_bins=80)
PUBLISHED: dict[str, tuple[str, dict, str]] = {  # name: (model_type, config fields, where they come from)
    "Whisper base": (
        "whisper",
        dict(
            WHISPER_BASE,
            d_model=512,
            encoder_layers=6,
            decoder_layers=6,
            encoder_attention_heads=8,
            decoder_attention_heads=8,
            encoder_ffn_dim=2048,
            decoder_ffn_dim=2048,
        ),
        WHISPER.format("base"),
    ),
    "Whisper small": (
        "whisper",
        dict(
            WHISPER_BASE,
            d_model=768,
            encoder_layers=12,
            decoder_layers=12,
            encoder_attention_heads=12,
            decoder_attention_heads=12,
            encoder_ffn_dim=3072,
            decoder_ffn_dim=3072,
        ),
        WHISPER.format("small"),
    ),
    "Whisper medium": (
        "whisper",
        dict(
            WHISPER_BASE,
            d_model=1024,
            encoder_layers=24,
            decoder_layers=24,
            encoder_attention_heads=16,
            decoder_attention_heads=16,
            encoder_ffn_dim=4096,
            decoder_ffn_dim=4096,
        ),
        WHISPER.format("medium"),
    ),
    "Whisper large-v3": (
        "whisper",
        dict(
            vocab_size=51866,
            num_mel_bins=128,
            d_model=1280,
            encoder_layers=32,
            decoder_layers=32,
            encoder_attention_heads=20,
            decoder_attention_heads=20,
            encoder_ffn_dim=5120,
            decoder_ffn_dim=5120,
        ),
        WHISPER.format("large-v3"),
    ),
    "Gemma 3 270M": (
        "gemma3_text",
        dict(
            vocab_size=262144,
            hidden_size=640,
            intermediate_size=2048,
            num_hidden_layers=18,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
        ),
        GEMMA.format("270m"),
    ),
    "Gemma 3 1B": (
        "gemma3_text",
        dict(
            vocab_size=262144,
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
        ),
        GEMMA.format("1b"),
    ),
    "Gemma 3 4B": (
        "gemma3_text",
        dict(
            vocab_size=262208,
            hidden_size=2560,
            intermediate_size=10240,
            num_hidden_layers=34,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
        ),
        GEMMA.format("4b") + " (text_config)",
    ),
    "Gemma 3 12B": (
        "gemma3_text",
        dict(
            vocab_size=262208,
            hidden_size=3840,
            intermediate_size=15360,
            num_hidden_layers=48,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=256,
        ),
        GEMMA.format("12b") + " (text_config)",
    ),
    "Gemma 3 27B": (
        "gemma3_text",
        dict(
            vocab_size=262208,
            hidden_size=5376,
            intermediate_size=21504,
            num_hidden_layers=62,
            num_attention_heads=32,
            num_key_value_heads=16,
            head_dim=128,
        ),
        GEMMA.format("27b") + " (text_config)",
    ),
    "Qwen2.5-7B": (
        "qwen2",
        dict(
            vocab_size=152064,
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            tie_word_embeddings=False,
        ),
        "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json",
    ),
    "Llama-3.1-8B": (
        "llama",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            tie_word_embeddings=False,
        ),
        "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
    ),
}
STRATEGIES = ("full fp32", "bf16 mixed", "bf16 base + LoRA", f"FSDP x{GPUS} bf16")


@dataclass(frozen=True)
class Shape:
    """What the memory of one model depends on, counted on the meta device."""

    name: str
    params: int  # every parameter, shared ones once
    lora: int  # LoRA (rank LORA_RANK) parameters on its attention and MLP projections
    unit: int  # the largest FSDP unit: one layer, or the token table
    activation: int  # bytes of bf16 activations kept for the backward pass, per sequence
    checkpointed: int  # the same with activation checkpointing


def build_on_meta(model_type: str, fields: dict) -> nn.Module:
    """The transformers model (WhisperForConditionalGeneration, or the causal LM) of a config, on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM, WhisperConfig, WhisperForConditionalGeneration

    with torch.device("meta"):
        if model_type == "whisper":
            return WhisperForConditionalGeneration(WhisperConfig(**fields))
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields))


def lora_parameters(model: nn.Module) -> int:
    """Parameters of rank-LORA_RANK adapters (r x (in + out)) beside each Linear named in LORA_TARGETS."""
    return sum(
        LORA_RANK * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in LORA_TARGETS
    )


def layer_bytes_per_token(hidden: int, ffn: int, gated: bool) -> int:
    """Bytes of bf16 activations one layer keeps per token (Korthikanti et al., 2022, "Reducing Activation
    Recomputation in Large Transformer Models": 34 h for ffn = 4 h; attention scores not kept, as SDPA's fused
    kernels keep none): attention 11 h, two norms 4 h, the MLP 3 h + 4 f (gated: 2 h + 8 f)."""
    return 15 * hidden + (2 * hidden + 8 * ffn if gated else 3 * hidden + 4 * ffn)


def whisper_activations(c) -> tuple[int, int]:
    """(kept, kept with checkpointing) bytes per sequence of SPEECH_FRAMES encoder frames and TARGET_TOKENS: the
    decoder layers add cross-attention (13 h per token) and its keys and values (4 h per frame); logits 10 bytes
    each (bf16, float32 for the loss and its gradient)."""
    h, s, u = c.d_model, SPEECH_FRAMES, TARGET_TOKENS
    encoder = s * layer_bytes_per_token(h, c.encoder_ffn_dim, False)
    decoder = u * (layer_bytes_per_token(h, c.decoder_ffn_dim, False) + 13 * h) + 4 * h * s
    logits = 10 * u * c.vocab_size
    kept = c.encoder_layers * encoder + c.decoder_layers * decoder + logits
    inputs = 2 * h * (s * c.encoder_layers + u * c.decoder_layers)  # each layer's input, to recompute from
    return kept, inputs + max(encoder, decoder) + logits


def lm_activations(c) -> tuple[int, int]:
    """(kept, kept with checkpointing) bytes per sequence of LM_TOKENS, logits over TRIMMED_VOCAB rows for the
    TARGET_TOKENS only (speechmt.models.lm_decoder)."""
    layer = LM_TOKENS * layer_bytes_per_token(c.hidden_size, c.intermediate_size, True)
    logits = 10 * TARGET_TOKENS * min(TRIMMED_VOCAB, c.vocab_size)
    inputs = 2 * c.hidden_size * LM_TOKENS * c.num_hidden_layers
    return c.num_hidden_layers * layer + logits, inputs + layer + logits


def shape(name: str) -> Shape:
    """Counts of the published model `name` (PUBLISHED)."""
    model_type, fields, _ = PUBLISHED[name]
    model = build_on_meta(model_type, fields)
    layers = (
        [*model.model.encoder.layers, *model.model.decoder.layers]
        if model_type == "whisper"
        else list(model.model.layers)
    )
    unit = max(
        [sum(p.numel() for p in layer.parameters()) for layer in layers] + [model.get_input_embeddings().weight.numel()]
    )
    kept, checkpointed = (whisper_activations if model_type == "whisper" else lm_activations)(model.config)
    return Shape(name, sum(p.numel() for p in model.parameters()), lora_parameters(model), unit, kept, checkpointed)


def static_bytes(s: Shape, strategy: str) -> tuple[int, int, int]:
    """(weights, gradients, Adam's two moments) bytes per GPU. bf16 mixed: float32 weights, gradients and moments,
    plus autocast's bf16 copies of the weights (kept for the backward pass); bf16 base + LoRA: the frozen base in
    bf16, the adapters float32 with their gradients and moments; FSDP: bf16 mixed sharded over GPUS, plus two
    gathered units (the one running and the one prefetched) in bf16 with one unit's float32 gradients."""
    p, lora = s.params, s.lora
    if strategy == "full fp32":
        return 4 * p, 4 * p, 8 * p
    if strategy == "bf16 mixed":
        return 6 * p, 4 * p, 8 * p
    if strategy == "bf16 base + LoRA":
        return 2 * p + 6 * lora, 4 * lora, 8 * lora
    return 4 * p // GPUS + 4 * s.unit, 4 * p // GPUS + 4 * s.unit, 8 * p // GPUS


def activation_bytes(s: Shape, strategy: str, checkpointing: bool) -> int:
    """Bytes kept per sequence: float32 activations are twice the bf16 ones."""
    kept = s.checkpointed if checkpointing else s.activation
    return 2 * kept if strategy == "full fp32" else kept


def sequences(s: Shape, strategy: str, checkpointing: bool) -> int:
    """Sequences one GPU holds at once beside the static bytes (0: not even one)."""
    free = BUDGET - sum(static_bytes(s, strategy))
    return max(0, free // activation_bytes(s, strategy, checkpointing))


def gib(n: int) -> str:
    return f"{n / GIB:.1f}" if n >= GIB / 10 else f"{n / GIB:.2f}"


def count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def model_rows(shapes: list[Shape]) -> list[str]:
    rows = [
        "| model | parameters | float32 | bf16 | LoRA r16 parameters | largest FSDP unit | source |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in shapes:
        rows.append(
            f"| {s.name} | {count(s.params)} | {gib(4 * s.params)} GiB | {gib(2 * s.params)} GiB | "
            f"{count(s.lora)} | {count(s.unit)} | [config.json]({PUBLISHED[s.name][2].split(' ')[0]}) |"
        )
    return rows


def strategy_rows(shapes: list[Shape]) -> list[str]:
    rows = [
        "| model | strategy | weights | gradients | Adam | static | activations / seq. | "
        "with checkpointing | seq. / GPU (ckpt) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in shapes:
        for strategy in STRATEGIES:
            w, g, o = static_bytes(s, strategy)
            plain, ckpt = (activation_bytes(s, strategy, c) for c in (False, True))
            fit = f"{sequences(s, strategy, False)} ({sequences(s, strategy, True)})"
            rows.append(
                f"| {s.name} | {strategy} | {gib(w)} | {gib(g)} | {gib(o)} | {gib(w + g + o)} | {gib(plain)} | "
                f"{gib(ckpt)} | {fit} |"
            )
    return rows


def fitting(s: Shape, strategies: tuple[str, ...]) -> str:
    """The strategies of `strategies` under which one GPU holds at least one sequence (checkpointing where needed)."""
    names = [f"{x}" + ("" if sequences(s, x, False) else " + ckpt") for x in strategies if sequences(s, x, True)]
    return ", ".join(names) or "none"


def summary_rows(shapes: list[Shape]) -> list[str]:
    rows = [f"| model | fits one 80 GB GPU | fits on {GPUS} x 80 GB |", "|---|---|---|"]
    for s in shapes:
        single = fitting(s, STRATEGIES[:3])
        rows.append(f"| {s.name} | {single} | {fitting(s, STRATEGIES)} |")
    return rows


def page(shapes: list[Shape], command: str) -> str:
    """docs/memory.md."""
    today = datetime.date.today().isoformat()
    return "\n".join(
        [
            "# Memory of large pretrained models",
            "",
            "[Documentation index](README.md) · options: [models](models.md) · written by "
            "[`benchmarks/memory_table.py`](../benchmarks/memory_table.py)",
            "",
            f"Written by `{command}` on {today}: parameters counted on PyTorch's meta device (no weight allocated) from "
            "each model's published config.json; bytes by the formulas below. An estimate for planning, not a "
            "measurement: the CUDA context, the kernels' workspace and the allocator's fragmentation are the "
            f"{(80 * GIB - BUDGET) / GIB:.0f} GiB kept aside from each 80 GB GPU ({BUDGET / GIB:.0f} GiB usable).",
            "",
            "## Which strategy fits",
            "",
            *summary_rows(shapes),
            "",
            "A strategy marked `+ ckpt` fits only with activation checkpointing (`encoder.gradient_checkpointing`, "
            "`decoder.gradient_checkpointing`). `bf16 base + LoRA` is `finetune: lora` with `base_dtype: bfloat16` "
            "(speechmt.models.memory) and `train.precision: bf16`. On 8 GPUs, DDP gives each GPU a whole copy: a "
            "strategy that fits one GPU fits each of the 8.",
            "",
            "## The options",
            "",
            "```yaml",
            "model:",
            "  encoder: {kind: whisper, name_or_path: openai/whisper-large-v3, finetune: frozen, base_dtype: bfloat16,",
            "            gradient_checkpointing: true}",
            "  decoder: {kind: lm, name_or_path: google/gemma-3-12b-pt, finetune: lora, base_dtype: bfloat16,",
            "            gradient_checkpointing: true}",
            "train: {precision: bf16}",
            "```",
            "",
            "- `base_dtype` (encoder whisper; decoders whisper and lm): `float32` (the default), `bfloat16` or `float16`: "
            "the frozen pretrained weights are loaded in that type, what trains (LoRA adapters, LNA's norms and "
            "attention, a Whisper encoder's layers above `frozen_layers`, the bridge) stays float32 for the optimiser. "
            "It needs something frozen (`finetune: frozen`, `lna` or `lora`, or `encoder.frozen_layers`) and a run "
            "under autocast (`train.precision: bf16` or `fp16`). A delta checkpoint records the base's checksum as "
            "loaded: it reloads on a base of the same `base_dtype`.",
            "- `gradient_checkpointing` (encoders wav2vec2 and whisper; every decoder): each layer's activations are "
            "recomputed in the backward pass (about a third more compute); transformers' own checkpointing for the HF "
            "modules (Whisper's encoder, the LMs), torch.utils.checkpoint around the layers of speechmt's Transformer "
            "decoder (Whisper's decoder). The gradients are the same (tests/models/test_large_models.py).",
            "- A multimodal checkpoint (Gemma 3 4B-27B) is read as its text model: `decoder.name_or_path` names the "
            "checkpoint as it is published.",
            "",
            "## Models",
            "",
            *model_rows(shapes),
            "",
            "Gemma 3 4B, 12B and 27B are multimodal checkpoints (`Gemma3ForConditionalGeneration`); the counts are their "
            "text models, which is all that speechmt loads (the SigLIP vision tower, ~0.4B, stays on disk).",
            "",
            "## Per strategy",
            "",
            *strategy_rows(shapes),
            "",
            "Sizes in GiB per GPU; the last column: sequences one GPU holds at once without (and with) checkpointing.",
            "",
            "## Formulas",
            "",
            "- Weights, gradients, Adam (P parameters, L LoRA parameters, U the largest FSDP unit, N = 8 GPUs):",
            "  full fp32 4P + 4P + 8P; bf16 mixed (autocast, float32 master weights) 4P + 2P (autocast's bf16 copies, "
            "kept for the backward pass) + 4P + 8P; bf16 base + LoRA 2P + 6L, 4L, 8L; FSDP bf16 (every weight "
            "trained, sharded) (4P + 4P + 8P) / N + 4U (two gathered bf16 units: the running and the prefetched) + 4U "
            "(one unit's float32 gradients before the reduce-scatter).",
            f"- LoRA: rank {LORA_RANK} on every attention and MLP projection (q, k, v, o / out, gate, up, down / fc1, "
            "fc2): r (in + out) parameters each.",
            "- Activations kept per sequence in bf16 (float32: twice), per layer and token: 15h (attention 11h, two norms "
            '4h) + 3h + 4f for a GELU MLP of width f, 2h + 8f for a gated one (Korthikanti et al., 2022, "Reducing '
            "Activation Recomputation in Large Transformer Models\": 34h at f = 4h); no attention scores (PyTorch SDPA's "
            "fused kernels keep none); Whisper's decoder layers add 13h per token for cross-attention and 4h per "
            "encoder frame for its keys and values; logits 10 bytes each (bf16, float32 for the loss and its gradient).",
            f"- Sequences: Whisper {SPEECH_FRAMES} encoder frames (a 30 s window) and {TARGET_TOKENS} target tokens; an "
            f"LM decoder {LM_TOKENS} tokens (prompt, source states, target) with logits for the {TARGET_TOKENS} target "
            f"tokens over {TRIMMED_VOCAB:,} trimmed output rows.",
            "- Activation checkpointing keeps each layer's input (2h per token and layer) and recomputes one layer at a "
            "time in the backward pass (that layer's activations on top).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "docs" / "memory.md"))
    args = parser.parse_args(argv)
    shapes = [shape(name) for name in PUBLISHED]
    command = " ".join(["python", "benchmarks/memory_table.py", *(argv if argv is not None else sys.argv[1:])])
    Path(args.out).write_text(page(shapes, command), encoding="utf-8")
    print(f"wrote {args.out}: {len(shapes)} models x {len(STRATEGIES)} strategies")


if __name__ == "__main__":
    main()
