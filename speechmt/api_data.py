"""The Python API's data building, what `speechmt data ...` does: corpus preparation (`prepare_mustc`,
`prepare_covost2`), vocabularies (`train_vocab`), retrieved examples (`retrieve`), MT pairs generated from
monolingual text (`backtranslate`, `distill`), and the synthetic mini corpora and texts built from Debian voices and
packages (`synth`, `add_unseen_voice`, `synth_mt`, `synth_memory`, `synth_mono`, `synth_tts`). Each returns its
summary (a JSON-typed dict) as the command prints it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from speechmt.api import OptionError

if TYPE_CHECKING:
    from speechmt.data.prepare import PrepareConfig
    from speechmt.tokenizers.sentencepiece import Tokenizer

Corpus = Literal["mustc", "covost2"]
Summary = dict[str, Any]


def _prepare_config(jobs: int, min_frames: int, max_frames: int, dtype: str, overwrite: bool) -> PrepareConfig:
    from speechmt.data.prepare import PrepareConfig

    if min_frames > max_frames:
        raise OptionError(f"min_frames: invalid value '{min_frames}': expected at most max_frames ({max_frames})")
    return PrepareConfig(
        min_frames=min_frames, max_frames=max_frames, jobs=jobs, store_dtype=dtype, overwrite=overwrite
    )


def prepare_mustc(
    root: str | os.PathLike,
    out: str | os.PathLike,
    tgt_lang: str | Sequence[str],
    *,
    splits: Sequence[str] | None = None,
    jobs: int = 2,
    min_frames: int = 5,
    max_frames: int = 3000,
    dtype: Literal["float16", "float32"] = "float16",
    overwrite: bool = False,
) -> Summary:
    """Prepares MuST-C en-<tgt_lang> (the released layout: root/en-<tgt>/data/) under `out`: manifests, fbank
    features, global CMVN and the summary, which counts every skipped utterance with its reason.

    Args:
        tgt_lang: one target (de), or several (["de", "es", "fr"]) into one folder: `train` holds every pair,
            the other splits are kept apart as dev_en-de, tst-COMMON_en-fr, ..., `dev` is their union, ids end in
            @en-de, and the summary counts per direction (docs/data.md).
        splits: default: those present of train, dev, tst-COMMON, tst-HE.
        jobs: feature extraction processes. min_frames, max_frames: training utterances outside are skipped.
        dtype: the feature store's precision. overwrite: redo splits that are already prepared.
    """
    from speechmt.data.mustc import prepare_mustc as _prepare

    cfg = _prepare_config(jobs, min_frames, max_frames, dtype, overwrite)
    return _prepare(root, out, tgt_lang, tuple(splits) if splits else None, cfg)


def prepare_covost2(
    root: str | os.PathLike,
    out: str | os.PathLike,
    src_lang: str | Sequence[str],
    tgt_lang: str | Sequence[str],
    *,
    jobs: int = 2,
    min_frames: int = 5,
    max_frames: int = 3000,
    dtype: Literal["float16", "float32"] = "float16",
    overwrite: bool = False,
) -> Summary:
    """Prepares CoVoST 2 <src_lang>-><tgt_lang> (root holds <src>/clips and the TSVs) under `out`, as
    `prepare_mustc` does; several source or target languages: every direction between them (never a language
    into itself) into one folder, laid out as `prepare_mustc`'s several targets (dev_de-en, test_es-en, ...)."""
    from speechmt.data.covost2 import prepare_covost2 as _prepare

    return _prepare(root, out, src_lang, tgt_lang, _prepare_config(jobs, min_frames, max_frames, dtype, overwrite))


VOCAB_FIELDS = {"src": ("src_text",), "tgt": ("tgt_text",), "joint": ("src_text", "tgt_text")}


def train_vocab(
    manifests: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    field: Literal["src", "tgt", "joint"] = "tgt",
    vocab_size: int = 8000,
    model_type: Literal["unigram", "bpe", "char"] = "unigram",
    lang_tags: Sequence[str] = (),
) -> Tokenizer:
    """Trains a SentencePiece vocabulary on the manifests' target texts (`field` "tgt"), source texts ("src") or
    both ("joint"), with `lang_tags` (e.g. <en> <de> <audio>) as pieces of their own; saves it to `out` (a .model
    file) and returns it."""
    from speechmt.data.vocab import train_from_manifests
    from speechmt.tokenizers.sentencepiece import TokenizerConfig

    if field not in VOCAB_FIELDS:
        raise OptionError(f"field: invalid value {str(field)!r}: expected src, tgt or joint")
    cfg = TokenizerConfig(model_type=model_type, vocab_size=vocab_size, lang_tags=tuple(lang_tags))
    tok = train_from_manifests(list(manifests), VOCAB_FIELDS[field], cfg)
    tok.save(out)
    return tok


