"""Small experiment configs shared by the training, decoding and CLI tests."""

from pathlib import Path

from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.models.translator import preset


def tiny_config(data: Path, save_dir: Path, **train) -> ExperimentConfig:
    """A tiny ST model on the replica: no dropout, no SpecAugment, whole training split in one batch."""
    model = preset("tiny", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    data_cfg = DataConfig(dir=str(data), src_vocab=str(data / "spm.model"), tgt_vocab=str(data / "spm.model"),
                          spec_augment="", max_tokens=4000, cmvn="global")
    defaults = dict(task="st", lr=2e-3, warmup_updates=10, max_updates=8, save_dir=str(save_dir),
                    save_interval_updates=4, validate_interval_updates=4, log_interval=2, seed=3)
    return ExperimentConfig(model=model, data=data_cfg, train=TrainConfig(**{**defaults, **train}))
