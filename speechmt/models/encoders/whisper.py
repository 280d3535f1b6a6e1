"""The `whisper` acoustic encoder: OpenAI Whisper's encoder (Radford et al., 2022, "Robust Speech Recognition
via Large-Scale Weak Supervision") through transformers' Whisper modules, any size, read from log-mel
features (`speechmt.frontend.whisper_mel`).

Whisper was trained on 30 s windows: its encoder has 1500 stored (sinusoidal) positions, and
transformers' `WhisperEncoder.forward` refuses anything but 3000 input frames. Here the same submodules
(conv1, conv2, positions, layers, final LayerNorm) run at the utterance's own length, positions sliced
to it, with a key-padding mask inside a padded batch, so each utterance's states equal those of the
utterance encoded alone. A 3 s clip costs 150 frames instead of 1500. The states differ from those of
Whisper's padded 30 s input (there, every frame also attends to the padding); feed 30 s-padded features
(`WhisperMelConfig(pad_seconds=30)`) to get those exactly. README ("Whisper backbones") gives the
measured cost and quality of each.

The encoder runs in two parts: `states` (the convolutions, positions and the first `split` layers; with
`split` = all layers, the final LayerNorm too) and `project` (the layers above, the final LayerNorm, the
projection). When the first part is frozen its output can be cached (speechmt.data.encoder_cache): all of it for
a frozen encoder, or the bottom layers only, with the layers above adapted (`encoder.frozen_layers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import (
    HF_CONFIGS,
    BuildParts,
    ModelConfigT,
    PretrainedOptions,
    base_dtype_field,
    base_dtype_problem,
    kind_field,
)
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput, Record, note
from speechmt.models.finetune import set_finetuning
from speechmt.models.memory import enable_hf_checkpointing
from speechmt.sequence import lengths_to_padding_mask


@dataclass
class WhisperEncoderConfig(PretrainedOptions, EncoderConfig):
    """encoder kind "whisper": a Hugging Face Whisper model's encoder on its log-mel features, at the
    utterance's length (finetune frozen: its states are cacheable)."""

    kind: str = kind_field("whisper")
    layerdrop: float = checked(0.0, lo=0, hi=1)  # probability of skipping each layer in training
    # the convolutions and the first N layers stay frozen whatever `finetune` says, which then applies to the
    # layers above (and the final LayerNorm); their input, the states after layer N, is cached when
    # data.cache_encoder is on, so an update runs only the layers above
    frozen_layers: int = checked(0, lo=0)
    # recompute its layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    # the type its frozen weights are kept in (float32, bfloat16 or float16: half the bytes); what trains stays
    # float32; needs something frozen (finetune frozen, lna or lora, or frozen_layers); speechmt.models.memory
    base_dtype: str = base_dtype_field()
    frontend: ClassVar[str] = "whisper_mel"

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "encoder.")
            + self.pretrained_problems("encoder")
            + [
                base_dtype_problem("encoder", self.base_dtype, self.finetune != "full" or self.frozen_layers > 0),
                self.frozen_layers
                and self.finetune == "frozen"
                and "encoder.frozen_layers needs encoder.finetune full, lna or lora (frozen freezes every layer)",
            ],
        )

    @property
    def cacheable_states(self) -> bool:
        return self.finetune == "frozen" or self.frozen_layers > 0


def build_whisper_encoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[WhisperEncoder, ModelConfigT]:
    """The Whisper encoder of parts.hf_encoder with its fine-tuning mode (with frozen_layers N: applied to the
    layers above N and the final LayerNorm only), and `cfg` as it is; its complete HF config goes to `parts.resolved`
    ("encoder.hf_config")."""
    e, lora = cfg.encoder, cfg.lora
    speech = whisper_encoder_from_hf(
        parts.hf_encoder, cfg.d_model, e.layerdrop, e.frozen_layers, e.gradient_checkpointing
    )
    if e.frozen_layers:
        speech.model.requires_grad_(False)
        for layer in speech.model.layers[e.frozen_layers :]:
            layer.requires_grad_(True)
            set_finetuning(layer, e.finetune, lora)
        speech.model.layer_norm.requires_grad_(e.finetune in ("full", "lna"))
    else:
        set_finetuning(speech.model, e.finetune, lora)
    parts.resolved.setdefault(HF_CONFIGS["encoder"], hf_config_dict(parts.hf_encoder))
    return speech, cfg


