"""Beam search speed against Hugging Face `generate`, same weights: one s2t_s-size Speech2Text model,
saved with save_pretrained, imported with `speechmt import hf`, decodes a prepared split in both, in this
one process.

    python benchmarks/bench_hf_s2t.py [--data recipes/mustc/data/en-de] [--split tst-COMMON] [--limit 200]
        [--batch-sizes 1 16] [--repeats 3] [--threads 2] [--weights trained|random] [--json OUT]

The model has fairseq's s2t_transformer_s dimensions (12 encoder / 6 decoder layers, d_model 256, 4 heads,
FFN 2048, two conv layers of 1024 channels). `--weights trained` (the default where the recipe's model
exists) makes its decoding realistic: it holds a trained speechmt ST model (by default the MuST-C-mini
recipe's, 6/3 layers, FFN 1024, 256 conv channels), padded out to those dimensions: the trained weights
sit in the leading rows and columns, the rest are Hugging Face's seeded random initialisation, with the
trained GLU gates moved to their half of the first conv. Its vocabulary and target tag are the trained
model's. Decoding then ends in EOS at the lengths the trained model gives (the random parts shift its
states a little). `--weights random` is all seeded random initialisation with the recipe's vocabulary;
the EOS output row then points where the decoder states move along the positions (`eos_row`), so that
hypotheses end after about 15 tokens instead of running to the maximum length or stopping at once.
The decoder starts from <s>, then the tag: speechmt feeds it as a prefix, HF as `decoder_input_ids`, so
both normalise by the generated tokens plus EOS.

Both decode the same features: the split's stored fbank with the model's utterance CMVN, padded with
zeros, sorted by length and cut into batches. Search: beam 5, length penalty 1, 5 finished hypotheses end
an utterance (HF `early_stopping=True`), at least one token, pad and <s> banned, at most `--max-len`
tokens before EOS for every utterance (speechmt max_len_a 0, max_len_b N, where it forces EOS; HF
max_new_tokens N + 1; the limit is not reached with the trained weights). Timed: encoder and search, from
features to token ids, under torch.inference_mode. Each encoder is also timed alone over the same
batches: it is the same work in both, and "search only" compares the rest (total minus encoder). The
four runs take turns, in reversed order every other repeat; medians over `--repeats` of wall seconds
and of process CPU seconds (all threads; on a shared machine the CPU ratio can be the steadier one).
HF's Speech2Text encoder lets padding into the last frames of shorter utterances of a batch (speechmt's
zeroes it), so batched HF hypotheses can differ from speechmt's; each difference is checked against HF's
hypothesis for that utterance alone (the batch-1 run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from sentencepiece import sentencepiece_model_pb2 as spm_pb2
from torch import Tensor
from transformers import (
    GenerationConfig,
    Speech2TextConfig,
    Speech2TextFeatureExtractor,
    Speech2TextForConditionalGeneration,
    Speech2TextTokenizer,
)

from speechmt.checkpoint import load_checkpoint
from speechmt.data.batching import collate_sequences
from speechmt.data.features import FeatureStore
from speechmt.data.manifest import read_manifest
from speechmt.decoding.search import DecodeOptions, beam_search
from speechmt.decoding.translate import LoadedModel, load_model
from speechmt.interop.hf_s2t import _rename, import_hf_s2t  # _rename: HF parameter name -> ours
from speechmt.tokenizers.sentencepiece import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "mustc" / "data" / "en-de"
TRAINED = ROOT / "recipes" / "mustc" / "exp" / "en-de" / "st" / "checkpoint_avg.safetensors"
S2T_S = dict(
    d_model=256,
    encoder_layers=12,
    decoder_layers=6,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    conv_channels=1024,
    conv_kernel_sizes=[5, 5],
    max_source_positions=6000,
    max_target_positions=1024,
)
HF_BOS, HF_PAD, HF_EOS, HF_UNK = 0, 1, 2, 3  # fairseq's dictionary, which HF Speech2Text keeps
_Piece = spm_pb2.ModelProto.SentencePiece


def hf_tag(tag: str) -> str:
    """Our language tag "<de>" as HF Speech2Text's "<lang:de>" (which import-hf turns back into a tag)."""
    return f"<lang:{tag.strip('<>')}>"


