"""The `wav2vec2` acoustic encoder: a Hugging Face self-supervised audio model read from raw 16 kHz waveforms.

wav2vec 2.0 (Baevski et al., NeurIPS 2020); through the same interface (AutoConfig / AutoModel, a CNN
`feature_extractor` with `conv_kernel` / `conv_stride`, `mask_time_indices`) also HuBERT (Hsu et al., 2021)
and data2vec audio (Baevski et al., ICML 2022). Weights come from `from_pretrained(name_or_path)` (a hub id
where the machine is online, a local directory otherwise) or a random init from a config.

Padding: output lengths come from the CNN's conv arithmetic. An attention mask is passed only to models
whose CNN uses layer norm (`feat_extract_norm == "layer"`, as HF's feature extractor sets
`return_attention_mask`); group-norm models were trained on zero-padded batches without one, so they get
zero-padded waveforms. Padded output frames are zero.

Fine-tuning options: freeze the CNN feature extractor, freeze everything, layer drop, time masking, gradient
checkpointing, and LNA (Li et al., ACL 2021, "Multilingual Speech Translation from Efficient Finetuning of
Pretrained Models"): only the LayerNorms and the self-attention projections train.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.frontend.waveform import WaveformConfig
from speechmt.models.components import HF_CONFIGS, BuildParts, ModelConfigT, PretrainedOptions, hf_fields, kind_field
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput, Record, note
from speechmt.models.finetune import lna_, lora_
from speechmt.models.memory import enable_hf_checkpointing
from speechmt.sequence import lengths_to_padding_mask

if TYPE_CHECKING:  # transformers is imported when an encoder is built
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass
class Wav2Vec2EncoderConfig(PretrainedOptions, EncoderConfig):
    """encoder kind "wav2vec2": a Hugging Face wav2vec2 / HuBERT / data2vec audio model on waveforms
    (hf_config for a random init: with "model_type" wav2vec2, hubert or data2vec-audio)."""

    kind: str = kind_field("wav2vec2")
    layerdrop: float = checked(0.0, lo=0, hi=1)  # probability of skipping each layer in training
    freeze_feature_extractor: bool = False  # freeze the CNN over the waveform (usual when pretrained)
    mask_time_prob: float = checked(0.0, lo=0, hi=1, hi_in=False)  # share of frames masked in spans in training
    mask_time_length: int = checked(10, lo=1)  # frames per masked span
    # recompute its layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    frontend: ClassVar[str] = "waveform"

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self, "encoder.") + self.pretrained_problems("encoder"))


def build_wav2vec2_encoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[Wav2Vec2Encoder, ModelConfigT]:
    """The encoder, and `cfg` as it is; the complete HF config goes to `parts.resolved` ("encoder.hf_config"), so that
    a checkpoint rebuilds the same architecture without the pretrained model at hand (from that config, which it
    reads there)."""
    e = cfg.encoder
    options = Wav2Vec2Options(
        freeze_feature_extractor=e.freeze_feature_extractor,
        freeze=e.finetune == "frozen",
        lna=e.finetune == "lna",
        layerdrop=e.layerdrop,
        mask_time_prob=e.mask_time_prob,
        mask_time_length=e.mask_time_length,
        gradient_checkpointing=e.gradient_checkpointing,
    )
    fields = hf_fields("encoder", e, parts.resolved)
    encoder = wav2vec2_encoder(e.name_or_path, fields, cfg.d_model, options, parts.pretrained)
    if e.finetune == "lora":  # frozen and lna are the options'
        lora_(encoder.model, cfg.lora)
    parts.resolved.setdefault(HF_CONFIGS["encoder"], encoder.model.config.to_dict())
    return encoder, cfg


@dataclass(frozen=True)
class Wav2Vec2Options:
    """How the HF model is fine-tuned. layerdrop and time masking are written into its config."""

    freeze_feature_extractor: bool = False  # the CNN over the waveform
    freeze: bool = False  # the whole HF model
    lna: bool = False  # only LayerNorms and self-attention q/k/v/out projections train
    layerdrop: float = 0.0
    mask_time_prob: float = 0.0  # share of frames in masked spans while training (HF's mask_time_prob)
    mask_time_length: int = 10  # frames per span
    gradient_checkpointing: bool = False


def conv_output_lengths(lengths: Tensor, kernels: tuple[int, ...], strides: tuple[int, ...]) -> Tensor:
    """Frames out of an unpadded conv stack: L -> floor((L - k) / s) + 1 per layer. (B,) -> (B,)."""
    for k, s in zip(kernels, strides):
        lengths = torch.div(lengths - k, s, rounding_mode="floor") + 1
    return lengths


class Wav2Vec2Encoder(nn.Module):
    """HF audio model -> Linear to the model dimension (when the sizes differ); padded frames zero."""

    def __init__(self, model: PreTrainedModel, dim: int, options: Wav2Vec2Options = Wav2Vec2Options()):
        super().__init__()
        config = model.config
        if not hasattr(model, "feature_extractor") or not hasattr(config, "conv_kernel"):
            raise ValueError(f"{type(model).__name__} is not a wav2vec2-style audio model (no CNN feature extractor)")
        self.model, self.options = model, options
        adapter = bool(getattr(config, "add_adapter", False))
        hidden = (getattr(config, "output_hidden_size", None) or config.hidden_size) if adapter else config.hidden_size
        self.proj = nn.Linear(hidden, dim) if hidden != dim else nn.Identity()
        self.kernels, self.strides = tuple(config.conv_kernel), tuple(config.conv_stride)
        # an adapter (wav2vec2 only) adds stride-s convolutions (kernel 3, padding 1) after the Transformer
        self.adapter_layers = config.num_adapter_layers if adapter else 0
        self.adapter_stride = config.adapter_stride if adapter else 1
        self.use_attention_mask = getattr(config, "feat_extract_norm", "layer") == "layer"

    def states_frozen(self) -> bool:
        """Not cached: SpecAugment-style time masking and fine-tuning make its states change in training."""
        return False

    def cnn_output_lengths(self, lengths: Tensor) -> Tensor:
        """Samples (B,) -> frames out of the CNN feature extractor (B,), where time masking applies."""
        return conv_output_lengths(lengths, self.kernels, self.strides)

    def output_lengths(self, lengths: Tensor) -> Tensor:
        """Samples (B,) -> output frames (B,)."""
        lengths = self.cnn_output_lengths(lengths)
        for _ in range(self.adapter_layers):
            lengths = torch.div(lengths - 1, self.adapter_stride, rounding_mode="floor") + 1
        return lengths

    def forward(self, waves: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """waves (B, T) 16 kHz, lengths (B,) in samples -> EncoderOutput(x (B, T', D), lengths (B,)); a
        `record` gets HF's hidden states: "layer.0" the projected CNN features, then each Transformer layer
        ("layer.<i>"; HF's last one is after the final norm), and "out"."""
        padding = lengths_to_padding_mask(lengths, waves.size(1))
        waves = waves.masked_fill(padding, 0.0)
        attention_mask = (~padding).long() if self.use_attention_mask else None
        mask = self._time_mask(lengths, waves.size(1))
        out = self.model(
            waves, attention_mask=attention_mask, mask_time_indices=mask, output_hidden_states=record is not None
        )
        h = out.last_hidden_state
        frames = self.output_lengths(lengths)
        for i, hidden in enumerate(out.hidden_states or ()):
            note(record, f"layer.{i}", hidden, self.cnn_output_lengths(lengths))
        x = self.proj(h)  # (B, T', H) -> (B, T', D)
        x = x.masked_fill(lengths_to_padding_mask(frames, x.size(1))[..., None], 0.0)
        note(record, "out", x, frames)
        return EncoderOutput(x, frames)

    def _time_mask(self, lengths: Tensor, samples: int) -> Tensor | None:
        """Spans of CNN frames to replace by the learned mask embedding, (B, T_cnn) bool over unpadded frames
        only; None outside training. All false where no span fits (HF would raise)."""
        o = self.options
        if not self.training or o.mask_time_prob <= 0:
            return None
        frames = self.cnn_output_lengths(lengths).cpu()
        width = int(self.cnn_output_lengths(torch.tensor(samples)))
        if width <= o.mask_time_length:
            return torch.zeros(len(frames), width, dtype=torch.bool, device=lengths.device)
        valid = (~lengths_to_padding_mask(frames, width)).long()
        from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices

        spans = _compute_mask_indices(
            (len(frames), width),
            o.mask_time_prob,
            o.mask_time_length,
            valid,
            min_masks=self.model.config.mask_time_min_masks,
        )
        return torch.from_numpy(spans).to(lengths.device)


def hf_audio_config(
    name_or_path: str, fields: dict, options: Wav2Vec2Options, pretrained: bool = True
) -> PretrainedConfig:
    """The HF config: the pretrained model's with `fields` as overrides, or (no name_or_path, or not
    `pretrained`) one built from `fields` alone (its "model_type", default "wav2vec2"); the options'
    layer drop and time masking written in."""
    from transformers import AutoConfig

    if name_or_path and pretrained:
        try:
            config = AutoConfig.from_pretrained(name_or_path, **fields)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(
                f"{name_or_path}: cannot load a Hugging Face audio model config ({str(e).splitlines()[0]})"
            ) from None
    else:
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type", "wav2vec2"), **fields)
    config.layerdrop = options.layerdrop
    config.mask_time_prob, config.mask_time_length = options.mask_time_prob, options.mask_time_length
    if options.mask_time_prob > 0:
        config.apply_spec_augment = True
    return config


def hf_audio_model(config: PretrainedConfig, name_or_path: str = "", pretrained: bool = True) -> PreTrainedModel:
    """AutoModel with `config`: pretrained weights from name_or_path, or a random init."""
    from transformers import AutoModel

    if name_or_path and pretrained:
        try:
            return AutoModel.from_pretrained(name_or_path, config=config, dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(
                f"{name_or_path}: cannot load a Hugging Face audio model ({str(e).splitlines()[0]})"
            ) from None
    return AutoModel.from_config(config)


def apply_finetuning(model: PreTrainedModel, options: Wav2Vec2Options) -> None:
    """Sets requires_grad as the options say, and gradient checkpointing."""
    if options.freeze:
        model.requires_grad_(False)
    if options.lna:
        lna_(model)
    if options.freeze_feature_extractor:
        model.feature_extractor._freeze_parameters()
    if options.gradient_checkpointing:
        enable_hf_checkpointing(model)


def wav2vec2_encoder(
    name_or_path: str, fields: dict, dim: int, options: Wav2Vec2Options, pretrained: bool = True
) -> Wav2Vec2Encoder:
    """Builds the encoder: config, model (pretrained or random), fine-tuning options."""
    config = hf_audio_config(name_or_path, fields, options, pretrained)
    model = hf_audio_model(config, name_or_path, pretrained)
    apply_finetuning(model, options)
    return Wav2Vec2Encoder(model, dim, options)


def feature_extractor_settings(name_or_path: str) -> WaveformConfig:
    """The waveform front end a model expects: its feature extractor's sampling rate and do_normalize
    (preprocessor_config.json); defaults (16 kHz, normalised) for a random init or a model without one."""
    if not name_or_path:
        return WaveformConfig()
    from transformers import AutoFeatureExtractor

    try:
        fe = AutoFeatureExtractor.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        warnings.warn(
            f"{name_or_path}: no feature extractor config ({str(e).splitlines()[0]}); "
            "using 16 kHz input normalised per utterance",
            stacklevel=2,
        )
        return WaveformConfig()
    return WaveformConfig(int(getattr(fe, "sampling_rate", 16000)), bool(getattr(fe, "do_normalize", True)))
