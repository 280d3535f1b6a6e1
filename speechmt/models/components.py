"""The component system: each slot of a model (encoder, decoder, shrink: the bridge's length reduction) is a registry from a kind's name to its
options dataclass and its builder, as the semantic layers are (speechmt.models.semantic).

A kind is one file: an options dataclass (the fields a config may give that kind, each checked where it is
declared, plus what the rest of the package may ask of it: its front end, whether its states can be cached, ...)
and a builder `(cfg, parts: BuildParts) -> (module, cfg)` that returns the module and the config with the sizes
the build took on (a pretrained decoder's width and vocabulary); what else it derives (an HF model's complete
config, `HF_CONFIGS`) goes to `parts.resolved`, the model bundle's. `cfg` is the model config (ModelConfig); a
builder is typed by what it reads of it, `ModelSettings`, so that the kinds' modules sit below the config that
names them. speechmt.models.registry registers the
built-in kinds; a test or a plug-in registers its own with `ENCODERS.register("toy", ToyOptions, build_toy)`.

A config names a kind and gives its options in one mapping: `encoder: {kind: whisper, name_or_path: ..,
finetune: frozen}`. `Slot.options` reads it: an option the kind does not have is one line naming it and the
kind's options, so a config says exactly what it sets. Checkpoints written before the kinds had options of their
own held every kind's fields; `Slot.options(..., saved=True)` drops the fields of other kinds, which the model
built from that checkpoint never read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol, TypeVar

from torch import nn

from speechmt.checks import checked
from speechmt.models.finetune import FINETUNE_MODES, LoraSettings
from speechmt.models.memory import BASE_DTYPES
from speechmt.models.migrate import HF_CONFIGS

__all__ = [
    "HF_CONFIGS",
    "BuildParts",
    "Kind",
    "KindOptions",
    "ModelConfigT",
    "ModelSettings",
    "PretrainedOptions",
    "Slot",
    "hf_fields",
    "kind_field",
]


class KindOptions:
    """The base of every kind's options: its `kind` is its class's, set once (another kind is another class)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "kind" and "kind" in self.__dict__ and value != self.__dict__["kind"]:
            raise AttributeError(
                f"{type(self).__name__} is kind {self.kind!r}: another kind has other options "
                f"(build them from a mapping with the new kind)"
            )
        super().__setattr__(name, value)


def kind_field(name: str) -> Any:
    """The `kind` field of an options dataclass: its registered name, set by the class, not by the caller
    (`kind: str = kind_field("conv")`)."""
    return field(default=name, init=False)


@dataclass
class PretrainedOptions:
    """The options of every part that starts from a Hugging Face model (a Whisper or wav2vec2 encoder, Whisper's
    decoder, a language model)."""

    # a hub id, a local directory or a name set-up converted under $SPEECHMT_HOME (e.g. whisper-base); "": a
    # random init of hf_config
    name_or_path: str = ""
    # HF config fields over the pretrained config, or the whole architecture for a random init, as given; the
    # complete config a build derives is the model bundle's (resolved "encoder.hf_config", "decoder.hf_config")
    hf_config: dict = field(default_factory=dict)
    # full, frozen, lna (only its LayerNorms and attention projections train) or lora (adapters with
    # ModelConfig.lora, the rest frozen)
    finetune: str = "full"

    def pretrained_problems(self, slot: str) -> list[str | bool]:
        """The problems of these fields (for raise_problems), `slot` naming the part: encoder or decoder."""
        self.hf_config = dict(self.hf_config)
        return [
            self.finetune not in FINETUNE_MODES
            and f"unknown {slot}.finetune {self.finetune!r}; expected one of {', '.join(FINETUNE_MODES)}"
        ]


def hf_fields(slot: str, options: Any, resolved: Mapping[str, Any]) -> dict:
    """The HF config fields `slot`'s pretrained part is built with: the complete config an earlier build derived
    (`resolved`'s HF_CONFIGS entry: a checkpoint's, so that it rebuilds the same architecture), else the options'
    own hf_config (overrides over the pretrained config, or a random init's architecture). The build then puts the
    complete config it derived in `resolved` where that held none (a checkpoint's stays as it was saved)."""
    return dict(resolved.get(HF_CONFIGS[slot]) or options.hf_config)


def base_dtype_field() -> Any:
    """The `base_dtype` option of a pretrained part whose frozen weights may be kept in half precision."""
    return checked("float32", choices=BASE_DTYPES)


def base_dtype_problem(slot: str, base_dtype: str, frozen: bool) -> str | bool:
    """The problem of a half-precision base_dtype on a part that freezes nothing (for raise_problems)."""
    return (
        base_dtype != "float32"
        and not frozen
        and (
            f"{slot}.base_dtype {base_dtype} keeps frozen weights only: it needs {slot}.finetune frozen, lna or lora"
            + (" or encoder.frozen_layers" if slot == "encoder" else "")
            + " (full fine-tuning trains every weight in float32)"
        )
    )


