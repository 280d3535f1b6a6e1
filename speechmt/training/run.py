"""`run_training(cfg)`: builds data, model and trainer from an ExperimentConfig and trains, resuming
from save_dir/checkpoint_last.safetensors when it exists (or from the newest readable
checkpoint_<step>.safetensors when checkpoint_last is unreadable)."""

from __future__ import annotations

import dataclasses
import os
import random
import re
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from speechmt.bundle import ModelBundle
from speechmt.checkpoint import CheckpointError, average_checkpoints, load_checkpoint, save_checkpoint
from speechmt.config import ExperimentConfig, init_source, save_config
from speechmt.data.manifest import record_directions
from speechmt.decoding.transcribe import SEARCH
from speechmt.frontend import Frontend
from speechmt.models.build import build, translator_weights
from speechmt.models.config import ModelConfig
from speechmt.models.ctc_head import RESOLVED as CTC_RESOLVED
from speechmt.models.delta import base_reference
from speechmt.models.encoders.whisper_transcript import set_targets
from speechmt.models.migrate import checkpoint_resolved
from speechmt.tasks import TaskData, stages_of
from speechmt.tasks.schedule import all_tasks
from speechmt.tokenizers.pair import Tokenizers
from speechmt.training import distributed as dist
from speechmt.training.builders import (
    build_dataset,
    decoder_side,
    decoder_tag,
    decoder_tags,
    decoder_tokenizer,
    direction_tags,
    frontend_for,
    main_task,
    model_config_for,
    objective_settings_for,
    resolved_for,
    stream_dir,
    teacher_for,
    tokenizers_for,
    with_teacher,
)
from speechmt.training.procrustes import whisper_asr_table
from speechmt.training.state import TrainState, rank_seed
from speechmt.training.trainer import LAST, Trainer


