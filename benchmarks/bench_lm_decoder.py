"""Training-update time of speech translation into a language-model decoder (research/mustc/conf/st_lm_gemma.yaml: frozen Whisper
base encoder, cached, -> conv bridge -> Gemma 3 270M with LoRA, output layer trimmed to the targets' tokens; and
`lm-ctc`, conf/st_lm_gemma_ctc.yaml's stage: LoRA in Whisper's top 3 layers, a CTC head over the LM's tokens and
the CTC compressor's soft embeddings, trained with CE + 0.3 CTC), against the top-3 Whisper recipe
(conf/st_whisper_base_top3_lora.yaml, the default model's), on the same real batches in one process; and the LM
with its whole 262k-row output layer, to show what the trimming saves. A setting with `@bf16` (e.g. `lm@bf16`) is
the same model trained under bf16 autocast on the CPU (`train.precision: bf16`): float32 weights, bf16 matmuls.

Each setting's encoder input is prepared once outside the timing, as training reads it from the cache: the
states after Whisper's layer 3 (top-3 recipe) or after its last layer (LM). A timed update is forward,
label-smoothed cross entropy, backward and an Adam step. Settings alternate within each repeat; the report gives
each one's median seconds per update and its ratio to the first setting's median.

    python benchmarks/bench_lm_decoder.py --manifest DATA/train.jsonl [--whisper whisper-base] \
        [--lm gemma-3-270m] [--settings top3 lm lm-ctc lm-fullhead] [--seconds 40] [--batches 3] [--repeats 3] \
        [--threads 2] [--ctc-checkpoint exp/lm_ctc/checkpoint_avg.safetensors] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_frozen_layers import batches, targets  # the same batches and targets as that benchmark

from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import read_manifest
from speechmt.frontend.whisper_mel import mel_settings
from speechmt.hub import resolve_pretrained
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.models.ctc_head import FIRST_LABEL
from speechmt.tasks.losses import ctc_loss
from speechmt.tokenizers.lm import LMTokenizer
from speechmt.tokenizers.whisper import WhisperTokenizer
from speechmt.training.run import init_encoder_from

LM_LORA = {
    "rank": 16,
    "alpha": 32,
    "dropout": 0.05,
    "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def build(name: str, whisper: str, lm: str, texts: list[str], transcripts: list[str]):
    """(model, tokenizer, tag, frozen encoder layers) of a setting."""
    torch.manual_seed(0)
    if name == "top3":
        tok = WhisperTokenizer.from_pretrained(resolve_pretrained(whisper))
        cfg = ModelConfig(
            encoder={"kind": "whisper", "name_or_path": whisper, "finetune": "lora", "frozen_layers": 3},
            decoder={"kind": "whisper", "finetune": "lora"},
            lora={"rank": 32, "alpha": 64, "dropout": 0.05},
            dropout=0.1,
            pad_id=tok.pad_id,
        )
        return build_model(cfg), tok, "<|de|>", 3
    tok = LMTokenizer.trimmed(lm, texts, ["<de>"])
    vocab = tok.config.vocab
    if name == "lm-fullhead":  # the same model with every row of the LM's output layer
        full = LMTokenizer.from_pretrained(lm, role="source")
        vocab = vocab + tuple(i for i in range(len(full)) if i not in set(vocab))
    resolved = {"decoder.vocab": list(vocab), "decoder.prompt": list(tok.prompt_ids("en"))}  # what a run derives
    if name == "lm-ctc":  # conf/st_lm_gemma_ctc.yaml
        src = LMTokenizer.from_pretrained(lm, role="source")
        ctc_vocab = tuple(dict.fromkeys(i for t in transcripts for i in src.encode(t)))
        cfg = ModelConfig(
            encoder={"kind": "whisper", "name_or_path": whisper, "finetune": "lora", "frozen_layers": 3},
            shrink={"kind": "ctc", "embed": "lm"},
            ctc=True,
            src_vocab_size=FIRST_LABEL + len(ctc_vocab),
            decoder={"kind": "lm", "name_or_path": lm, "finetune": "lora"},
            lora={**LM_LORA, "targets": LM_LORA["targets"] + ["out_proj", "fc1", "fc2"]},
            dropout=0.1,
            pad_id=tok.pad_id,
        )
        return build_model(cfg, resolved={**resolved, "ctc_vocab": list(ctc_vocab)}), (tok, src), "<de>", 3
    cfg = ModelConfig(
        encoder={"kind": "whisper", "name_or_path": whisper, "finetune": "frozen"},
        shrink={"kind": "conv", "layers": 2, "channels": 1024},
        decoder={"kind": "lm", "name_or_path": lm, "finetune": "lora"},
        lora=LM_LORA,
        dropout=0.1,
        pad_id=tok.pad_id,
    )
    return build_model(cfg, resolved=resolved), tok, "<de>", None


def inputs(model, batch, frozen: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder input training reads from the cache: the states after layer `frozen` (None: the last)."""
    x, lengths = collate_sequences([m for m, _ in batch])
    with torch.no_grad():
        model.speech_encoder.eval()
        x, lengths = model.speech_encoder.states(x, lengths)
        model.speech_encoder.train()
    return x, lengths


