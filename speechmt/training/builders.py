"""Plain builder functions that turn an ExperimentConfig into tokenizers, datasets and a model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from speechmt.audio import CMVNConfig, FbankConfig, SpecAugmentConfig
from speechmt.config import ConfigError, DataConfig, ExperimentConfig
from speechmt.data.dataset import (
    DirectionTags,
    SpeechDataset,
    StoredFeatures,
    Subset,
    Tags,
    TextDataset,
    global_cmvn,
    speech_source,
)
from speechmt.data.manifest import direction, read_split, split_direction
from speechmt.data.retrieval import example_prefixes, read_examples, with_examples
from speechmt.frontend import FbankFrontend, Frontend, WaveformFrontend, WhisperMelConfig, WhisperMelFrontend
from speechmt.models.config import ModelConfig
from speechmt.models.ctc_head import FIRST_LABEL
from speechmt.models.ctc_head import RESOLVED as CTC_RESOLVED
from speechmt.models.semantic.lut import LM_TEACHER
from speechmt.tasks import OBJECTIVES, TASK_INPUTS, ObjectiveSettings, TaskData, stages_of
from speechmt.tasks.schedule import all_tasks
from speechmt.tokenizers.lm import LMTokenizer
from speechmt.tokenizers.pair import AnyTokenizer, Tokenizers
from speechmt.tokenizers.sentencepiece import SPECIAL_PIECES, Tokenizer
from speechmt.tokenizers.whisper import WhisperTokenizer, WhisperTokenizerConfig

if TYPE_CHECKING:
    from speechmt.data.augment import Augmenter


def run_tasks(cfg: ExperimentConfig) -> list[TaskData]:
    """Every data stream of every stage of the run."""
    return all_tasks(stages_of(cfg.train))


def stream_dir(cfg: ExperimentConfig, spec: TaskData) -> str:
    """The prepared folder a stream reads: data.dir, or its data_dir (a relative one inside data.dir, e.g.
    "mt-text" for the extra text that `speechmt data synth-mt --out DATA/mt-text` writes)."""
    if not spec.data_dir:
        return cfg.data.dir
    return spec.data_dir if Path(spec.data_dir).is_absolute() else str(Path(cfg.data.dir) / spec.data_dir)


def main_task(cfg: ExperimentConfig) -> str:
    """The task a trained checkpoint does by default: the last stage's first."""
    return stages_of(cfg.train)[-1].tasks[0].task


def decoder_side(cfg: ExperimentConfig) -> str:
    """Which tokenizer the decoder writes with: "src" (the transcripts') for ASR-only runs, else "tgt"; a run
    that mixes ASR with ST or MT needs one vocabulary for both (joint, or Whisper's)."""
    tasks = {t.task for t in run_tasks(cfg)}
    if tasks == {"asr"}:
        return "src"
    if "asr" in tasks and not cfg.model.decoder.one_vocabulary and cfg.data.src_vocab != cfg.data.tgt_vocab:
        raise ConfigError(
            "asr together with st or mt shares one decoder: give data.src_vocab and data.tgt_vocab "
            "the same joint SentencePiece model (or use model.decoder.kind whisper or lm)"
        )
    return "tgt"


def load_tokenizers(data: DataConfig, model: ModelConfig | None = None, side: str = "tgt") -> Tokenizers:
    """Reads the vocabularies a data config names (an empty path gives None). With a Whisper decoder, the
    decoder's `side` ("src" for ASR-only runs, "tgt" otherwise) is Whisper's tokenizer, from its model folder;
    so is the source side when the text encoder embeds with Whisper's tables (text_encoder.embeddings)."""
    toks = Tokenizers(
        Tokenizer.load(data.src_vocab) if data.src_vocab else None,
        Tokenizer.load(data.tgt_vocab) if data.tgt_vocab else None,
    )
    if model is None or not model.decoder.whisper_tokens:
        return toks
    from speechmt.hub import resolve_pretrained

    whisper = WhisperTokenizer.from_pretrained(
        resolve_pretrained(model.whisper_decoder_source), WhisperTokenizerConfig(data.whisper_task)
    )
    whisper_src = side == "src" or model.text_encoder.embeddings == "whisper"
    return Tokenizers(whisper if whisper_src else toks.src, whisper if side == "tgt" else toks.tgt)


