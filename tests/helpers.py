"""Small experiment configs shared by the training, decoding and CLI tests."""

from dataclasses import asdict
from pathlib import Path

from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.models.config import ModelConfig, preset
from speechmt.models.migrate import FINETUNE_FLAGS, FLAT_NAMES


def tiny_config(data: Path, save_dir: Path, **train) -> ExperimentConfig:
    """A tiny ST model on the replica: no dropout, no SpecAugment, whole training split in one batch."""
    model = preset("tiny", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    data_cfg = DataConfig(
        dir=str(data),
        src_vocab=str(data / "spm.model"),
        tgt_vocab=str(data / "spm.model"),
        spec_augment="",
        max_tokens=4000,
        cmvn="global",
    )
    defaults = dict(
        task="st",
        lr=2e-3,
        warmup_updates=10,
        max_updates=8,
        save_dir=str(save_dir),
        save_interval_updates=4,
        validate_interval_updates=4,
        log_interval=2,
        seed=3,
    )
    return ExperimentConfig(model=model, data=data_cfg, train=TrainConfig(**{**defaults, **train}))


def two_update_st(data: Path, exp: Path) -> str:
    """Trains tiny_config's ST model for 2 updates into `exp` (speechmt train, no validation decoding) and returns
    its checkpoint_last path: a model that translates badly, and quickly."""
    from speechmt.cli import main
    from speechmt.config import save_config

    save_config(tiny_config(data, exp, max_updates=2, save_interval_updates=2, valid_decode=False), exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return str(exp / "checkpoint_last.safetensors")


# shared fields added after the nesting: no flat checkpoint has them (ctc_vocab was one until it moved to the bundle)
AFTER_NESTING: tuple[str, ...] = ()
# the encoder's and decoder's fields when one dataclass held every kind's (before each kind had options of its own)
LEGACY_DEFAULTS = {
    "encoder": dict(
        layers=12,
        input_dim=80,
        subsampler="conv1d",
        conv_channels=1024,
        conv_kernels=(5, 5),
        name_or_path="",
        hf_config={},
        finetune="full",
        layerdrop=0.0,
        freeze_feature_extractor=False,
        mask_time_prob=0.0,
        mask_time_length=10,
        gradient_checkpointing=False,
    ),
    "decoder": dict(layers=6, name_or_path="", hf_config={}, finetune="full", tie_embeddings=True, output_bias=False),
    "shrink": dict(channels=1024, kernel=5, mode="mean", layers=2, embed="states"),
}


def flat_model_config(cfg: ModelConfig) -> dict:
    """`cfg` as the flat dict of a checkpoint written before the nesting (speechmt.models.migrate in reverse):
    the shared fields, every old flat name, and the encoder's three fine-tuning flags."""
    nested = asdict(cfg)
    flat = {k: v for k, v in nested.items() if not isinstance(v, dict) and k not in AFTER_NESTING}
    flat.update(
        {
            old: nested[group].get(name, LEGACY_DEFAULTS.get(group, {}).get(name))
            for old, (group, name) in FLAT_NAMES.items()
        }
    )
    flat.update({flag: cfg.encoder.finetune == mode for flag, mode in FINETUNE_FLAGS.items()})
    return flat


def tiny_wav2vec2_fields(**overrides) -> dict:
    """HF config fields of a tiny random wav2vec2: the base model's CNN geometry (20 ms frames) with 16
    channels, a 2-layer Transformer of width 32, layer-norm CNN (attention masks), no dropout."""
    fields = dict(
        model_type="wav2vec2",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=[16] * 7,
        conv_kernel=[10, 3, 3, 3, 3, 2, 2],
        conv_stride=[5, 2, 2, 2, 2, 2, 2],
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
        codevector_dim=16,
        proj_codevector_dim=16,
        num_codevector_groups=2,
        num_codevectors_per_group=8,
        num_negatives=5,
    )
    return {**fields, **overrides}


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descending from it (read from /proc: torchrun starts its workers in sessions of
    their own, which a process-group kill misses)."""
    import os

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def kill_tree(pid: int) -> None:
    """SIGKILLs `pid` and all its descendants at once, as a machine that loses power would stop them."""
    import os
    import signal

    for p in process_tree(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
