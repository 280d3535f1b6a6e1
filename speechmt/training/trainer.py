"""The training loop: stages of data streams, weighted objectives, accumulation, clipping, autocast,
validation, checkpoints and exact resume (mid-stage and across stage boundaries)."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from speechmt.checkpoint import save_checkpoint
from speechmt.config import ExperimentConfig
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import Batch
from speechmt.data.loader import make_loader, resolve_workers
from speechmt.models.delta import load_model_state, model_state, trained_keys
from speechmt.tasks import OBJECTIVES, ObjectiveSettings, Stage, TaskData, stages_of, task_losses
from speechmt.training import distributed as dist
from speechmt.training.log import JsonLog, Meter
from speechmt.training.optim import build_optimizer, build_scheduler
from speechmt.training.state import TrainState, check_base, rank_seed, rng_state, set_rng_state, update_freq_per_rank

LAST, BEST = "checkpoint_last.safetensors", "checkpoint_best.safetensors"


DataFn = Callable[[TaskData, bool], "Dataset | None"]
"""(stream, train) -> its training dataset (train) or dev dataset (None when it has none)."""


def fixed_data(train_data: Dataset, valid_data: Dataset | None = None) -> DataFn:
    """A DataFn for one-stream runs over datasets built beforehand (benchmarks, tests)."""
    return lambda spec, train: train_data if train else valid_data


def draw_streams(seed: int, step: int, ratios: list[float], k: int) -> list[int]:
    """The streams of an update's k batches under mix "sample": drawn by `ratios`, a function of (seed, step)
    alone, so that a resumed run and every rank draw the same."""
    return random.Random(f"{seed}:{step}").choices(range(len(ratios)), weights=ratios, k=k)


@dataclass
class Stream:
    """One data stream of the current stage: its spec, datasets and batch sampler."""

    spec: TaskData
    train: Dataset
    valid: Dataset | None
    sampler: BucketBatchSampler
    loader: DataLoader  # over `sampler`'s batches, for the whole stage
    valid_loader: DataLoader | None = None  # over this rank's dev batches (Trainer._valid_batches)
    valid_padding: int = 0


class Trainer:
    """Trains `model` through the configured stages (`stages_of(cfg.train)`); `data` builds each stage's
    datasets when the stage begins. Checkpoints carry `extras` (the model bundle's entries: speechmt.bundle) so that a
    checkpoint alone is enough to translate; `valid_decoder(model, stream)` scores dev decoding; `on_save()`
    runs after each checkpoint_last is written (e.g. an export). A model with a `before_update(step)` method
    has it called before each update (e.g. a temperature schedule)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        model: torch.nn.Module,
        settings: ObjectiveSettings,
        data: DataFn,
        extras: dict[str, Any],
        device: torch.device,
        pad_id: int = 0,
        valid_decoder: Callable[[torch.nn.Module, TaskData], dict[str, float]] | None = None,
        on_save: Callable[[], None] | None = None,
    ):
        self.cfg, self.settings, self.data, self.extras, self.device = cfg, settings, data, extras, device
        self.valid_decoder, self.pad_id, self.on_save = valid_decoder, pad_id, on_save
        self.stages = stages_of(cfg.train)
        self.model = model.to(device)
        self.trainable = {n: p.requires_grad for n, p in self.model.named_parameters()}
        t = cfg.train
        self.update_runner = UpdateRunner(self.model, settings)
        self.runner = dist.wrap(self.update_runner, device, t.strategy)
        self.sharded = dist.is_sharded(self.runner)
        self.update_freq = update_freq_per_rank(t.update_freq, t.update_freq_world_size, dist.world_size())
        self.optimizer = build_optimizer(self.model, t.lr, t.adam_betas, t.weight_decay, t.lr_scale)
        self.scheduler = build_scheduler(self.optimizer, t.warmup_updates)
        self.scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16" and device.type == "cuda")
        self.streams: list[Stream] = []
        self.streams_of: int | None = None  # the stage self.streams belong to
        self.state = TrainState()
        self.save_dir = Path(t.save_dir)
        self.log = JsonLog(self.save_dir, enabled=dist.is_main())
        if self.sharded and valid_decoder is not None:
            self.valid_decoder = None
            if dist.is_main():
                print(
                    "train.strategy fsdp: validation reports dev losses only; decode checkpoints with speechmt "
                    "evaluate (a sharded model decodes on no single rank)"
                )

    # --- data ---

    def _loader(self, data, sampler, seed: int = 0) -> DataLoader:
        """A loader to keep for the stage (persistent workers: speechmt.data.loader); it draws on its own
        generator (seeded per stream and rank), never on the global RNG (exact resume)."""
        d = self.cfg.data
        return make_loader(
            data,
            sampler,
            pad_id=self.pad_id,
            num_workers=resolve_workers(d.num_workers),
            device=self.device,
            context=d.loader_context,
            seed=rank_seed(seed, dist.rank()),
        )

    def _enter_stage(self) -> Stage:
        """The current stage with its freezing applied and its streams built."""
        stage = self.stages[self.state.stage]
        frozen = tuple(stage.freeze)
        for name, p in self.model.named_parameters():
            p.requires_grad = self.trainable[name] and not (frozen and name.startswith(frozen))
        if self.streams_of != self.state.stage:
            self._close_streams()  # the last stage's workers stop before this one's start
            self.streams = [self._stream(spec, i) for i, spec in enumerate(stage.tasks)]
            self.streams_of = self.state.stage
        return stage

    def _close_streams(self) -> None:
        """Drops the streams and with them their loaders' workers."""
        self.streams, self.streams_of = [], None

    def _stream(self, spec: TaskData, i: int) -> Stream:
        t, d = self.cfg.train, self.cfg.data
        train = self.data(spec, True)
        sampler = BucketBatchSampler(
            train.sizes,
            spec.max_tokens or d.max_tokens,
            spec.max_sentences or d.max_sentences or None,
            shuffle=True,
            seed=t.seed + 7919 * i,
            rank=dist.rank(),
            world_size=dist.world_size(),
            groups=self._direction_groups(train),
            temperature=d.sampling_temperature,
        )
        return Stream(spec, train, self.data(spec, False), sampler, self._loader(train, sampler, t.seed + 7919 * i))

    def _direction_groups(self, train: Dataset):
        """Each training item's direction index (N,), for sampling by direction (data.sampling_temperature != 1
        over several data.directions); None otherwise or for a dataset of no directions (pretraining's)."""
        d = self.cfg.data
        directions = getattr(train, "directions", None)
        return (
            directions()[0]
            if directions is not None and d.sampling_temperature != 1 and len(d.directions) > 1
            else None
        )

    def _position(self, i: int) -> tuple[int, int]:
        if i == 0:
            return self.state.epoch, self.state.batches_in_epoch
        return tuple(self.state.positions.get(self.streams[i].spec.key, (0, 0)))

    def _set_position(self, i: int, epoch: int, batches: int) -> None:
        if i == 0:
            self.state.epoch, self.state.batches_in_epoch = epoch, batches
        else:
            self.state.positions[self.streams[i].spec.key] = [epoch, batches]

    def _batches(self, i: int, max_epochs: int) -> Iterator[Batch]:
        """Stream i's batches from its current position on, epoch after epoch (until max_epochs if set)."""
        stream = self.streams[i]
        while True:
            epoch, done = self._position(i)
            if max_epochs and epoch >= max_epochs:
                return
            stream.sampler.load_state_dict({"epoch": epoch, "position": done})
            if done and done >= len(stream.sampler):  # stopped right after the epoch's last batch: the next
                self._set_position(i, epoch + 1, 0)  # (the sampler would start this epoch again)
                continue
            stream.sampler.set_epoch(epoch)
            if hasattr(stream.train, "set_epoch"):
                stream.train.set_epoch(epoch)
            for batch in stream.loader:
                done += 1
                self._set_position(i, epoch, done)
                yield batch
            self._set_position(i, epoch + 1, 0)

    def _group(self, stage: Stage, iters: list[Iterator[Batch]]) -> list[tuple[int, Batch]]:
        """The batches of one update: update_freq of every stream (mix together) or update_freq drawn by
        the streams' ratios (mix sample, a function of seed and step, so resume draws the same). Empty
        when the first stream has run its epochs."""
        n = self.update_freq
        if stage.mix == "sample":
            picks = draw_streams(self.cfg.train.seed, self.state.step, [s.spec.ratio for s in self.streams], n)
        else:
            picks = [i for i in range(len(iters)) for _ in range(n)]
        group = []
        for i in picks:
            batch = next(iters[i], None)
            if batch is None:  # only the first stream ends (at the stage's epochs)
                break
            group.append((i, batch))
        return group

    # --- training ---

    def _autocast(self):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.train.precision)
        enabled = dtype is not None and (self.device.type == "cuda" or dtype == torch.bfloat16)
        return torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=enabled)

    def train(self) -> TrainState:
        """Runs the stages from the current state until max_updates or the last stage's end."""
        t = self.cfg.train
        self._log_setup()
        bar = tqdm(
            total=t.max_updates,
            initial=self.state.step,
            desc="train",
            unit="upd",
            disable=None if dist.is_main() else True,
            mininterval=1.0,
        )
        while self.state.step < t.max_updates and self.state.stage < len(self.stages):
            self._run_stage(bar)
            if self.state.step >= t.max_updates or self.state.stage == len(self.stages) - 1:
                break
            self._next_stage()
        bar.close()
        self.save(LAST)
        self._close_streams()
        return self.state

    def _log_setup(self) -> None:
        """The run's shape in the log: ranks, strategy, and the batch an update sums over all ranks."""
        t, d, ws = self.cfg.train, self.cfg.data, dist.world_size()
        self.log.write(
            {
                "type": "setup",
                "step": self.state.step,
                "world_size": ws,
                "local_world_size": dist.local_world_size(),
                "strategy": t.strategy if ws > 1 or dist.launched() else "single",
                "device": str(self.device),
                "precision": t.precision,
                "update_freq_per_rank": self.update_freq,
                "batches_per_update": self.update_freq * ws,
                "max_tokens_per_update": self.update_freq * ws * d.max_tokens,
            }
        )

    def _run_stage(self, bar: tqdm) -> None:
        stage, t = self._enter_stage(), self.cfg.train
        max_epochs = min(e for e in (stage.epochs, t.max_epochs) if e) if stage.epochs or t.max_epochs else 0
        iters = [self._batches(i, max_epochs if i == 0 else 0) for i in range(len(self.streams))]
        meter = Meter()
        while self.state.step < t.max_updates and not (
            stage.updates and self.state.step - self.state.stage_start >= stage.updates
        ):
            group = self._group(stage, iters)
            if not group:
                break
            self._update(group, meter)
            bar.update(1)
            bar.set_postfix(
                loss=f"{meter.value('loss'):.3f}",
                lr=f"{self.scheduler.get_last_lr()[0]:.2e}",
                utt_s=f"{meter.rate('nsentences'):.1f}",
            )
            self._after_update(meter)

    def _next_stage(self) -> None:
        """Moves to the next stage: fresh stream positions and best dev loss; a checkpoint marks the edge."""
        s = self.state
        s.stage, s.stage_start, s.epoch, s.batches_in_epoch, s.positions = s.stage + 1, s.step, 0, 0, {}
        s.best_loss, s.stage_epochs = math.inf, s.epochs_done
        self.log.write({"type": "stage", "step": s.step, "stage": s.stage, "name": self.stages[s.stage].name})
        self._enter_stage()
        self.save(LAST)

    def _normalisers(self, group: list[tuple[int, Batch]]) -> dict[tuple[int, str], float]:
        """Each (stream, objective)'s normaliser summed over the update's batches on this rank."""
        sums: dict[tuple[int, str], float] = {}
        for i, batch in group:
            for name in self.streams[i].spec.weights:
                sums[(i, name)] = sums.get((i, name), 0.0) + OBJECTIVES[name].normaliser(batch)
        return sums

    def _update(self, group: list[tuple[int, Batch]], meter: "Meter") -> None:
        """One optimiser step over `group`: the weighted objectives, each divided by its normaliser summed
        over the whole update (all batches, all ranks), known before backward. The division is split into
        a factor on each loss (reference / own normaliser: 1 when they agree, as CE and CTC do) and one
        scaling of the gradients by the reference normaliser, as fairseq divides by the sample size. Ramped
        weights (TaskData.ramp) are those of the stage's update step - stage_start, a function of the state."""
        self.runner.train()
        if hasattr(self.model, "before_update"):
            self.model.before_update(self.state.step)
        local = self._normalisers(group)
        applied = {i: self.streams[i].spec.weights_at(self.state.step - self.state.stage_start) for i, _ in group}
        keys = sorted(local)
        totals = dict(zip(keys, dist.all_reduce_sums([local[k] for k in keys])))  # one collective
        reference = max(next(iter(totals.values())), 1.0)
        factors = {k: reference / max(v, 1.0) for k, v in totals.items()}
        sums: dict[tuple[int, str, str], Any] = {}
        nsent = ntok = 0
        for j, (i, batch) in enumerate(group):
            spec = self.streams[i].spec
            batch = batch.to(self.device)
            with dist.no_sync_unless(self.runner, last=j == len(group) - 1), self._autocast():
                loss, parts = self.runner(
                    batch, spec.task, applied[i], {n: factors[(i, n)] for n in spec.weights}, spec.parts
                )
            self.scaler.scale(loss).backward()
            for k, v in parts.items():
                sums[(i, *k)] = sums.get((i, *k), 0) + v
            nsent, ntok = nsent + len(batch), ntok + (int(batch.tgt_lengths.sum()) if batch.tgt is not None else 0)
        sums = {k: float(v) for k, v in sums.items()}  # one device sync per update
        self.scaler.unscale_(self.optimizer)
        scale = dist.world_size() / reference  # DDP averages gradients over ranks
        torch._foreach_mul_([p.grad for p in self.model.parameters() if p.grad is not None], scale)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip_norm or float("inf"))
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
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
        meter.add(**self._per_unit(sums, local, applied), nsentences=nsent, ntokens=ntok, gnorm=float(norm))

    def _per_unit(
        self,
        sums: dict[tuple[int, str, str], float],
        norms: dict[tuple[int, str], float],
        weights: dict[int, dict[str, float]] | None = None,
    ) -> dict[str, float]:
        """Logged values: every objective and stat per unit of its normaliser (named `objective[_stat]`,
        prefixed by the stream's key when the stage has several), and `loss`, the objectives weighted by
        `weights` {stream: {objective: weight}} (default: the streams' full weights, unramped)."""
        out, total = {}, 0.0
        for (i, name, stat), value in sums.items():
            spec = self.streams[i].spec
            per = value / max(norms.get((i, name), 0.0), 1.0)
            label = f"{name}_{stat}" if stat else name
            out[f"{spec.key}_{label}" if len(self.streams) > 1 else label] = per
            if not stat:
                total += (weights[i] if weights else spec.weights)[name] * per
        return {"loss": total, **out}

    def _after_update(self, meter: "Meter") -> None:
        t, step = self.cfg.train, self.state.step
        if step % t.log_interval == 0:
            self.log.write(
                {
                    "type": "train",
                    "step": step,
                    "epoch": self.state.epoch,
                    **meter.summary(),
                    "lr": self.scheduler.get_last_lr()[0],
                    "nonfinite_skipped": self.state.nonfinite_skipped,
                }
            )
            meter.reset()
        if t.validate_interval_updates and step % t.validate_interval_updates == 0:
            self.validate()
        if t.save_interval_updates and step % t.save_interval_updates == 0:
            self.save_numbered()
        self._after_epoch()

    def _after_epoch(self) -> None:
        """checkpoint_epoch<E>.safetensors when the update finished the first stream's E-th epoch (E counted over
        the run's stages) and E is a multiple of train.save_interval_epochs; the last keep_last_epochs kept."""
        s, every = self.state, self.cfg.train.save_interval_epochs
        finished = s.epoch + (s.batches_in_epoch >= len(self.streams[0].sampler))
        done = s.stage_epochs + finished
        if done <= s.epochs_done:
            return
        s.epochs_done = done
        if every and done % every == 0:
            name = f"checkpoint_epoch{done}.safetensors"
            self.save(name)
            self.save(LAST)  # an epoch's end is a place to resume from (fairseq's checkpoint_last at each)
            s.kept_epochs.append(name)
            while len(s.kept_epochs) > self.cfg.train.keep_last_epochs:
                self._remove(s.kept_epochs.pop(0))

    def _valid_batches(self, stream: Stream) -> tuple[list[list[int]], int]:
        """This rank's share of a dev set's batches (every world_size-th, none repeated, so the sums are
        exact) and how many repeats of its first batch follow them: under FSDP every rank runs as many
        forwards as the others (each gathers weights with all ranks); the repeats are not counted."""
        sampler = BucketBatchSampler(
            stream.valid.sizes, stream.spec.max_tokens or self.cfg.data.max_tokens, shuffle=False
        )
        batches, ws = sampler.rank_batches(), dist.world_size()
        mine = batches[dist.rank() :: ws]
        padding = (-(-len(batches) // ws) - len(mine)) if self.sharded else 0
        return mine + [batches[0]] * padding, padding

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Every stream's objectives on its dev set (per unit of their normalisers; `valid_loss` is their
        weighted sum over the streams), split across the ranks and summed, and the valid decoder's scores
        (greedy BLEU or WER) of the stage's first stream, decoded once (rank 0); keeps
        checkpoint_best.safetensors by valid_loss within the stage."""
        if self.streams_of != self.state.stage:
            self._enter_stage()
        if all(s.valid is None for s in self.streams):
            return {}
        self.model.eval()
        runner = self.runner if self.sharded else self.update_runner  # DDP's forward would sync buffers
        sums: dict[tuple[int, str, str], float] = {}
        norms: dict[tuple[int, str], float] = {}
        for i, stream in enumerate(self.streams):
            if stream.valid is None:
                continue
            if stream.valid_loader is None:
                batches, stream.valid_padding = self._valid_batches(stream)
                stream.valid_loader = self._loader(stream.valid, batches)
            ones, counted = {name: 1.0 for name in stream.spec.weights}, len(stream.valid_loader) - stream.valid_padding
            for j, batch in enumerate(stream.valid_loader):
                with self._autocast():
                    _, parts = runner(
                        batch.to(self.device), stream.spec.task, stream.spec.weights, ones, stream.spec.parts
                    )
                if j >= counted:
                    continue
                for name in {name for name, _ in parts}:
                    norms[(i, name)] = norms.get((i, name), 0.0) + OBJECTIVES[name].normaliser(batch)
                for k, v in parts.items():
                    sums[(i, *k)] = sums.get((i, *k), 0.0) + float(v)
        sums = self._summed(sums)
        norms = self._summed(norms)
        per = self._per_unit(sums, norms)
        result = {"valid_loss": per.pop("loss"), **{f"valid_{k}": v for k, v in per.items()}}
        if self.valid_decoder is not None and dist.is_main():
            result.update(self.valid_decoder(self.model, self.streams[0].spec))
        self.log.write({"type": "valid", "step": self.state.step, **result})
        if result["valid_loss"] < self.state.best_loss:
            self.state.best_loss = result["valid_loss"]
            self.save(BEST)
        return result

    @staticmethod
    def _summed(values: dict) -> dict:
        """{key: value summed over the ranks} for keys every rank holds or not: the union of the ranks' keys
        (gathered) in one order, then one all-reduce."""
        keys = sorted({k for rank_keys in dist.all_gather_object(sorted(values)) for k in rank_keys})
        return dict(zip(keys, dist.all_reduce_sums([values.get(k, 0.0) for k in keys])))

    def _trainable_names(self) -> set[str]:
        """The parameters the run trains, including those its current stage freezes for a while."""
        return {name for name, trains in self.trainable.items() if trains}

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint holds: the bundle, model config and weights (gathered whole under FSDP), the train
        config, and the state to resume from, with every rank's RNG streams. A collective: all ranks call it."""
        base = self.extras.get("base")
        if self.sharded:
            from speechmt.training.fsdp import full_optimizer_state, full_state, reshard_all

            reshard_all(self.runner)
            keys = trained_keys(self.model, self._trainable_names()) if base is not None else None
            weights = full_state(self.model, keys)
            optimizer = full_optimizer_state(self.optimizer)
        else:
            weights = model_state(self.model, base, self._trainable_names())
            optimizer = self.optimizer.state_dict()
        rngs = dist.all_gather_object(rng_state())
        return {
            **self.extras,
            "model_config": asdict(self.model.config),
            "model": weights,
            "train_config": self.cfg.to_dict(),
            "train_state": {
                "state": asdict(self.state),
                "optimizer": optimizer,
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": rngs[0],
                "rng_ranks": rngs,
                "world_size": dist.world_size(),
            },
        }

    def save(self, name: str) -> None:
        """Writes save_dir/name (rank 0; the state gathered from all ranks first)."""
        state = self.checkpoint_state()  # every rank: gathering the state is a collective
        if dist.is_main():
            save_checkpoint(self.save_dir / name, state)
            if name == LAST and self.on_save is not None:
                self.on_save()

    def _remove(self, name: str) -> None:
        if dist.is_main():
            (self.save_dir / name).unlink(missing_ok=True)

    def save_numbered(self) -> None:
        """checkpoint_<step>.safetensors (the last `keep_last` kept) and checkpoint_last.safetensors."""
        name = f"checkpoint_{self.state.step}.safetensors"
        self.save(name)
        self.save(LAST)
        self.state.kept.append(name)
        while len(self.state.kept) > self.cfg.train.keep_last:
            self._remove(self.state.kept.pop(0))

    def load_state(self, ckpt: dict[str, Any]) -> None:
        """Restores model, optimiser, scheduler, scaler, position and this rank's RNG streams from a checkpoint
        (exact resume; at another world size, ranks without a saved stream draw from a fresh seed)."""
        ts = ckpt["train_state"]
        if self.sharded:
            from speechmt.training.fsdp import load_full_optimizer_state, load_full_state

            check_base(ckpt.get("base"), self.extras.get("base"))
            load_full_state(self.model, ckpt["model"], strict=ckpt.get("base") is None)
            load_full_optimizer_state(self.optimizer, ts["optimizer"])
        else:
            load_model_state(self.model, ckpt["model"], ckpt.get("base"))
            self.optimizer.load_state_dict(ts["optimizer"])
        self.scheduler.load_state_dict(ts["scheduler"])
        self.scaler.load_state_dict(ts["scaler"])
        self.state = TrainState(**ts["state"])
        rngs = ts.get("rng_ranks") or [ts["rng"]]
        if dist.rank() < len(rngs) and ts.get("world_size", 1) == dist.world_size():
            set_rng_state(rngs[dist.rank()])
        elif dist.rank() == 0:
            set_rng_state(ts["rng"])
        else:
            seed = rank_seed(self.cfg.train.seed + self.state.step, dist.rank())
            random.seed(seed), np.random.seed(seed % 2**32), torch.manual_seed(seed)


def loss_parts(losses: dict[str, tuple[torch.Tensor, dict]]) -> dict[tuple[str, str], torch.Tensor]:
    """{(objective, ""): its detached summed loss, (objective, stat): each stat's sum}."""
    parts = {}
    for name, (loss, stats) in losses.items():
        parts[(name, "")] = loss.detach()
        parts.update({(name, k): v for k, v in stats.items()})
    return parts


class UpdateRunner(torch.nn.Module):
    """One batch's weighted objectives as a module, so that DDP sees the whole computation as one forward."""

    def __init__(self, model: torch.nn.Module, settings: ObjectiveSettings):
        super().__init__()
        self.model, self.settings = model, settings

    def forward(
        self,
        batch: Batch,
        task: str,
        weights: dict[str, float],
        factors: dict[str, float],
        parts: list[str] | tuple[str, ...] = (),
    ) -> tuple[torch.Tensor, dict[tuple[str, str], torch.Tensor]]:
        """(sum of weight * factor * loss, loss_parts) of the batch's `parts` (all when empty)."""
        losses = task_losses(self.model, batch, task, weights, self.settings, parts)
        total = sum(
            weights[n] * loss * factors[n] if weights[n] != 1.0 else loss * factors[n]
            for n, (loss, _) in losses.items()
        )
        return total, loss_parts(losses)
