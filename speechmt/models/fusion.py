"""Deep fusion of the speech encoder's layers into the bridge (layer-wise coordination): the decoder reads a
learned mix of a chosen set of encoder layers instead of the top layer alone, as the deep-fusion seed lets the
NMT decoder read every layer of the pretrained encoder (and ELMo's softmax-weighted layer mix), with
task-specific partitions learned progressively (partitioned multi-task fine-tuning).

`model.fusion: {layers: [2, 4, 6], tasks: [st, asr], gate: 0.0}` (Whisper encoders; layers 1-based, layer N the
top): each chosen layer's states h_i through the encoder's final LayerNorm, mixed by softmax weights a (they sum
to 1), and x = proj(out + g (sum_i a_i LN(h_i) - out)), out the top layer's states and g a learned gate starting
at `gate` (0: the model starts exactly as without fusion; 1: the pure mix). The weights and the gate are a
partition per task of `tasks` (a task not listed, or decoding, uses the first): only that task's batches run
through it, so only its loss updates it. A stage's `freeze: [fusion.]` keeps them at their start while the rest
learns, a later stage trains them: the progressive schedule of research/mustc/conf/st_lm_gemma_ctc_fusion.yaml.
Layers below encoder.frozen_layers are cached, not run: the lowest layer it can read is frozen_layers itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from speechmt.checks import checked, count_problem, field_problems, raise_problems
from speechmt.models.encoders.base import EncoderOutput, Record
from speechmt.sequence import lengths_to_padding_mask

DEFAULT_PARTITION = "all"


@dataclass
class FusionConfig:
    """The encoder layers the bridge reads (1-based, empty: the top one alone, no fusion), the tasks with a
    partition of their own (empty: one for all), the gate's start."""

    layers: tuple[int, ...] = ()
    tasks: tuple[str, ...] = ()
    gate: float = checked(0.0, lo=0, hi=1)

    def __post_init__(self):
        self.layers, self.tasks = tuple(self.layers), tuple(self.tasks)
        raise_problems(
            "bad ModelConfig",
            [
                *(count_problem("fusion.layers item", i, 1) for i in self.layers),
                len(set(self.layers)) != len(self.layers) and f"fusion.layers repeats a layer: {list(self.layers)}",
                len(set(self.tasks)) != len(self.tasks) and f"fusion.tasks repeats a task: {list(self.tasks)}",
                *field_problems(self, "fusion."),
            ],
        )

    @property
    def enabled(self) -> bool:
        return bool(self.layers)


class LayerFusion(nn.Module):
    """Record of the encoder's layers + its output -> the output with x the projected, gated mix (module docstring)."""

    def __init__(self, cfg: FusionConfig, n_layers: int):
        super().__init__()
        bad = [i for i in cfg.layers if i > n_layers]
        if bad:
            raise ValueError(f"fusion.layers {bad}: the speech encoder has layers 1..{n_layers}")
        self.layers = tuple(sorted(cfg.layers))
        parts = cfg.tasks or (DEFAULT_PARTITION,)
        self.first = parts[0]
        self.weights = nn.ParameterDict({t: nn.Parameter(torch.zeros(len(self.layers))) for t in parts})
        self.gates = nn.ParameterDict({t: nn.Parameter(torch.tensor(float(cfg.gate))) for t in parts})

    def partition(self, task: str) -> str:
        """The partition a task runs through: its own, else the first."""
        return task if task in self.weights else self.first

    def mix_weights(self, task: str = "") -> Tensor:
        """(L,) the task's softmax weights over the chosen layers (they sum to 1)."""
        return torch.softmax(self.weights[self.partition(task)], dim=0)

    def forward(self, record: Record, out: EncoderOutput, encoder: nn.Module, task: str = "") -> EncoderOutput:
        """record: the encoder's "layer.<i>" (0-based) and "out" states (B, T, H); out: its projected output
        (B, T, D) -> out with x = proj(top + g (mix - top)), padded frames zero."""
        missing = [i for i in self.layers if f"layer.{i - 1}" not in record]
        if missing or "out" not in record:
            raise ValueError(
                f"fusion.layers {missing}: not run in this pass (below encoder.frozen_layers, whose "
                "states are cached, or dropped by layerdrop)"
            )
        norm = encoder.model.layer_norm
        top, lengths = record["out"]
        states = torch.stack([norm(record[f"layer.{i - 1}"][0]) for i in self.layers], dim=-1)  # (B, T, H, L)
        part = self.partition(task)
        mix = states @ torch.softmax(self.weights[part], dim=0).to(states.dtype)  # (B, T, H)
        x = encoder.proj(top + self.gates[part] * (mix - top))
        x = x.masked_fill(lengths_to_padding_mask(lengths, x.size(1))[..., None], 0.0)
        return EncoderOutput(x, out.lengths, out.ctc_logits, out.ctc_lengths)


def build_fusion(cfg: FusionConfig, encoder_kind: str, speech: nn.Module, frozen_layers: int) -> LayerFusion | None:
    """The fusion a model config names, or None; ValueError for an encoder it cannot read."""
    if not cfg.enabled:
        return None
    if encoder_kind != "whisper":
        raise ValueError("model.fusion reads a Whisper encoder's layers (encoder 'whisper')")
    low = [i for i in cfg.layers if i < max(frozen_layers, 1)]
    if frozen_layers and low:
        raise ValueError(f"fusion.layers {low}: below encoder.frozen_layers {frozen_layers}, whose states are cached")
    if speech.options.layerdrop:
        raise ValueError("model.fusion needs encoder.layerdrop 0 (a dropped layer has no states to mix)")
    return LayerFusion(cfg, len(speech.model.layers))