def retrieve(
    data: str | os.PathLike,
    splits: Sequence[str],
    *,
    memory: Sequence[str] = ("train",),
    k: int = 2,
    distract: Sequence[str] | None = None,
    distract_rate: float | None = None,
    distract_skip: int = 0,
    seed: int = 0,
) -> Summary:
    """Writes, for each utterance of the prepared `splits` of `data`, the `k` most similar translation pairs of
    the `memory` splits (BM25 over source words) as few-shot examples for an LM decoder (decoder.examples); a split
    both searched and given examples never gets an utterance's own pair.

    `distract`: for training, a drawn share (`distract_rate`, default 0.3, by `seed`) of the utterances get theirs
    from these manifests, memory folders or names instead, the best after the first `distract_skip`.
    """
    from speechmt.data.retrieval import Distractors, retrieve_splits

    if not distract and (distract_rate is not None or distract_skip):
        raise OptionError("distract_rate, distract_skip: only with distract")
    drawn = (
        Distractors(tuple(distract), 0.3 if distract_rate is None else distract_rate, seed, distract_skip)
        if distract
        else None
    )
    return retrieve_splits(data, list(splits), list(memory), k, drawn)


def backtranslate(
    input: str | os.PathLike,
    out: str | os.PathLike,
    src_lang: str,
    tgt_lang: str,
    *,
    model: str | None = None,
    lm: str | None = None,
    task: Literal["mt"] | None = None,
    field: str = "tgt_text",
    round_trip: str | None = None,
    min_score: float = 0.0,
    batch_size: int = 16,
    beam: int = 1,
    max_new_tokens: int = 128,
    limit: int = 0,
    device: str = "cpu",
    mode: Literal["back", "distill"] = "back",
) -> Summary:
    """A prepared MT folder (`out`: train.jsonl, generated.jsonl, the summary; a rerun resumes it) from
    monolingual text: with `mode` "back", target-side text translated into the source language (pairs: machine
    source -> human target); with "distill" (`distill`), source-side text into the target language.

    Args:
        input: one text per line, or a manifest (.jsonl) whose `field` is read.
        src_lang, tgt_lang: the MT data's languages.
        model: a speechmt MT checkpoint translating the input (`task` "mt": a multi-task model's text translation);
            lm: instead, a causal LM (folder, or a name under $SPEECHMT_HOME) with a 3-shot prompt.
        round_trip: score each pair by the chrF of its output translated back against the input: "same" (the `lm`
            prompted the other way), or a reverse checkpoint or LM folder; pairs under `min_score` are dropped.
        batch_size, beam, max_new_tokens, device: the generation's. limit: the first N texts (0: all).

    Raises speechmt.decoding.text_generators.GeneratorError (one line) for a generator that cannot be made.
    """
    from speechmt.decoding.backtranslate import (
        BacktranslateConfig,
        generate_pairs,
        load_generator,
        round_trip_generator,
    )

    cfg = BacktranslateConfig(
        os.fspath(input), os.fspath(out), src_lang, tgt_lang, mode, field, batch_size, limit, min_score
    )
    gen, name = load_generator(model, lm, cfg.input_lang, cfg.output_lang, device, beam, max_new_tokens, task)
    back, back_name = round_trip_generator(round_trip, cfg, lm, device, beam, max_new_tokens)
    return generate_pairs(cfg, gen, back, {"generator": name, "round_trip_generator": back_name})


def distill(input: str | os.PathLike, out: str | os.PathLike, src_lang: str, tgt_lang: str, **options) -> Summary:
    """`backtranslate` with mode "distill": source-side text translated into the target language by a teacher
    (pairs: human source -> machine target); the same keyword arguments."""
    return backtranslate(input, out, src_lang, tgt_lang, **{**options, "mode": "distill"})


def synth(
    corpus: Literal["mustc", "covost2", "real"],
    out: str | os.PathLike,
    *,
    size: Literal["tiny", "small", "full"] = "small",
    seed: int = 0,
    jobs: int = 2,
    hold_out_voice: str | None = None,
    langs: Sequence[str] | None = None,
    tst_real: str | os.PathLike | None = None,
) -> Summary:
    """Builds a synthetic mini corpus (docs/data.md) in the released layout of `corpus` under `out` and returns its
    summary (also out/synth_summary.json). `hold_out_voice` (mustc): this voice speaks no train, dev or tst-COMMON
    talk, only the test split tst-VOICE. `langs`: mustc's targets (default de; any of de es fr it nl pt ro ru) or
    covost2's sources into English (default de es; any of de es fr it pt nl ru ca); the languages other than de
    (and es for covost2) take their pairs from the installed packages' gettext catalogs, and the summary gives
    pairs and hours per direction and names the directions with too little text.

    `corpus` "real": real recorded speech beyond English (speechmt_corpora.real_speech), not synthetic: the Asterisk
    telephone prompts of `langs` (default fr, es, it; Debian asterisk-core-sounds-<lang>-wav and -<lang>) with
    English references written for speechmt, in the CoVoST 2 layout under `out` (split test); with `tst_real` (a
    folder holding en-de/data/tst-REAL), also tst-REAL with French, Spanish and Italian references as
    TST_REAL/en-<lang>/data/tst-REAL. Its summary is also out/real_x_en_summary.json."""
    from speechmt_corpora import build_mini_corpus

    if hold_out_voice and corpus != "mustc":
        raise OptionError(f"hold_out_voice: for corpus mustc only, not {corpus}")
    if tst_real and corpus != "real":
        raise OptionError(f"tst_real: for corpus real only, not {corpus}")
    if corpus == "real":
        from speechmt_corpora.real_speech import REAL_TARGETS, build_real_x_en, build_tst_real_targets

        summary = build_real_x_en(Path(out), tuple(langs) if langs else REAL_TARGETS)
        if tst_real:
            summary["tst_real"] = {f"en-{lang}": n for lang, n in build_tst_real_targets(Path(tst_real)).items()}
        return summary
    return build_mini_corpus(
        corpus,
        size,
        Path(out),
        seed=seed,
        jobs=jobs,
        hold_out_voice=hold_out_voice,
        langs=tuple(langs) if langs else None,
    )


