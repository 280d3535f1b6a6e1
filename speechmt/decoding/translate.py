"""Files (or arrays) in, text out: a checkpoint's own feature pipeline, pause-based chunking of long
audio, batched beam search.

Audio longer than `SegmentConfig.max_seconds` is cut at pauses and read chunk by chunk from disk, so
memory stays bounded whatever the file's length; the chunks' texts are joined with spaces.

A batch survives bad items when asked to (`errors="keep"`): an unreadable file gets its reason in
`Translation.error` and the others are translated. Audio shorter than the model's smallest input (25 ms,
or a header without samples) gives an empty text, a warning naming the file and its length, and the same
words in `Translation.warning`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

import numpy as np
import torch

from speechmt.audio import SAMPLE_RATE, AudioError, audio_info, read_audio, resample
from speechmt.bundle import ModelBundle, direction_source, pick_tag
from speechmt.checkpoint import CheckpointError, load_checkpoint
from speechmt.checks import DTYPES
from speechmt.data.batching import collate_sequences
from speechmt.data.manifest import split_direction
from speechmt.data.retrieval import TranslationMemory, example_prefixes, memory_from_manifests
from speechmt.decoding.mbr import mbr_order
from speechmt.decoding.search import DecodeOptions, search
from speechmt.decoding.segment import SegmentConfig, find_segments, iter_file_segments, voiced_span
from speechmt.decoding.transcribe import SEARCH
from speechmt.frontend import Frontend
from speechmt.models.build import build_model
from speechmt.models.delta import load_model_state
from speechmt.models.encoders import EncoderOutput
from speechmt.models.encoders.whisper_asr import LANGUAGES_RESOLVED, Languages
from speechmt.models.translator import Translator
from speechmt.tokenizers.lm import language_name
from speechmt.tokenizers.sentencepiece import Tokenizer


@dataclass
class LoadedModel:
    """A model ready to translate: weights, the decoder's tokenizer and tag, and its front end."""

    model: Translator
    tokenizer: Tokenizer
    tag: str | None
    frontend: Frontend
    task: str
    path: str
    device: torch.device
    source_tokenizer: Tokenizer | None = None  # the text encoder's, for MT
    decoder_start: str = "bos"  # the decoder's first input: "bos", or "eos" (models converted from fairseq)
    whisper_transcript: bool = False  # task asr of a cascade's model (its encoder transcribes): its ASR's transcript
    dtype: torch.dtype = torch.float32  # the weights' and the encoder input's (bfloat16: ~2x faster matmuls)
    memory: "TranslationMemory | None" = None  # where a model with decoder.examples finds them for speech
    directions: dict[str, str | None] = field(default_factory=dict)  # a model of several: {"en-fr": its tag}
    # the source language of the speech (given, or the one source of the direction asked); None: not known, heard
    # where the model `hears_source` (a whisper_asr model of several sources: Whisper detects it per clip)
    src_lang: str | None = None
    hears_source: bool = False
    _transcript_tokenizer: object = None

    @property
    def speech_examples(self) -> bool:
        """Whether the decoder reads retrieved examples before the speech path's vectors (decoder.examples, task
        st; asr and mt read none before speech)."""
        return bool(self.examples) and self.task == "st"

    def languages(self) -> tuple[str, str]:
        """(source, target) language names of an LM decoder's few-shot form: its prompt's ("<bos>English:") and
        its target tag's."""
        prompt = self.source_tokenizer.decode(self.model.decoder.prompt.tolist(), strip_tags=False)
        return prompt.strip().rstrip(":"), language_name(self.tag)

    def sources(self) -> tuple[str, ...]:
        """The source languages of the directions into the target this model writes (its `tag`): those a clip
        whose language is not given may be heard in (empty: any its encoder transcribes)."""
        return tuple(split_direction(d)[0] for d, tag in self.directions.items() if tag == self.tag)

    def transcript_text(self, ids: list[int]) -> str:
        """The speech encoder's own transcript ids -> text (its transcript_tokenizer, loaded on first use)."""
        if self._transcript_tokenizer is None:
            self._transcript_tokenizer = self.model.config.encoder.transcript_tokenizer()
        return self._transcript_tokenizer.decode(ids)

    @property
    def max_input_seconds(self) -> float | None:
        """The longest audio the speech encoder takes at once (a Whisper encoder's window: 30 s); None when
        any length goes (conv and wav2vec2 encoders)."""
        return self.frontend.max_seconds

    @property
    def min_input_samples(self) -> int:
        """The shortest 16 kHz wave the model translates: one 25 ms fbank window or wav2vec2 receptive field;
        for Whisper, 201 samples (one log-mel frame, past the STFT's reflect padding)."""
        return self.frontend.min_samples

    @property
    def examples(self) -> int:
        """How many retrieved translation pairs the decoder reads before each text source (decoder.examples)."""
        return self.model.config.decoder.examples

    @property
    def reads_audio(self) -> bool:
        """Whether the model's front end works on the audio itself (wav2vec2, Whisper) rather than on the
        fbank features that preparation stores."""
        return not self.frontend.prepared

    def decode_options(self, beam: int = 5, **kw) -> DecodeOptions:
        start = self.tokenizer.eos_id if self.decoder_start == "eos" else None
        return DecodeOptions(
            beam_size=beam,
            prefix=self.tokenizer.prefix_ids(self.tag),
            bos_id=self.tokenizer.bos_id,
            eos_id=self.tokenizer.eos_id,
            pad_id=self.tokenizer.pad_id,
            start_id=start,
            suppress=self.tokenizer.suppress_ids,
            **kw,
        )