def to_hf_ids(tok: Tokenizer) -> list[int | None]:
    """HF id of each of our ids: specials in fairseq's order, <blank> (which HF lacks) None, the rest after."""
    specials = {tok.bos_id: HF_BOS, tok.pad_id: HF_PAD, tok.eos_id: HF_EOS, tok.unk_id: HF_UNK}
    return [specials.get(i, i - 1 if i > tok.blank_id else None) for i in range(len(tok))]


def save_hf_tokenizer(tok: Tokenizer, out: Path) -> Speech2TextTokenizer:
    """Writes `tok` as a HF Speech2Text tokenizer (fairseq's layout: SentencePiece ids = dictionary ids)."""
    proto = spm_pb2.ModelProto.FromString(tok.state_dict()["model"])
    tags = {t: hf_tag(t) for t in tok.config.lang_tags}
    pieces = [_Piece(piece=p, score=0.0, type=_Piece.CONTROL) for p in ("<s>", "<pad>", "</s>")]
    pieces.append(_Piece(piece="<unk>", score=0.0, type=_Piece.UNKNOWN))
    for p in list(proto.pieces)[tok.blank_id + 1 :]:
        pieces.append(_Piece(piece=tags[p.piece], score=0.0, type=_Piece.USER_DEFINED) if p.piece in tags else p)
    del proto.pieces[:]
    proto.pieces.extend(pieces)
    spec = proto.trainer_spec
    spec.bos_id, spec.pad_id, spec.eos_id, spec.unk_id = HF_BOS, HF_PAD, HF_EOS, HF_UNK
    spec.bos_piece, spec.pad_piece, spec.eos_piece, spec.unk_piece = "<s>", "<pad>", "</s>", "<unk>"
    del spec.user_defined_symbols[:]
    spec.user_defined_symbols.extend(tags.values())
    (out / "sp.model").write_bytes(proto.SerializeToString())
    (out / "vocab.json").write_text(json.dumps({p.piece: i for i, p in enumerate(pieces)}))
    return Speech2TextTokenizer(str(out / "vocab.json"), str(out / "sp.model"))


def _padded(hf: Tensor, ours: Tensor, key: str) -> Tensor:
    """HF's tensor with a smaller trained one in its leading rows/columns; the first conv's GLU halves
    (outputs, gates) each keep their half. Extra output rows of the first conv are zero, so its extra
    GLU channels are 0."""
    out = hf.clone()
    if key == "speech_encoder.subsampler.convs.0.weight" or key == "speech_encoder.subsampler.convs.0.bias":
        half, big = ours.size(0) // 2, hf.size(0) // 2
        out[:big] = 0.0
        out[:half], out[big : big + half] = ours[:half], ours[half:]
        return out
    out[tuple(slice(0, n) for n in ours.shape)] = ours
    return out


def trained_state(
    hf: Speech2TextForConditionalGeneration, state: dict[str, Tensor], hf_ids: list[int | None]
) -> dict[str, Tensor]:
    """HF's state dict with the trained speechmt `state` (our names, smaller dimensions) put into it."""
    rows = [o for _, o in sorted((h, o) for o, h in enumerate(hf_ids) if h is not None)]
    out = {}
    for key, value in hf.state_dict().items():
        ours = _rename(key)
        if ours in ("decoder.embed.weight", "decoder.output.weight"):
            out[key] = state[ours][rows]
        elif ours in state:
            out[key] = _padded(value, state[ours], ours)
        else:
            out[key] = value  # layers beyond the trained model's: HF's random initialisation
    return out


