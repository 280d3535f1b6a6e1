"""The Python API, speechmt's one front door: `load_model()`, `load_cascade()`, `translate()`, `simultaneous()` and
the subtitles of a translation; evaluation in speechmt.api_evaluate, training in speechmt.api_train (all re-exported
by `speechmt`). The arguments are the command line's options as typed keyword arguments, checked by the same rules
(speechmt.checks) with the same one-line messages; every `speechmt` command calls this API.

Importing this module is cheap: torch and the models load on the first call.
"""

from __future__ import annotations

import os
from argparse import ArgumentTypeError
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar, Union, cast

from speechmt import checks as opt

if TYPE_CHECKING:
    import numpy as np
    import torch

    from speechmt.decoding.search import DecodeOptions
    from speechmt.decoding.simultaneous import Commit
    from speechmt.decoding.subtitles import Cue
    from speechmt.decoding.translate import LoadedModel, Translation

Task = Literal["st", "asr", "mt"]
Dtype = Literal["float32", "bfloat16"]
Policy = Literal["wait-k", "alignatt"]
Audio = Union[str, os.PathLike, "np.ndarray"]
TASKS: Final[tuple[Task, ...]] = ("st", "asr", "mt")
TRANSLATE_TASKS: Final[tuple[Task, ...]] = ("st", "asr")  # what a model does with audio; "mt" (text in) is evaluate's
T = TypeVar("T")


class OptionError(ValueError):
    """A bad argument of an API function, in one line that names it, its value and what is allowed, as the
    command line does: "beam: invalid value '0': expected an integer from 1 to 256"."""


def checked(name: str, parse: Callable[[str], T], value: object) -> T:
    """`value` through a command-line type check (speechmt.checks); OptionError named `name` if it fails."""
    try:
        return parse(str(value))
    except ArgumentTypeError as e:
        raise OptionError(f"{name}: {e}") from None


def checked_device(value: object) -> str:
    """A device name (cpu, cuda, cuda:N, mps) this machine has; OptionError naming `device` otherwise."""
    from speechmt.checks import device_problem

    problem = device_problem(str(value))
    if problem:
        raise OptionError(f"device: invalid value {str(value)!r}: {problem}")
    return str(value)


def checked_task(value: object, allowed: tuple[Task, ...]) -> Task | None:
    """`value` when it is one of `allowed` or None (the model's own task); OptionError otherwise."""
    if value is None:
        return None
    for task in allowed:
        if value == task:
            return task
    raise OptionError(
        f"task: invalid value {str(value)!r}: expected one of {', '.join(allowed)} (or None: the model's own task)"
    )


@dataclass(frozen=True)
class SearchOptions:
    """The search options besides the beam, checked (`search_options`): LoadedModel.decode_options's keyword
    arguments, which `translate`, `cascade_translate` and `evaluate_cascade` pass on to it."""

    len_penalty: float
    max_len_a: float
    max_len_b: int
    min_len: int
    mbr: str | None
    samples: int

    def decode_options(self, lm: LoadedModel, beam: int) -> DecodeOptions:
        """`lm`'s DecodeOptions with `beam` and these options."""
        return lm.decode_options(
            beam,
            len_penalty=self.len_penalty,
            max_len_a=self.max_len_a,
            max_len_b=self.max_len_b,
            min_len=self.min_len,
            mbr=self.mbr,
            samples=self.samples,
        )


def search_options(
    beam: int, len_penalty: float, max_len_a: float, max_len_b: int, min_len: int, mbr: str | None, mbr_samples: int
) -> tuple[int, SearchOptions]:
    """The beam and the other search options checked as the command line checks them: (beam, the other options
    of LoadedModel.decode_options)."""
    from speechmt.decoding.mbr import UTILITIES

    beam = checked("beam", opt.integer(1, opt.MAX_BEAM), beam)
    penalty = checked("len_penalty", opt.number(-10, 10), len_penalty)
    len_a = checked("max_len_a", opt.number(0, 10), max_len_a)
    len_b = checked("max_len_b", opt.integer(0, opt.MAX_OUTPUT_TOKENS), max_len_b)
    least = checked("min_len", opt.integer(0, opt.MAX_OUTPUT_TOKENS), min_len)
    if mbr not in (None, *UTILITIES):
        raise OptionError(f"mbr: invalid value {str(mbr)!r}: expected chrf, bleu or None")
    samples = checked("mbr_samples", opt.integer(0, opt.MAX_BEAM), mbr_samples)
    if samples and not mbr:
        raise OptionError("mbr_samples: only with mbr (chrf or bleu)")
    if mbr and beam < 2 and not samples:
        raise OptionError(f"mbr: needs a beam of 2 or more hypotheses, or mbr_samples, to choose from (beam is {beam})")
    return beam, SearchOptions(penalty, len_a, len_b, least, mbr, samples)


