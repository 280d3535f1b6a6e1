"""Synthetic parallel text from monolingual text: back-translation (Sennrich et al., ACL 2016: human target-side
text, machine-made source side) and sequence-level distillation (Kim & Rush, EMNLP 2016: human source, a
teacher's translation as the target), written as a prepared MT folder.

`generate_pairs(cfg, generator, round_trip)` reads the input (one text per line, or a manifest's field), skips
empty and repeated lines (counted), translates the rest in batches and appends each batch to
`out/generated.jsonl` with a flush, so a killed run keeps every finished line and a rerun skips the ids done. A
round-trip model (the reverse direction) translates each output back; the sentence chrF of that against the
input is the filter score, and `--min-score` keeps the pairs at or above it (how many each threshold would keep
is in the summary). Then

```
out/generated.jsonl                 id, input, output, round_trip, score per line (the resumable record)
out/train.jsonl                     the kept pairs as manifest records (empty audio): a config's data_dir reads it
out/backtranslate_summary.json      counts with reasons, score distribution, throughput
```
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from speechmt.data.manifest import Record, iter_manifest, write_manifest
from speechmt.progress import Progress

Generator = Callable[[Sequence[str]], list[str]]
THRESHOLDS = (10, 20, 30, 40, 50, 60, 70)


class BacktranslateError(ValueError):
    """Input or output that cannot be used; one line naming it."""


@dataclass(frozen=True)
class BacktranslateConfig:
    """What to translate and where to: `mode` "back" (input = the target side; pairs: output -> input) or
    "distill" (input = the source side; pairs: input -> output); languages of the resulting MT data."""

    input: str
    out: str
    src_lang: str
    tgt_lang: str
    mode: str = "back"
    field: str = "tgt_text"  # a manifest input's text field
    batch_size: int = 16
    limit: int = 0  # 0: every line
    min_score: float = 0.0  # round-trip chrF a pair needs (with a round-trip model)

    @property
    def input_lang(self) -> str:
        return self.tgt_lang if self.mode == "back" else self.src_lang

    @property
    def output_lang(self) -> str:
        return self.src_lang if self.mode == "back" else self.tgt_lang


def read_inputs(cfg: BacktranslateConfig) -> tuple[list[tuple[str, str]], Counter]:
    """(id, text) of the input, in order, without empty and repeated texts (counted by reason), at most `limit`.
    A manifest (.jsonl) gives its records' ids and `field`; a text file `line_<n>` (n from 1)."""
    path = Path(cfg.input)
    if not path.is_file():
        raise BacktranslateError(f"{path}: no such input file")
    skipped: Counter = Counter()
    if path.suffix == ".jsonl":
        if cfg.field not in ("src_text", "tgt_text"):
            raise BacktranslateError(f"field {cfg.field!r}: expected src_text or tgt_text")
        items = [(r.id, getattr(r, cfg.field)) for r in iter_manifest(path)]
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            items = [(f"line_{n}", line.rstrip("\n")) for n, line in enumerate(f, 1)]
    kept, seen = [], set()
    for id_, text in items:
        text = " ".join(text.split())
        if not text:
            skipped["empty"] += 1
        elif text.casefold() in seen:
            skipped["repeated"] += 1
        elif cfg.limit and len(kept) >= cfg.limit:
            skipped["beyond the limit"] += 1
        else:
            seen.add(text.casefold())
            kept.append((id_, text))
    return kept, skipped


def read_done(path: Path) -> dict[str, dict]:
    """{id: line} of a previous run's generated.jsonl; a last line cut short by a kill is dropped (the file is
    truncated after the last whole line)."""
    if not path.is_file():
        return {}
    done, good = {}, 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                row = json.loads(raw)
                done[row["id"]] = row
            except (ValueError, KeyError, TypeError):
                break
            good += len(raw)
    if good != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good)
    return done


def sentence_chrf(hypothesis: str, reference: str) -> float:
    """Sentence-level chrF (sacreBLEU's defaults: character 6-grams, beta 2), 0-100."""
    from sacrebleu.metrics import CHRF

    return CHRF().sentence_score(hypothesis, [reference]).score