@dataclass(frozen=True)
class WhisperEncoderOptions:
    """How the encoder is fine-tuned (applied by speechmt.models.finetune) and its layer drop."""

    layerdrop: float = 0.0


def whisper_output_lengths(lengths: Tensor) -> Tensor:
    """Mel frames (B,) -> encoder frames (B,): conv2 has kernel 3, stride 2, padding 1: ceil(T / 2)."""
    return torch.div(lengths - 1, 2, rounding_mode="floor") + 1


class WhisperEncoder(nn.Module):
    """transformers' WhisperEncoder run at the input's length -> Linear to the model dimension when the
    widths differ. `states` runs the convolutions and the first `split` layers (None: all of them and the
    final LayerNorm), the part that can be frozen and cached; `project` what follows it."""

    def __init__(
        self,
        model: nn.Module,
        dim: int,
        options: WhisperEncoderOptions = WhisperEncoderOptions(),
        split: int | None = None,
    ):
        super().__init__()
        self.model, self.options = model, options
        hidden, n_layers = model.config.d_model, len(model.layers)
        self.split = n_layers if split is None else split
        if not 0 <= self.split <= n_layers:
            raise ValueError(f"the Whisper encoder has {n_layers} layers; cannot split it after layer {self.split}")
        self.proj = nn.Linear(hidden, dim) if hidden != dim else nn.Identity()
        self.n_mels, self.max_frames = model.config.num_mel_bins, model.config.max_source_positions

    @property
    def hidden_size(self) -> int:
        return self.model.config.d_model

    @property
    def splits_inside(self) -> bool:
        """True when `states` stops below the top layer (some layers run in `project`)."""
        return self.split < len(self.model.layers)

    @property
    def states_name(self) -> str:
        """The record name of what `states` returns: "out", "layer.<split - 1>" or "conv"."""
        return "out" if not self.splits_inside else f"layer.{self.split - 1}" if self.split else "conv"

    def _states_prefixes(self) -> tuple[str, ...]:
        """Names (prefixes in the Whisper encoder's state dict) of the tensors `states` computes with."""
        top = () if self.splits_inside else ("layer_norm.",)
        return ("conv1.", "conv2.", "embed_positions.") + tuple(f"layers.{i}." for i in range(self.split)) + top

    def states_part(self) -> dict[str, Tensor]:
        """The tensors `states` computes with (the cache key's weights): the whole Whisper encoder when it
        runs all layers, else its convolutions, positions and first `split` layers."""
        keep = self._states_prefixes()
        return {k: v for k, v in self.model.state_dict().items() if k.startswith(keep)}

    def states_frozen(self) -> bool:
        """True when nothing `states` runs is trained (its output is then cacheable)."""
        keep = self._states_prefixes()
        return not any(p.requires_grad for k, p in self.model.named_parameters() if k.startswith(keep))

    def _mask(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """(frame padding (B, T'), the layers' additive attention mask (B, 1, 1, T'))."""
        frame_pad = lengths_to_padding_mask(lengths, x.size(1))
        mask = torch.zeros(frame_pad.shape, dtype=x.dtype, device=x.device)
        return frame_pad, mask.masked_fill(frame_pad, torch.finfo(x.dtype).min)[:, None, None, :]

    def _layers(self, x: Tensor, mask: Tensor, lengths: Tensor, indices: range, record: Record | None) -> Tensor:
        for i in indices:
            if self.training and self.options.layerdrop > 0 and float(torch.rand([])) < self.options.layerdrop:
                continue
            x = self.model.layers[i](x, mask)
            note(record, f"layer.{i}", x, lengths)
        return x

    def states(self, mels: Tensor, lengths: Tensor, record: Record | None = None) -> tuple[Tensor, Tensor]:
        """mels (B, T, n_mels) zero-padded, lengths (B,) -> the states after the first `split` layers (all
        of them: Whisper's final states) (B, ceil(T/2), H) with padded frames zero, and their lengths (B,);
        a `record` gets "conv", "layer.<i>" and, after the last layer, "out"."""
        enc = self.model
        if mels.size(-1) != self.n_mels:
            raise ValueError(f"Whisper encoder expects {self.n_mels} mel bins, got {mels.size(-1)}")
        pad = lengths_to_padding_mask(lengths, mels.size(1))  # (B, T)
        mels = mels.to(enc.conv1.weight.dtype)  # the weights' type (encoder.base_dtype), also outside autocast
        x = F.gelu(enc.conv1(mels.transpose(1, 2)))  # (B, T, M) -> (B, H, T)
        x = F.gelu(enc.conv2(x.masked_fill(pad[:, None, :], 0.0))).transpose(1, 2)  # -> (B, T', H)
        out_lengths = whisper_output_lengths(lengths)
        if x.size(1) > self.max_frames:
            raise ValueError(
                f"{x.size(1) * 0.02:.1f} s of audio is longer than the Whisper encoder's "
                f"{self.max_frames * 0.02:.0f} s window; cut it first"
            )
        x = x + enc.embed_positions.weight[: x.size(1)].to(x.dtype)
        x = F.dropout(x, enc.dropout, self.training)
        note(record, "conv", x, out_lengths)
        frame_pad, mask = self._mask(x, out_lengths)
        x = self._layers(x, mask, out_lengths, range(self.split), record)
        if self.splits_inside:
            return x.masked_fill(frame_pad[..., None], 0.0), out_lengths
        x = enc.layer_norm(x).masked_fill(frame_pad[..., None], 0.0)
        note(record, "out", x, out_lengths)
        return x, out_lengths

    def project(self, states: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """`states`' output (B, T', H) -> the layers above `split` and the final LayerNorm when `states` stopped
        below them -> EncoderOutput x (B, T', D), padded frames zero; a `record` gets those layers, "out" and
        "projected" when the widths differ."""
        if self.splits_inside:
            frame_pad, mask = self._mask(states, lengths)
            x = self._layers(states, mask, lengths, range(self.split, len(self.model.layers)), record)
            states = self.model.layer_norm(x).masked_fill(frame_pad[..., None], 0.0)
            note(record, "out", states, lengths)
        if not isinstance(self.proj, nn.Identity):  # a trained float32 projection of a base_dtype encoder's states
            states = states.to(self.proj.weight.dtype)
        x = self.proj(states)
        x = x.masked_fill(lengths_to_padding_mask(lengths, x.size(1))[..., None], 0.0)
        if not isinstance(self.proj, nn.Identity):
            note(record, "projected", x, lengths)
        return EncoderOutput(x, lengths)

    def forward(self, mels: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """mels (B, T, n_mels), lengths (B,) -> EncoderOutput(x (B, ceil(T/2), D), lengths)."""
        return self.project(*self.states(mels, lengths, record), record)


def hf_config_dict(model: nn.Module) -> dict:
    """The complete HF config of a loaded model, as stored in a speechmt checkpoint."""
    return model.config.to_diff_dict() | {
        k: getattr(model.config, k)
        for k in (
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "num_mel_bins",
            "vocab_size",
            "max_source_positions",
            "max_target_positions",
        )
    }


def whisper_encoder_from_hf(
    hf_model: nn.Module, dim: int, layerdrop: float = 0.0, frozen_layers: int = 0, checkpointing: bool = False
) -> WhisperEncoder:
    """The Whisper encoder of a loaded WhisperForConditionalGeneration, projected to `dim` when needed;
    `frozen_layers` > 0: its cacheable part stops after that many layers; `checkpointing`: its layers' activations
    are recomputed in the backward pass (transformers' activation checkpointing)."""
    n_layers = len(hf_model.model.encoder.layers)
    if frozen_layers >= n_layers:
        raise ValueError(
            f"encoder.frozen_layers {frozen_layers} leaves none of the Whisper encoder's {n_layers} "
            f"layers to train; use encoder.finetune frozen"
        )
    if checkpointing:
        enable_hf_checkpointing(hf_model.model.encoder)
    return WhisperEncoder(hf_model.model.encoder, dim, WhisperEncoderOptions(layerdrop), frozen_layers or None)
