"""Whisper's encoder at the utterance's own length (speechmt) against Whisper's 30 s input, same weights, same clips.

For each input mode: encoder seconds per audio second (median of --repeats passes over the clips, the two
modes alternating), and zero-shot quality: greedy transcripts with Whisper's own decoder and prompt
(<|startoftranscript|><|en|><|transcribe|><|notimestamps|>), WER against the manifest's transcripts
(fairseq's normalisation, as `speechmt evaluate` scores ASR); plus how far apart the two modes' encoder
states are (mean cosine similarity of the frames both have).

    python benchmarks/bench_whisper_trim.py --manifest DATA/tst-COMMON.jsonl [--model whisper-base] \
        [--limit 100] [--repeats 3] [--threads 2] [--json OUT]
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
from speechmt.decoding.search import DecodeOptions, greedy_search
from speechmt.evaluation.metrics import wer
from speechmt.frontend.whisper_mel import WhisperMelConfig, mel_settings, whisper_log_mel
from speechmt.hub import resolve_pretrained
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.tokenizers.whisper import WhisperTokenizer


def encode_pass(model, mels: list[torch.Tensor], batch: int) -> tuple[float, list]:
    """Seconds to encode all clips `batch` at a time, and the EncoderOutputs."""
    outs, start = [], time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(mels), batch):
            x, lengths = collate_sequences(mels[i : i + batch])
            outs.append(model.encode_speech(x, lengths))
    return time.perf_counter() - start, outs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True)
    p.add_argument("--model", default="whisper-base", help="hub id, folder, or a name under $SPEECHMT_HOME")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    folder = resolve_pretrained(args.model)
    tok = WhisperTokenizer.from_pretrained(folder)
    model = build_model(
        ModelConfig(
            encoder={"kind": "whisper", "name_or_path": args.model},
            decoder={"kind": "whisper"},
            dropout=0.0,
            pad_id=tok.pad_id,
        )
    ).eval()
    records = read_manifest(args.manifest)[: args.limit]
    base_dir = Path(args.manifest).parent
    waves = [record_audio(r, base_dir) for r in records]
    audio = sum(len(w) for w in waves) / 16000
    mel = mel_settings(folder)
    modes = {
        "trimmed": [whisper_log_mel(w, mel) for w in waves],
        "padded_30s": [whisper_log_mel(w, WhisperMelConfig(mel.n_mels, pad_seconds=30)) for w in waves],
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    outs = {}
    for _ in range(args.repeats):
        for mode, mels in modes.items():
            seconds, outs[mode] = encode_pass(model, mels, args.batch)
            times[mode].append(seconds / audio)
    options = DecodeOptions(
        beam_size=1,
        prefix=tok.prefix_ids("<|en|>"),
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        suppress=tok.suppress_ids,
        max_len_b=120,
    )
    refs = [r.src_text for r in records]
    result = {"clips": len(records), "audio_seconds": round(audio, 1), "model": args.model, "threads": args.threads}
    for mode in modes:
        hyps = [tok.decode(t) for enc in outs[mode] for t in greedy_search(model, enc, options)]
        result[mode] = {
            "encoder_s_per_audio_s": round(statistics.median(times[mode]), 4),
            "wer": round(wer(hyps, refs).score, 2),
            "example": hyps[0],
        }
    sims = []
    for a, b in zip(outs["trimmed"], outs["padded_30s"]):
        for i, n in enumerate(a.lengths.tolist()):
            sims.append(float(F.cosine_similarity(a.x[i, :n], b.x[i, :n], dim=-1).mean()))
    result["mean_cosine_trimmed_vs_padded"] = round(statistics.mean(sims), 4)
    result["speedup_trimmed"] = round(
        result["padded_30s"]["encoder_s_per_audio_s"] / result["trimmed"]["encoder_s_per_audio_s"], 2
    )
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