def eos_row(model: Speech2TextForConditionalGeneration, generator: torch.Generator) -> Tensor:
    """An EOS output row for a random model, (D,): twice the unit direction from the mean final decoder
    state at positions 1-11 to that at 18-39 (on random features and tokens), so that EOS's logit rises
    from about -12 to +10 along the positions and crosses the others' (about 0 +- 0.3) near position 16."""
    feats = torch.randn(4, 300, model.config.input_feat_per_channel, generator=generator)
    tokens = torch.randint(HF_UNK + 1, model.config.vocab_size, (4, 40), generator=generator)
    tokens[:, 0] = HF_BOS
    out = model(input_features=feats, decoder_input_ids=tokens, output_hidden_states=True)
    states = out.decoder_hidden_states[-1]  # (4, 40, D), after the final LayerNorm
    direction = states[:, 18:40].mean((0, 1)) - states[:, 1:12].mean((0, 1))
    return 2 * direction / direction.norm()


def build_hf_model(out: Path, weights: str, trained: Path, seed: int) -> Path:
    """Saves an s2t_s-size HF Speech2Text model, tokenizer and feature extractor under `out`."""
    ckpt = load_checkpoint(trained) if weights == "trained" else None
    tok = (
        Tokenizer.from_state_dict(ckpt["tokenizers"]["tgt"])
        if ckpt is not None
        else Tokenizer.load(DATA / "spm_st_2000.model")
    )
    out.mkdir(parents=True, exist_ok=True)
    hf_tok = save_hf_tokenizer(tok, out)
    config = Speech2TextConfig(
        vocab_size=len(tok) - 1,
        **S2T_S,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        tie_word_embeddings=False,
        decoder_start_token_id=HF_BOS,
        bos_token_id=HF_BOS,
        pad_token_id=HF_PAD,
        eos_token_id=HF_EOS,
    )
    torch.manual_seed(seed)
    model = Speech2TextForConditionalGeneration(config).eval()
    hf_ids = to_hf_ids(tok)
    with torch.no_grad():
        if ckpt is not None:
            model.load_state_dict(trained_state(model, ckpt["model"], hf_ids))
        else:
            model.lm_head.weight[HF_EOS] = eos_row(model, torch.Generator().manual_seed(seed))
    model.generation_config.decoder_start_token_id = HF_BOS
    tag = ckpt.get("decoder_tag") if ckpt is not None else "<de>"
    if tag:  # import-hf reads the target tag from here
        model.generation_config.forced_bos_token_id = hf_tok.convert_tokens_to_ids(hf_tag(tag))
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    Speech2TextFeatureExtractor().save_pretrained(out)
    return out


def load_features(data: Path, split: str, limit: int, lm: LoadedModel) -> list[Tensor]:
    """The split's stored fbank (T, 80) with the model's CMVN, float32, in manifest order."""
    store = FeatureStore(data / "fbank80" / split)
    records = read_manifest(data / f"{split}.jsonl")[:limit]
    return [lm.frontend.normalise(store[r.id]) for r in records]


def length_batches(feats: list[Tensor], size: int) -> list[list[int]]:
    """Indices sorted by length (shortest first), cut into batches of `size`."""
    order = sorted(range(len(feats)), key=lambda i: (len(feats[i]), i))
    return [order[b : b + size] for b in range(0, len(order), size)]


def decode_ours(
    lm: LoadedModel, feats: list[Tensor], batches: list[list[int]], options: DecodeOptions
) -> list[list[int]]:
    """speechmt: encoder + beam search -> best hypothesis per utterance (our ids, no EOS)."""
    out: list[list[int]] = [[] for _ in feats]
    for batch in batches:
        x, lengths = collate_sequences([feats[i] for i in batch])
        enc = lm.model.encode_speech(x, lengths)
        for i, hyps in zip(batch, beam_search(lm.model, enc, options)):
            out[i] = hyps[0].tokens
    return out


def decode_hf(
    hf: Speech2TextForConditionalGeneration,
    feats: list[Tensor],
    batches: list[list[int]],
    config: GenerationConfig,
    prompt: list[int],
    from_hf: dict[int, int],
) -> list[list[int]]:
    """HF generate -> best hypothesis per utterance, in our ids (prompt and EOS left out)."""
    out: list[list[int]] = [[] for _ in feats]
    for batch in batches:
        x, lengths = collate_sequences([feats[i] for i in batch])
        mask = (torch.arange(x.size(1))[None] < lengths[:, None]).long()
        start = torch.tensor([prompt]).expand(len(batch), -1)
        seqs = hf.generate(
            input_features=x, attention_mask=mask, decoder_input_ids=start, generation_config=config
        ).tolist()
        for i, row in zip(batch, seqs):
            row = row[len(prompt) :]
            out[i] = [from_hf[t] for t in row[: row.index(HF_EOS) if HF_EOS in row else len(row)]]
    return out


