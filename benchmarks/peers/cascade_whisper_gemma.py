"""Peer system: zero-shot cascade, Whisper base ASR (faster-whisper) -> Gemma 3 270M prompted to translate.

No training at all: faster-whisper transcribes each clip in its source language (beam 5, int8, 30 s input
windows; run in the peer environment .venv-peers by benchmarks/peers/faster_whisper_peer.py), then Gemma 3 270M,
a base language model, continues a 3-shot plain-text prompt, e.g. for English -> German

    English: <sentence>\\nGerman: <translation>\\n\\n   (three everyday pairs, none from any test set)
    English: <transcript>\\nGerman:

greedily, and its output up to the first newline is the translation. The direction is the split's (every record
names its src_lang and tgt_lang) or --src-lang/--tgt-lang; the shots are the same three sentences in each language
of speechmt.decoding.text_generators.SHOTS (written for these prompts). Runs in the project's .venv (torch +
transformers); scores with speechmt's metric code (sacreBLEU BLEU and chrF, as `speechmt evaluate`) and
writes a peer hypotheses file that `speechmt research benchmark --peer FILE.json` also reads:

    .venv/bin/python benchmarks/peers/cascade_whisper_gemma.py --data DATA --split tst-REAL \\
        --out eval/cascade_whisper_gemma.tst-REAL.json

DATA is a prepared data folder (`speechmt data prepare ...`, holding SPLIT.jsonl). Beside OUT.json go OUT.asr.json
(the Whisper transcription, a faster_whisper_peer.py file) and OUT.tsv (id, transcript, hypothesis,
reference). `--asr-json` reuses an earlier transcription instead of running Whisper again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout: speechmt need not be installed
from speechmt.data.manifest import read_split  # noqa: E402
from speechmt.decoding.text_generators import NAMES, SHOTS, few_shot_prompt  # noqa: E402
from speechmt.evaluation.metrics import bleu, chrf, wer  # noqa: E402

DEFAULT_LM = Path(os.environ.get("SPEECHMT_HOME", Path.home() / ".cache" / "speechmt")) / "gemma-3-270m"
DEFAULT_PEERS_PYTHON = REPO / ".venv-peers" / "bin" / "python"
# Whisper base: 74M parameters (Radford et al. 2022, Table 1); the LM's count is taken from the loaded model.
WHISPER_BASE_PARAMS = 74_000_000


class CascadeError(Exception):
    """Bad input (data dir, split, ASR file, LM folder) or a failed ASR run; the message says which."""


def prompt_for(source: str, src_lang: str = "en", tgt_lang: str = "de") -> str:
    """The 3-shot prompt that asks the LM for the `tgt_lang` of one `src_lang` sentence (codes of SHOTS)."""
    return few_shot_prompt(source, src_lang, tgt_lang)


def direction(records: list, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The (source, target) language codes: given, else the records' own (one each); CascadeError otherwise."""
    pair = []
    for given, field in ((src_lang, "src_lang"), (tgt_lang, "tgt_lang")):
        found = sorted({getattr(r, field) for r in records} - {""})
        code = given or (found[0] if len(found) == 1 else None)
        if code is None:
            flag = "--" + field.replace("_", "-")
            raise CascadeError(f"the split's records name {', '.join(found) or 'no'} {field}; pass {flag}")
        if code not in SHOTS:
            raise CascadeError(f"{field} {code!r}: no prompt shots in that language (known: {', '.join(SHOTS)})")
        pair.append(code)
    return pair[0], pair[1]


