"""Experiment configuration: the data, training and model dataclasses, and their YAML form.

A recipe's conf/*.yaml is a serialisation of `ExperimentConfig`; `load_config(path, overrides)` reads one
and applies `section.key=value` overrides (values parsed as YAML scalars; the key a dotted path into nested
settings, e.g. model.encoder.kind=whisper). The model section is nested (one mapping per module, see
speechmt.models.config.ModelConfig); flat model sections and overrides in the older names still load,
through speechmt.models.migrate.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from speechmt.checks import (
    ConfigError,
    check_config,
    check_override,
    checked,
    count_problem,
    field_check,
    raise_problems,
    read_yaml_mapping,
)
from speechmt.data.manifest import is_direction
from speechmt.models.config import SLOTS, ModelConfig, preset
from speechmt.models.migrate import migrate_model_config, migrate_model_override
from speechmt.tasks.align import AlignConfig
from speechmt.tasks.schedule import Stage, parse_stages


@dataclass
class DataConfig:
    """Where the prepared data and vocabularies are, and how batches are made."""

    dir: str = ""
    train_split: str = "train"
    valid_split: str = "dev"
    src_vocab: str = ""  # SentencePiece model of the source side (ASR targets, CTC, MT input)
    tgt_vocab: str = ""  # SentencePiece model of the target side (ST/MT output)
    src_lang: str = "en"
    tgt_lang: str = "de"
    lang_tag: bool = True  # targets start with the target language tag, e.g. <de> (Whisper decoder: <|de|>)
    # one model for several directions ("en-de", "en-fr", ...: every record of the data in one of them), each
    # target started by its own direction's tag; [] : the one direction src_lang-tgt_lang
    directions: list[str] = field(default_factory=list)
    # sampling across directions by their utterance counts n_d, p_d ~ n_d ** (1 / T), drawn anew every epoch:
    # 1 keeps the data as it is, 5 is the multilingual baselines' usual setting, a large T makes directions equal
    sampling_temperature: float = checked(1.0, lo=0, lo_in=False)
    whisper_task: str = "transcribe"  # Whisper decoder: the task token after the language token
    # Whisper encoder input: each clip zero-padded to this many seconds (30: Whisper's own input; 0: the clip's length)
    whisper_pad_seconds: float = checked(0.0, lo=0, hi=30)
    cmvn: str = "utterance"  # "utterance" or "global" (statistics from preparation)
    spec_augment: str = "lb"  # "", "lb" or "ld"
    cache_encoder: bool = True  # a frozen Whisper encoder's states are computed once per split and cached
    max_tokens: int = checked(40000, lo=1)  # padded frames (audio) or tokens (text) per batch
    max_sentences: int = checked(0, lo=0)  # 0: no limit
    # DataLoader workers per rank (persistent, speechmt.data.loader); -1: sized to the machine, the usable CPUs
    # per local rank less one, at most 8
    num_workers: int = checked(-1, lo=-1, note="-1: sized to the machine")
    # how workers start: "fork", "spawn", "forkserver", or "" for the platform's default
    loader_context: str = checked("", choices=("", "fork", "spawn", "forkserver"), note='"": the platform default')
    # on-the-fly augmentation of the training audio (speechmt.data.augment; wav2vec2 and whisper encoders, not
    # cached frozen-encoder states): the probability of each (0: off), then its settings
    augment_reverb: float = 0.0
    augment_rir_dir: str = ""  # room impulse responses (wav/flac/ogg); "": synthetic exponential decays
    augment_rt60: tuple[float, float] = (0.2, 0.8)  # seconds, for the synthetic ones
    augment_noise: float = 0.0
    augment_noise_snr: tuple[float, float] = (5.0, 20.0)  # dB, drawn uniformly per utterance
    augment_noise_dir: str = ""  # noise recordings; "": white Gaussian noise
    augment_telephone: float = 0.0  # 8 kHz, 300-3400 Hz, mu-law

    def __post_init__(self):
        self.augment_rt60, self.augment_noise_snr = tuple(self.augment_rt60), tuple(self.augment_noise_snr)
        probabilities = {
            "augment_reverb": self.augment_reverb,
            "augment_noise": self.augment_noise,
            "augment_telephone": self.augment_telephone,
        }
        raise_problems(
            "data",
            [
                *(
                    not 0 <= v <= 1 and f"{k} must be a probability from 0 to 1, got {v}"
                    for k, v in probabilities.items()
                ),
                not (len(self.augment_rt60) == 2 and 0 < self.augment_rt60[0] <= self.augment_rt60[1] <= 2)
                and f"augment_rt60 must be [low, high] seconds with 0 < low <= high <= 2, got {list(self.augment_rt60)}",
                not (len(self.augment_noise_snr) == 2 and self.augment_noise_snr[0] <= self.augment_noise_snr[1])
                and f"augment_noise_snr must be [low, high] dB with low <= high, got {list(self.augment_noise_snr)}",
                *(
                    f"directions: {d!r} is no direction (en-de, zh-CN-en)"
                    for d in self.directions
                    if not is_direction(d)
                ),
                len(set(self.directions)) != len(self.directions) and f"directions repeat: {self.directions}",
            ],
        )


@dataclass
class TrainConfig:
    """Optimisation, schedule, checkpointing and logging (fairseq s2t defaults where they exist)."""

    task: str = "st"  # st, asr or mt: the task of a one-stage run (when `stages` is empty)
    stages: list[Stage] = field(default_factory=list)  # a progressive multi-task schedule (speechmt.tasks.schedule)
    lr: float = checked(2e-3, lo=0, lo_in=False)
    # parameter-name glob -> a factor of lr for what it matches (first match counts), e.g. {"*fusion*": 50}
    lr_scale: dict[str, float] = field(default_factory=dict)
    warmup_updates: int = checked(10000, lo=0)
    max_updates: int = checked(100000, lo=0)
    max_epochs: int = checked(0, lo=0)  # 0: no limit
    update_freq: int = checked(1, lo=1)
    # N > 0: update_freq is the value for N ranks (GPUs); on W ranks the trainer accumulates update_freq * N / W
    # batches per update, keeping the global batch when the GPU count changes (0: update_freq as given on any W)
    update_freq_world_size: int = checked(0, lo=0)
    # N > 0 under torchrun: "ddp" replicates the model on every rank; "fsdp" shards weights, gradients and
    # optimiser state over the ranks (torch.distributed.fsdp.fully_shard), for models that do not fit one GPU
    strategy: str = checked("ddp", choices=("ddp", "fsdp"))
    clip_norm: float = checked(10.0, lo=0)
    weight_decay: float = checked(0.0, lo=0)
    adam_betas: tuple[float, float] = (0.9, 0.98)
    label_smoothing: float = checked(0.1, lo=0, hi=1, hi_in=False)
    ctc_weight: float = checked(0.0, lo=0, hi=1)
    seed: int = checked(1, lo=0)
    save_dir: str = "exp/st"
    save_interval_updates: int = checked(1000, lo=0)
    keep_last: int = checked(10, lo=0)
    # N > 0: at the end of every N-th epoch of the first stream, checkpoint_epoch<E>.safetensors (E from 1), the last
    # keep_last_epochs kept: the window fairseq's recipes average ("the last 10 epochs")
    save_interval_epochs: int = checked(0, lo=0)
    keep_last_epochs: int = checked(10, lo=0)
    validate_interval_updates: int = checked(1000, lo=0)
    log_interval: int = checked(50, lo=1)
    precision: str = "fp32"  # fp32, bf16 (autocast on CUDA and CPU) or fp16 (autocast on CUDA)
    device: str = checked("auto", device=True)
    # deterministic kernels (torch.use_deterministic_algorithms; ops without one, such as CTC's backward on CUDA,
    # warn): on a GPU, a resumed run then equals an uninterrupted one bit for bit, as on the CPU; slower
    deterministic: bool = False
    # torch CPU threads (0: torch's default, OMP_NUM_THREADS); 1 per job when jobs share cores
    threads: int = checked(0, lo=0)
    init_encoder_from: str = ""  # a checkpoint (e.g. ASR) whose tensors under init_prefixes initialise this model
    init_prefixes: tuple[str, ...] = ("speech_encoder.", "ctc_head.")  # e.g. add "decoder." from an MT model
    # more checkpoints to initialise parts from, after init_encoder_from, each "PATH:prefix,prefix" (as ESPnet's
    # --init_param), e.g. ["exp/lm_mt/checkpoint_avg.safetensors:decoder.", "exp/ctc/last.safetensors:speech_encoder.,ctc_head."]
    init_from: tuple[str, ...] = ()
    valid_decode: bool = True  # also decode the dev split greedily at validation: BLEU (st, mt) or WER (asr)
    # the align objectives' options (speechmt.tasks.align): layer, text (detach or anchor), anchor_weight, units
    align: AlignConfig = field(default_factory=AlignConfig)
    # N > 0: before the first update, the speech encoder's projection set by Procrustes from N training utterances'
    # token-pooled speech states and the text path's vectors of their tokens (speechmt.models.procrustes)
    init_procrustes: int = 0
    # the map those pairs fit: "orthogonal" (Procrustes after iterative normalisation, scaled) or "least_squares"
    # (ridge regression, any linear map: speechmt.training.procrustes.fit_least_squares)
    init_map: str = checked("orthogonal", choices=("orthogonal", "least_squares"))

    def __post_init__(self):
        self.adam_betas = tuple(self.adam_betas)
        self.init_from = (self.init_from,) if isinstance(self.init_from, str) else tuple(self.init_from)
        for item in self.init_from:
            init_source(item)  # ConfigError (one line) for a malformed item
        self.stages = parse_stages(self.stages or [])
        self.lr_scale = lr_scale_checked(self.lr_scale)
        if isinstance(self.align, dict):
            self.align = AlignConfig(**self.align)
        raise_problems(
            "train",
            [
                count_problem("init_procrustes", self.init_procrustes, 0, "utterances; 0: none"),
                field_check(TrainConfig, "init_map").problem("init_map", self.init_map, str),
            ],
        )
        if self.stages and self.ctc_weight:
            raise ConfigError(
                "train.ctc_weight applies to one-stage runs; with train.stages give ctc as an "
                "objective weight of a task, e.g. objectives: {ce: 0.7, ctc: 0.3}"
            )
        if self.task not in ("st", "asr", "mt"):
            raise ConfigError(f"unknown task {self.task!r}; expected st, asr or mt")
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ConfigError(f"unknown precision {self.precision!r}; expected fp32, bf16 or fp16")


def init_source(item: str) -> tuple[str, tuple[str, ...]]:
    """ "PATH:prefix,prefix" (an item of train.init_from) -> (PATH, prefixes); each prefix ends with a dot."""
    path, _, tail = str(item).rpartition(":")
    prefixes = tuple(p.strip() for p in tail.split(",") if p.strip())
    if not path or not prefixes or not all(p.endswith(".") for p in prefixes):
        raise ConfigError(
            f"train.init_from item {item!r}: expected CHECKPOINT:prefix.[,prefix.] "
            "(e.g. exp/mt/checkpoint_avg.safetensors:decoder.)"
        )
    return path, prefixes


@dataclass
class ExperimentConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        from speechmt.data.augment import augment_problem

        problem = augment_problem(self.data, self.model)  # waveform augmentation on a model that reads no audio
        if problem or (problem := self._asr_pairs_problem()) or (problem := self._base_dtype_problem()):
            raise ConfigError(problem)

    def _base_dtype_problem(self) -> str:
        """Why a half-precision frozen base cannot train here ("" when it can): its activations meet the float32
        trained weights only under autocast, which train.precision fp32 leaves off."""
        for part in ("encoder", "decoder"):
            dtype = getattr(getattr(self.model, part), "base_dtype", "float32")
            if dtype != "float32" and self.train.precision == "fp32":
                return (
                    f"model.{part}.base_dtype {dtype} needs train.precision bf16 or fp16 (autocast casts "
                    "between the frozen half-precision weights and the float32 trained ones)"
                )
        return ""

    def _asr_pairs_problem(self) -> str:
        """Why train.init_procrustes or the align objective cannot pair this model's whisper_asr tokens ("" when they
        can): the pairs are its states and an LM decoder's embeddings of their text, and only asr_embed states starts
        from no table; both read each token off the state before it (the greedy search's); align at the LM's input."""
        encoder = self.model.encoder
        aligns = any("align" in t.objectives for stage in self.train.stages for t in stage.tasks)
        users = [
            name
            for name, on in (("train.init_procrustes", self.train.init_procrustes), ("the align objective", aligns))
            if on
        ]
        if not users or not encoder.transcribes:
            return ""
        if encoder.asr_embed != "states":
            return (
                f"{users[0]} on encoder whisper_asr needs model.encoder.asr_embed states (with "
                f"{encoder.asr_embed} the LM reads the transcript's embeddings already; its projection starts at zero)"
            )
        if not self.model.decoder.lm_tokens:
            return f"{users[0]} on encoder whisper_asr needs decoder kind lm (its embeddings are the targets)"
        if aligns and self.train.align.layer:
            return (
                f"train.align.layer {self.train.align.layer}: a whisper_asr encoder's tokens meet the LM's "
                f"embeddings of their text at layer 0 only"
            )
        if encoder.asr_beam > 1:
            return (
                f"{users[0]} on encoder whisper_asr reads each token off the state before it (the greedy "
                f"search's); model.encoder.asr_beam is {encoder.asr_beam}: set it to 1"
            )
        return ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExperimentConfig":
        unknown = sorted(set(d) - {"model", "data", "train"})
        if unknown:
            raise ConfigError(f"unknown section(s): {', '.join(map(str, unknown))}; expected model, data and train")
        model = _model_section(d)
        name = model.pop("preset", None)
        _check_known(ModelConfig, model, "model")
        try:
            built = preset(name, **model) if name else ModelConfig(**model)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"model: {e}") from None
        return cls(
            model=built,
            data=_build(DataConfig, _data_section(d), "data"),
            train=_build(TrainConfig, _section(d, "train"), "train"),
        )


def lr_scale_checked(scales: dict) -> dict[str, float]:
    """train.lr_scale as {pattern: factor}, or ConfigError naming the entry that is not a name glob with a
    positive finite factor."""
    out = {}
    for key, value in (scales or {}).items():
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if not isinstance(key, str) or not key or number is None or not 0 < number < float("inf"):
            raise ConfigError(
                f"train.lr_scale entry {key!r}: {value!r}: expected a parameter-name glob and a "
                "positive finite factor of train.lr, e.g. {'*fusion*': 50}"
            )
        out[key] = float(number)
    return out


def _section(d: dict[str, Any], name: str) -> dict[str, Any]:
    """A config section as a dict (an empty `name:` line is an empty section)."""
    value = d.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: expected a mapping of options, got {value!r}")
    return dict(value)


def _data_section(d: dict[str, Any]) -> dict[str, Any]:
    """The data section, its `whisper_pad_30s` flag (before `whisper_pad_seconds`) read as 30 s or none."""
    data = _section(d, "data")
    if "whisper_pad_30s" in data:
        flag = data.pop("whisper_pad_30s")
        if not isinstance(flag, bool):
            raise ConfigError(f"data: whisper_pad_30s must be true or false, got {flag!r} (now whisper_pad_seconds)")
        data["whisper_pad_seconds"] = 30.0 if flag else 0.0
    return data


def _model_section(d: dict[str, Any]) -> dict[str, Any]:
    """The model section in the nested form (a flat one, from before the nesting, migrated)."""
    try:
        return migrate_model_config(_section(d, "model"))
    except ValueError as e:
        raise ConfigError(f"model: {e}") from None


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
"""The sections of an ExperimentConfig and their dataclasses (for the type and range checks)."""


def _tuples(d: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _check_known(cls, d: dict[str, Any], section: str) -> None:
    """ConfigError naming the keys of `d` that are no field of dataclass `cls`, in nested dataclasses too."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields), key=str)
    if unknown:
        raise ConfigError(f"unknown {section} option(s): {', '.join(map(str, unknown))}")
    hints = typing.get_type_hints(cls)
    for name, value in d.items():  # a component slot's options are checked by its kind (models.components.Slot)
        if (
            dataclasses.is_dataclass(hints[name])
            and isinstance(value, dict)
            and not (cls is ModelConfig and name in SLOTS)
        ):
            _check_known(hints[name], value, f"{section}.{name}")


def _build(cls, d: dict[str, Any], section: str):
    _check_known(cls, d, section)
    try:
        return cls(**_tuples(d))
    except (TypeError, ValueError) as e:  # a message naming the section already (raise_problems) keeps one name
        message = str(e)
        raise ConfigError(message if message.startswith(f"{section}:") else f"{section}: {message}") from None


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies `section.key=value` strings to a config dict (values parsed as YAML scalars); `key` may be a
    dotted path into nested settings (model.encoder.kind=whisper). A model override in the older flat names
    (model.encoder=whisper, model.encoder_layers=6) sets its nested place, the model section made nested first."""
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.split(".")
        if not sep or len(parts) < 2 or not all(parts):
            raise ConfigError(f"override {item!r}: expected section.key=value, e.g. train.lr=1e-3")
        section, value = d.get(parts[0]), yaml_value(text)
        if section is None:
            section = d[parts[0]] = {}
        if not isinstance(section, dict):
            raise ConfigError(f"override {item!r}: section {parts[0]} is not a mapping in the config")
        path = parts[1:]
        if parts[0] == "model":
            section = d["model"] = _model_section(d)
            try:
                path, value = migrate_model_override(section, ".".join(path), value)
            except ValueError as e:
                raise ConfigError(f"override {item!r}: {e}") from None
            _new_kind(section, path, value)
        _set_path(section, path, value, item)
    return d


def _new_kind(model: dict[str, Any], path: list[str], value: Any) -> None:
    """An override of a component's kind (model.encoder.kind=whisper) to another kind than the config's drops
    the options the config gave the old one: another kind has other options (set its own after it)."""
    if len(path) == 2 and path[1] == "kind" and isinstance(model.get(path[0]), dict) and path[0] in SLOTS:
        part = model[path[0]]
        if part.get("kind", SLOTS[path[0]].default) != value:
            model[path[0]] = {}


def _set_path(section: dict[str, Any], path: list[str], value: Any, item: str) -> None:
    """section[path[0]][path[1]]... = value, making the mappings on the way."""
    target = section
    for i, name in enumerate(path[:-1]):
        target = target.setdefault(name, {})
        if not isinstance(target, dict):
            raise ConfigError(f"override {item!r}: {'.'.join(path[: i + 1])} is not a mapping in the config")
    target[path[-1]] = value


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def yaml_value(text: str) -> Any:
    """A YAML scalar, with numbers such as 1e-3 read as floats (YAML 1.1 wants a dot: 1.0e-3)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(
            f"value {text!r} is not a YAML value ({getattr(e, 'problem', None) or 'malformed'})"
        ) from None
    return float(value) if isinstance(value, str) and _FLOAT.fullmatch(value.strip()) else value


def load_config(path: str | os.PathLike | None, overrides: list[str] = ()) -> ExperimentConfig:
    """Reads a YAML experiment config (or starts from defaults when path is None) and applies overrides."""
    d = read_yaml_mapping(path, "with model, data and train sections") if path is not None else {}
    for item in overrides:  # each value checked as the command line checks it, before any section is built
        check_override(item, SECTIONS)
    d = apply_overrides(d, list(overrides))
    try:  # a bad value is named with the file it was read from (or overridden over)
        cfg = ExperimentConfig.from_dict(d)
        return check_config(cfg, SECTIONS)  # the file's values held to the rules the command line's are
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path is not None else str(e)) from None


def save_config(cfg: ExperimentConfig, path: str | os.PathLike) -> None:
    def plain(x):
        if isinstance(x, tuple):
            return list(x)
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    Path(path).write_text(yaml.safe_dump(plain(cfg.to_dict()), sort_keys=False), encoding="utf-8")