def encode_ours(lm: LoadedModel, feats: list[Tensor], batches: list[list[int]]) -> list[list[int]]:
    """speechmt's encoder alone over the batches (the part of decoding that is the same work in both)."""
    for batch in batches:
        lm.model.encode_speech(*collate_sequences([feats[i] for i in batch]))
    return []


def encode_hf(
    hf: Speech2TextForConditionalGeneration, feats: list[Tensor], batches: list[list[int]]
) -> list[list[int]]:
    """HF's encoder alone over the batches, as generate runs it."""
    for batch in batches:
        x, lengths = collate_sequences([feats[i] for i in batch])
        hf.get_encoder()(x, attention_mask=(torch.arange(x.size(1))[None] < lengths[:, None]).long())
    return []


def hf_generation_config(max_len: int, beam: int) -> GenerationConfig:
    """HF generate set as fairseq's (and speechmt's) beam search."""
    return GenerationConfig(
        num_beams=beam,
        num_return_sequences=1,
        max_new_tokens=max_len + 1,
        min_new_tokens=1,
        length_penalty=1.0,
        early_stopping=True,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
        do_sample=False,
        suppress_tokens=[HF_PAD, HF_BOS],
        decoder_start_token_id=HF_BOS,
        eos_token_id=HF_EOS,
        pad_token_id=HF_PAD,
        bos_token_id=HF_BOS,
        forced_bos_token_id=None,
    )