def run_asr(data: Path, split: str, peers_python: Path, beam: int, threads: int, out: Path, language: str) -> dict:
    """Transcribes the split with faster_whisper_peer.py in the peer environment; returns its JSON."""
    if not peers_python.is_file():
        raise CascadeError(f"{peers_python}: peer environment missing (run `make peers`)")
    cmd = [
        str(peers_python),
        str(REPO / "benchmarks" / "peers" / "faster_whisper_peer.py"),
        "--data",
        str(data),
        "--split",
        split,
        "--task",
        "transcribe",
        "--language",
        language,
        "--beam",
        str(beam),
        "--threads",
        str(threads),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        raise CascadeError(f"faster_whisper_peer.py exited with {proc.returncode}: {' '.join(cmd)}")
    return json.loads(out.read_text(encoding="utf-8"))


def newline_ids(tokenizer) -> list[int]:
    """Ids of every token whose text holds a newline (Gemma has '\\n', '\\n\\n', ... as single tokens)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return [i for i, t in enumerate(tokens) if t is not None and "\n" in t]


def translate(
    sources: list[str], lm_dir: Path, batch_size: int, max_new_tokens: int, threads: int, pair: tuple[str, str]
) -> tuple[list[str], int]:
    """Greedy 3-shot translations, each cut at its first newline (an empty source gives an empty output),
    and the LM's parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList

    if not (lm_dir / "config.json").is_file():
        raise CascadeError(f"{lm_dir}: no Hugging Face model folder (config.json missing)")
    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(lm_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(lm_dir, dtype=torch.float32).eval()
    stop = torch.tensor(newline_ids(tok))

    class StopAtNewline(StoppingCriteria):
        """Finishes each row once it has emitted a token holding a newline."""

        def __call__(self, input_ids, scores, **kwargs):  # (B, T) -> (B,) bool
            return torch.isin(input_ids[:, -1], stop)

    out = [""] * len(sources)
    todo = [i for i, s in enumerate(sources) if s.strip()]
    for start in range(0, len(todo), batch_size):
        idx = todo[start : start + batch_size]
        enc = tok([prompt_for(sources[i].strip(), *pair) for i in idx], return_tensors="pt", padding=True)
        with torch.inference_mode():
            gen = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                num_beams=1,
                stopping_criteria=StoppingCriteriaList([StopAtNewline()]),
                pad_token_id=tok.pad_token_id,
            )
        for row, i in enumerate(idx):
            text = tok.decode(gen[row, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            out[i] = text.split("\n", 1)[0].strip()
        print(
            f"cascade_whisper_gemma: translated {min(start + batch_size, len(todo))}/{len(todo)}",
            file=sys.stderr,
            flush=True,
        )
    return out, sum(p.numel() for p in model.parameters())


def write_json(path: Path, obj: dict) -> None:
    """Writes obj as JSON atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> dict:
    """ASR (or a given ASR file), then MT, then scores; returns the peer hypotheses object."""
    data = Path(args.data)
    manifest = data / f"{args.split}.jsonl"
    if not manifest.is_file():
        raise CascadeError(f"{manifest}: split '{args.split}' not prepared in {data}")
    records = read_split(data, args.split)
    pair = direction(records, args.src_lang, args.tgt_lang)
    if args.asr_json:
        asr = json.loads(Path(args.asr_json).read_text(encoding="utf-8"))
    else:  # kept beside the output, so that --asr-json can reuse it
        asr = run_asr(
            data,
            args.split,
            Path(args.peers_python),
            args.beam,
            args.threads,
            Path(args.out).with_suffix(".asr.json"),
            pair[0],
        )
    by_id = dict(zip(asr["ids"], asr["hypotheses"]))
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise CascadeError(f"ASR output lacks {len(missing)} ids of {args.split} (first: {missing[0]!r})")
    transcripts = [by_id[r.id] for r in records]
    start, cpu_start = time.perf_counter(), time.process_time()
    hyps, lm_params = translate(transcripts, Path(args.lm), args.batch_size, args.max_new_tokens, args.threads, pair)
    mt_seconds, mt_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    refs = [r.tgt_text for r in records]
    scores = {
        s.name: {"score": round(s.score, 2), "signature": s.signature} for s in (bleu(hyps, refs), chrf(hyps, refs))
    }
    asr_wer = wer(transcripts, [r.src_text for r in records])
    shots = " | ".join(SHOTS[pair[0]])
    src, tgt = NAMES[pair[0]], NAMES[pair[1]]
    return {
        "system": "cascade: faster-whisper base (int8) -> Gemma 3 270M (3-shot)",
        "params": WHISPER_BASE_PARAMS + lm_params,
        "task": "st",
        "split": args.split,
        "ids": [r.id for r in records],
        "hypotheses": hyps,
        "decode_seconds": round(asr["decode_seconds"] + mt_seconds, 3),
        "audio_seconds": asr["audio_seconds"],
        "threads": args.threads,
        "device": "cpu",
        "notes": (
            f"ASR: {asr['notes']}. MT: {Path(args.lm).name}, float32, greedy, 3-shot plain-text prompt "
            f"({src}: ...\\n{tgt}: ...; shots: {shots}), cut at the first newline, batches of "
            f"{args.batch_size} (left padding), {mt_seconds:.1f} s wall / {mt_cpu:.1f} s CPU; ASR WER "
            f"{asr_wer.score:.2f} ({asr_wer.signature})"
        ),
        "transcripts": transcripts,
        "scores": scores,
        "asr_wer": round(asr_wer.score, 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="prepared data directory holding SPLIT.jsonl")
    p.add_argument("--split", required=True)
    p.add_argument("--out", required=True, help="peer hypotheses JSON to write (a .tsv is written beside it)")
    p.add_argument("--lm", default=str(DEFAULT_LM), help="Gemma 3 270M Hugging Face folder")
    p.add_argument("--peers-python", default=str(DEFAULT_PEERS_PYTHON), help="python of .venv-peers")
    p.add_argument("--asr-json", default=None, help="reuse this faster_whisper_peer.py transcribe output")
    p.add_argument("--src-lang", default=None, help="source language code (default: the records')")
    p.add_argument("--tgt-lang", default=None, help="target language code (default: the records')")
    p.add_argument("--beam", type=int, default=5, help="Whisper beam size")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8, help="sentences per LM generate call")
    p.add_argument("--max-new-tokens", type=int, default=160)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        peer = run(args)
    except CascadeError as e:
        print(f"cascade_whisper_gemma: error: {e}", file=sys.stderr)
        return 1
    out = Path(args.out)
    write_json(out, peer)
    refs = [r.tgt_text for r in read_split(Path(args.data), args.split)]
    rows = ["id\ttranscript\thypothesis\treference"] + [
        "\t".join(x.replace("\t", " ") for x in row)
        for row in zip(peer["ids"], peer["transcripts"], peer["hypotheses"], refs)
    ]
    out.with_suffix(".tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    for name, s in peer["scores"].items():
        print(f"{name} = {s['score']:.2f}  ({s['signature']})")
    print(f"ASR WER = {peer['asr_wer']:.2f}; hypotheses in {out} and {out.with_suffix('.tsv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
