"""GPU memory of large pretrained parts: frozen base weights kept in a half-precision type while what trains stays
float32 (`base_dtype`), and activation checkpointing (a layer's activations recomputed in the backward pass
instead of kept from the forward one: Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost").

A frozen Qwen2.5-7B-shaped LM holds 28 GiB of float32 weights and 14 GiB in bfloat16; its LoRA adapters, the
bridge and the heads, which the optimiser updates, stay float32 (Adam's updates of bfloat16 weights lose the small
steps). The casts of the forward pass are autocast's: train such a model with train.precision bf16 (or fp16).
docs/memory.md has the sizes per model and strategy (benchmarks/memory_table.py).

Checkpointing uses transformers' own where the module is a transformers model (its layers are
GradientCheckpointingLayer: Whisper's encoder, every causal LM), and torch.utils.checkpoint around the layers of
speechmt's TransformerDecoder (Whisper's decoder, the plain one); both non-reentrant, both only while training.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from speechmt.models.layers import LayerCache, TransformerDecoderLayer

__all__ = [
    "BASE_DTYPES",
    "CheckpointedDecoderLayer",
    "checkpoint_decoder_layers",
    "enable_hf_checkpointing",
    "parameter_bytes",
    "torch_dtype",
    "train_in_float32",
]

BASE_DTYPES = ("float32", "bfloat16", "float16")
"""The types a pretrained part's frozen weights may be kept in (EncoderConfig / DecoderConfig.base_dtype)."""


def torch_dtype(name: str) -> torch.dtype:
    """One of BASE_DTYPES -> torch's dtype; ValueError (one line) otherwise."""
    if name not in BASE_DTYPES:
        raise ValueError(f"unknown base_dtype {name!r}; expected one of {', '.join(BASE_DTYPES)}")
    return getattr(torch, name)


def train_in_float32(module: nn.Module, base: torch.dtype) -> None:
    """Casts, in place, `module`'s parameters that train (requires_grad) to float32 and the frozen ones to `base`;
    integer tensors and buffers stay as they are. A tied parameter is one tensor and is cast once."""
    for p in module.parameters():
        if p.is_floating_point():
            p.data = p.data.to(torch.float32 if p.requires_grad else base)


def parameter_bytes(module: nn.Module, trainable: bool | None = None) -> int:
    """Bytes of `module`'s parameters (each shared tensor once); `trainable` True / False: only those that train /
    only the frozen ones."""
    return sum(
        p.numel() * p.element_size() for p in module.parameters() if trainable is None or p.requires_grad == trainable
    )


def enable_hf_checkpointing(model: nn.Module) -> None:
    """Activation checkpointing of a transformers model's layers (non-reentrant), through transformers' own call
    (activation_checkpointing_enable from 5.x, gradient_checkpointing_enable before)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    # transformers also makes the input embeddings' output require gradients, which only the reentrant variant
    # needs; the hook would set requires_grad on every embedding output, at decoding too
    if hasattr(model, "disable_input_require_grads"):
        model.disable_input_require_grads()


class CheckpointedDecoderLayer(TransformerDecoderLayer):
    """A TransformerDecoderLayer whose forward runs under torch.utils.checkpoint while training with gradients
    (no cache there); the same parameters, names and state dict as the plain layer."""

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        self_mask: Tensor | None,
        cache: LayerCache | None = None,
        group: int = 1,
    ) -> Tensor:
        """As TransformerDecoderLayer.forward: x (N * group, U, D), memory (N, S, D) -> (N * group, U, D)."""
        layer = super().forward
        if self.training and torch.is_grad_enabled() and cache is None:
            return checkpoint(layer, x, memory, memory_mask, self_mask, None, group, use_reentrant=False)
        return layer(x, memory, memory_mask, self_mask, cache, group)


def checkpoint_decoder_layers(decoder: nn.Module) -> None:
    """Activation checkpointing of a speechmt TransformerDecoder's layers, in place: each becomes a
    CheckpointedDecoderLayer (its class changes, nothing else; FSDP2's fully_shard changes a module's class so)."""
    for layer in decoder.layers:
        if type(layer) is not TransformerDecoderLayer:
            raise TypeError(f"cannot checkpoint a {type(layer).__name__}: a TransformerDecoderLayer was expected")
        layer.__class__ = CheckpointedDecoderLayer