def timed(fn: Callable[[], list[list[int]]]) -> tuple[float, float, list[list[int]]]:
    """Wall and process CPU seconds of fn() under inference mode, and its result."""
    with torch.inference_mode():
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a prepared MuST-C(-mini) folder")
    parser.add_argument("--split", default="tst-COMMON")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=200, help="tokens before EOS, every utterance")
    parser.add_argument(
        "--weights",
        choices=["trained", "random"],
        default=None,
        help="default: trained where --trained exists, else random",
    )
    parser.add_argument("--trained", type=Path, default=TRAINED, help="a speechmt ST checkpoint (conv1d, <de>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    weights = args.weights or ("trained" if args.trained.exists() else "random")
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = build_hf_model(Path(tmp) / "hf", weights, args.trained, args.seed)
        path = import_hf_s2t(hf_dir, Path(tmp) / "model.safetensors")
        lm, hf_ids = load_model(path), load_checkpoint(path)["imported_from"]["hf_ids"]
        hf = Speech2TextForConditionalGeneration.from_pretrained(hf_dir).eval()
    feats = load_features(args.data, args.split, args.limit, lm)
    options = lm.decode_options(beam=args.beam, max_len_a=0.0, max_len_b=args.max_len, len_penalty=1.0)
    from_hf = {h: o for o, h in enumerate(hf_ids) if h is not None}
    prompt = [hf_ids[options.bos_id], *(hf_ids[t] for t in options.prefix)]
    config = hf_generation_config(args.max_len, args.beam)
    runners = {
        "speechmt": lambda b: decode_ours(lm, feats, b, options),
        "hf": lambda b: decode_hf(hf, feats, b, config, prompt, from_hf),
        "speechmt_encoder": lambda b: encode_ours(lm, feats, b),
        "hf_encoder": lambda b: encode_hf(hf, feats, b),
    }
    rows = [measure(runners, length_batches(feats, size), size, args.repeats) for size in args.batch_sizes]
    report(rows, feats, args, weights)


def measure(
    runners: dict[str, Callable[[list[list[int]]], list[list[int]]]], batches: list[list[int]], size: int, repeats: int
) -> dict:
    """Alternating timed runs of each runner (in turn, the order reversed every other repeat): wall and
    CPU seconds of each run, and the hypotheses."""
    for run in runners.values():  # warm-up: one batch each
        timed(lambda: run(batches[:1]))
    times: dict[str, list[float]] = {name: [] for name in runners}
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    hyps: dict[str, list[list[int]]] = {}
    names = list(runners)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds, cpu_seconds, hyps[name] = timed(lambda: runners[name](batches))
            times[name].append(seconds)
            cpu[name].append(cpu_seconds)
    return {"batch_size": size, "times": times, "cpu": cpu, "hyps": hyps}


def report(rows: list[dict], feats: list[Tensor], args: argparse.Namespace, weights: str) -> None:
    """Prints the table (and writes --json): medians, ratio, identical hypotheses, padding-leak check."""
    alone = next((r["hyps"]["hf"] for r in rows if r["batch_size"] == 1), None)
    n = len(feats)
    lines = [
        "| batch | speechmt s | HF s | HF / speechmt | CPU s: speechmt, HF, ratio | encoder s: speechmt, HF "
        "| search only: HF / speechmt | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    results = []
    for r in rows:
        ours, theirs = r["hyps"]["speechmt"], r["hyps"]["hf"]
        same = sum(a == b for a, b in zip(ours, theirs))
        differ = [i for i in range(n) if ours[i] != theirs[i]]
        leak = None if alone is None or r["batch_size"] == 1 else sum(ours[i] == alone[i] for i in differ)
        t_ours, t_hf = statistics.median(r["times"]["speechmt"]), statistics.median(r["times"]["hf"])
        c_ours, c_hf = statistics.median(r["cpu"]["speechmt"]), statistics.median(r["cpu"]["hf"])
        e_ours, e_hf = statistics.median(r["times"]["speechmt_encoder"]), statistics.median(r["times"]["hf_encoder"])
        search = (t_hf - e_hf) / (t_ours - e_ours)
        lines.append(
            f"| {r['batch_size']} | {t_ours:.2f} | {t_hf:.2f} | {t_hf / t_ours:.2f} | "
            f"{c_ours:.2f}, {c_hf:.2f}, {c_hf / c_ours:.2f} | {e_ours:.2f}, {e_hf:.2f} | {search:.2f} | "
            f"{same}/{n} |"
        )
        results.append(
            {
                "batch_size": r["batch_size"],
                "speechmt_s": r["times"]["speechmt"],
                "hf_s": r["times"]["hf"],
                "speechmt_cpu_s": r["cpu"]["speechmt"],
                "hf_cpu_s": r["cpu"]["hf"],
                "speechmt_median_s": t_ours,
                "hf_median_s": t_hf,
                "ratio": t_hf / t_ours,
                "cpu_ratio": c_hf / c_ours,
                "speechmt_encoder_s": r["times"]["speechmt_encoder"],
                "hf_encoder_s": r["times"]["hf_encoder"],
                "search_only_ratio": search,
                "identical": same,
                "n": n,
                "differing": differ,
                "differing_equal_to_hf_alone": leak,
                "speechmt_hyps": ours,
                "hf_hyps": theirs,
            }
        )
    lengths = [len(h) for h in rows[0]["hyps"]["speechmt"]]
    at_max = sum(x >= args.max_len for x in lengths)
    print(
        f"weights {weights}; {n} segments of {args.split}; beam {args.beam}; threads {torch.get_num_threads()}; "
        f"medians of {args.repeats}; hypothesis length mean {statistics.mean(lengths):.1f} tokens "
        f"(min {min(lengths)}, max {max(lengths)}, {at_max} at --max-len {args.max_len})"
    )
    print("\n".join(lines))
    for res in results:
        if res["differing"] and res["differing_equal_to_hf_alone"] is not None:
            print(
                f"batch {res['batch_size']}: {len(res['differing'])} differ from HF's batched hypotheses; "
                f"speechmt's equal HF's on the utterance alone for {res['differing_equal_to_hf_alone']} of them"
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "weights": weights,
                    "split": args.split,
                    "n": n,
                    "beam": args.beam,
                    "threads": torch.get_num_threads(),
                    "repeats": args.repeats,
                    "max_len": args.max_len,
                    "mean_hyp_len": statistics.mean(lengths),
                    "rows": results,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
