"""AlignAtt's view of a decoder (speechmt.decoding.simultaneous): which attention says where the next token looks
in the input, recorded while a step is decoded, and the rule that reads it.

A Whisper decoder's alignment heads (from its base model's generation_config.json) or, on other decoders with
cross-attention, every head of the top half of the layers (`CrossAttention`); a language-model decoder's
self-attention from the next token over the source positions after its prompt (`SourceAttention`).
`attends_to_last` is the vote of the heads.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from speechmt.hub import resolve_pretrained
from speechmt.models.lm_decoder import LMDecoder

if TYPE_CHECKING:
    from speechmt.decoding.translate import LoadedModel


class SimultaneousError(ValueError):
    """A model or setting simultaneous translation cannot use; one line."""


def is_lm_decoder(decoder: torch.nn.Module) -> bool:
    return isinstance(decoder, LMDecoder)


def alignment_heads(config) -> list[tuple[int, int]] | None:
    """(layer, head) pairs of a Whisper decoder's alignment heads, read from its base model's
    generation_config.json; None for other decoders or when the base does not list them."""
    if not config.decoder.whisper_tokens or not config.whisper_decoder_source:
        return None
    path = Path(resolve_pretrained(config.whisper_decoder_source)) / "generation_config.json"
    if not path.is_file():
        return None
    heads = json.loads(path.read_text()).get("alignment_heads")
    return [(int(layer), int(head)) for layer, head in heads] if heads else None


def attends_to_last(weights: Tensor, frames: int, f: int) -> bool:
    """AlignAtt's rule on one next token: weights (N, S), the cross-attention of N heads over S encoder frames
    (the first `frames` real) -> whether at least half of the heads attend most to one of the last f frames."""
    peaks = weights[:, :frames].argmax(-1)  # (N,)
    return 2 * int((peaks >= frames - f).sum()) >= weights.size(0)


class CrossAttention:
    """Records, while active, the cross-attention weights of the last query position at the chosen heads
    (`heads`: (layer, head) pairs; None: every head of the top half of the layers); wraps each such layer's
    `cross_attn.attend` on the instance and restores it after."""

    def __init__(self, decoder: torch.nn.Module, heads: list[tuple[int, int]] | None = None):
        layers = getattr(decoder, "layers", None)
        if layers is None or not all(hasattr(layer, "cross_attn") for layer in layers):
            raise SimultaneousError(
                "alignatt needs a decoder with cross-attention; this model's decoder "
                f"({type(decoder).__name__}) has none: use --simultaneous wait-k"
            )
        if heads is None:
            n_heads = layers[0].cross_attn.n_heads
            heads = [(i, h) for i in range(len(layers) // 2, len(layers)) for h in range(n_heads)]
        bad = [(i, h) for i, h in heads if not (0 <= i < len(layers) and 0 <= h < layers[i].cross_attn.n_heads)]
        if bad:
            raise SimultaneousError(f"alignatt: the decoder has no head {bad[0]} (layer, head)")
        self.heads: dict[int, list[int]] = {}
        for i, h in heads:
            self.heads.setdefault(i, []).append(h)
        self.modules = {i: layers[i].cross_attn for i in self.heads}
        self.weights: list[Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator["CrossAttention"]:
        for i, m in self.modules.items():
            m.attend = self._recorder(m, self.heads[i])
        try:
            yield self
        finally:
            for m in self.modules.values():
                del m.attend  # back to the class's method

    def _recorder(self, module, heads: list[int]):
        original = type(module).attend.__get__(module)

        def attend(x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int = 1) -> Tensor:
            q = module._heads(module.q_proj(x[:, -1:]))  # (B, H, 1, D/H): the last position's query
            scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5  # (B, H, 1, S)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            self.weights.append(scores.softmax(-1)[0, heads, 0])  # (N_layer, S)
            return original(x, k, v, mask, group)

        return attend

    def take(self) -> Tensor:
        """The recorded weights of the last step, (N, S) over the chosen heads; clears the record."""
        weights = torch.cat(self.weights)
        self.weights.clear()
        return weights


class SourceAttention:
    """A language-model decoder's counterpart of `CrossAttention`: records, while active, the self-attention of
    the last position over the source (the key positions after the prompt: a single utterance has no padding)
    at every head of the top half of the LM's layers. While recording, the LM computes attention eagerly (the
    only implementation that returns its weights) and forward hooks keep them; both are undone after."""

    def __init__(self, decoder: torch.nn.Module):
        self.lm = decoder.lm
        layers = self.lm.model.layers
        self.modules = [layer.self_attn for layer in layers[len(layers) // 2 :]]
        self.start = decoder.prompt.numel()
        self.weights: list[Tensor] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator["SourceAttention"]:
        previous = self.lm.config._attn_implementation
        self.lm.set_attn_implementation("eager")
        hooks = [m.register_forward_hook(self._keep) for m in self.modules]
        try:
            yield self
        finally:
            for hook in hooks:
                hook.remove()
            self.lm.set_attn_implementation(previous)

    def _keep(self, module, args, output) -> None:
        self.weights.append(output[1][0, :, -1, self.start :].float())  # (H, K - P): from the source on

    def take(self) -> Tensor:
        """The recorded weights of the last step, (N, S') over the source and what follows it; clears them."""
        weights = torch.cat(self.weights)
        self.weights.clear()
        return weights


def policy_attention(lm: LoadedModel) -> CrossAttention | SourceAttention:
    """The attention AlignAtt reads on this model's decoder."""
    decoder = lm.model.decoder
    if is_lm_decoder(decoder):
        return SourceAttention(decoder)
    return CrossAttention(decoder, alignment_heads(lm.model.config))


PolicyAttention = CrossAttention | SourceAttention
"""What AlignAtt reads on a decoder (policy_attention's result)."""
