"""The training loop: accumulation, clipping, autocast, validation, checkpoints and exact resume."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from speechmt.config import ExperimentConfig
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import Batch, collate
from speechmt.tasks import TASKS, TaskConfig
from speechmt.training import distributed as dist
from speechmt.training.checkpoint import save_checkpoint
from speechmt.training.delta import load_model_state, model_state
from speechmt.training.optim import build_optimizer, build_scheduler

LAST, BEST = "checkpoint_last.safetensors", "checkpoint_best.safetensors"


@dataclass
class TrainState:
    """Where a run is: updates done, epoch, batches of this epoch consumed, best dev loss, skipped updates."""

    step: int = 0
    epoch: int = 0
    batches_in_epoch: int = 0
    best_loss: float = math.inf
    nonfinite_skipped: int = 0
    kept: list[str] = field(default_factory=list)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores rng_state(); the generators take CPU byte tensors, wherever the checkpoint was loaded to."""
    torch.set_rng_state(state["torch"].cpu())
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


class Trainer:
    """Trains `model` on `train_data` with the configured task; checkpoints carry `extras` (tokenizers,
    feature settings) so that a checkpoint alone is enough to translate."""

    def __init__(self, cfg: ExperimentConfig, model: torch.nn.Module, task_cfg: TaskConfig, train_data,
                 valid_data, extras: dict[str, Any], device: torch.device, pad_id: int = 0,
                 valid_decoder: Callable[[torch.nn.Module], dict[str, float]] | None = None):
        self.cfg, self.task_cfg, self.extras, self.device = cfg, task_cfg, extras, device
        self.valid_decoder = valid_decoder
        self.model = model.to(device)
        self.task = TASKS[cfg.train.task]
        self.runner = dist.wrap(TaskRunner(self.model, self.task, task_cfg), device)
        t = cfg.train
        self.optimizer = build_optimizer(self.model, t.lr, t.adam_betas, t.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, t.warmup_updates)
        self.scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16" and device.type == "cuda")
        self.train_data, self.valid_data, self.pad_id = train_data, valid_data, pad_id
        self.sampler = BucketBatchSampler(train_data.sizes, cfg.data.max_tokens, cfg.data.max_sentences or None,
                                          shuffle=True, seed=t.seed, rank=dist.rank(), world_size=dist.world_size())
        self.state = TrainState()
        self.save_dir = Path(t.save_dir)
        self.log = JsonLog(self.save_dir, enabled=dist.is_main())

    def _loader(self, data, sampler) -> DataLoader:
        # an explicit generator keeps the DataLoader from drawing on the global RNG (exact resume)
        return DataLoader(data, batch_sampler=sampler, collate_fn=lambda b: collate(b, self.pad_id),
                          num_workers=self.cfg.data.num_workers, generator=torch.Generator())

    def _autocast(self):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.train.precision)
        enabled = dtype is not None and self.device.type == "cuda"
        return torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=enabled)

    def _batches(self) -> Iterator[Batch]:
        """Training batches from the current position on, epoch after epoch, until max_epochs."""
        t = self.cfg.train
        while not t.max_epochs or self.state.epoch < t.max_epochs:
            self.sampler.load_state_dict({"epoch": self.state.epoch, "position": self.state.batches_in_epoch})
            self.sampler.set_epoch(self.state.epoch)
            if hasattr(self.train_data, "set_epoch"):
                self.train_data.set_epoch(self.state.epoch)
            for batch in self._loader(self.train_data, self.sampler):
                self.state.batches_in_epoch += 1
                yield batch
            self.state.epoch += 1
            self.state.batches_in_epoch = 0

    def train(self) -> TrainState:
        """Runs until max_updates (or max_epochs); returns the final state."""
        t = self.cfg.train
        batches = self._batches()
        bar = tqdm(total=t.max_updates, initial=self.state.step, desc="train", unit="upd",
                   disable=None if dist.is_main() else True, mininterval=1.0)
        meter = Meter()
        while self.state.step < t.max_updates:
            group = [b for _, b in zip(range(t.update_freq), batches)]
            if not group:
                break
            self._update(group, meter)
            bar.update(1)
            bar.set_postfix(loss=f"{meter.value('loss'):.3f}", lr=f"{self.scheduler.get_last_lr()[0]:.2e}",
                            utt_s=f"{meter.rate('nsentences'):.1f}")
            self._after_update(meter)
        bar.close()
        self.save(LAST)
        return self.state

    def _update(self, group: list[Batch], meter: "Meter") -> None:
        """One optimiser step over `group` (update_freq batches): summed losses, normalised by tokens."""
        self.runner.train()
        sums: dict[str, Any] = {}
        for i, batch in enumerate(group):
            batch = batch.to(self.device)
            with dist.no_sync_unless(self.runner, last=i == len(group) - 1), self._autocast():
                loss, stats = self.runner(batch)
            self.scaler.scale(loss).backward()
            for k, v in stats.items():
                sums[k] = sums.get(k, 0) + v
        totals = {k: float(v) for k, v in sums.items()}  # one device sync per update
        ntokens = dist.all_reduce_sum(totals["ntokens"])
        self.scaler.unscale_(self.optimizer)
        scale = dist.world_size() / max(ntokens, 1.0)  # DDP averages gradients over ranks
        torch._foreach_mul_([p.grad for p in self.model.parameters() if p.grad is not None], scale)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip_norm or float("inf"))
        if not torch.isfinite(norm):
            self.state.nonfinite_skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.update()
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.state.step += 1
        loss_sum = totals["ce_loss"] if "ctc_loss" not in totals else (
            (1 - self.task_cfg.ctc_weight) * totals["ce_loss"] + self.task_cfg.ctc_weight * totals["ctc_loss"])
        per_token = {k: totals[k] / max(totals["ntokens"], 1) for k in ("nll_loss", "ctc_loss") if k in totals}
        meter.add(loss=loss_sum / max(totals["ntokens"], 1), nsentences=totals["nsentences"],
                  ntokens=totals["ntokens"], gnorm=float(norm), **per_token)

    def _after_update(self, meter: "Meter") -> None:
        t, step = self.cfg.train, self.state.step
        if step % t.log_interval == 0:
            self.log.write({"type": "train", "step": step, "epoch": self.state.epoch, **meter.summary(),
                            "lr": self.scheduler.get_last_lr()[0], "nonfinite_skipped": self.state.nonfinite_skipped})
            meter.reset()
        if t.validate_interval_updates and step % t.validate_interval_updates == 0:
            self.validate()
        if t.save_interval_updates and step % t.save_interval_updates == 0:
            self.save_numbered()

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Dev loss per target token (label-smoothed and nll), and the valid decoder's scores (greedy BLEU
        or WER) when there is one; keeps checkpoint_best.safetensors by the loss."""
        if self.valid_data is None:
            return {}
        self.model.eval()
        sampler = BucketBatchSampler(self.valid_data.sizes, self.cfg.data.max_tokens, shuffle=False,
                                     rank=dist.rank(), world_size=dist.world_size())
        loss = nll = ntok = 0.0
        for batch in self._loader(self.valid_data, sampler):
            with self._autocast():
                _, stats = self.task(self.model, batch.to(self.device), self.task_cfg)
            loss, nll, ntok = loss + float(stats["ce_loss"]), nll + float(stats["nll_loss"]), ntok + stats["ntokens"]
        loss, nll, ntok = (dist.all_reduce_sum(v) for v in (loss, nll, ntok))
        result = {"valid_loss": loss / max(ntok, 1), "valid_nll": nll / max(ntok, 1),
                  "valid_ppl": math.exp(min(nll / max(ntok, 1), 50))}
        if self.valid_decoder is not None and dist.is_main():
            result.update(self.valid_decoder(self.model))
        self.log.write({"type": "valid", "step": self.state.step, **result})
        if result["valid_loss"] < self.state.best_loss:
            self.state.best_loss = result["valid_loss"]
            self.save(BEST)
        return result

    def checkpoint_state(self) -> dict[str, Any]:
        return {"model_config": asdict(self.model.config), "model": model_state(self.model, self.extras.get("base")),
                "train_config": self.cfg.to_dict(), **self.extras,
                "train_state": {"state": asdict(self.state), "optimizer": self.optimizer.state_dict(),
                                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                                "rng": rng_state()}}

    def save(self, name: str) -> None:
        if dist.is_main():
            save_checkpoint(self.save_dir / name, self.checkpoint_state())

    def save_numbered(self) -> None:
        """checkpoint_<step>.safetensors (the last `keep_last` kept) and checkpoint_last.safetensors."""
        name = f"checkpoint_{self.state.step}.safetensors"
        self.save(name)
        self.save(LAST)
        self.state.kept.append(name)
        while len(self.state.kept) > self.cfg.train.keep_last:
            old = self.save_dir / self.state.kept.pop(0)
            if dist.is_main():
                old.unlink(missing_ok=True)

    def load_state(self, ckpt: dict[str, Any]) -> None:
        """Restores model, optimiser, scheduler, scaler, RNG and position from a checkpoint (exact resume)."""
        load_model_state(self.model, ckpt["model"], ckpt.get("base"))
        ts = ckpt["train_state"]
        self.optimizer.load_state_dict(ts["optimizer"])
        self.scheduler.load_state_dict(ts["scheduler"])
        self.scaler.load_state_dict(ts["scaler"])
        self.state = TrainState(**ts["state"])
        set_rng_state(ts["rng"])


class TaskRunner(torch.nn.Module):
    """A task as a module, so that DDP sees the whole task computation as one forward."""

    def __init__(self, model: torch.nn.Module, task, task_cfg: TaskConfig):
        super().__init__()
        self.model, self.task, self.task_cfg = model, task, task_cfg

    def forward(self, batch: Batch):
        return self.task(self.model, batch, self.task_cfg)


class Meter:
    """Running sums of training statistics between log lines, with rates per wall second."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, float] = {}
        self.count, self.start = 0, time.perf_counter()

    def add(self, **values: float) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def value(self, key: str) -> float:
        return self.sums.get(key, 0.0) / max(self.count, 1)

    def rate(self, key: str) -> float:
        return self.sums.get(key, 0.0) / max(time.perf_counter() - self.start, 1e-9)

    def summary(self) -> dict[str, float]:
        means = {k: self.value(k) for k in ("loss", "nll_loss", "ctc_loss", "gnorm") if k in self.sums}
        return {**means, "utt_per_s": self.rate("nsentences"), "tokens_per_s": self.rate("ntokens")}


class JsonLog:
    """Appends JSON lines to save_dir/train_log.jsonl and mirrors numbers to TensorBoard when installed."""

    def __init__(self, save_dir: Path, enabled: bool = True):
        self.enabled, self.path, self.tb = enabled, save_dir / "train_log.jsonl", None
        if enabled:
            save_dir.mkdir(parents=True, exist_ok=True)
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(save_dir / "tensorboard"))
            except ImportError:
                self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        """Appends the record, and prints it as one line (above the progress bar when there is one)."""
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"time": time.time(), **record}) + "\n")
        tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        if self.tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k not in ("step", "time"):
                    self.tb.add_scalar(f"{record.get('type', 'train')}/{k}", v, record.get("step", 0))
            self.tb.flush()