def _in_direction(lm: "LoadedModel | Cascade", src_lang: str | None, tgt_lang: str | None) -> "LoadedModel | Cascade":
    """The model writing the direction asked (a cascade's MT stage does)."""
    from speechmt.decoding.translate import in_direction

    if isinstance(lm, Cascade):
        return Cascade(lm.asr, in_direction(lm.mt, src_lang, tgt_lang))
    return in_direction(lm, src_lang, tgt_lang)


def _checked_dtype(dtype: object) -> str:
    if dtype not in opt.DTYPES:
        raise OptionError(f"dtype: invalid value {str(dtype)!r}: expected {' or '.join(opt.DTYPES)}")
    return str(dtype)


def load_model(
    path: str | os.PathLike | None = None,
    device: str = "cpu",
    task: Task | None = None,
    dtype: Dtype = "float32",
    memory: Sequence[str | os.PathLike] | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> LoadedModel:
    """Loads a model from one checkpoint file, ready for `translate`, `simultaneous` and `evaluate`.

    Args:
        path: a `.safetensors` checkpoint or exported model (`speechmt train`, `average`, `export`,
            `import hf`); None: the bundled English -> German model, "multilingual": the bundled one of eight
            directions (English <-> German, French, Spanish, Italian; speechmt/pretrained/MODEL_CARD.md; both
            need the Whisper base and Gemma 3 270M that `make setup` installs).
        device: cpu, cuda, cuda:N (a CUDA device of this machine) or mps.
        task: what a multi-task model's decoder does: "st" translates, "asr" transcribes, "mt" translates
            text (evaluate); None: the checkpoint's own task. "asr" of a cascade with a bridge (the bundled
            one: its ASR transcribes, the bridge hands that to its LM) is its ASR's transcript, computed anyway.
        dtype: the weights' type while decoding: "bfloat16" runs the matrix products about twice as fast on
            CPUs with AVX512-BF16 or AMX and on GPUs, at a small cost in precision.
        memory: a model that reads retrieved examples before the speech (decoder.examples): the translation
            memories it searches by its own transcript (manifests, memory folders or names built under
            $SPEECHMT_HOME, e.g. `ding-en-de`, which `speechmt data synth-memory` builds); None: the one the
            model names (decoder.memory), loaded on first use.
        src_lang, tgt_lang: the direction a model of several writes ("en", "fr"; None: its first, or the one
            the other names); `evaluate` decodes each utterance in its own record's direction.

    Raises OptionError for a bad device, task, dtype or language code, and speechmt.checkpoint.CheckpointError (one line naming the
    file) for a missing, unsafe (pickled) or unusable checkpoint, a task or direction it was not trained for (naming
    the directions it knows), or `memory`
    for a model that reads no examples; speechmt.data.manifest.ManifestError (one line) for a memory not there.
    """
    from speechmt.decoding.translate import load_model as _load
    from speechmt.decoding.translate import with_memory
    from speechmt.pretrained import model_path

    device, task = checked_device(device), checked_task(task, TASKS)
    src, tgt = checked_language("src_lang", src_lang), checked_language("tgt_lang", tgt_lang)
    lm = _load(model_path(path), device, task, _checked_dtype(dtype), src, tgt)
    return with_memory(lm, memory) if memory else lm


def checked_language(name: str, code: object) -> str | None:
    """A language code option (en, fr, zh-CN) as given, None as None; OptionError naming `name` otherwise."""
    if code is not None and not (isinstance(code, str) and opt.LANGUAGE_CODE.fullmatch(code)):
        raise OptionError(f"{name}: invalid value {str(code)!r}: expected a language code such as en, fr or zh-CN")
    return code


@dataclass
class Cascade:
    """An ASR model whose transcripts a text MT model translates (`load_cascade`); `translate` and `evaluate` take
    it where they take a model."""

    asr: LoadedModel
    mt: LoadedModel

    @property
    def path(self) -> str:
        """The MT model's checkpoint: the file a cascade's reports are named after."""
        return self.mt.path


def load_cascade(
    asr: str | os.PathLike,
    mt: str | os.PathLike,
    device: str = "cpu",
    dtype: Dtype = "float32",
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> Cascade:
    """Loads the cascade baseline: `asr` (a checkpoint that transcribes) and `mt` (one that translates text; one
    multi-task checkpoint can be both), the MT stage writing the direction `src_lang`, `tgt_lang` names (as
    load_model's). OptionError for a bad device, dtype or language code; CheckpointError (one line naming the
    file) for a model not trained so."""
    from speechmt.decoding.cascade import load_cascade as _load
    from speechmt.decoding.translate import in_direction

    src, tgt = checked_language("src_lang", src_lang), checked_language("tgt_lang", tgt_lang)
    asr_model, mt_model = _load(asr, mt, checked_device(device), _checked_dtype(dtype))
    return Cascade(asr_model, in_direction(mt_model, src, tgt))


def translate(
    model: LoadedModel | Cascade | str | os.PathLike | None,
    inputs: Audio | Sequence[Audio],
    *,
    task: Literal["st", "asr"] | None = None,
    device: str | None = None,
    beam: int = 5,
    nbest: int = 1,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    batch_size: int = 16,
    max_chunk_seconds: float = 20.0,
    cut_pauses: float = 0.0,
    errors: Literal["raise", "keep"] = "raise",
    mbr: Literal["chrf", "bleu"] | None = None,
    mbr_samples: int = 0,
    strategy: str | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> list[Translation]:
    """Translates (or, for an ASR model or task="asr", transcribes) audio files or 16 kHz arrays, in order.

    The arguments are `speechmt translate`'s options, under the same rules and with the same one-line
    messages (OptionError, a ValueError, naming the argument):

    Args:
        model: a model from `load_model`, a cascade from `load_cascade`, a checkpoint path (loaded here with
            `task` and `device`), or None for the bundled English -> German model.
        inputs: an audio file (wav, flac, ogg, mp3; any length, any sample rate) or a 16 kHz mono float
            array, or a sequence of them.
        task: "st" or "asr": what a multi-task model does (None: its own task). Only with a path or None as
            `model`; a loaded model keeps the task it was loaded for.
        device: cpu, cuda, cuda:N or mps (None: cpu for a path, the loaded model's own device).
        beam: beam size, 1 (greedy) to 256.
        nbest: hypotheses kept in each result's `nbest`, 1 to `beam` (a cascade keeps none).
        len_penalty: hypothesis scores are divided by length ** len_penalty; -10 to 10.
        max_len_a, max_len_b: at most max_len_a * encoder length + max_len_b output tokens per chunk;
            max_len_a from 0 to 10, max_len_b from 0 to 100000.
        min_len: at least this many output tokens per chunk, 0 to 100000.
        batch_size: chunks decoded at once, 1 to 4096.
        max_chunk_seconds: audio is cut at pauses into chunks of at most this many seconds: more than 1, at
            most 3600 and what the model takes at once (Whisper: 30).
        cut_pauses: also cut at every pause of at least this many milliseconds, about one sentence per chunk
            (what `--format srt` does with 300); 0 to 10000; 0: only where a chunk would pass max_chunk_seconds.
        errors: "raise": an unreadable file raises speechmt.audio.AudioError (one line naming it); "keep":
            it gets an empty result with the reason in `error`, and the others are translated.
        mbr: "chrf" or "bleu": minimum Bayes risk, each chunk's text the one of the beam's `beam` hypotheses
            with the highest mean sentence score against the others (`nbest` then in that order); None: the
            best-scoring hypothesis. Needs beam >= 2 or mbr_samples. A cascade applies it to its MT stage.
        mbr_samples: with mbr, this many epsilon samples (epsilon 0.02) per chunk, 0 to 256, are the
            references the beam's hypotheses are scored against (0: the beam itself).
        strategy: how each step's token is chosen, a token decoder by name (speechmt.decoding.search.TOKEN_DECODERS:
            greedy, beam, sample, or one registered there); None: greedy at beam 1, else beam search. Not for a
            cascade.
        temperature: strategy "sample" draws from softmax(log-probs / temperature), 0 to 100 (0 is greedy),
        top_k: among the top_k most probable tokens (0: all),
        top_p: among the most probable tokens holding top_p of the mass, 0 < top_p <= 1.
        seed: the random seed of the draws (sampling, mbr_samples), 0 to 2**31 - 1.
        src_lang, tgt_lang: the direction a model of several languages writes ("en", "fr"); None: the one
            it was loaded for (`load_model`'s), its first. CheckpointError naming those it knows for another.

    Task "asr" of a cascade with a bridge (the bundled one) returns its ASR's transcript, found by the ASR's own
    search: beam, nbest and the length options, which drive the decoder's search, do not apply to it (`nbest`
    holds the one transcript).

    Returns one speechmt.decoding.translate.Translation per input: `source`, `text`, `nbest`, `chunks`
    (start, end seconds) and `chunk_texts`, `voiced` (each chunk less its edge silence; `timed_texts()` pairs
    them with the texts, as subtitles show them), `audio_seconds`, `transcript` (a cascade's ASR output),
    `error`, `warning` (audio too short to translate: an empty text and a warning, also issued through `warnings`).
    """
    beam, search = search_options(beam, len_penalty, max_len_a, max_len_b, min_len, mbr, mbr_samples)
    drawing = _strategy_options(strategy, temperature, top_k, top_p, seed)
    nbest = checked("nbest", opt.integer(1, opt.MAX_BEAM), nbest)
    if nbest > beam:
        raise OptionError(f"nbest: invalid value '{nbest}': expected an integer from 1 to beam ({beam})")
    batch_size = checked("batch_size", opt.integer(1, opt.MAX_BATCH), batch_size)
    seconds = checked("max_chunk_seconds", opt.number(1, opt.MAX_CHUNK_SECONDS, lo_open=True), max_chunk_seconds)
    pause_ms = checked("cut_pauses", opt.number(0, 10000), cut_pauses)
    if errors not in ("raise", "keep"):
        raise OptionError(f"errors: invalid value {str(errors)!r}: expected raise or keep")
    lm = _model(model, checked_task(task, TRANSLATE_TASKS), None if device is None else checked_device(device))
    lm = _in_direction(lm, checked_language("src_lang", src_lang), checked_language("tgt_lang", tgt_lang))
    _check_chunk_seconds(lm.asr if isinstance(lm, Cascade) else lm, seconds)
    from speechmt.decoding.segment import SegmentConfig

    items = _audio_items(inputs)
    segment = SegmentConfig(max_seconds=seconds, pause_cut_ms=pause_ms)
    if isinstance(lm, Cascade) and strategy is not None:
        raise OptionError("strategy: not with a cascade (its stages decode by beam search)")
    if isinstance(lm, Cascade):
        from speechmt.decoding.cascade import cascade_translate

        return cascade_translate(
            lm.asr,
            lm.mt,
            items,
            beam=beam,
            batch_size=batch_size,
            segment=segment,
            errors=errors,
            len_penalty=search.len_penalty,
            max_len_a=search.max_len_a,
            max_len_b=search.max_len_b,
            min_len=search.min_len,
            mbr=search.mbr,
            samples=search.samples,
        )
    from speechmt.decoding.translate import translate as _translate

    return _translate(
        lm,
        items,
        beam=beam,
        batch_size=batch_size,
        segment=segment,
        errors=errors,
        nbest=nbest,
        len_penalty=search.len_penalty,
        max_len_a=search.max_len_a,
        max_len_b=search.max_len_b,
        min_len=search.min_len,
        mbr=search.mbr,
        samples=search.samples,
        **drawing,
    )


def _strategy_options(strategy: object, temperature: object, top_k: object, top_p: object, seed: object) -> dict:
    """The token decoder and its sampling settings, checked as the command line checks them (DecodeOptions
    fields)."""
    from speechmt.decoding.search import TOKEN_DECODERS

    if strategy is not None and strategy not in TOKEN_DECODERS:
        raise OptionError(f"strategy: invalid value {str(strategy)!r}: expected one of {', '.join(TOKEN_DECODERS)}")
    return dict(
        strategy=strategy,
        temperature=checked("temperature", opt.number(0, 100), temperature),
        top_k=checked("top_k", opt.integer(0, 10**6), top_k),
        top_p=checked("top_p", opt.number(0, 1, lo_open=True), top_p),
        seed=checked("seed", opt.integer(0, 2**31 - 1), seed),
    )


def _audio_items(inputs: Audio | Sequence[Audio]) -> list[Audio]:
    """`translate`'s inputs as a list: one file or array, or the items of a sequence of them."""
    if isinstance(inputs, (str, os.PathLike)) or hasattr(inputs, "dtype"):
        return [cast("Audio", inputs)]  # a path, or an array (a sequence of inputs has no dtype)
    return list(inputs)


def _check_chunk_seconds(lm: LoadedModel, seconds: float) -> None:
    """OptionError when chunks of `seconds` are more than the model takes at once (Whisper's 30 s window)."""
    limit = lm.max_input_seconds
    if limit is not None and seconds > limit:
        raise OptionError(
            f"max_chunk_seconds: invalid value '{seconds:g}': {lm.path} takes at most {limit:g} s of audio at once"
        )


def _model(
    model: LoadedModel | Cascade | str | os.PathLike | None, task: Task | None, device: str | None
) -> LoadedModel | Cascade:
    """`model` itself, or loaded from its path (None: the bundled model); a loaded model must already do
    `task` on `device` when they are given, and a cascade takes no task."""
    if not isinstance(model, Cascade):
        return _loaded(model, task, device)
    if task is not None:
        raise OptionError(f"task: invalid value {task!r}: task picks a model's task, not a cascade's")
    _check_device(model.asr, device)
    return model


def _loaded(model: LoadedModel | str | os.PathLike | None, task: Task | None, device: str | None) -> LoadedModel:
    """`_model` of a single model."""
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_model(model, device or "cpu", task)
    if task is not None and task != model.task:
        raise OptionError(
            f"task: invalid value {task!r}: the model was loaded for {model.task!r}; pass task to "
            "load_model, or a checkpoint path to translate"
        )
    _check_device(model, device)
    return model


def _check_device(model: LoadedModel, device: str | None) -> None:
    """OptionError when `device` is given and is not where the loaded model is."""
    if device is not None and _torch_device(device) != _torch_device(model.device):
        raise OptionError(
            f"device: invalid value {device!r}: the model was loaded on {model.device}; pass device "
            "to load_model, or a checkpoint path to translate"
        )


def _torch_device(name: str | torch.device) -> torch.device:
    """torch.device(name), "cuda" naming the current CUDA device's index."""
    import torch

    dev = torch.device(name)
    return torch.device("cuda", torch.cuda.current_device()) if dev.type == "cuda" and dev.index is None else dev


@dataclass
class Stream:
    """One input translated as it arrived (`simultaneous`): the text, each commit in order, the audio read and the
    compute spent (ms), each word's delay (the audio read when it was written) and elapsed time (that plus the
    compute so far), and the latency: AL and LAAL, computation-unaware and -aware (AL_CA, LAAL_CA), in ms."""

    source: str
    text: str
    commits: list[Commit]
    source_ms: float
    compute_ms: float
    word_delays_ms: list[float]
    word_elapsed_ms: list[float]
    latency_ms: dict[str, float | int | None]


def simultaneous(
    model: LoadedModel | str | os.PathLike | None,
    audio: Audio | Iterable[np.ndarray],
    *,
    policy: Policy = "wait-k",
    k: int | None = None,
    step_ms: float = 400.0,
    window_seconds: float = 20.0,
    tail_beam: int = 1,
    task: Literal["st", "asr"] | None = None,
    device: str | None = None,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    on_commit: Callable[[Commit], None] | None = None,
    source: str | None = None,
) -> Stream:
    """Translates one input as its audio arrives (`speechmt translate --simultaneous`, docs/subtitles.md).

    Args:
        model: as `translate`'s (not a cascade).
        audio: an audio file, a 16 kHz mono float array, or an iterable of such arrays arriving in order (blocks
            of any size, re-cut into `step_ms` steps: a live stream).
        policy: "wait-k" writes a token per step after k steps; "alignatt" writes while the attention is not on
            the last k source positions.
        k: wait-k: steps read before the first token; alignatt: encoder frames (Whisper: 20 ms) or, into a
            language-model decoder, its source positions; 1 to 1000 (None: 3 for wait-k; 30 for alignatt, 2 into a
            language-model decoder).
        step_ms: the decision step in milliseconds of audio, 25 to 10000.
        window_seconds: the audio window a translation is written in, at most what the model takes at once.
        tail_beam: beam size for what is written after the input has ended, behind the committed tokens, 1 to 256.
        task, device, len_penalty, max_len_a, max_len_b, min_len: as `translate`'s.
        on_commit: called with each speechmt.decoding.simultaneous.Commit (its `text` to append) as it is made.
        source: the input's name in the result (default: the file's path, or "stream").

    Raises OptionError for a bad argument, speechmt.audio.AudioError for an unreadable file and
    speechmt.decoding.simultaneous.SimultaneousError for a model that cannot stream.
    """
    from speechmt.audio import read_audio
    from speechmt.decoding.simultaneous import SimultaneousConfig, default_k, translate_stream
    from speechmt.evaluation.latency import Delays, corpus_latency, word_delays

    step = checked("step_ms", opt.number(25, 10000), step_ms)
    tail = checked("tail_beam", opt.integer(1, opt.MAX_BEAM), tail_beam)
    window = checked("window_seconds", opt.number(0, opt.MAX_CHUNK_SECONDS, lo_open=True), window_seconds)
    _, search = search_options(1, len_penalty, max_len_a, max_len_b, min_len, None, 0)
    lm = _streaming_model(model, task, device, policy)
    k = default_k(policy, lm) if k is None else checked("k", opt.integer(1, 1000), k)
    if isinstance(audio, (str, os.PathLike)):
        source, audio = source or os.fspath(audio), read_audio(audio)
    cfg = SimultaneousConfig(policy, k, step_ms=step, max_seconds=window, tail_beam=tail)
    result = translate_stream(lm, audio, cfg, search.decode_options(lm, 1), on_commit)
    delays, elapsed = word_delays(result.events())
    latency = corpus_latency([Delays(tuple(delays), tuple(elapsed), result.source_ms)])
    return Stream(
        source or "stream",
        result.text,
        result.commits,
        result.source_ms,
        result.compute_ms,
        delays,
        elapsed,
        {name: latency[name] for name in ("AL", "LAAL", "AL_CA", "LAAL_CA")},
    )


def _streaming_model(
    model: LoadedModel | str | os.PathLike | None, task: str | None, device: str | None, policy: str
) -> LoadedModel:
    """`simultaneous`'s model, checked: a policy it knows and a model, not a cascade."""
    from speechmt.decoding.simultaneous import POLICIES

    if policy not in POLICIES:
        raise OptionError(f"policy: invalid value {str(policy)!r}: expected {' or '.join(POLICIES)}")
    if isinstance(model, Cascade):
        raise OptionError("model: simultaneous translation takes a model, not a cascade")
    return _loaded(model, checked_task(task, TRANSLATE_TASKS), None if device is None else checked_device(device))


SubtitleFormat = Literal["srt", "vtt"]


def subtitle_cues(result: Translation) -> list[Cue]:
    """A translation's subtitle cues (speechmt.decoding.subtitles.Cue: start, end seconds, text, its lines), timed
    by the voiced span of each chunk (docs/subtitles.md)."""
    from speechmt.decoding.subtitles import make_cues

    return make_cues(result.timed_texts(), result.audio_seconds)


def subtitles(result: Translation, fmt: SubtitleFormat = "srt") -> str:
    """A translation's subtitles as SubRip ("srt") or WebVTT ("vtt") text."""
    from speechmt.decoding.subtitles import to_srt, to_vtt

    if fmt not in ("srt", "vtt"):
        raise OptionError(f"fmt: invalid value {str(fmt)!r}: expected srt or vtt")
    return (to_srt if fmt == "srt" else to_vtt)(subtitle_cues(result))


def write_subtitles(result: Translation, out_dir: str | os.PathLike, fmt: SubtitleFormat = "srt") -> Path:
    """Writes a translation's subtitles to out_dir/<the input's stem>.srt (or .vtt), creating out_dir; returns
    the file. OptionError for a result without text because its input could not be read (`result.error`)."""
    if result.error:
        raise OptionError(f"result: {result.error}")
    text = subtitles(result, fmt)
    out = Path(out_dir) / f"{Path(result.source).stem}.{fmt}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