def ctc_labels(model, src: LMTokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """CTC targets of transcripts in the LM's tokens, as the CTC head labels them: (N,) and lengths (B,)."""
    rows = [model.ctc_head.labels(torch.tensor(src.encode(t), dtype=torch.long)) for t in texts]
    return torch.cat(rows), torch.tensor([len(r) for r in rows])


def update(model, opt, x, lengths, inp, gold, ctc_targets=None, bf16: bool = False) -> float:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        enc = model.encode_speech(x, lengths, precomputed=True)
        logits = model.decode(inp, enc)
        loss = F.cross_entropy(logits.float().flatten(0, 1), gold.flatten(), ignore_index=-100, label_smoothing=0.1)
        if ctc_targets is not None:  # conf/st_lm_gemma_ctc.yaml's 0.3 CTC, per target token as the trainer does
            labels, label_lengths = ctc_targets
            loss = (
                loss + 0.3 * ctc_loss(enc.ctc_logits, enc.ctc_lengths, labels, label_lengths, 4) / label_lengths.sum()
            )
    opt.zero_grad()
    loss.backward()
    opt.step()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True)
    p.add_argument("--whisper", default="whisper-base")
    p.add_argument("--lm", default="gemma-3-270m")
    names = ["top3", "lm", "lm-ctc", "lm-fullhead"]
    p.add_argument("--settings", nargs="+", default=names, choices=names + [f"{n}@bf16" for n in names])
    p.add_argument(
        "--seconds",
        type=float,
        default=40.0,
        help="audio per batch (research/mustc/conf/st_lm_gemma.yaml's max_tokens)",
    )
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--ctc-checkpoint",
        help="a trained CTC bridge (conf/ctc_lm_gemma.yaml's run) for lm-ctc: its "
        "speech encoder and CTC head, so that the LM reads as many segments as training does (a random "
        "head labels nearly every frame apart: ~10x the segments)",
    )
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    manifest = Path(args.manifest)
    records = read_manifest(manifest)
    data = batches(records, manifest.parent, args.seconds, args.batches, mel_settings(resolve_pretrained(args.whisper)))
    texts = [r.tgt_text for r in records]
    starts = [sum(len(b) for b in data[:k]) for k in range(len(data))]  # batches() takes records in order
    transcripts = [[r.src_text for r in records[s : s + len(b)]] for s, b in zip(starts, data)]
    runs = {}
    for name in args.settings:
        base = name.removesuffix("@bf16")
        model, tok, tag, frozen = build(base, args.whisper, args.lm, texts, [r.src_text for r in records])
        if base == "lm-ctc" and args.ctc_checkpoint:
            init_encoder_from(model, args.ctc_checkpoint, ("speech_encoder.", "ctc_head."))
        tok, src = tok if isinstance(tok, tuple) else (tok, None)
        opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=1e-4)
        runs[name] = (
            model.train(),
            opt,
            [
                (
                    *inputs(model, b, frozen),
                    *targets(tok, [t for _, t in b], tag),
                    ctc_labels(model, src, t) if src is not None else None,
                )
                for b, t in zip(data, transcripts)
            ],
        )
    times: dict[str, list[float]] = {n: [] for n in args.settings}
    for _ in range(args.repeats):
        for name, (model, opt, prepared) in runs.items():
            times[name] += [update(model, opt, *b, bf16=name.endswith("@bf16")) for b in prepared]
    ref = statistics.median(times[args.settings[0]])
    report = {
        "whisper": args.whisper,
        "lm": args.lm,
        "threads": args.threads,
        "batches": len(data),
        "seconds_of_audio_per_batch": args.seconds,
        "repeats": args.repeats,
        "utterances_per_batch": statistics.mean(len(b) for b in data),
        "seconds_per_update": {},
    }
    print(
        f"{len(data)} batches of ~{args.seconds:.0f} s ({report['utterances_per_batch']:.1f} utterances), "
        f"{args.repeats} repeats, {args.threads} threads; ratio to {args.settings[0]}"
    )
    for name in args.settings:
        med = statistics.median(times[name])
        trainable = sum(q.numel() for q in runs[name][0].parameters() if q.requires_grad)
        report["seconds_per_update"][name] = {
            "median": med,
            "ratio": med / ref,
            "trainable": trainable,
            "all": times[name],
        }
        print(f"{name}: median {med:.2f} s per update ({med / ref:.2f}x), {trainable:,} trained parameters")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
