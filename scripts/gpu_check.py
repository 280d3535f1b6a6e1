"""The GPU check: what only a GPU machine can show, in one run of a few minutes. Run it first whenever a GPU is lent:

    python scripts/gpu_check.py --out OUT            # on the GPU machine (.venv with a CUDA torch)
    python scripts/gpu_check.py --device cpu --out OUT --updates 8   # the same path on CPUs (gloo; no fp16)

A tiny random Whisper encoder (trained in full) in front of a tiny random Gemma 3 LM decoder (LoRA on a bf16 base
but in the fp32 runs), on the MuST-C
replica in tests/assets, each run under torchrun (the process group joined at world size 1 too, so one GPU runs
NCCL):
- bf16, deterministic kernels: an uninterrupted run of --updates updates, and the same run killed (SIGKILL) after
  its half-way checkpoint and resumed: equal bit for bit;
- fp16 with the grad scaler: finite losses, the scaler's state in the checkpoint, the loss going down;
- FSDP (fully_shard) at world size 1: equal to the DDP run within bf16 tolerance;
- with 2 GPUs or more: DDP on 2 ranks equals 1 rank at the same global batch, and FSDP on 2 ranks equals DDP;
- decoding the dev split with beam search from the last checkpoint on the device.
Each check's outcome, numbers and seconds go to OUT/gpu_check.json (and are printed); the exit status is 1 when
any check fails. The logs of every run stay in OUT/runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from speechmt.checkpoint import load_checkpoint  # noqa: E402
from speechmt.config import DataConfig, ExperimentConfig, TrainConfig, save_config  # noqa: E402
from speechmt.models.config import ModelConfig  # noqa: E402
from tests.helpers import kill_tree  # noqa: E402


def prepare(out: Path) -> tuple[Path, Path, Path]:
    """The MuST-C replica prepared (with a joint vocabulary), a tiny Whisper and a tiny Gemma 3 LM, under out/."""
    from speechmt.data.mustc import prepare_mustc
    from speechmt.data.prepare import PrepareConfig
    from speechmt.data.vocab import train_from_manifests
    from speechmt.tokenizers.sentencepiece import TokenizerConfig
    from tests.lm_helpers import tiny_lm_dir
    from tests.whisper_helpers import tiny_whisper_dir

    data = out / "data"
    if not (data / "spm.model").exists():
        prepare_mustc(ROOT / "tests/assets/mustc", data, "de", cfg=PrepareConfig(jobs=1))
        manifests = [data / f"{s}.jsonl" for s in ("train", "dev", "tst-COMMON")]
        tok = train_from_manifests(
            manifests, ("src_text", "tgt_text"), TokenizerConfig(vocab_size=150, lang_tags=("<en>", "<de>"))
        )
        tok.save(data / "spm.model")
    return data, tiny_whisper_dir(out / "whisper", d_model=64), tiny_lm_dir(out / "lm", hidden=64)


def config(
    data: Path, whisper: Path, lm: Path, save_dir: Path, device: str, updates: int, dropout: float = 0.1, **train
) -> ExperimentConfig:
    """The checked model: Whisper encoder (full) -> conv shrink -> LM decoder with LoRA; one utterance per batch,
    2 batches per update summed over the ranks (update_freq 2 given for 1 rank)."""
    model = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": str(whisper), "finetune": "full"},
        shrink={"kind": "conv", "layers": 2, "channels": 64},
        decoder={
            "kind": "lm",
            "name_or_path": str(lm),
            "finetune": "lora",  # a bf16 base under
            "base_dtype": "float32" if train.get("precision") == "fp32" else "bfloat16",
        },  # LoRA
        lora={"rank": 4, "alpha": 8, "dropout": 0.0},
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        n_heads=2,
    )
    data_cfg = DataConfig(dir=str(data), spec_augment="", max_tokens=250, src_lang="en", tgt_lang="de", num_workers=1)
    defaults = dict(
        task="st",
        lr=3e-3,
        warmup_updates=4,
        max_updates=updates,
        update_freq=2,
        update_freq_world_size=1,
        save_dir=str(save_dir),
        save_interval_updates=max(updates // 2, 1),
        validate_interval_updates=max(updates // 2, 1),
        valid_decode=False,
        log_interval=2,
        seed=1,
        label_smoothing=0.0,
        keep_last=2,
        device="auto" if device == "cuda" else "cpu",
        precision="bf16",
        deterministic=True,
    )
    return ExperimentConfig(model=model, data=data_cfg, train=TrainConfig(**{**defaults, **train}))


def _command(cfg_path: Path, ranks: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        "--module",
        "speechmt",
        "train",
        "--config",
        str(cfg_path),
    ]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def train(cfg: ExperimentConfig, ranks: int = 1, kill_at: Path | None = None) -> dict:
    """`speechmt train` of cfg under torchrun; with `kill_at`, every process is killed once that file exists.
    Returns the last checkpoint (after a kill, the run is not finished: the caller resumes it)."""
    save_dir = Path(cfg.train.save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    path = save_dir.with_suffix(".yaml")
    save_config(cfg, path)
    with open(save_dir.with_suffix(".log"), "a") as log:
        proc = subprocess.Popen(
            _command(path, ranks), env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
        )
        deadline = time.monotonic() + 500
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_at is not None and kill_at.exists():
                kill_tree(proc.pid)  # the launcher and its workers (in sessions of their own) at once
                proc.wait()
                return {}
            time.sleep(0.05)
        if proc.poll() is None:
            kill_tree(proc.pid)
            raise RuntimeError(f"{save_dir.name}: no end within 500 s (log: {save_dir.with_suffix('.log')})")
    if proc.returncode != 0:
        raise RuntimeError(f"{save_dir.name}: exit status {proc.returncode} (log: {save_dir.with_suffix('.log')})")
    return load_checkpoint(save_dir / "checkpoint_last.safetensors")


def max_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two checkpoints' weights (inf when their names differ)."""
    if a["model"].keys() != b["model"].keys():
        return float("inf")
    return max((x.float() - b["model"][k].float()).abs().max().item() for k, x in a["model"].items())


