"""Corpus metrics for translation (sacreBLEU BLEU, chrF and chrF++; COMET where `unbabel-comet` and a model are
at hand) and recognition (WER and CER with jiwer).

Every metric returns a `Score` carrying sacreBLEU's signature string (or one in the same style for WER and
CER), so that a number is never reported without the settings that produced it.
"""

from __future__ import annotations

import importlib.metadata
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jiwer
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

_TOKENIZER_13A = Tokenizer13a()


@dataclass
class Score:
    """One corpus-level metric: `score` in percent (0-100), the signature of its settings, and details.

    `details` holds JSON-typed values only (numbers, strings, lists), so that a report round-trips.
    """

    name: str
    score: float
    signature: str
    details: dict[str, Any] = field(default_factory=dict)


def _check_pairs(hyps: Sequence[str], refs: Sequence[str]) -> None:
    """Raises ValueError unless hyps and refs are two non-empty lists of equal length."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: the lists must be parallel")
    if not hyps:
        raise ValueError("no sentences to score: hypotheses and references are empty")


def bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a", lowercase: bool = False) -> Score:
    """Corpus BLEU of detokenised hypotheses against one reference each (sacreBLEU, as MuST-C reports).

    Case-sensitive with the 13a tokenizer by default. Details: n-gram `precisions` (percent), `counts` and
    `totals` per order, brevity penalty `bp`, `sys_len` and `ref_len` in tokens, and their `ratio`.
    """
    _check_pairs(hyps, refs)
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    result = metric.corpus_score(list(hyps), [list(refs)])
    details = {
        "precisions": [float(p) for p in result.precisions],
        "counts": [int(c) for c in result.counts],
        "totals": [int(t) for t in result.totals],
        "bp": float(result.bp),
        "sys_len": int(result.sys_len),
        "ref_len": int(result.ref_len),
        "ratio": float(result.ratio),
    }
    return Score("BLEU", float(result.score), str(metric.get_signature()), details)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus chrF2 (sacreBLEU defaults: character 6-grams, beta 2, no word n-grams), one reference each."""
    _check_pairs(hyps, refs)
    metric = CHRF()
    result = metric.corpus_score(list(hyps), [list(refs)])
    details = {"beta": metric.beta, "char_order": metric.char_order, "word_order": metric.word_order}
    return Score("chrF", float(result.score), str(metric.get_signature()), details)