class ModelSettings(Protocol):
    """What a component's builder reads of the model config (speechmt.models.config.ModelConfig has it), a
    dataclass, which the builder returns updated with dataclasses.replace: the sizes and dropouts the modules
    share, the vocabulary and padding of the decoder side, the slots' options (each the options dataclass of the
    slot's kind, which its builder knows) and the LoRA settings."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # a dataclass
    d_model: int
    n_heads: int
    ffn_dim: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    tgt_vocab_size: int
    pad_id: int
    position_offset: int
    encoder: Any  # the options of an ENCODERS kind
    shrink: Any  # of a SHRINKS kind
    decoder: Any  # of a DECODERS kind
    lora: LoraSettings


ModelConfigT = TypeVar("ModelConfigT", bound=ModelSettings)
"""A builder's config: the one it is given (a ModelConfig), which it returns, as that type, with what it resolved."""


@dataclass
class BuildParts:
    """What one component's builder may need beyond the config: whether pretrained weights load (False: a
    checkpoint's weights follow), the Hugging Face Whisper models loaded once for the encoder and decoder that
    read them, the decoder once built (an encoder whose output is the decoder's own embeddings needs it), the
    CTC head (a shrink that merges by its labels needs it), the search a cascade's ASR runs (`transcription`:
    speechmt.decoding.transcribe.SEARCH, given by the caller, as models/ cannot reach up to decoding/), and what the
    builds derive (`resolved`, by name: a checkpoint's, read when its model is rebuilt, else filled in; the model
    bundle keeps it, speechmt.bundle.ModelBundle.resolved)."""

    pretrained: bool = True
    hf_encoder: nn.Module | None = None
    hf_decoder: nn.Module | None = None
    decoder: nn.Module | None = None
    ctc_head: nn.Module | None = None
    transcription: Any = None
    resolved: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """A registered kind: its options dataclass and its builder."""

    options: type
    build: Callable[..., Any]


class Slot:
    """The kinds of one component slot of a model config (`name`: encoder, decoder, shrink)."""

    def __init__(self, name: str, default: str):
        self.name, self.default = name, default
        self.kinds: dict[str, Kind] = {}

    def register(self, kind: str, options: type, build: Callable[..., Any]) -> None:
        """Adds a kind: `options` a dataclass whose `kind` field (kind_field) defaults to `kind`."""
        fields = {f.name: f for f in dataclasses.fields(options)}
        if "kind" not in fields or fields["kind"].default != kind or fields["kind"].init:
            raise ValueError(
                f"{options.__name__} needs `kind: str = kind_field({kind!r})` to be registered as "
                f"{self.name} kind {kind!r}"
            )
        self.kinds[kind] = Kind(options, build)

    def unregister(self, kind: str) -> None:
        self.kinds.pop(kind, None)

    def __contains__(self, kind: object) -> bool:
        return kind in self.kinds

    def __iter__(self):
        return iter(self.kinds)

    def builder(self, kind: str) -> Callable[..., Any]:
        return self.kinds[kind].build

    def options(self, value: Any, saved: bool = False) -> Any:
        """The options object of `value`: an options instance of a registered kind (returned as it is) or a
        mapping with `kind` (default: the slot's default) and that kind's fields. ValueError ("bad ModelConfig:
        ...", one line) for an unknown kind or a field the kind does not have; with `saved` (a checkpoint's
        dict from before the kinds had options of their own) such fields are dropped instead."""
        if isinstance(value, Mapping):
            d = dict(value)
            kind = d.pop("kind", self.default)
            if kind not in self.kinds:
                raise ValueError(
                    f"bad ModelConfig: unknown {self.name} {kind!r}; expected one of {', '.join(self.kinds)}"
                )
            cls = self.kinds[kind].options
            names = [f.name for f in dataclasses.fields(cls) if f.init]
            unknown = sorted(set(d) - set(names), key=str)
            if unknown and not saved:
                raise ValueError(
                    f"bad ModelConfig: {', '.join(f'{self.name}.{k}' for k in unknown)}: not an option "
                    f"of {self.name} {kind!r} (its options: {', '.join(names) or 'none'})"
                )
            return cls(**{k: v for k, v in d.items() if k in names})
        kinds = {k.options: name for name, k in self.kinds.items()}
        if type(value) not in kinds:
            raise ValueError(
                f"bad ModelConfig: {self.name} must be given as a mapping with its kind and options or "
                f"as the options of a {self.name} kind ({', '.join(k.__name__ for k in kinds)}), got "
                f"{value!r} (a flat config: ModelConfig.from_dict)"
            )
        return value