def generate_pairs(
    cfg: BacktranslateConfig,
    generator: Generator,
    round_trip: Generator | None = None,
    names: dict[str, str | None] | None = None,
) -> dict:
    """Translates the input (see the module docstring) and writes the prepared MT folder; returns the summary."""
    if cfg.mode not in ("back", "distill"):
        raise BacktranslateError(f"mode {cfg.mode!r}: expected back or distill")
    items, skipped = read_inputs(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "generated.jsonl"
    done = read_done(store)
    todo = [(i, t) for i, t in items if i not in done]
    start, words = time.perf_counter(), 0
    with (
        open(store, "a", encoding="utf-8") as f,
        Progress(
            len(todo), f"{'back-translate' if cfg.mode == 'back' else 'distill'} {Path(cfg.input).name}", "line"
        ) as bar,
    ):
        for b in range(0, len(todo), cfg.batch_size):
            batch = todo[b : b + cfg.batch_size]
            outputs = generator([t for _, t in batch])
            back = round_trip(outputs) if round_trip is not None else [None] * len(batch)
            for (id_, text), output, again in zip(batch, outputs, back):
                score = None if again is None else round(sentence_chrf(again, text), 2)
                row = {"id": id_, "input": text, "output": output, "round_trip": again, "score": score}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                done[id_] = row
                words += len(output.split())
            f.flush()
            os.fsync(f.fileno())
            bar.update(len(batch))
    seconds = time.perf_counter() - start
    summary = write_pairs(cfg, [done[i] for i, _ in items if i in done], skipped)
    summary.update(names or {})
    summary["throughput"] = {
        "generated_now": len(todo),
        "seconds": round(seconds, 2),
        "lines_per_second": round(len(todo) / seconds, 3) if seconds > 0 else None,
        "output_words_per_second": round(words / seconds, 2) if seconds > 0 else None,
        "resumed_from": len(items) - len(todo),
    }
    (out / "backtranslate_summary.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return summary


def write_pairs(cfg: BacktranslateConfig, rows: list[dict], skipped: Counter) -> dict:
    """train.jsonl of the rows that pass (a non-empty output, the score threshold), and the counts."""
    dropped: Counter = Counter()
    records = []
    for row in rows:
        if not row["output"].strip():
            dropped["empty output"] += 1
        elif row["score"] is not None and row["score"] < cfg.min_score:
            dropped[f"round-trip chrF below {cfg.min_score:g}"] += 1
        else:
            src, tgt = (row["output"], row["input"]) if cfg.mode == "back" else (row["input"], row["output"])
            records.append(
                Record(
                    id=f"{cfg.mode}_{row['id']}",
                    audio="",
                    offset=0.0,
                    duration=0.0,
                    n_frames=0,
                    src_text=src,
                    tgt_text=tgt,
                    speaker="",
                    src_lang=cfg.src_lang,
                    tgt_lang=cfg.tgt_lang,
                )
            )
    write_manifest(Path(cfg.out) / "train.jsonl", records)
    scores = sorted(r["score"] for r in rows if r["score"] is not None and r["output"].strip())
    summary = {
        "config": asdict(cfg),
        "pair": f"{cfg.src_lang}-{cfg.tgt_lang}",
        "input_skipped": dict(skipped),
        "generated": len(rows),
        "pairs": len(records),
        "dropped": dict(dropped),
    }
    if scores:
        summary["round_trip_chrf"] = {
            "mean": round(sum(scores) / len(scores), 2),
            "median": scores[len(scores) // 2],
            "kept_at_threshold": {str(t): sum(s >= t for s in scores) for t in THRESHOLDS},
        }
    return summary


def load_generator(
    model: str | None,
    lm: str | None,
    from_lang: str,
    to_lang: str,
    device: str = "cpu",
    beam: int = 1,
    max_new_tokens: int = 128,
    task: str | None = None,
) -> tuple[Generator, str]:
    """A generator from `from_lang` to `to_lang`: a speechmt checkpoint (`model`) or a causal LM (`lm`) with
    a few-shot prompt; and its name for the summary."""
    from speechmt.decoding.text_generators import CheckpointGenerator, FewShotLM

    if (model is None) == (lm is None):
        raise BacktranslateError("give --model CHECKPOINT or --lm NAME_OR_FOLDER (one of them)")
    if model is not None:
        if not Path(model).is_file():
            raise BacktranslateError(f"{model}: no such checkpoint")
        gen = CheckpointGenerator(model, device, beam, max_new_tokens, task)
        return gen, f"checkpoint {model}"
    gen = FewShotLM(lm, from_lang, to_lang, device, max_new_tokens)
    return gen, f"causal LM {lm}, 3-shot prompt, greedy"


def round_trip_generator(
    round_trip: str | None,
    cfg: BacktranslateConfig,
    lm: str | None,
    device: str = "cpu",
    beam: int = 1,
    max_new_tokens: int = 128,
) -> tuple[Generator | None, str | None]:
    """The reverse-direction generator for the filter score: None (no score), "same" (the --lm prompted the
    other way), an LM folder (config.json inside) or a speechmt checkpoint file."""
    if round_trip is None:
        return None, None
    back = (cfg.output_lang, cfg.input_lang)
    if round_trip == "same":
        if lm is None:
            raise BacktranslateError(
                "--round-trip without a value reuses --lm; with --model give the reverse "
                "direction's checkpoint: --round-trip CHECKPOINT"
            )
        return load_generator(None, lm, *back, device, beam, max_new_tokens)
    if (Path(round_trip) / "config.json").is_file() or not Path(round_trip).exists():
        return load_generator(None, round_trip, *back, device, beam, max_new_tokens)
    return load_generator(round_trip, None, *back, device, beam, max_new_tokens)
