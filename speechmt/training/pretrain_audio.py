"""`speechmt research pretrain-audio`: wav2vec 2.0 self-supervised pretraining on unlabelled audio (Baevski et al.,
NeurIPS 2020; the model and its loss: speechmt.models.wav2vec2_pretraining), run by the same trainer as every
other run: one stage of the `audio` task with the `wav2vec2` objective.

The output directory is a Hugging Face model directory (`save_pretrained` + the feature extractor's
preprocessor_config.json), so `Wav2Vec2Model.from_pretrained(out)` reads it and a speechmt model uses it
with `model.encoder=wav2vec2 model.encoder_name_or_path=out`. Every file in it is replaced atomically after
each checkpoint; the training state (weights, optimiser, schedule, RNG, data position) is the trainer's
`out/checkpoint_last.safetensors` (safetensors + JSON, never a pickle), and a run resumes from it exactly.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from speechmt.checkpoint import CheckpointError
from speechmt.checks import checked, read_yaml_mapping
from speechmt.config import ConfigError, DataConfig, ExperimentConfig, TrainConfig, yaml_value
from speechmt.data.dataset import AudioInput, SpeechDataset
from speechmt.data.manifest import Record, read_manifest
from speechmt.frontend.waveform import WaveformConfig, WaveformFrontend
from speechmt.models.wav2vec2_pretraining import PretrainingSettings, Wav2Vec2Pretraining
from speechmt.tasks import ObjectiveSettings, Stage, TaskData
from speechmt.training.state import TrainState
from speechmt.training.trainer import LAST, Trainer, fixed_data

STATE_FILE = LAST  # the trainer's checkpoint_last.safetensors
OLD_STATE_FILE = "pretrain_state.safetensors"  # before the pretraining ran through the trainer

# A CPU-sized wav2vec2: the base model's CNN geometry (20 ms frames) with 128 channels, a 4 x 256 Transformer.
SMALL_CONFIG: dict[str, Any] = dict(
    model_type="wav2vec2",
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    conv_dim=[128] * 7,
    conv_kernel=[10, 3, 3, 3, 3, 2, 2],
    conv_stride=[5, 2, 2, 2, 2, 2, 2],
    feat_extract_norm="layer",
    do_stable_layer_norm=True,
    num_conv_pos_embeddings=64,
    num_conv_pos_embedding_groups=16,
    codevector_dim=128,
    proj_codevector_dim=128,
    num_codevector_groups=2,
    num_codevectors_per_group=160,
    num_negatives=50,
    hidden_dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.0,
    feat_proj_dropout=0.1,
    layerdrop=0.0,
)


@dataclass
class PretrainAudioConfig:
    """What to pretrain on, the model, masking, optimisation and checkpointing."""

    manifests: tuple[str, ...] = ()  # manifests (.jsonl) whose utterances' audio is the training data
    out: str = ""  # output: a Hugging Face model directory
    init: str = ""  # start from this pretrained model (hub id or directory); "" = random init from hf_config
    hf_config: dict = field(default_factory=lambda: dict(SMALL_CONFIG))  # Wav2Vec2Config fields (random init)
    do_normalize: bool = True  # zero mean, unit variance per utterance (saved in the feature extractor config)
    mask_prob: float = 0.65  # share of frames that start a masked span (wav2vec 2.0: 0.65)
    mask_length: int = checked(10, lo=1)  # frames per span
    min_masks: int = checked(2, lo=0)
    gumbel_temperature: tuple[float, float, float] = (2.0, 0.5, 0.999995)  # start, floor, decay per update
    lr: float = checked(5e-4, lo=0, lo_in=False)
    warmup_updates: int = checked(500, lo=0)
    max_updates: int = checked(10000, lo=1)
    weight_decay: float = checked(0.01, lo=0)
    clip_norm: float = checked(10.0, lo=0)
    max_tokens: int = checked(6000, lo=1)  # padded 10 ms frames of audio per batch
    max_sentences: int = checked(0, lo=0)  # 0: no limit
    seed: int = checked(1, lo=0)
    save_interval_updates: int = checked(500, lo=0)
    log_interval: int = checked(50, lo=1)
    device: str = checked("auto", device=True)

    def __post_init__(self):
        self.manifests = tuple(self.manifests)
        self.gumbel_temperature = tuple(float(t) for t in self.gumbel_temperature)
        numbers = {
            f.name: {"int": int, "float": float}[f.type] for f in dataclasses.fields(self) if f.type in ("int", "float")
        }
        bad = [name for name, kind in numbers.items() if not _is_number(getattr(self, name), kind)]
        for name, kind in numbers.items():  # YAML reads 1e-4 as a string
            if name not in bad:
                setattr(self, name, kind(getattr(self, name)))
        problems = [
            bad and f"not a number: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}",
            not self.manifests and "no manifests to pretrain on",
            not self.out and "no output directory (out)",
            not 0 < self.mask_prob < 1 and f"mask_prob must be in (0, 1), got {self.mask_prob}",
            self.mask_length < 1 and f"mask_length must be >= 1, got {self.mask_length}",
            len(self.gumbel_temperature) != 3 and "gumbel_temperature is (start, floor, decay)",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ConfigError("pretrain-audio: " + "; ".join(problems))


def _is_number(value: Any, kind: type) -> bool:
    try:
        kind(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def load_pretrain_config(
    path: str | os.PathLike | None, overrides: Sequence[str] = (), **fields
) -> PretrainAudioConfig:
    """A YAML mapping of PretrainAudioConfig fields (or the defaults), then `fields` that are not None,
    then `key=value` overrides (YAML scalars; `hf_config.key=value` for a model field)."""
    d = read_yaml_mapping(path, "of pretrain-audio options") if path is not None else {}
    d.update({k: v for k, v in fields.items() if v is not None})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. max_updates=2000")
        section, _, sub = key.partition(".")
        if sub and section == "hf_config":
            d["hf_config"] = {**d.get("hf_config", SMALL_CONFIG), sub: yaml_value(value)}
        else:
            d[key] = yaml_value(value)
    known = {f.name for f in dataclasses.fields(PretrainAudioConfig)}
    if set(d) - known:
        raise ConfigError(f"unknown pretrain-audio option(s): {', '.join(sorted(set(d) - known))}")
    return PretrainAudioConfig(**d)


def pretraining_records(cfg: PretrainAudioConfig) -> list[Record]:
    """The manifests' utterances (audio paths made absolute) long enough for two masked spans of 20 ms frames;
    prints how many were left out."""
    records: list[Record] = []
    for manifest in cfg.manifests:
        base = Path(manifest).parent
        records += [replace(r, audio=str(base / r.audio)) for r in read_manifest(manifest)]
    min_frames = 4 * cfg.mask_length  # 10 ms frames: at least 2 spans of mask_length 20 ms frames
    kept = [r for r in records if r.n_frames >= min_frames]
    if len(kept) < len(records):
        print(
            f"pretrain-audio: left out {len(records) - len(kept)} of {len(records)} utterances shorter than "
            f"{min_frames * 10} ms"
        )
    if not kept:
        raise ConfigError(
            f"pretrain-audio: no utterance of at least {min_frames * 10} ms in {', '.join(cfg.manifests)}"
        )
    return kept


def build_pretraining_model(cfg: PretrainAudioConfig) -> Wav2Vec2Pretraining:
    """Wav2Vec2ForPreTraining from cfg.init, or a random init from cfg.hf_config, with cfg's masking."""
    from transformers import AutoConfig, Wav2Vec2ForPreTraining

    settings = PretrainingSettings(
        cfg.mask_prob, cfg.mask_length, cfg.min_masks, cfg.gumbel_temperature, dict(cfg.hf_config)
    )
    if not cfg.init:
        fields = dict(cfg.hf_config)
        config = AutoConfig.for_model(fields.pop("model_type", "wav2vec2"), **fields)
        config.mask_time_prob, config.mask_time_length = cfg.mask_prob, cfg.mask_length  # masked_spec_embed
        return Wav2Vec2Pretraining(Wav2Vec2ForPreTraining(config), settings)
    try:
        config = AutoConfig.from_pretrained(cfg.init, mask_time_prob=cfg.mask_prob, mask_time_length=cfg.mask_length)
        model = Wav2Vec2ForPreTraining.from_pretrained(cfg.init, config=config, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(
            f"{cfg.init}: cannot load a wav2vec2 model to pretrain from ({str(e).splitlines()[0]})"
        ) from None
    return Wav2Vec2Pretraining(model, replace(settings, hf_config=config.to_dict()))


def experiment_config(cfg: PretrainAudioConfig) -> ExperimentConfig:
    """The trainer's view of a pretraining run: one stage of unlabelled audio with the wav2vec2 objective,
    checkpoints in cfg.out, no validation."""
    stage = Stage("wav2vec2", [TaskData("audio", {"wav2vec2": 1.0})])
    train = TrainConfig(
        lr=cfg.lr,
        warmup_updates=cfg.warmup_updates,
        max_updates=cfg.max_updates,
        weight_decay=cfg.weight_decay,
        clip_norm=cfg.clip_norm,
        seed=cfg.seed,
        save_dir=cfg.out,
        save_interval_updates=cfg.save_interval_updates,
        keep_last=2,
        validate_interval_updates=0,
        log_interval=cfg.log_interval,
        device=cfg.device,
        valid_decode=False,
        stages=[stage],
    )
    return ExperimentConfig(data=DataConfig(max_tokens=cfg.max_tokens, max_sentences=cfg.max_sentences), train=train)


def export_hf(model: Wav2Vec2Pretraining, waveform: WaveformConfig, out: Path) -> None:
    """The Hugging Face directory (model and feature extractor), file by file, each replaced atomically."""
    from transformers import Wav2Vec2FeatureExtractor

    staging = out / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    model.model.save_pretrained(staging)
    Wav2Vec2FeatureExtractor(
        feature_size=1,
        sampling_rate=waveform.sample_rate,
        padding_value=0.0,
        do_normalize=waveform.do_normalize,
        return_attention_mask=model.model.config.feat_extract_norm == "layer",
    ).save_pretrained(staging)
    for path in sorted(staging.iterdir()):
        _fsync(path)
        os.replace(path, out / path.name)
    staging.rmdir()


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def pretrain_audio(cfg: PretrainAudioConfig, resume: bool = True) -> TrainState:
    """Pretrains as `cfg` says into cfg.out through the trainer (checkpoints there, the HF directory written
    after each); with `resume`, continues exactly from cfg.out's last checkpoint."""
    from speechmt.training.run import pick_device, resume_checkpoint, seed_everything

    out, device = Path(cfg.out), pick_device(cfg.device)
    if resume and (out / OLD_STATE_FILE).exists() and not (out / STATE_FILE).exists():
        raise CheckpointError(
            f"{out / OLD_STATE_FILE}: the state of an older speechmt's pretraining, which this "
            "one does not resume; pass --no-resume to start afresh"
        )
    seed_everything(cfg.seed)
    waveform = WaveformConfig(do_normalize=cfg.do_normalize)
    model = build_pretraining_model(cfg)
    records = pretraining_records(cfg)
    data = SpeechDataset(records, AudioInput(".", WaveformFrontend(waveform)))
    trainer = Trainer(
        experiment_config(cfg),
        model,
        ObjectiveSettings(),
        fixed_data(data),
        {},
        device,
        on_save=lambda: export_hf(trainer.model, waveform, out),
    )
    found = resume_checkpoint(out, device) if resume else None
    if found is not None:
        trainer.load_state(found[0])
        print(f"resumed from {found[1]} at update {trainer.state.step}")
    return trainer.train()