def pick_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return torch.device("cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def use_deterministic_kernels() -> None:
    """Deterministic CUDA kernels from here on (train.deterministic): cuBLAS with a fixed workspace (set before
    its first use) and torch's deterministic algorithms, warning for ops that have none."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


def init_encoder_from(
    model: torch.nn.Module, path: str, prefixes: tuple[str, ...] = ("speech_encoder.", "ctc_head.")
) -> int:
    """Copies the tensors under `prefixes` of another checkpoint whose shapes agree, e.g. an ASR model's speech
    encoder and CTC head (fairseq's load_pretrained_encoder_from) or an MT model's decoder, into `model`.
    Returns the number of tensors copied; CheckpointError when the first prefix finds none. A FAT-MLM checkpoint
    is read on a Translator's names first (FAT-ST: speechmt.models.build.translator_weights)."""
    checkpoint = load_checkpoint(path)
    theirs = ModelConfig.from_dict(checkpoint.get("model_config") or {})
    source = translator_weights(checkpoint["model"], theirs)
    own = model.state_dict()
    copied = {k: v for k, v in source.items() if k.startswith(prefixes) and k in own and own[k].shape == v.shape}
    ctc_vocabs = [
        list(r.get(CTC_RESOLVED) or ()) for r in (checkpoint_resolved(checkpoint), getattr(model, "resolved", {}))
    ]
    if "ctc_head.weight" in copied and ctc_vocabs[0] != ctc_vocabs[1]:  # the LM tokens each CTC head writes
        raise CheckpointError(
            f"{path}: its CTC head writes other LM tokens (ctc_vocab) than this model's; "
            "train both on the same transcripts, or leave ctc_head. out of the prefixes"
        )
    if not any(k.startswith(prefixes[0]) for k in copied):
        raise CheckpointError(f"{path}: no {prefixes[0].rstrip('.')} weights of matching shapes to initialise from")
    model.load_state_dict(copied, strict=False)
    return len(copied)


def dev_decoder(
    cfg: ExperimentConfig, toks: Tokenizers, frontend: Frontend, device: torch.device
) -> Callable[[torch.nn.Module, TaskData], dict[str, float]]:
    """A function scoring a model's greedy output for a stream's task on its dev split: {"valid_bleu", ...}
    or {"valid_wer"}; {} for a stream without one."""
    from speechmt.decoding.translate import LoadedModel
    from speechmt.evaluation.evaluate import decode_split, references, score

    def decode(model: torch.nn.Module, spec: TaskData) -> dict[str, float]:
        split = _valid_split(cfg, spec)
        if not split:
            return {}
        tokenizer, task = decoder_tokenizer(decoder_side(cfg), toks), spec.task
        lm = LoadedModel(model, tokenizer, decoder_tag(cfg, task), frontend, task, "(training)", device, toks.src)
        lm.directions = direction_tags(cfg).get(task, {})
        records, hyps, _, _ = decode_split(
            lm, stream_dir(cfg, spec), split, lm.decode_options(beam=1), cfg.data.max_tokens
        )
        scores = {f"valid_{k.lower()}": s.score for k, s in score(task, hyps, references(task, records)).items()}
        return scores | per_direction_scores(task, records, hyps) if len(lm.directions) > 1 else scores

    return decode


def per_direction_scores(task: str, records, hyps: list[str]) -> dict[str, float]:
    """{"valid_bleu_en-fr": ..., ...}: a multilingual model's dev scores in each direction."""
    from speechmt.evaluation.evaluate import references, score

    index, names = record_directions(records)
    out = {}
    for d, name in enumerate(names):
        mine = np.flatnonzero(index == d).tolist()
        scored = score(task, [hyps[i] for i in mine], references(task, [records[i] for i in mine]))
        out |= {f"valid_{k.lower()}_{name}": s.score for k, s in scored.items()}
    return out


def _valid_split(cfg: ExperimentConfig, spec: TaskData) -> str:
    """A stream's dev split: its own, or data.valid_split when it reads data.dir; "" for none."""
    if spec.valid_split is not None:
        return spec.valid_split
    return "" if stream_dir(cfg, spec) != cfg.data.dir else cfg.data.valid_split


def run_training(cfg: ExperimentConfig, resume: bool = True) -> TrainState:
    """Trains as `cfg` says; with `resume`, continues exactly from save_dir's last checkpoint."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = pick_device(cfg.train.device)
    dist.init(device)
    if cfg.train.deterministic:
        use_deterministic_kernels()
    seed_everything(cfg.train.seed)
    toks = tokenizers_for(cfg)
    frontend = frontend_for(cfg)
    teacher = teacher_for(cfg)  # None unless an objective needs a text teacher (LUT's distance)
    resolved = resolved_for(cfg, toks)  # what the run derives beside the config: the model bundle keeps it
    model = build(with_teacher(model_config_for(cfg, toks, resolved), teacher), transcription=SEARCH, resolved=resolved)
    if cfg.train.init_encoder_from:
        init_encoder_from(model, cfg.train.init_encoder_from, tuple(cfg.train.init_prefixes))
    for item in cfg.train.init_from:
        init_encoder_from(model, *init_source(item))

    def data(spec: TaskData, train: bool):
        split = (spec.split or cfg.data.train_split) if train else _valid_split(cfg, spec)
        return (
            build_dataset(
                cfg, split, toks, frontend, train=train, encoder=model.speech_encoder, spec=spec, teacher=teacher
            )
            if split
            else None
        )

    bundle = ModelBundle(
        model.config,
        toks,
        frontend,
        main_task(cfg),
        decoder_tags(cfg),
        decoder_side(cfg),
        base=base_reference(model),
        resolved=getattr(model, "resolved", {}),  # what the build derived (a Translator's or FAT-MLM's)
        directions=direction_tags(cfg),
    )  # what every checkpoint of the run carries
    pad_id = decoder_tokenizer(decoder_side(cfg), toks).pad_id
    aligns = any("align" in t.objectives for t in all_tasks(stages_of(cfg.train)))
    fits = cfg.train.init_procrustes and not (resume and (Path(cfg.train.save_dir) / LAST).exists())  # not on a resume
    table = None  # the LM's embeddings of Whisper's pieces: align's targets and Procrustes' pairs (whisper_asr)
    if cfg.model.encoder.transcribes and (aligns or fits):
        table = whisper_asr_table(model, cfg.model.encoder.name_or_path, cfg.model.decoder.name_or_path)
    if table is not None and aligns:
        set_targets(model.speech_encoder, table)  # the align objective's text side
    if fits:
        procrustes_at_start(cfg, model, data, objective_settings_for(cfg, toks), pad_id, device, table)
    valid_decoder = dev_decoder(cfg, toks, frontend, device) if cfg.train.valid_decode else None
    trainer = Trainer(
        cfg, model, objective_settings_for(cfg, toks), data, bundle.state_dict(), device, pad_id, valid_decoder
    )
    if dist.rank():  # every rank built the same model; from here each draws its own stream (dropout, ...)
        seed_everything(rank_seed(cfg.train.seed, dist.rank()))
    found = resume_checkpoint(Path(cfg.train.save_dir), device) if resume else None
    if found is not None:
        trainer.load_state(found[0])
        if dist.is_main():
            print(f"resumed from {found[1]} at update {trainer.state.step}")
    if dist.is_main():
        Path(cfg.train.save_dir).mkdir(parents=True, exist_ok=True)
        save_config(cfg, Path(cfg.train.save_dir) / "config.yaml")
    return trainer.train()


def procrustes_at_start(
    cfg: ExperimentConfig,
    model: torch.nn.Module,
    data: Callable,
    settings,
    pad_id: int,
    device: torch.device,
    table=None,
) -> dict[str, float]:
    """train.init_procrustes: the speech encoder's projection set by Procrustes from the first N utterances of
    the first stage's first speech stream (speechmt.training.procrustes; a whisper_asr encoder's from its states of
    them, cached as training reads them or searched live, `table` its pieces' LM embeddings: whisper_asr_table);
    printed: pairs, mean cosine before/after."""
    from speechmt.tasks import TASK_INPUTS
    from speechmt.training.procrustes import first_batches, init_projection

    spec = next((t for t in stages_of(cfg.train)[0].tasks if TASK_INPUTS[t.task] == "speech"), None)
    if spec is None:
        raise ValueError("train.init_procrustes needs a speech stream (st or asr) in the first stage")
    spec = dataclasses.replace(spec, objectives={**spec.objectives, "align": 1.0})
    if table is None and cfg.model.encoder.transcribes:
        table = whisper_asr_table(model, cfg.model.encoder.name_or_path, cfg.model.decoder.name_or_path)
    batches = first_batches(data(spec, True), cfg.train.init_procrustes, pad_id, device)
    stats = init_projection(
        model.to(device),
        batches,
        settings.first_text_id,
        settings.blank_id,
        units=cfg.train.align.units,
        table=table,
        kind=cfg.train.init_map,
    )
    if dist.is_main():
        print(
            f"init_procrustes ({cfg.train.init_map}): {stats['pairs']:.0f} token pairs, mean cosine "
            f"{stats['cosine_before']:.3f} -> {stats['cosine_after']:.3f}"
        )
    return stats


def resume_checkpoint(save_dir: Path, device: torch.device) -> tuple[dict, Path] | None:
    """(state, path) to resume from: save_dir/checkpoint_last.safetensors, or when that is unreadable the
    newest readable checkpoint_<step>.safetensors beside it, with a warning, the unreadable file renamed to
    <name>.unreadable (kept). None when there is no checkpoint_last: a fresh run. CheckpointError (one line)
    when none is readable, or for a run of an older speechmt (pickled checkpoint_last.pt), as fairseq
    stops rather than start afresh over a run's checkpoints."""
    last = save_dir / LAST
    if not last.exists():
        if (old := save_dir / "checkpoint_last.pt").exists():
            raise CheckpointError(
                f"{old}: a pickled checkpoint of an older speechmt, not loaded (pickles can run "
                f"code); to resume, convert it if you trust it: speechmt import convert {old} --out "
                f"{last} --trust; or pass --no-resume to start afresh"
            )
        return None
    try:
        return load_checkpoint(last, map_location=device), last
    except CheckpointError as e:
        error = e
    for path in reversed(numbered_checkpoints(save_dir)):
        try:
            state = load_checkpoint(path, map_location=device)
        except CheckpointError:
            continue
        dist.barrier()  # every rank has tried checkpoint_last before it is renamed
        if dist.is_main():
            kept = _unused_name(last.with_name(f"{last.name}.unreadable"))
            last.rename(kept)
            warnings.warn(
                f"{error}; resuming from {path.name}, the newest readable checkpoint beside it; "
                f"{last.name} is kept as {kept.name}",
                stacklevel=2,
            )
        return state, path
    raise CheckpointError(
        f"{error}; no readable checkpoint_<step>.safetensors beside it either; pass --no-resume to start afresh"
    )


def _unused_name(path: Path) -> Path:
    """`path`, or path.1, path.2, ... when it exists: an earlier unreadable file is never replaced."""
    n, candidate = 0, path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def numbered_checkpoints(directory: str | Path, by: str = "update") -> list[Path]:
    """A folder's numbered checkpoints, oldest first: checkpoint_<step>.safetensors (`by` "update", written every
    train.save_interval_updates updates) or checkpoint_epoch<E>.safetensors (`by` "epoch", E from 1, written at the
    end of every train.save_interval_epochs-th epoch)."""
    prefix = {"update": "checkpoint_", "epoch": "checkpoint_epoch"}[by]
    found = [
        (int(m.group(1)), p)
        for p in Path(directory).glob("checkpoint_*.safetensors")
        if (m := re.fullmatch(rf"{prefix}(\d+)\.safetensors", p.name))
    ]
    return [p for _, p in sorted(found)]


def average(inputs: list[str], last: int, out: str, by: str = "auto") -> list[Path]:
    """Averages the given checkpoint files, or the `last` numbered checkpoints of each given folder: its epoch
    checkpoints (`by` "epoch": fairseq's --num-epoch-checkpoints), its update checkpoints (`by` "update"), or with
    `by` "auto" the epoch ones when the folder has any, else the update ones. Returns the files averaged."""
    if by not in ("auto", "epoch", "update"):
        raise ValueError(f"unknown checkpoint kind {by!r}; expected auto, epoch or update")
    paths: list[Path] = []
    for item in inputs:
        p = Path(item)
        if not p.is_dir():
            paths.append(p)
            continue
        kind = by if by != "auto" else "epoch" if numbered_checkpoints(p, "epoch") else "update"
        found = numbered_checkpoints(p, kind)
        if not found and by == "epoch":
            raise CheckpointError(
                f"no checkpoint_epoch<E>.safetensors in {p} (a run writes them with train.save_interval_epochs > 0)"
            )
        paths += found[-last:]
    if not paths:
        raise CheckpointError(f"no checkpoints found in {', '.join(inputs)}")
    state = average_checkpoints(paths)
    state.pop("format", None)
    save_checkpoint(out, state)
    return paths
