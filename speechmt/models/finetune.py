"""Which parameters of a pretrained module train: all (`full`), none (`frozen`), LayerNorms and attention
projections only (`lna`: Li et al., ACL 2021, "Multilingual Speech Translation from Efficient Finetuning of
Pretrained Models"), or low-rank adapters beside its frozen linear layers (`lora`: Hu et al., ICLR 2022,
through the `peft` library).

A LoRA module keeps its frozen weight as `<name>.base_layer.weight` and adds `<name>.lora_A.default.weight`
(r, in) and `<name>.lora_B.default.weight` (out, r); `merge_lora` folds W + (alpha / r) B A back into plain
Linear layers, for a checkpoint without adapters.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from speechmt.checks import checked, field_problems, raise_problems

FINETUNE_MODES = ("full", "frozen", "lna", "lora")
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


@dataclass
class LoraSettings:
    """LoRA rank, scaling alpha (the update is scaled by alpha / rank), dropout on its input, and the names
    of the Linear layers that get adapters (matched at the end of module names). ModelConfig.lora: shared by
    the encoder (encoder.finetune lora) and the decoder (decoder.finetune lora)."""

    rank: int = checked(16, lo=1)
    alpha: float = checked(32.0, lo=0, lo_in=False)
    dropout: float = checked(0.0, lo=0, hi=1, hi_in=False)
    targets: tuple[str, ...] = ATTENTION_PROJECTIONS + ("fc1", "fc2")

    def __post_init__(self):
        self.targets = tuple(self.targets)
        raise_problems(
            "bad LoRA settings",
            field_problems(self, "lora.")
            + [not self.targets and "lora.targets must name at least one Linear layer, got none"],
        )


def _is_norm(m: nn.Module) -> bool:
    """A LayerNorm or an RMSNorm (torch's, or a model's own class such as Gemma3RMSNorm; a leaf module, not a
    layer class named after its norm such as Wav2Vec2EncoderLayerStableLayerNorm)."""
    named = type(m).__name__.endswith(("RMSNorm", "LayerNorm")) and next(m.children(), None) is None
    return isinstance(m, nn.LayerNorm) or named


def lna_(module: nn.Module) -> None:
    """Freezes `module` but for its LayerNorms (or RMSNorms) and the q/k/v/output projections of its attention
    layers (output named out_proj, as Whisper's, or o_proj, as a Llama-family LM's)."""
    module.requires_grad_(False)
    for m in module.modules():
        if _is_norm(m):
            m.requires_grad_(True)
        out = next((name for name in ("out_proj", "o_proj") if hasattr(m, name)), None)
        if out and all(hasattr(m, name) for name in ATTENTION_PROJECTIONS[:3]):
            for name in (*ATTENTION_PROJECTIONS[:3], out):
                getattr(m, name).requires_grad_(True)


def lora_(module: nn.Module, settings: LoraSettings) -> None:
    """Adds LoRA adapters (peft) to the target Linear layers of `module`; only the adapters train."""
    from peft import LoraConfig, inject_adapter_in_model

    targets = sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, m in module.named_modules()
            if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in settings.targets
        }
    )
    if not targets:
        raise ValueError(f"LoRA: no Linear layer of {type(module).__name__} is named {', '.join(settings.targets)}")
    config = LoraConfig(
        r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets, bias="none"
    )
    inject_adapter_in_model(config, module)
    for name, p in module.named_parameters():
        p.requires_grad_(".lora_" in name)


def set_finetuning(module: nn.Module, mode: str, lora: LoraSettings | None = None) -> None:
    """Applies one of FINETUNE_MODES to `module` (in place)."""
    if mode not in FINETUNE_MODES:
        raise ValueError(f"unknown fine-tuning mode {mode!r}; expected one of {', '.join(FINETUNE_MODES)}")
    if mode == "frozen":
        module.requires_grad_(False)
    elif mode == "lna":
        lna_(module)
    elif mode == "lora":
        lora_(module, lora or LoraSettings())


def merge_lora(model: nn.Module) -> int:
    """Folds every LoRA adapter of `model` into its base Linear and puts that Linear back in its place;
    returns how many layers were merged."""
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, m in list(model.named_modules()):
        if isinstance(m, LoraLayer):
            m.merge()
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, m.get_base_layer())
            merged += 1
    return merged