def chrf_pp(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus chrF++ (sacreBLEU's CHRF(word_order=2): character 6-grams and word 1-2-grams, beta 2)."""
    _check_pairs(hyps, refs)
    metric = CHRF(word_order=2)
    result = metric.corpus_score(list(hyps), [list(refs)])
    details = {"beta": metric.beta, "char_order": metric.char_order, "word_order": metric.word_order}
    return Score("chrF++", float(result.score), str(metric.get_signature()), details)


def translation_scores(hyps: Sequence[str], refs: Sequence[str]) -> tuple[Score, Score, Score]:
    """BLEU, chrF and chrF++: what every translation report prints."""
    return bleu(hyps, refs), chrf(hyps, refs), chrf_pp(hyps, refs)


class CometUnavailable(Exception):
    """Why COMET was not computed (the package or the model is missing): one line for the report."""


def comet(
    hyps: Sequence[str], refs: Sequence[str], srcs: Sequence[str], model: str | None, batch_size: int = 8
) -> Score:
    """Corpus COMET (the mean of the segment scores, times 100) with Unbabel's `unbabel-comet` package and a
    model: a checkpoint file (.ckpt), a model folder holding checkpoints/model.ckpt, or a name the package can
    download. Raises CometUnavailable, with the reason, when the package or the model is missing; never a
    number otherwise."""
    _check_pairs(hyps, refs)
    if len(srcs) != len(hyps):
        raise ValueError(f"{len(hyps)} hypotheses but {len(srcs)} sources: the lists must be parallel")
    if not model:
        raise CometUnavailable("no COMET model given (--comet MODEL: a checkpoint, or a name to download)")
    try:
        import comet as comet_package
    except ImportError:
        raise CometUnavailable("the unbabel-comet package is not installed (pip install 'speechmt[comet]')") from None
    try:
        path = _comet_checkpoint(model) or comet_package.download_model(model)
        scorer = comet_package.load_from_checkpoint(path)
        data = [{"src": s, "mt": h, "ref": r} for s, h, r in zip(srcs, hyps, refs)]
        out = scorer.predict(data, batch_size=batch_size, gpus=0, progress_bar=False)
    except Exception as e:  # the package's own errors: no network, a bad checkpoint, ...
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CometUnavailable(f"COMET model {model!r} could not be used ({why})") from None
    version = importlib.metadata.version("unbabel-comet")
    segments = [float(x) for x in out.scores]
    return Score(
        "COMET",
        100.0 * sum(segments) / len(segments),
        f"nrefs:1|model:{model}|comet:{version}",
        {"model": model, "segments": len(segments)},
    )


def optional_comet(
    hyps: Sequence[str], refs: Sequence[str], srcs: Sequence[str], model: str | None
) -> tuple[Score | None, str | None]:
    """(COMET Score, None), or (None, the one line that says why COMET was skipped)."""
    try:
        return comet(hyps, refs, srcs, model), None
    except CometUnavailable as e:
        return None, f"COMET skipped: {e}"


def _comet_checkpoint(model: str) -> str | None:
    """A local COMET checkpoint: the file itself, or a folder's checkpoints/model.ckpt; None for a name."""
    import os

    if os.path.isfile(model):
        return model
    inside = os.path.join(model, "checkpoints", "model.ckpt")
    return inside if os.path.isfile(inside) else None


def _is_punctuation_token(token: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in token)


def normalize_for_wer(text: str) -> str:
    """Normalises text before WER/CER as fairseq's S2T recipes do (`--wer-tokenizer 13a --wer-lowercase
    --wer-remove-punct`, fairseq/scoring/tokenizer.py).

    Rule: tokenise with sacreBLEU's 13a tokenizer; drop every token made only of Unicode punctuation
    (category P*); lowercase; join the remaining tokens with single spaces. Punctuation inside a token is
    kept, so "It's 5 o'clock." -> "it's 5 o'clock", "e-mail" stays "e-mail" and "¿Qué?" -> "¿qué" (13a does
    not split off ¿ and ¡), while "Hello, World!" -> "hello world" and "U.S.A." -> "u s a". Symbols
    (category S*, such as "$" or "♪") are kept.
    """
    tokens = _TOKENIZER_13A(text).split()
    return " ".join(t for t in tokens if not _is_punctuation_token(t)).lower()


def _jiwer_version() -> str:
    return importlib.metadata.version("jiwer")


def _prepare_for_edit_distance(
    hyps: Sequence[str], refs: Sequence[str], normalize: bool
) -> tuple[list[str], list[str], str]:
    """Checks and optionally normalises the pairs; returns them with the signature of the settings.

    Raises ValueError when every reference is empty after normalisation (the error rate is undefined).
    """
    _check_pairs(hyps, refs)
    if normalize:
        hyps, refs = [normalize_for_wer(h) for h in hyps], [normalize_for_wer(r) for r in refs]
    if not any(r.split() for r in refs):
        raise ValueError(
            f"all {len(refs)} references are empty{' after normalisation' if normalize else ''}: "
            "the error rate is undefined"
        )
    settings = "tok:13a|case:lc|punct:removed" if normalize else "tok:none|case:mixed|punct:kept"
    return list(hyps), list(refs), f"nrefs:1|{settings}|jiwer:{_jiwer_version()}"


def _edit_details(
    out: jiwer.WordOutput | jiwer.CharacterOutput, refs: Sequence[str], normalize: bool
) -> dict[str, Any]:
    """Edit counts of a jiwer alignment; `ref_units` is the number of reference words (or characters)."""
    return {
        "substitutions": out.substitutions,
        "deletions": out.deletions,
        "insertions": out.insertions,
        "hits": out.hits,
        "ref_units": out.hits + out.substitutions + out.deletions,
        "empty_refs": sum(1 for r in refs if not r.split()),
        "normalized": normalize,
    }


def wer(hyps: Sequence[str], refs: Sequence[str], normalize: bool = True) -> Score:
    """Corpus word error rate in percent: (substitutions + deletions + insertions) / reference words.

    With `normalize`, both sides go through `normalize_for_wer` first. An empty reference is kept and
    counted, as in fairseq: its hypothesis words are insertions and it adds no reference words; the
    details give how many there were (`empty_refs`). Raises ValueError if all references are empty.
    """
    hyps, refs, signature = _prepare_for_edit_distance(hyps, refs, normalize)
    out = jiwer.process_words(refs, hyps)
    return Score("WER", 100.0 * float(out.wer), signature, _edit_details(out, refs, normalize))


def cer(hyps: Sequence[str], refs: Sequence[str], normalize: bool = True) -> Score:
    """Corpus character error rate in percent over the (normalised) strings, spaces counted as characters.

    Empty references are counted as in `wer`; raises ValueError if all references are empty.
    """
    hyps, refs, signature = _prepare_for_edit_distance(hyps, refs, normalize)
    out = jiwer.process_characters(refs, hyps)
    return Score("CER", 100.0 * float(out.cer), signature, _edit_details(out, refs, normalize))