def load_model(
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    task: str | None = None,
    dtype: str = "float32",
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> LoadedModel:
    """Rebuilds a model from one checkpoint file (its bundle and weights). `task` (None: the checkpoint's own)
    is what a multi-task model's decoder writes: "st" translates, "asr" transcribes, each started by its tag
    (speechmt.bundle.ModelBundle). CheckpointError (one line) for a task the checkpoint was not trained for.
    `dtype` (one of speechmt.checks.DTYPES, torch's names) is what the weights are cast to for inference:
    "bfloat16" halves their memory and runs the matrix products in bfloat16 (on a CPU with AVX512-BF16 or AMX,
    and on GPUs, about twice as fast); scores stay float32 (the search's log-softmax). `src_lang`, `tgt_lang`:
    the direction a model of several writes (None: its first, or the one the other names); CheckpointError,
    one line naming the directions it knows, for another.

    Task asr of a model whose speech encoder transcribes (a cascade's ASR and bridge: encoder whisper_asr) is that
    transcript, whatever the decoder was trained for: its ASR's search (speechmt.decoding.transcribe) read by the
    encoder's transcript_tokenizer; the decoder does not run. Such a model of several sources transcribes in
    `src_lang` (or the one source of the direction `tgt_lang` names), else in the language Whisper detects in
    each clip among its sources; a model whose bundle does not yet hold those sources' tokens ("encoder.asr_languages")
    takes them from its directions."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    weights = getattr(torch, dtype)
    ckpt = load_checkpoint(path, map_location="cpu")
    bundle = ModelBundle.from_checkpoint(ckpt, path)
    task = task or bundle.task
    tag, tokenizer, whisper = task_output(bundle, task, path, src_lang, tgt_lang)
    resolved = dict(bundle.resolved)
    if bundle.hears_source and not resolved.get(LANGUAGES_RESOLVED):  # trained before the sources were resolved
        resolved[LANGUAGES_RESOLVED] = bundle.sources()
    try:  # a checkpoint on a pretrained base holds trained parameters only: the rest comes from the base
        model = build_model(bundle.config, bundle.base is not None, SEARCH, resolved)
        load_model_state(model, ckpt["model"], bundle.base, path)
    except (KeyError, RuntimeError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"{path}: checkpoint lacks or mismatches what a model needs ({str(e).splitlines()[0]})"
        ) from None
    device = torch.device(device)
    return LoadedModel(
        model.to(device=device, dtype=weights).eval(),
        tokenizer,
        tag,
        bundle.frontend,
        task,
        str(path),
        device,
        bundle.tokenizers.src,
        bundle.decoder_start,
        whisper,
        weights,
        directions={} if whisper else dict(bundle.directions.get(task) or {}),
        src_lang=direction_source(bundle.directions.get(task) or {}, src_lang, tgt_lang),
        hears_source=bundle.hears_source,
    )


def in_direction(lm: LoadedModel, src_lang: str | None = None, tgt_lang: str | None = None) -> LoadedModel:
    """`lm` writing the direction asked (None: any it knows; both None: `lm` as it is), its tag picked from the
    directions it was trained in (speechmt.bundle.pick_tag), its speech heard in `src_lang` (or the one source of
    the directions into `tgt_lang`; else, where it `hears_source`, the language Whisper detects); CheckpointError,
    one line naming the file and the directions it knows, for one it was not trained in."""
    if src_lang is None and tgt_lang is None:
        return lm
    try:
        tag = pick_tag(lm.directions, lm.tag, src_lang, tgt_lang, lm.hears_source)
        return replace(lm, tag=tag, src_lang=direction_source(lm.directions, src_lang, tgt_lang))
    except CheckpointError as e:
        raise CheckpointError(f"{lm.path}: {e}") from None


def with_memory(lm: LoadedModel, manifests: Sequence[str | os.PathLike] | None) -> LoadedModel:
    """`lm` with the translation memory of `manifests` (their pairs; manifests, memory folders or names:
    speechmt.data.retrieval.memory_manifest), or else of the memory the model names (decoder.memory), where its
    decoder reads retrieved examples before the speech (LoadedModel.speech_examples). CheckpointError or
    ManifestError (one line) when such a model gets and names none, when that memory is missing, or when a model
    that reads none gets some."""
    if not lm.speech_examples:
        if manifests:
            raise CheckpointError(
                f"{lm.path}: --memory is for a model that reads retrieved examples before the "
                f"speech (decoder.examples > 0, task st); this one reads none"
            )
        return lm
    manifests = manifests or ([lm.model.config.decoder.memory] if lm.model.config.decoder.memory else [])
    if not manifests:
        raise CheckpointError(
            f"{lm.path}: the model reads {lm.examples} retrieved examples before the speech "
            "(decoder.examples) and names no memory; give --memory its translation pairs (a "
            "memory folder or name, or manifests such as DATA/train.jsonl)"
        )
    lm.memory = memory_from_manifests(manifests)
    return lm


def task_output(
    bundle: ModelBundle, task: str, path: str | os.PathLike, src_lang: str | None = None, tgt_lang: str | None = None
) -> tuple[str | None, Tokenizer, bool]:
    """(the decoder's tag for `task` in the direction asked (ModelBundle.direction_tag), the tokenizer its output is decoded with, whether that output is the speech
    encoder's own transcript: task asr of an encoder that transcribes, read with its transcript_tokenizer, no tag)."""
    transcripts = bundle.config.encoder.transcript_tokenizer() if task == "asr" else None
    if transcripts is not None:
        return None, transcripts, True
    try:
        return bundle.direction_tag(task, src_lang, tgt_lang), bundle.decoder_tokenizer(task), False
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None


@dataclass
class Translation:
    """The result for one input: text, the chunks it was cut into (seconds) and their texts, audio seconds."""

    source: str
    text: str = ""
    chunks: list[tuple[float, float]] = field(default_factory=list)
    audio_seconds: float = 0.0
    nbest: list[str] = field(default_factory=list)
    chunk_texts: list[str] = field(default_factory=list)  # the text of each chunk, in order
    transcript: str = ""  # the cascade's ASR output (empty for end-to-end models)
    # the source language the speech was transcribed in by a whisper_asr model of several sources (given, or
    # detected by Whisper: its chunks' most frequent); "" for other models
    src_lang: str = ""
    error: str | None = None  # why the input could not be read (translate(errors="keep")); text is then empty
    warning: str | None = None  # why the text is empty though the input was read: too short to translate
    voiced: list[tuple[float, float]] = field(default_factory=list)  # each chunk less its edge silence (s)

    def timed_texts(self) -> list[tuple[float, float, str]]:
        """(start s, end s, text) of each chunk with text and voiced frames: its voiced span, when subtitles
        show it (a chunk without voiced frames is silence, whose text a model made up)."""
        spans = self.voiced or self.chunks
        return [(s, e, t) for (s, e), t in zip(spans, self.chunk_texts) if t.strip() and e > s]


def _chunks(item: str | os.PathLike | np.ndarray, seg: SegmentConfig) -> Iterator[tuple[float, float, np.ndarray]]:
    """(start s, end s, 16 kHz wave) per chunk of a file path or a 16 kHz array."""
    if isinstance(item, np.ndarray):
        for s, e in find_segments(item, SAMPLE_RATE, seg) or [(0, len(item))]:
            yield s / SAMPLE_RATE, e / SAMPLE_RATE, item[s:e]
        return
    path = os.fspath(item)
    seconds = _duration(path)
    if seconds == 0.0:  # a header without samples (a truncated file): nothing to translate, said by translate()
        return
    read_audio(path, 0.0, min(0.05, seconds))  # validates the file with a clear error
    for chunk in iter_file_segments(path, seg):
        wave = resample(chunk.wave, chunk.sample_rate, SAMPLE_RATE)
        if not np.isfinite(wave).all():
            raise AudioError(f"{path}: non-finite samples (NaN or Inf)", "non-finite samples")
        yield chunk.start_seconds, chunk.end / chunk.sample_rate, wave


def _duration(path: str) -> float:
    sample_rate, frames, _ = audio_info(path)
    return frames / sample_rate


def encode_inputs(lm: LoadedModel, inputs: list[torch.Tensor], languages: Languages = None) -> EncoderOutput:
    """Front-end outputs of one batch (each (T_i, ...)) -> the model's speech encoder output: the one place
    translate, evaluate and the cascade encode audio. A model with decoder.examples reads them first
    (encode_with_examples). `languages`: see `encode_heard`."""
    return encode_heard(lm, inputs, languages)[0]


def encode_heard(
    lm: LoadedModel, inputs: list[torch.Tensor], languages: Languages = None
) -> tuple[EncoderOutput, list[str]]:
    """`encode_inputs`' output and the source language each row was transcribed in: a whisper_asr encoder of several
    sources transcribes each in its `languages` code (None, or a row's None or "": `lm.src_lang`, else the one
    Whisper detects); "" each for other encoders."""
    x, lengths = collate_sequences(inputs)
    x, lengths = _to_model(lm, x), lengths.to(lm.device)
    if lm.speech_examples:
        return encode_with_examples(lm, x, lengths, _languages(lm, languages, len(inputs)))
    encoder = lm.model.speech_encoder
    if getattr(encoder, "languages", None):  # its search's prompt is each row's language: the states first
        given = _languages(lm, languages, len(inputs))
        states, state_lengths, _, spoken = encoder.heard(x, lengths, languages=given, among=lm.sources())
        return lm.model.encode_speech(states, state_lengths, precomputed=True), spoken
    return lm.model.encode_speech(x, lengths), [""] * len(inputs)


def _languages(lm: LoadedModel, languages: Languages, rows: int) -> list[str | None]:
    """Each row's source language: its own in `languages`, else `lm.src_lang` (None: heard)."""
    given = list(languages) if languages is not None else [None] * rows
    return [g or lm.src_lang for g in given]


def encode_with_examples(
    lm: LoadedModel, x: torch.Tensor, lengths: torch.Tensor, languages: Languages = None
) -> tuple[EncoderOutput, list[str]]:
    """Speech read after retrieved examples: Whisper's search (a whisper_asr encoder) gives each utterance's
    states and transcript; the transcript finds the `lm.examples` nearest pairs of `lm.memory` (BM25), whose
    few-shot text the decoder reads before the speech's vectors; without `lm.memory`, the memory the model names
    (decoder.memory) is loaded on first use. Returns that encoder output and the language each row was transcribed
    in (`languages`: each row's source language, as `encode_heard`'s). CheckpointError or ManifestError (one line)
    without a memory or without a transcript to search by."""
    encoder = lm.model.speech_encoder
    if not hasattr(encoder, "search"):
        raise CheckpointError(
            f"{lm.path}: examples before speech are found by the encoder's own transcript; "
            f"encoder {lm.model.config.encoder.kind!r} writes none (use encoder whisper_asr)"
        )
    if lm.memory is None:
        with_memory(lm, None)  # the memory the model names, or one line asking for one
    states, state_lengths, ids, spoken = encoder.heard(x, lengths, languages=languages, among=lm.sources())
    out = lm.model.encode_speech(states, state_lengths, precomputed=True)
    found = lm.memory.search([lm.transcript_text(i) for i in ids], lm.examples)
    prefixes = example_prefixes(
        [[(e.src, e.tgt) for e in ex] for ex in found], lm.examples, lm.source_tokenizer, *lm.languages()
    )
    prefix, prefix_lengths = collate_sequences(prefixes, lm.source_tokenizer.pad_id)
    return lm.model.prefixed(out, prefix.to(lm.device), prefix_lengths.to(lm.device)), spoken


def _to_model(lm: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """A batch of front-end outputs on the model's device, features in its dtype (token ids stay integers)."""
    return x.to(lm.device, lm.dtype) if x.is_floating_point() else x.to(lm.device)


def encode_audio(lm: LoadedModel, waves: list[np.ndarray]) -> EncoderOutput:
    """Encodes 16 kHz waves through the model's own front end."""
    return encode_inputs(lm, [lm.frontend(w) for w in waves])


def encode_texts(lm: LoadedModel, texts: Sequence[str]) -> EncoderOutput:
    """Texts -> a text model's encoder output x (B, S, D), lengths (B,); each source ends with </s>, as in
    training, so an empty text is one token long."""
    tok = lm.source_tokenizer
    x, lengths = collate_sequences([torch.tensor(tok.encode(t)) for t in texts], tok.pad_id)
    return lm.model.encode_text(x.to(lm.device), lengths.to(lm.device))


@torch.no_grad()
def decode_inputs(
    lm: LoadedModel, inputs: list[torch.Tensor], options: DecodeOptions, languages: Languages = None
) -> tuple[list[list[str]], list[int]]:
    """Front-end outputs of one batch (each (T_i, ...)) -> each one's n-best texts, best first, and the length
    of what the text was read from (the decoder's memory: the encoder output it attends to): the one place
    translate, evaluate and the cascade decode speech. Task asr of a cascade's model (`whisper_transcript`): its
    ASR's transcript, one text each (`options` do not apply), and its length in the ASR's tokens. `languages`:
    each row's source language (`encode_heard`)."""
    return decode_heard(lm, inputs, options, languages)[:2]


@torch.no_grad()
def decode_heard(
    lm: LoadedModel, inputs: list[torch.Tensor], options: DecodeOptions, languages: Languages = None
) -> tuple[list[list[str]], list[int], list[str]]:
    """`decode_inputs`' texts and lengths, and the source language each row was transcribed in (`encode_heard`)."""
    if lm.whisper_transcript:
        x, lengths = collate_sequences(inputs)
        encoder, given = lm.model.speech_encoder, _languages(lm, languages, len(inputs))
        ids, spoken = encoder.heard_transcripts(_to_model(lm, x), lengths.to(lm.device), given, lm.sources())
        return [[lm.tokenizer.decode(i)] for i in ids], [len(i) for i in ids], spoken
    enc, spoken = encode_heard(lm, inputs, languages)
    return (*decode_encoded(lm, enc, options), spoken)


@torch.no_grad()
def decode_encoded(lm: LoadedModel, enc: EncoderOutput, options: DecodeOptions) -> tuple[list[list[str]], list[int]]:
    """An encoder output (speech or text) -> each row's n-best texts, best first, and its length."""
    return hypothesis_texts(lm, search(lm.model, enc, options), options), enc.lengths.tolist()


def hypothesis_texts(lm: LoadedModel, nbest: list[list[list[int]]], options: DecodeOptions) -> list[list[str]]:
    """The search's token ids per row -> each row's `options.nbest` texts, best first: by the search's score,
    or with `options.mbr` by expected utility against the whole beam, or with `options.samples` against the
    samples that follow the beam's hypotheses (speechmt.decoding.mbr)."""
    texts = [[lm.tokenizer.decode(tokens) for tokens in n] for n in nbest]
    if options.samples:  # the beam's hypotheses are the candidates, the samples the references
        texts = [mbr_order(t[: len(t) - options.samples], options.mbr, t[len(t) - options.samples :]) for t in texts]
    elif options.mbr:
        texts = [mbr_order(t, options.mbr) for t in texts]
    return [t[: options.nbest] for t in texts]


def _decode_batch(
    lm: LoadedModel, waves: list[np.ndarray], options: DecodeOptions
) -> tuple[list[list[str]], list[str]]:
    """n-best texts for a batch of 16 kHz waves, and the language each was transcribed in (`decode_heard`)."""
    texts, _, spoken = decode_heard(lm, [lm.frontend(w) for w in waves], options)
    return texts, spoken


def _pieces(
    inputs: Sequence, segment: SegmentConfig, min_samples: int, results: list[Translation], errors: str
) -> Iterator[tuple[int, int, float, float, np.ndarray]]:
    """(input index, chunk index, start s, end s, wave) of every decodable chunk, input by input. An
    unreadable input raises AudioError, or with errors="keep" has its reason in results[n].error. Each
    chunk's voiced span goes into results[n].voiced."""
    for n, item in enumerate(inputs):
        try:
            for k, (start, end, wave) in enumerate(_chunks(item, segment)):
                results[n].audio_seconds += end - start
                if len(wave) >= min_samples:
                    span = voiced_span(wave, SAMPLE_RATE, segment) or (0, 0)  # (0, 0): silence
                    results[n].voiced.append((start + span[0] / SAMPLE_RATE, start + span[1] / SAMPLE_RATE))
                    yield n, k, start, end, wave
        except AudioError as e:
            if errors == "raise":
                raise
            results[n].error = str(e)


def translate(
    lm: LoadedModel,
    inputs: Sequence[str | os.PathLike | np.ndarray],
    beam: int = 5,
    batch_size: int = 16,
    segment: SegmentConfig = SegmentConfig(),
    errors: str = "raise",
    **options,
) -> list[Translation]:
    """Translates (or transcribes, for an ASR model) audio files or 16 kHz float arrays, in order.

    Chunks are decoded `batch_size` at a time, sorted by length within a window of 4 batches, so at
    most that window of audio is held in memory. An unreadable file raises AudioError (errors="raise"), or
    (errors="keep") gets an empty Translation with the reason in `error` while the others are translated.
    An input shorter than the model's smallest input gives an empty text and a warning (also in `warning`).
    """
    if errors not in ("raise", "keep"):
        raise ValueError(f"errors must be 'raise' or 'keep', got {errors!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    limit = lm.max_input_seconds
    if limit is not None and segment.max_seconds > limit:
        raise ValueError(
            f"{lm.path} takes at most {limit:g} s of audio at once; segment.max_seconds is {segment.max_seconds:g}"
        )
    opts = lm.decode_options(beam, **options)
    results = [Translation(f"array[{n}]" if isinstance(i, np.ndarray) else str(i)) for n, i in enumerate(inputs)]
    done: dict[tuple[int, int], tuple[float, float, list[str], str]] = {}
    window: list[tuple[int, int, float, float, np.ndarray]] = []

    def flush() -> None:
        window.sort(key=lambda p: len(p[4]))
        for b in range(0, len(window), batch_size):
            batch = window[b : b + batch_size]
            texts, spoken = _decode_batch(lm, [p[4] for p in batch], opts)
            for (n, k, start, end, _), nbest, lang in zip(batch, texts, spoken):
                done[(n, k)] = (start, end, nbest, lang)
        window.clear()

    min_samples = lm.min_input_samples
    for piece in _pieces(inputs, segment, min_samples, results, errors):
        window.append(piece)
        if len(window) >= 4 * batch_size:
            flush()
    flush()
    heard: dict[int, list[str]] = {}
    for (n, _), (start, end, nbest, lang) in sorted(done.items()):
        if results[n].error:  # chunks read before the file turned out unreadable further on
            results[n].voiced = []
            continue
        heard.setdefault(n, []).append(lang)
        results[n].chunks.append((start, end))
        results[n].chunk_texts.append(nbest[0])
        results[n].text = f"{results[n].text} {nbest[0]}".strip()
        results[n].nbest = nbest if len(results[n].chunks) == 1 else []
    for n, langs in heard.items():  # the chunks' most frequent (the first of equals)
        results[n].src_lang = max(dict.fromkeys(langs), key=langs.count)
    for r in results:
        if r.error is None and not r.chunks:
            length = f"{r.audio_seconds * 1000:.4g} ms of audio" + (" (no samples)" if not r.audio_seconds else "")
            r.warning = (
                f"{r.source}: {length}, shorter than the model's smallest input "
                f"({min_samples * 1000 / SAMPLE_RATE:g} ms); nothing to translate"
            )
            warnings.warn(r.warning, stacklevel=2)
    return results