def add_unseen_voice(out: str | os.PathLike, voice: str, *, seed: int = 0, jobs: int = 2) -> Summary:
    """Adds to the finished MuST-C mini build at `out` the test split tst-VOICE: tst-COMMON's sentences spoken by
    a voice none of its talks uses. Returns the split's summary with its name ("split") and voice."""
    from speechmt_corpora.mustc import add_unseen_voice as _add

    split, summary = _add(Path(out), voice, seed, jobs)
    return {"split": split, **summary["splits"][split], "voice": summary["unseen_voices"][split]}


def synth_mt(
    corpus: Corpus,
    root: str | os.PathLike,
    *,
    lang: Literal["de", "es"] = "de",
    out: str | os.PathLike | None = None,
    sources: Sequence[str] | None = None,
) -> Summary:
    """Extra text-only MT pairs for the mini corpus at `root`, none of its sentences, written to `out` (default:
    beside the corpus, ROOT/<pair>/mt-text); `sources`: "all", or some of ding, gettext, debian-reference,
    gnome-help, sword (default: ding for de, sword for es). Returns the summary with "out"."""
    from speechmt_corpora.mt_text import build_mt_text, default_out

    folder = Path(out) if out else default_out(corpus, Path(root), lang)
    chosen = None if not sources else "all" if "all" in sources else tuple(sources)
    return {"out": str(folder), **build_mt_text(corpus, Path(root), folder, lang, chosen)}


def synth_memory(
    out: str | os.PathLike | None = None, *, seed: int = 0, ding: str | os.PathLike | None = None
) -> Summary:
    """The translation memory a model with retrieved examples reads: every filtered Ding pair (`ding`: the
    dictionary file, default Debian's trans-de-en), none of MuST-C mini's (`seed`) dev or test sentences, written
    to `out` (default: $SPEECHMT_HOME/ding-en-de)."""
    from speechmt.hub import speechmt_home
    from speechmt_corpora.memory import NAME, build_memory
    from speechmt_corpora.mt_sources import SourcePaths

    paths = SourcePaths(ding=Path(ding)) if ding else SourcePaths()
    return build_memory(Path(out) if out else speechmt_home() / NAME, seed, paths)


def synth_mono(
    corpus: Corpus,
    root: str | os.PathLike,
    *,
    lang: Literal["de"] = "de",
    out: str | os.PathLike | None = None,
    fortunes: str | os.PathLike | None = None,
) -> Summary:
    """Monolingual German text for `backtranslate` (mustc) or `distill` (covost2), none of the mini corpus'
    sentences, written to `out` (default: beside the corpus, ROOT/<pair>/mono-text) as mono.<lang>.txt and
    mono_text_summary.json; `fortunes`: the fortunes-de folder (default: Debian's)."""
    from speechmt_corpora.mono_text import MonoPaths, build_mono_text
    from speechmt_corpora.mt_text import default_out

    folder = Path(out) if out else default_out(corpus, Path(root), lang, "mono-text")
    paths = MonoPaths(fortunes_de=Path(fortunes)) if fortunes else MonoPaths()
    return build_mono_text(corpus, Path(root), folder, lang, paths)


def synth_tts(
    root: str | os.PathLike,
    *,
    text: str | os.PathLike | None = None,
    split: str = "train-tts",
    limit: int = 0,
    min_words: int = 0,
    sentences: bool = False,
    seed: int = 0,
    jobs: int = 2,
) -> Summary:
    """Voices the English side of MT pairs (`text`, a manifest; default: what `synth_mt` wrote,
    ROOT/en-de/mt-text/train.jsonl) into the new split `split` of the MuST-C-layout corpus at `root`: MT data as
    synthetic ST data. `limit`: a seeded sample of this many pairs (0: all); `min_words`: pairs of at least this
    many source words; `sentences`: whole sentences only."""
    from speechmt_corpora.mt_text import default_out
    from speechmt_corpora.voiced_text import voice_text_pairs

    pairs = Path(text) if text else default_out("mustc", Path(root)) / "train.jsonl"
    return voice_text_pairs(Path(root), pairs, split, limit, seed, jobs, min_words, sentences)