def tokenizers_for(cfg: ExperimentConfig) -> Tokenizers:
    """The tokenizers of a run: load_tokenizers, or with an LM decoder (model.decoder.kind lm) the LM's
    tokenizer trimmed to the tokens of the run's training targets (lm_target_texts) and task prefixes, and on
    the source side the LM's whole tokenizer when a task reads text, the decoder reads retrieved examples
    (decoder.examples), the CTC head writes the LM's tokens (shrink.embed lm) or an objective reads the
    transcripts through the LM's embeddings (text_encoder.embeddings lm: align), else data.src_vocab (for a CTC
    head)."""
    if not cfg.model.decoder.lm_tokens:
        return load_tokenizers(cfg.data, cfg.model, decoder_side(cfg))
    name = cfg.model.decoder.name_or_path
    tags = list(dict.fromkeys(t for per in direction_tags(cfg).values() for t in per.values() if t))
    if not tags:
        raise ConfigError("an LM decoder needs data.lang_tag: true (the target language's name starts each target)")
    tgt = LMTokenizer.trimmed(name, lm_target_texts(cfg), tags)
    reads_lm_tokens = cfg.model.shrink.embed == "lm"  # its CTC head writes the LM's tokens
    reads_lm_tokens |= cfg.model.text_encoder.embeddings == "lm" and any(  # the text path embeds the transcripts
        OBJECTIVES[n].reads_transcript for t in run_tasks(cfg) for n in t.weights
    )
    if reads_lm_tokens or cfg.model.decoder.examples or any(TASK_INPUTS[t.task] == "text" for t in run_tasks(cfg)):
        return Tokenizers(LMTokenizer.from_pretrained(name, role="source"), tgt)
    return Tokenizers(Tokenizer.load(cfg.data.src_vocab) if cfg.data.src_vocab else None, tgt)


def lm_target_texts(cfg: ExperimentConfig) -> Iterator[str]:
    """The decoder targets of every training stream of a run (transcripts for asr): an LM decoder's output
    vocabulary is the tokens they use."""
    for spec in run_tasks(cfg):
        if spec.task in DECODING_TASKS:
            field = "src_text" if spec.task == "asr" else "tgt_text"
            yield from (
                getattr(r, field) for r in read_split(stream_dir(cfg, spec), spec.split or cfg.data.train_split)
            )


def decoder_tokenizer(side: str, toks: Tokenizers) -> AnyTokenizer:
    """The tokenizer of what the decoder writes (`side` from decoder_side)."""
    tok = toks.src if side == "src" else toks.tgt
    if tok is None:
        raise ConfigError(f"the decoder needs data.{side}_vocab (a SentencePiece model from `speechmt data vocab`)")
    return tok


