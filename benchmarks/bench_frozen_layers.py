"""Training-update time of Whisper with LoRA in its encoder and decoder, against how many of its bottom encoder
layers are frozen and cached (`encoder.frozen_layers`), on the same real batches in one process.

For each setting N (0: the whole encoder adapted, as research/mustc/conf/st_whisper_base_enc_lora.yaml), the batches' encoder
input is prepared once outside the timing, as training reads it: log-mel features for N = 0, the states after
layer N for N > 0 (what the cache holds). A timed update is forward, label-smoothed cross entropy, backward and
an Adam step. The settings alternate within each repeat; the report gives each one's median seconds per update
and its ratio to N = 0's median.

    python benchmarks/bench_frozen_layers.py --manifest DATA/train.jsonl [--model whisper-base] \
        [--frozen-layers 0 3 4] [--batches 4] [--repeats 3] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import read_manifest, record_audio
from speechmt.frontend.whisper_mel import mel_settings, whisper_log_mel
from speechmt.hub import resolve_pretrained
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.tokenizers.whisper import WhisperTokenizer


def batches(records, folder: Path, seconds: float, count: int, mel) -> list[list]:
    """`count` batches of consecutive records, each up to `seconds` of audio: [(mel (T, 80), text)]."""
    out, current, total = [], [], 0.0
    for r in records:
        if total + r.n_frames / 100 > seconds and current:
            out.append(current)
            current, total = [], 0.0
            if len(out) == count:
                break
        current.append((whisper_log_mel(record_audio(r, folder), mel), r.tgt_text))
        total += r.n_frames / 100
    return out


def targets(tok: WhisperTokenizer, texts: list[str], tag: str = "<|de|>") -> tuple[torch.Tensor, torch.Tensor]:
    """(decoder input (B, U), gold next tokens (B, U), padded with -100), as training builds them."""
    rows = [torch.tensor([tok.bos_id, *tok.encode(t, lang_tag=tag)]) for t in texts]
    width = max(len(r) for r in rows) - 1
    inp = torch.full((len(rows), width), tok.pad_id)
    gold = torch.full((len(rows), width), -100)
    for i, r in enumerate(rows):
        inp[i, : len(r) - 1], gold[i, : len(r) - 1] = r[:-1], r[1:]
    return inp, gold


def setting(model_name: str, frozen: int, pad_id: int):
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": model_name, "finetune": "lora", "frozen_layers": frozen},
            decoder={"kind": "whisper", "finetune": "lora"},
            lora={"rank": 32, "alpha": 64, "dropout": 0.05},
            dropout=0.1,
            pad_id=pad_id,
        )
    )
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model.train(), opt


def inputs(model, batch, frozen: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder input training reads: log-mel, or the cached states after layer `frozen`."""
    x, lengths = collate_sequences([m for m, _ in batch])
    if frozen:
        with torch.no_grad():
            model.speech_encoder.eval()
            x, lengths = model.speech_encoder.states(x, lengths)
            model.speech_encoder.train()
    return x, lengths


def update(model, opt, x, lengths, inp, gold, precomputed: bool) -> float:
    start = time.perf_counter()
    logits = model.decode(inp, model.encode_speech(x, lengths, precomputed=precomputed))
    loss = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=-100, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True)
    p.add_argument("--model", default="whisper-base", help="hub id, folder, or a name under $SPEECHMT_HOME")
    p.add_argument("--frozen-layers", type=int, nargs="+", default=[0, 3, 4])
    p.add_argument("--seconds", type=float, default=60.0, help="audio per batch (the recipes' max_tokens 6000)")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    folder = resolve_pretrained(args.model)
    tok = WhisperTokenizer.from_pretrained(folder)
    manifest = Path(args.manifest)
    data = batches(read_manifest(manifest), manifest.parent, args.seconds, args.batches, mel_settings(folder))
    runs = {}
    for n in args.frozen_layers:
        model, opt = setting(args.model, n, tok.pad_id)
        prepared = [(*inputs(model, b, n), *targets(tok, [t for _, t in b])) for b in data]
        runs[n] = (model, opt, prepared)
    times: dict[int, list[float]] = {n: [] for n in args.frozen_layers}
    for _ in range(args.repeats):
        for n, (model, opt, prepared) in runs.items():
            times[n] += [update(model, opt, *b, precomputed=n > 0) for b in prepared]
    ref = statistics.median(times[args.frozen_layers[0]])
    report = {
        "model": args.model,
        "threads": args.threads,
        "batches": len(data),
        "utterances_per_batch": statistics.mean(len(b) for b in data),
        "repeats": args.repeats,
        "seconds_per_update": {},
    }
    print(
        f"{len(data)} batches of ~{args.seconds:.0f} s ({report['utterances_per_batch']:.1f} utterances), "
        f"{args.repeats} repeats, {args.threads} threads; ratio to frozen_layers {args.frozen_layers[0]}"
    )
    for n in args.frozen_layers:
        med = statistics.median(times[n])
        trainable = sum(p.numel() for p in runs[n][0].parameters() if p.requires_grad)
        report["seconds_per_update"][n] = {"median": med, "ratio": med / ref, "trainable": trainable}
        print(f"frozen_layers {n}: median {med:.2f} s per update ({med / ref:.2f}x), {trainable:,} trained parameters")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
