"""Training throughput on this machine: utterances and audio seconds per wall second for model presets.

Runs `--updates` optimiser steps of the ST task on a prepared split (real batches from the bucketing
sampler, SpecAugment on, fp32 on CPU or the given device) after `--warmup` untimed steps, and reports the
median over `--repeats` timed windows.

    python benchmarks/bench_train.py --data recipes/mustc/data/en-de --vocab recipes/mustc/data/en-de/spm_st_2000.model
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.models.build import build_model, count_parameters
from speechmt.models.config import preset
from speechmt.training.builders import (
    build_dataset,
    frontend_for,
    load_tokenizers,
    model_config_for,
    objective_settings_for,
)
from speechmt.training.log import Meter
from speechmt.training.trainer import Trainer, fixed_data


def measure(name: str, args) -> dict:
    base, _, overrides = name.partition(":")
    extra = dict(kv.split("=") for kv in overrides.split(",") if kv)
    cfg = ExperimentConfig(
        model=preset(base, **{k: int(v) for k, v in extra.items()}),
        data=DataConfig(dir=args.data, tgt_vocab=args.vocab, max_tokens=args.max_tokens),
        train=TrainConfig(
            max_updates=10**9,
            save_dir="/tmp/speechmt-bench",
            log_interval=10**9,
            validate_interval_updates=0,
            save_interval_updates=0,
            warmup_updates=100,
        ),
    )
    toks = load_tokenizers(cfg.data)
    frontend = frontend_for(cfg)
    data = build_dataset(cfg, "train", toks, frontend, train=True)
    model = build_model(model_config_for(cfg, toks))
    trainer = Trainer(cfg, model, objective_settings_for(cfg, toks), fixed_data(data), {}, torch.device(args.device))
    batches = trainer._batches()
    windows = []
    for w in range(args.repeats + 1):
        utts = frames = 0
        start = time.perf_counter()
        for _ in range(args.updates if w else args.warmup):
            group = [next(batches)]
            utts += len(group[0])
            frames += int(group[0].feat_lengths.sum())
            trainer._update(group, Meter())
        if w:
            elapsed = time.perf_counter() - start
            windows.append((utts / elapsed, frames / 100 / elapsed))
    return {
        "preset": name,
        "params": count_parameters(model),
        "utt_per_s": statistics.median(u for u, _ in windows),
        "audio_s_per_s": statistics.median(a for _, a in windows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["tiny", "s2t_s"],
        help="preset names, optionally with int overrides: s2t_s:encoder_layers=6,ffn_dim=1024",
    )
    parser.add_argument("--max-tokens", type=int, default=10000)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"device {args.device}, threads {torch.get_num_threads()}, max_tokens {args.max_tokens}")
    for name in args.presets:
        r = measure(name, args)
        print(
            f"{name:8s} {r['params'] / 1e6:6.1f}M params  {r['utt_per_s']:7.1f} utt/s  "
            f"{r['audio_s_per_s']:7.1f} audio s/s  (median of {args.repeats} x {args.updates} updates)"
        )


if __name__ == "__main__":
    main()