def run_directions(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """The (source, target) languages of each direction the run's model learns: data.directions, else the one
    data.src_lang-data.tgt_lang."""
    return [split_direction(d) for d in cfg.data.directions] or [(cfg.data.src_lang, cfg.data.tgt_lang)]


def direction_tag(cfg: ExperimentConfig, task: str, src_lang: str, tgt_lang: str) -> str | None:
    """The language tag that starts the decoder targets of `task` in one direction: the target's (the
    source's for asr: the transcript's language); None when data.lang_tag is off."""
    if not cfg.data.lang_tag:
        return None
    lang = src_lang if task == "asr" else tgt_lang
    return cfg.model.decoder.language_tag(lang, src_lang, cfg.data.whisper_task)


def decoder_tag(cfg: ExperimentConfig, task: str | None = None) -> str | None:
    """The language tag that starts every decoder target of `task` (default: the run's main task) in the run's
    first direction; None when data.lang_tag is off."""
    return direction_tag(cfg, task or main_task(cfg), *run_directions(cfg)[0])


def stream_tags(cfg: ExperimentConfig, task: str) -> Tags:
    """What a stream's dataset starts `task`'s targets with: decoder_tag for one direction, each record's own
    direction's tag (DirectionTags) for several."""
    directions = run_directions(cfg)
    if len(directions) == 1:
        return decoder_tag(cfg, task)
    tags = {direction(s, t): direction_tag(cfg, task, s, t) for s, t in directions}
    return DirectionTags(tags, direction(cfg.data.src_lang, cfg.data.tgt_lang))


def direction_tags(cfg: ExperimentConfig) -> dict[str, dict[str, str | None]]:
    """{task: {direction: its tag}} for every task a checkpoint of the run decodes (decoder_tags' tasks), so a
    model of several directions can be told which one to write (speechmt.bundle.ModelBundle.directions)."""
    return {
        task: {direction(s, t): direction_tag(cfg, task, s, t) for s, t in run_directions(cfg)}
        for task in decoder_tags(cfg)
    }


def kept_directions(cfg: ExperimentConfig, ds, where: str):
    """`ds` less the records of directions data.directions does not name (a folder of more directions than the
    run learns); `ds` itself when it keeps all, or when the run names no directions. ConfigError when it keeps
    none."""
    if not cfg.data.directions:
        return ds
    index, names = ds.directions((cfg.data.src_lang, cfg.data.tgt_lang))
    wanted = [d for d, name in enumerate(names) if name in cfg.data.directions]
    if len(wanted) == len(names):
        return ds
    if not wanted:
        raise ConfigError(
            f"{where}: no records in data.directions ({', '.join(cfg.data.directions)}); it holds {', '.join(names)}"
        )
    return Subset(ds, np.flatnonzero(np.isin(index, wanted)))


DECODING_TASKS = ("st", "asr", "mt")  # tasks whose output is the decoder's text


def decoder_tags(cfg: ExperimentConfig) -> dict[str, str | None]:
    """{task: its decoder_tag} for every task a checkpoint of the run decodes: the main task first, then each
    st, asr or mt stream that trains the decoder (a "ce" objective), in the order the stages name them."""
    main = [main_task(cfg)] if main_task(cfg) in DECODING_TASKS else []
    trained = [t.task for t in run_tasks(cfg) if t.task in DECODING_TASKS and "ce" in t.weights]
    return {task: decoder_tag(cfg, task) for task in dict.fromkeys(main + trained)}


def fbank_frontend(cfg: ExperimentConfig) -> FbankFrontend:
    """The conv encoder's front end: the fbank settings preparation used (prepare_summary.json) and the CMVN the
    model trains with (data.cmvn; global: preparation's statistics)."""
    summary = Path(cfg.data.dir) / "prepare_summary.json"
    fbank = FbankConfig(**json.loads(summary.read_text())["fbank"]) if summary.exists() else FbankConfig()
    cmvn = global_cmvn(cfg.data.dir) if cfg.data.cmvn == "global" else CMVNConfig(cfg.data.cmvn)
    return FbankFrontend(fbank, cmvn)


def waveform_frontend(cfg: ExperimentConfig) -> WaveformFrontend:
    """A wav2vec2 encoder's front end: its feature extractor's settings."""
    from speechmt.models.encoders.wav2vec2 import feature_extractor_settings

    return WaveformFrontend(feature_extractor_settings(cfg.model.encoder.name_or_path))


def whisper_frontend(cfg: ExperimentConfig) -> WhisperMelFrontend:
    """A Whisper encoder's front end: its feature extractor's mel bins (its config's for a random one), at the
    clip's length or padded to data.whisper_pad_seconds (30: Whisper's own input)."""
    from speechmt.frontend.whisper_mel import mel_settings
    from speechmt.hub import resolve_pretrained

    encoder = cfg.model.encoder
    if not encoder.name_or_path:
        mel = WhisperMelConfig(int(encoder.hf_config.get("num_mel_bins", 80)))
    else:
        mel = mel_settings(resolve_pretrained(encoder.name_or_path))
    return WhisperMelFrontend(dataclasses.replace(mel, pad_seconds=cfg.data.whisper_pad_seconds))


FRONTENDS = {"fbank": fbank_frontend, "waveform": waveform_frontend, "whisper_mel": whisper_frontend}
"""How a run makes each front end (speechmt.frontend), by name."""


def frontend_for(cfg: ExperimentConfig) -> Frontend:
    """The front end the run's speech encoder reads (model.encoder.frontend)."""
    return FRONTENDS[cfg.model.encoder.frontend](cfg)


def build_dataset(
    cfg: ExperimentConfig,
    split: str,
    toks: Tokenizers,
    frontend: Frontend | None,
    train: bool,
    encoder: "torch.nn.Module | None" = None,
    spec: TaskData | None = None,
    teacher=None,
):
    """The dataset of one split for a data stream (`spec`; default: the run's first) read through `frontend`
    (None: frontend_for(cfg)), with a text
    `teacher`'s states of the transcripts (cached once per split) when one of its objectives needs them;
    see _dataset."""
    spec = spec or run_tasks(cfg)[0]
    where = f"{stream_dir(cfg, spec)}/{split}"
    ds = kept_directions(cfg, _dataset(cfg, split, toks, frontend or frontend_for(cfg), train, encoder, spec), where)
    if not any(OBJECTIVES[n].needs_teacher for n in spec.weights) or cfg.model.semantic.teacher() == LM_TEACHER:
        return ds  # no states to cache: a language-model teacher is the model's own decoder
    if teacher is None:
        raise ConfigError(f"task {spec.task}: the distance objective needs a text teacher (model.semantic lut)")
    from speechmt.data.teacher_cache import WithTeacher, cached_teacher_split

    data_dir = stream_dir(cfg, spec)
    records = read_split(data_dir, split)
    return WithTeacher(ds, cached_teacher_split(data_dir, split, teacher, records))


def _dataset(
    cfg: ExperimentConfig,
    split: str,
    toks: Tokenizers,
    frontend: Frontend,
    train: bool,
    encoder: "torch.nn.Module | None",
    spec: TaskData,
):
    """The dataset of one split for a data stream; SpecAugment only when `train` and the input is the stored
    fbank. Every example carries its decoder target as tgt and, for text input or objectives that read it,
    the transcript as src; speech is read from its speech_source."""
    data_dir = stream_dir(cfg, spec)
    sides = _sides(cfg, toks, spec)
    if TASK_INPUTS[spec.task] == "text" or spec.task == "fat_text":
        records = read_split(data_dir, split)
        if cfg.model.decoder.examples and TASK_INPUTS[spec.task] == "text":
            records = with_examples(records, data_dir, split, cfg.model.decoder.examples)
        return TextDataset.from_records(records, toks.src, sides["tgt_tokenizer"], tgt_tag=sides["tgt_tag"])
    records, source = speech_source(
        data_dir, split, frontend, encoder if cfg.data.cache_encoder else None, _augmenter(cfg, train)
    )
    augment = SpecAugmentConfig.policy(cfg.data.spec_augment) if train and cfg.data.spec_augment else None
    augment = augment if isinstance(source, StoredFeatures) else None
    prefixes = None
    if cfg.model.decoder.examples and spec.task != "asr":  # examples before the speech; a transcript needs none
        prefixes = example_prefixes(
            read_examples(data_dir, split, records),
            cfg.model.decoder.examples,
            toks.src,
            cfg.data.src_lang,
            cfg.data.tgt_lang,
        )
    return SpeechDataset(records, source, spec_augment=augment, seed=cfg.train.seed, prefixes=prefixes, **sides)


def _augmenter(cfg: ExperimentConfig, train: bool) -> "Augmenter | None":
    """A training split's waveform augmentation (data.augment_*; speechmt.data.augment); None for other splits."""
    from speechmt.data.augment import Augmenter, augment_config

    settings = augment_config(cfg.data) if train else None
    return None if settings is None else Augmenter(settings)


def _sides(cfg: ExperimentConfig, toks: Tokenizers, spec: TaskData) -> dict:
    """The tokenizers and tags of the transcript (src) and the decoder target (tgt) a stream's dataset encodes."""
    transcript = any(OBJECTIVES[n].reads_transcript for n in spec.weights)
    return dict(
        src_tokenizer=toks.src if transcript else None,
        tgt_tokenizer=decoder_tokenizer(decoder_side(cfg), toks),
        tgt_tag=stream_tags(cfg, spec.task),
        tgt_field="src_text" if spec.task == "asr" else "tgt_text",
    )


def model_config_for(cfg: ExperimentConfig, toks: Tokenizers, resolved: dict[str, Any] | None = None) -> ModelConfig:
    """The model config with vocabulary sizes taken from the tokenizers, a CTC head when an objective needs
    one and a source vocabulary when a task reads text or an objective reads transcripts (CTC writes them,
    the contrastive objective encodes them); a CTC head over an LM's tokens has a label for each of `resolved`'s
    (resolved_for's, derived when not given)."""
    dec = decoder_tokenizer(decoder_side(cfg), toks)
    specs = run_tasks(cfg)
    ctc = needs_ctc_head(cfg)
    text = bool(cfg.model.decoder.examples) or any(
        TASK_INPUTS[t.task] == "text" or any(OBJECTIVES[n].reads_transcript for n in t.weights) for t in specs
    )
    src_size = len(toks.src) if toks.src is not None and (ctc or text) else 0
    ctc_vocab = (resolved_for(cfg, toks) if resolved is None else resolved).get(CTC_RESOLVED)
    if ctc_vocab:
        src_size = FIRST_LABEL + len(ctc_vocab)
    elif ctc and toks.src is not None and toks.src.blank_id is None:
        raise ConfigError(
            "a CTC head writes the transcript in a SentencePiece source vocabulary with a blank "
            "(data.src_vocab); model.text_encoder.embeddings whisper puts Whisper's in its place"
        )
    if cfg.model.shrink.needs_ctc_head and not ctc:
        raise ConfigError(
            "model.shrink.kind ctc merges frames by the CTC head's labels: it needs train.ctc_weight > 0 "
            "(or a ctc objective) and data.src_vocab to train that head"
        )
    return dataclasses.replace(
        cfg.model,
        tgt_vocab_size=len(dec),
        src_vocab_size=src_size,
        ctc=ctc or cfg.model.ctc,
        pad_id=dec.pad_id,
    )


def needs_ctc_head(cfg: ExperimentConfig) -> bool:
    """Whether an objective of the run's tasks trains a CTC head."""
    return any(OBJECTIVES[n].needs_ctc_head for t in run_tasks(cfg) for n in t.weights)


def resolved_for(cfg: ExperimentConfig, toks: Tokenizers) -> dict[str, Any]:
    """What the run derives for its model's build beside the config (build_model's `resolved`, kept in the model
    bundle, speechmt.bundle.ModelBundle.resolved), each a list of LM ids: an LM decoder's trimmed output
    vocabulary and the prompt before the source ("decoder.vocab", "decoder.prompt":
    speechmt.models.lm_decoder.RESOLVED), and the LM tokens a CTC head writes with shrink.embed lm ("ctc_vocab":
    lm_ctc_vocab), and the source languages a transcribing encoder hears when the run has several
    ("encoder.asr_languages": their codes, which the build turns into Whisper's language tokens)."""
    out: dict[str, Any] = {}
    sources = list(dict.fromkeys(s for s, _ in run_directions(cfg)))
    if cfg.model.encoder.transcribes and len(sources) > 1:
        if not cfg.data.cache_encoder:
            raise ConfigError(
                f"encoder {cfg.model.encoder.kind} of several sources ({', '.join(sources)}) is given each "
                f"utterance's language where its search is cached: set data.cache_encoder true"
            )
        out["encoder.asr_languages"] = sources
    if cfg.model.decoder.lm_tokens:
        dec = decoder_tokenizer(decoder_side(cfg), toks)
        out |= {"decoder.vocab": list(dec.config.vocab), "decoder.prompt": list(dec.prompt_ids(prompt_language(cfg)))}
    if cfg.model.shrink.embed == "lm" and needs_ctc_head(cfg):
        out[CTC_RESOLVED] = list(lm_ctc_vocab(cfg, toks.src))
    return out


def prompt_language(cfg: ExperimentConfig) -> str:
    """The source language an LM decoder's prompt names ("English:"): the runs' one source, "" (none named) for
    a model of several."""
    sources = {s for s, _ in run_directions(cfg)}
    return sources.pop() if len(sources) == 1 else ""


def lm_ctc_vocab(cfg: ExperimentConfig, src: AnyTokenizer) -> tuple[int, ...]:
    """The LM ids a CTC head over an LM's tokens writes: every token of the transcripts of the run's training
    streams that train it (a ctc objective), as the LM's source-side tokenizer encodes them, in order of first
    appearance."""
    if not isinstance(src, LMTokenizer):
        raise ConfigError("shrink.embed lm needs the LM's own tokenizer on the source side (decoder 'lm')")
    vocab: dict[int, None] = {}
    for spec in run_tasks(cfg):
        if "ctc" in spec.weights:
            for r in read_split(stream_dir(cfg, spec), spec.split or cfg.data.train_split):
                vocab.update(dict.fromkeys(src.encode(r.src_text)))
    if not vocab:
        raise ConfigError("shrink.embed lm: no transcript tokens in the ctc streams' training splits")
    return tuple(vocab)


def teacher_for(cfg: ExperimentConfig):
    """The frozen text teacher (speechmt.models.teacher) of a run whose objectives need one, else None: the one
    the semantic layer names (SemanticConfig.teacher; LUT's default: the packaged MiniLM BERT)."""
    if not any(OBJECTIVES[n].needs_teacher for t in run_tasks(cfg) for n in t.weights):
        return None
    name = cfg.model.semantic.teacher()
    if name is None:
        raise ConfigError("the distance objective needs a text teacher (model.semantic lut)")
    if name == LM_TEACHER:  # the model's own LM decoder, read by the objective
        return None
    from speechmt.models.teacher import load_teacher

    return load_teacher(name)


def with_teacher(model: ModelConfig, teacher) -> ModelConfig:
    """The model config with the teacher's name and width in the semantic layer's config."""
    if teacher is None:
        return model
    return dataclasses.replace(model, semantic=model.semantic.with_teacher(teacher.name, teacher.hidden_size))


def objective_settings_for(cfg: ExperimentConfig, toks: Tokenizers) -> ObjectiveSettings:
    """The objectives' token ids: the transcripts' first text id (0 in Whisper's vocabulary, whose special
    tokens come after its text) and CTC blank, the decoder's padding and start ids."""
    dec = decoder_tokenizer(decoder_side(cfg), toks)
    src = toks.src if toks.src is not dec or isinstance(toks.src, WhisperTokenizer) else None
    first_text_id = src.first_text_id if src is not None else len(SPECIAL_PIECES)
    # Whisper's vocabulary has no blank (model_config_for refuses CTC on it): the SentencePiece one stands in
    blank_id = src.blank_id if src is not None and src.blank_id is not None else Tokenizer.blank_id
    return ObjectiveSettings(
        label_smoothing=cfg.train.label_smoothing,
        first_text_id=first_text_id,
        blank_id=blank_id,
        pad_id=dec.pad_id,
        bos_id=dec.bos_id,
        align=cfg.train.align,
    )