def train_losses(save_dir: Path, key: str = "ce_nll") -> list[float]:
    lines = [json.loads(x) for x in (save_dir / "train_log.jsonl").read_text().splitlines()]
    return [x[key] for x in lines if x["type"] == "train"]


class Checks:
    """Runs named checks, each a function returning (passed, numbers), and keeps their outcomes."""

    def __init__(self, out: Path):
        self.out, self.results = out, {}

    def run(self, name: str, fn: Callable[[], tuple[bool, dict]]) -> None:
        start = time.monotonic()
        try:
            passed, numbers = fn()
        except Exception as e:  # a failed check is reported and the others still run
            passed, numbers = False, {"error": f"{type(e).__name__}: {e}"}
        self.results[name] = {"passed": bool(passed), "seconds": round(time.monotonic() - start, 1), **numbers}
        print(f"{'PASS' if passed else 'FAIL'} {name}: {json.dumps(self.results[name])}", flush=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.results, indent=1) + "\n")


def environment(device: str) -> dict:
    info = {"torch": torch.__version__, "device": device, "gpus": torch.cuda.device_count()}
    if device == "cuda":
        info.update(
            cuda=torch.version.cuda,
            name=torch.cuda.get_device_name(0),
            bf16=torch.cuda.is_bf16_supported(),
            nccl=torch.distributed.is_nccl_available(),
        )
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check")))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument(
        "--max-ranks",
        type=int,
        default=None,
        help="at most this many ranks (default: the GPUs here; 2 on --device cpu)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; --device cpu runs the same checks on CPUs", file=sys.stderr)
        return 2
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    checks = Checks(args.out)
    checks.results["environment"] = environment(args.device)
    print(json.dumps(checks.results["environment"]), flush=True)
    data, whisper, lm = prepare(args.out)
    n = args.updates

    def cfg(name: str, dropout: float = 0.1, **train) -> ExperimentConfig:
        return config(data, whisper, lm, runs / name, args.device, n, dropout, **train)

    got: dict[str, dict] = {}

    def uninterrupted() -> tuple[bool, dict]:
        got["bf16"] = train(cfg("bf16"))
        losses = train_losses(runs / "bf16")
        return got["bf16"]["train_state"]["state"]["step"] == n and losses[-1] < losses[0], {
            "updates": n,
            "first_nll": losses[0],
            "last_nll": losses[-1],
        }

    def kill_and_resume() -> tuple[bool, dict]:
        train(cfg("resumed"), kill_at=runs / "resumed" / f"checkpoint_{max(n // 2, 1)}.safetensors")
        resumed = train(cfg("resumed"))
        diff = max_difference(resumed, got["bf16"])
        return diff == 0.0, {"max_abs_difference": diff}

    def fp16() -> tuple[bool, dict]:
        ckpt = train(cfg("fp16", precision="fp16"))
        losses = train_losses(runs / "fp16")
        scaler = ckpt["train_state"]["scaler"]
        finite = all(x == x and abs(x) != float("inf") for x in losses)
        return finite and losses[-1] < losses[0] and bool(scaler), {
            "first_nll": losses[0],
            "last_nll": losses[-1],
            "scale": scaler.get("scale"),
            "nonfinite_skipped": ckpt["train_state"]["state"]["nonfinite_skipped"],
        }

    def fsdp(ranks: int, against: str) -> Callable[[], tuple[bool, dict]]:
        def check() -> tuple[bool, dict]:
            ckpt = train(cfg(f"fsdp{ranks}", strategy="fsdp"), ranks)
            diff = max_difference(ckpt, got[against])
            return diff < 2e-2, {"max_abs_difference_vs_" + against: diff, "tolerance": 2e-2}

        return check

    def two_ranks() -> tuple[bool, dict]:  # without dropout: one rank draws no masks for two
        one = train(cfg("fp32_1", dropout=0.0, precision="fp32"), 1)
        two = train(cfg("fp32_2", dropout=0.0, precision="fp32"), 2)
        got["bf16_2"] = train(cfg("bf16_2"), 2)  # what FSDP on 2 ranks is held to
        diff = max_difference(two, one)
        return diff < 1e-3, {"max_abs_difference": diff, "tolerance": 1e-3}

    def decode() -> tuple[bool, dict]:
        from speechmt.decoding.translate import load_model
        from speechmt.evaluation.evaluate import decode_split

        model = load_model(runs / "bf16" / "checkpoint_last.safetensors", device=args.device)
        start = time.monotonic()
        decoded = decode_split(model, data, "dev", model.decode_options(beam=4))
        return len(decoded.hyps) == len(decoded.records) > 0, {
            "utterances": len(decoded.hyps),
            "decode_seconds": round(time.monotonic() - start, 2),
            "first": decoded.hyps[0],
        }

    checks.run("bf16_ddp_world_size_1", uninterrupted)
    checks.run("kill_and_exact_resume", kill_and_resume)
    if args.device == "cuda":
        checks.run("fp16_grad_scaler", fp16)
    checks.run("fsdp_world_size_1", fsdp(1, "bf16"))
    max_ranks = args.max_ranks or (2 if args.device == "cpu" else torch.cuda.device_count())
    if max_ranks >= 2:
        checks.run("ddp_2_ranks_equal_1", two_ranks)
        checks.run("fsdp_2_ranks", fsdp(2, "bf16_2"))
    checks.run("decode_on_device", decode)
    failed = [k for k, v in checks.results.items() if k != "environment" and not v["passed"]]
    print(f"gpu_check: {len(checks.results) - 1 - len(failed)} passed, {len(failed)} failed {failed or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
