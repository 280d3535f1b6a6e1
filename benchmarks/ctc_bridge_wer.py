"""What the CTC bridge of an LM-decoder model hears: its CTC head's greedy transcript (in the LM's tokens)
of a prepared split, scored with WER/CER against the transcripts (jiwer, as `speechmt evaluate --task asr`).
The LM reads the soft embeddings of exactly these segments, so this WER bounds what its ST can get right.

    .venv/bin/python benchmarks/ctc_bridge_wer.py --model exp/lm_ctc/checkpoint_last.safetensors \\
        --data data/en-de --split tst-COMMON [--limit 200] [--out wer.json]

Prints WER, CER, the number of segments per second of audio and per transcript token, and examples.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import load_split
from speechmt.decoding.translate import load_model
from speechmt.evaluation.evaluate import _encode_batch
from speechmt.evaluation.metrics import cer, wer
from speechmt.models.ctc_head import FIRST_LABEL
from speechmt.models.shrink import ctc_segments


def greedy_ctc(enc, blank: int) -> list[list[int]]:
    """Each row's greedy CTC labels: the argmax of each run of one non-blank label (text labels only)."""
    segments, counts = ctc_segments(enc.ctc_logits, enc.ctc_lengths, blank)
    labels = enc.ctc_logits.argmax(-1)
    out = []
    for b in range(labels.size(0)):
        first = (segments[b] >= 0) & (segments[b] != torch.nn.functional.pad(segments[b][:-1], (1, 0), value=-1))
        out.append([int(x) for x in labels[b][first] if int(x) >= FIRST_LABEL])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    lm = load_model(a.model)
    head, src = lm.model.ctc_head, lm.source_tokenizer
    if head is None or not head.vocab.numel() or src is None:
        print(f"{a.model}: not a model with a CTC head over an LM's tokens (shrink.embed lm)", file=sys.stderr)
        return 2
    records, store = load_split(Path(a.data), a.split)
    records = records[: a.limit]
    hyps, segments, start = [""] * len(records), 0, time.perf_counter()
    with torch.inference_mode():
        for idx in BucketBatchSampler([r.n_frames for r in records], 20000, shuffle=False):
            enc = _encode_batch(lm, records, store, idx, Path(a.data))
            for j, labels in zip(idx, greedy_ctc(enc, 4)):
                hyps[j] = src._tok.decode(head.lm_ids(torch.tensor(labels, dtype=torch.long)).tolist()).strip()
                segments += len(labels)
    refs = [r.src_text for r in records]
    w, c = wer(hyps, refs), cer(hyps, refs)
    audio = sum(r.duration for r in records)
    tokens = sum(len(src.encode(t)) for t in refs)
    result = {
        "model": a.model,
        "split": a.split,
        "utterances": len(records),
        "wer": w.score,
        "cer": c.score,
        "segments_per_second": segments / audio,
        "segments_per_token": segments / tokens,
        "seconds": time.perf_counter() - start,
        "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:8]],
    }
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
