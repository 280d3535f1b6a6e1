"""`speechmt pretrain-audio`: wav2vec 2.0 self-supervised pretraining on unlabelled audio (Baevski et al.,
NeurIPS 2020), on Hugging Face's Wav2Vec2ForPreTraining: spans of CNN frames are masked, and the Transformer
output at each masked frame must pick its quantised CNN frame among `num_negatives` distractors from the same
utterance (contrastive loss), while a diversity loss keeps the codebooks in use. Masks and negatives come
from transformers' own `_compute_mask_indices` and `_sample_negative_indices`, over unpadded frames only.

The output directory is a Hugging Face model directory (`save_pretrained` + the feature extractor's
preprocessor_config.json), so `Wav2Vec2Model.from_pretrained(out)` reads it and a speechmt model uses it
with `model.encoder=wav2vec2 model.encoder_name_or_path=out`. Every file in it is replaced atomically; the
training state (weights, optimiser, schedule, RNG, data position) is `out/pretrain_state.safetensors`
(safetensors + JSON, never a pickle), written atomically, and a run resumes from it exactly.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader
from tqdm import tqdm

from speechmt.config import ConfigError
from speechmt.data.batching import BucketBatchSampler
from speechmt.sequence import lengths_to_padding_mask
from speechmt.data.dataset import Batch, collate
from speechmt.data.manifest import Record, read_manifest
from speechmt.data.waveform import WaveformConfig, WaveformDataset
from speechmt.checkpoint import load_checkpoint, save_checkpoint
from speechmt.training.optim import build_optimizer, build_scheduler
from speechmt.training.trainer import JsonLog, rng_state, set_rng_state

STATE_FILE = "pretrain_state.safetensors"

# A CPU-sized wav2vec2: the base model's CNN geometry (20 ms frames) with 128 channels, a 4 x 256 Transformer.
SMALL_CONFIG: dict[str, Any] = dict(
    model_type="wav2vec2", hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
    conv_dim=[128] * 7, conv_kernel=[10, 3, 3, 3, 3, 2, 2], conv_stride=[5, 2, 2, 2, 2, 2, 2],
    feat_extract_norm="layer", do_stable_layer_norm=True, num_conv_pos_embeddings=64,
    num_conv_pos_embedding_groups=16, codevector_dim=128, proj_codevector_dim=128, num_codevector_groups=2,
    num_codevectors_per_group=160, num_negatives=50, hidden_dropout=0.1, attention_dropout=0.1,
    activation_dropout=0.0, feat_proj_dropout=0.1, layerdrop=0.0)


@dataclass
class PretrainAudioConfig:
    """What to pretrain on, the model, masking, optimisation and checkpointing."""

    manifests: tuple[str, ...] = ()  # manifests (.jsonl) whose utterances' audio is the training data
    out: str = ""  # output: a Hugging Face model directory
    init: str = ""  # start from this pretrained model (hub id or directory); "" = random init from hf_config
    hf_config: dict = field(default_factory=lambda: dict(SMALL_CONFIG))  # Wav2Vec2Config fields (random init)
    do_normalize: bool = True  # zero mean, unit variance per utterance (saved in the feature extractor config)
    mask_prob: float = 0.65  # share of frames that start a masked span (wav2vec 2.0: 0.65)
    mask_length: int = 10  # frames per span
    min_masks: int = 2
    gumbel_temperature: tuple[float, float, float] = (2.0, 0.5, 0.999995)  # start, floor, decay per update
    lr: float = 5e-4
    warmup_updates: int = 500
    max_updates: int = 10000
    weight_decay: float = 0.01
    clip_norm: float = 10.0
    max_tokens: int = 6000  # padded 10 ms frames of audio per batch
    max_sentences: int = 0  # 0: no limit
    seed: int = 1
    save_interval_updates: int = 500
    log_interval: int = 50
    device: str = "auto"

    def __post_init__(self):
        self.manifests = tuple(self.manifests)
        self.gumbel_temperature = tuple(float(t) for t in self.gumbel_temperature)
        numbers = {f.name: {"int": int, "float": float}[f.type] for f in dataclasses.fields(self)
                   if f.type in ("int", "float")}
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


def load_pretrain_config(path: str | os.PathLike | None, overrides: Sequence[str] = (),
                         **fields) -> PretrainAudioConfig:
    """A YAML mapping of PretrainAudioConfig fields (or the defaults), then `fields` that are not None,
    then `key=value` overrides (YAML scalars; `hf_config.key=value` for a model field)."""
    d: dict[str, Any] = {}
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: config file not found")
        d = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(d, dict):
            raise ConfigError(f"{path}: expected a mapping of pretrain-audio options")
    d.update({k: v for k, v in fields.items() if v is not None})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. max_updates=2000")
        section, _, sub = key.partition(".")
        if sub and section == "hf_config":
            d["hf_config"] = {**d.get("hf_config", SMALL_CONFIG), sub: yaml.safe_load(value)}
        else:
            d[key] = yaml.safe_load(value)
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
        print(f"pretrain-audio: left out {len(records) - len(kept)} of {len(records)} utterances shorter than "
              f"{min_frames * 10} ms")
    if not kept:
        raise ConfigError(f"pretrain-audio: no utterance of at least {min_frames * 10} ms in "
                          f"{', '.join(cfg.manifests)}")
    return kept


def build_pretraining_model(cfg: PretrainAudioConfig) -> torch.nn.Module:
    """Wav2Vec2ForPreTraining: from cfg.init, or a random init from cfg.hf_config."""
    from transformers import AutoConfig, Wav2Vec2ForPreTraining

    if not cfg.init:
        fields = dict(cfg.hf_config)
        config = AutoConfig.for_model(fields.pop("model_type", "wav2vec2"), **fields)
        config.mask_time_prob, config.mask_time_length = cfg.mask_prob, cfg.mask_length  # masked_spec_embed
        return Wav2Vec2ForPreTraining(config)
    try:
        config = AutoConfig.from_pretrained(cfg.init, mask_time_prob=cfg.mask_prob, mask_time_length=cfg.mask_length)
        return Wav2Vec2ForPreTraining.from_pretrained(cfg.init, config=config, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"{cfg.init}: cannot load a wav2vec2 model to pretrain from "
                                f"({str(e).splitlines()[0]})") from None


def pretraining_targets(frames: torch.Tensor, width: int, cfg: PretrainAudioConfig,
                        num_negatives: int) -> tuple[np.ndarray, np.ndarray]:
    """Masked spans over the unpadded frames (B, T') bool, and for every frame `num_negatives` distractors
    (B, T', K): indices into the flattened (B * T') frames, drawn from the masked frames of its utterance."""
    valid = (~lengths_to_padding_mask(frames.cpu(), width)).long()
    mask = _compute_mask_indices((len(frames), width), cfg.mask_prob, cfg.mask_length, valid, cfg.min_masks)
    return mask, _sample_negative_indices((len(frames), width), num_negatives, mask)


def pretraining_loss(model: torch.nn.Module, waves: torch.Tensor, lengths: torch.Tensor,
                     cfg: PretrainAudioConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Contrastive + diversity loss per masked frame for a batch of waves (B, T) with lengths (B,) samples."""
    config = model.config
    frames = model._get_feat_extract_output_lengths(lengths)
    width = int(model._get_feat_extract_output_lengths(torch.tensor(waves.size(1))))
    mask, negatives = pretraining_targets(frames, width, cfg, config.num_negatives)
    padding = lengths_to_padding_mask(lengths, waves.size(1))
    attention_mask = (~padding).long() if config.feat_extract_norm == "layer" else None
    out = model(waves.masked_fill(padding, 0.0), attention_mask=attention_mask,
                mask_time_indices=torch.from_numpy(mask).to(waves.device),
                sampled_negative_indices=torch.from_numpy(negatives).to(waves.device))
    n = float(mask.sum())
    stats = {"contrastive_loss": out.contrastive_loss.detach() / n, "diversity_loss": out.diversity_loss.detach() / n,
             "perplexity": out.codevector_perplexity.detach(), "masked_frames": torch.tensor(n)}
    return out.loss / n, stats


def _compute_mask_indices(*args):
    from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices as compute

    return compute(*args)


def _sample_negative_indices(*args):
    from transformers.models.wav2vec2.modeling_wav2vec2 import _sample_negative_indices as sample

    return sample(*args)


@dataclass
class PretrainState:
    step: int = 0
    epoch: int = 0
    batches_in_epoch: int = 0


class AudioPretrainer:
    """The pretraining loop: one optimiser step per batch, gumbel temperature annealing, logs, checkpoints."""

    def __init__(self, cfg: PretrainAudioConfig, device: torch.device):
        self.cfg, self.device, self.out = cfg, device, Path(cfg.out)
        self.waveform = WaveformConfig(do_normalize=cfg.do_normalize)
        self.data = WaveformDataset(pretraining_records(cfg), self.waveform, base_dir=".")
        self.model = build_pretraining_model(cfg).to(device)
        self.optimizer = build_optimizer(self.model, cfg.lr, (0.9, 0.98), cfg.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, cfg.warmup_updates)
        self.sampler = BucketBatchSampler(self.data.sizes, cfg.max_tokens, cfg.max_sentences or None, shuffle=True,
                                          seed=cfg.seed)
        self.state = PretrainState()
        self.log = JsonLog(self.out)

    def _batches(self) -> Iterator[Batch]:
        while True:
            self.sampler.load_state_dict({"epoch": self.state.epoch, "position": self.state.batches_in_epoch})
            loader = DataLoader(self.data, batch_sampler=self.sampler, collate_fn=collate, generator=torch.Generator())
            for batch in loader:
                self.state.batches_in_epoch += 1
                yield batch
            self.state.epoch += 1
            self.state.batches_in_epoch = 0

    def temperature(self) -> float:
        start, floor, decay = self.cfg.gumbel_temperature
        return max(start * decay ** self.state.step, floor)

    def train(self) -> PretrainState:
        cfg = self.cfg
        batches = self._batches()
        bar = tqdm(total=cfg.max_updates, initial=self.state.step, desc="pretrain-audio", unit="upd", disable=None)
        sums: dict[str, float] = {}
        while self.state.step < cfg.max_updates:
            stats = self._update(next(batches))
            sums = {k: sums.get(k, 0.0) + v for k, v in stats.items()}
            bar.update(1)
            bar.set_postfix(loss=f"{stats['loss']:.3f}")
            if self.state.step % cfg.log_interval == 0:
                n = cfg.log_interval
                self.log.write({"type": "pretrain", "step": self.state.step, "epoch": self.state.epoch,
                                **{k: v / n for k, v in sums.items()}, "lr": self.scheduler.get_last_lr()[0],
                                "temperature": self.temperature()})
                sums = {}
            if cfg.save_interval_updates and self.state.step % cfg.save_interval_updates == 0:
                self.save()
        bar.close()
        self.save()
        return self.state

    def _update(self, batch: Batch) -> dict[str, float]:
        self.model.train()
        self.model.set_gumbel_temperature(self.temperature())
        loss, stats = pretraining_loss(self.model, batch.feats.to(self.device), batch.feat_lengths.to(self.device),
                                       self.cfg)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm or math.inf)
        if torch.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.state.step += 1
        return {"loss": float(loss.detach()), "gnorm": float(norm), **{k: float(v) for k, v in stats.items()}}

    def save(self) -> None:
        """The Hugging Face directory (file by file, each replaced atomically), then the training state."""
        from transformers import Wav2Vec2FeatureExtractor

        staging = self.out / ".staging"
        shutil.rmtree(staging, ignore_errors=True)
        self.model.save_pretrained(staging)
        Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=self.waveform.sample_rate, padding_value=0.0,
                                 do_normalize=self.waveform.do_normalize,
                                 return_attention_mask=self.model.config.feat_extract_norm == "layer",
                                 ).save_pretrained(staging)
        for path in sorted(staging.iterdir()):
            _fsync(path)
            os.replace(path, self.out / path.name)
        staging.rmdir()
        save_checkpoint(self.out / STATE_FILE, {
            "pretrain_config": asdict(self.cfg), "model": self.model.state_dict(),
            "train_state": {"state": asdict(self.state), "optimizer": self.optimizer.state_dict(),
                            "scheduler": self.scheduler.state_dict(), "rng": rng_state()}})

    def load_state(self, ckpt: dict[str, Any]) -> None:
        self.model.load_state_dict(ckpt["model"])
        ts = ckpt["train_state"]
        self.optimizer.load_state_dict(ts["optimizer"])
        self.scheduler.load_state_dict(ts["scheduler"])
        self.state = PretrainState(**ts["state"])
        set_rng_state(ts["rng"])


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def pretrain_audio(cfg: PretrainAudioConfig, resume: bool = True) -> PretrainState:
    """Pretrains as `cfg` says into cfg.out; with `resume`, continues exactly from cfg.out/STATE_FILE."""
    from speechmt.training.run import pick_device, seed_everything

    seed_everything(cfg.seed)
    trainer = AudioPretrainer(cfg, pick_device(cfg.device))
    state_path = Path(cfg.out) / STATE_FILE
    if resume and state_path.exists():
        trainer.load_state(load_checkpoint(state_path, map_location=trainer.device))
        print(f"resumed from {state_path} at update {trainer.state.step}")
    return trainer.train()
