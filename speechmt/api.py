"""The Python API: `load_model()` and `translate()`, the command line's `speechmt translate` options as typed
keyword arguments, checked by the same rules (speechmt.checks) with the same one-line messages.

Importing this module is cheap: torch and the models load on the first call.
"""

from __future__ import annotations

import os
from argparse import ArgumentTypeError
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Union

from speechmt import checks as opt

if TYPE_CHECKING:
    import numpy as np

    from speechmt.decoding.translate import LoadedModel, Translation

Task = Literal["st", "asr", "mt"]
Audio = Union[str, os.PathLike, "np.ndarray"]
TRANSLATE_TASKS = ("st", "asr")  # what a model does with audio; "mt" (text in) is evaluate's


class OptionError(ValueError):
    """A bad argument of `load_model` or `translate`, in one line that names it, its value and what is
    allowed, as the command line does: "beam: invalid value '0': expected an integer from 1 to 256"."""


def _checked(name: str, parse: Callable[[str], object], value: object):
    """`value` through a command-line type check (speechmt.checks); OptionError named `name` if it fails."""
    try:
        return parse(str(value))
    except ArgumentTypeError as e:
        raise OptionError(f"{name}: {e}") from None


def _device(value: object) -> str:
    from speechmt.checks import device_problem

    problem = device_problem(str(value))
    if problem:
        raise OptionError(f"device: invalid value {str(value)!r}: {problem}")
    return str(value)


def _task(value: object, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise OptionError(f"task: invalid value {str(value)!r}: expected one of {', '.join(allowed)} (or None: the "
                          "model's own task)")
    return value  # type: ignore[return-value]


def load_model(path: str | os.PathLike | None = None, device: str = "cpu", task: Task | None = None,
               dtype: Literal["float32", "bfloat16"] = "float32",
               memory: Sequence[str | os.PathLike] | None = None) -> LoadedModel:
    """Loads a model from one checkpoint file, ready for `translate`.

    Args:
        path: a `.safetensors` checkpoint or exported model (`speechmt train`, `average`, `export`,
            `import-hf`); None: the bundled English -> German model (speechmt/pretrained/MODEL_CARD.md; it
            needs the Whisper base that `make setup` installs).
        device: cpu, cuda, cuda:N (a CUDA device of this machine) or mps.
        task: what a multi-task model's decoder does: "st" translates, "asr" transcribes, "mt" translates
            text (evaluate); None: the checkpoint's own task. "asr" of a model whose speech encoder is
            whisper_asr (the bundled one) is Whisper's own transcript, which the model computes anyway.
        dtype: the weights' type while decoding: "bfloat16" runs the matrix products about twice as fast on
            CPUs with AVX512-BF16 or AMX and on GPUs, at a small cost in precision.
        memory: a model that reads retrieved examples before the speech (decoder.examples): the translation
            memories it searches by its own transcript (manifests, memory folders or names built under
            $SPEECHMT_HOME, e.g. `ding-en-de`, which `speechmt synth-memory` builds); None: the one the model
            names (decoder.memory), loaded on first use.

    Raises OptionError for a bad device, task or dtype, and speechmt.checkpoint.CheckpointError (one line naming the
    file) for a missing, unsafe (pickled) or unusable checkpoint, or a task it was not trained for, or `memory`
    for a model that reads no examples; speechmt.data.manifest.ManifestError (one line) for a memory not there.
    """
    from speechmt.decoding.translate import load_model as _load, with_memory
    from speechmt.pretrained import default_model_path

    device, task = _device(device), _task(task, ("st", "asr", "mt"))
    if dtype not in opt.DTYPES:
        raise OptionError(f"dtype: invalid value {str(dtype)!r}: expected {' or '.join(opt.DTYPES)}")
    lm = _load(default_model_path() if path is None else path, device, task, dtype)
    return with_memory(lm, memory) if memory else lm


def translate(model: LoadedModel | str | os.PathLike | None, inputs: Audio | Sequence[Audio], *,
              task: Literal["st", "asr"] | None = None, device: str | None = None, beam: int = 5, nbest: int = 1,
              len_penalty: float = 1.0, max_len_a: float = 0.0, max_len_b: int = 200, min_len: int = 1,
              batch_size: int = 16, max_chunk_seconds: float = 20.0, cut_pauses: float = 0.0,
              errors: Literal["raise", "keep"] = "raise", mbr: Literal["chrf", "bleu"] | None = None,
              mbr_samples: int = 0) -> list[Translation]:
    """Translates (or, for an ASR model or task="asr", transcribes) audio files or 16 kHz arrays, in order.

    The arguments are `speechmt translate`'s options, under the same rules and with the same one-line
    messages (OptionError, a ValueError, naming the argument):

    Args:
        model: a model from `load_model`, a checkpoint path (loaded here with `task` and `device`), or None
            for the bundled English -> German model.
        inputs: an audio file (wav, flac, ogg, mp3; any length, any sample rate) or a 16 kHz mono float
            array, or a sequence of them.
        task: "st" or "asr": what a multi-task model does (None: its own task). Only with a path or None as
            `model`; a loaded model keeps the task it was loaded for.
        device: cpu, cuda, cuda:N or mps (None: cpu for a path, the loaded model's own device).
        beam: beam size, 1 (greedy) to 256.
        nbest: hypotheses kept in each result's `nbest`, 1 to `beam`.
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
            best-scoring hypothesis. Needs beam >= 2 or mbr_samples.
        mbr_samples: with mbr, this many epsilon samples (epsilon 0.02) per chunk, 0 to 256, are the
            references the beam's hypotheses are scored against (0: the beam itself).

    Task "asr" of a whisper_asr model (the bundled one) returns Whisper's own transcript, found by the encoder's
    search (encoder.asr_beam): beam, nbest and the length options, which drive the decoder's search, do not
    apply to it (`nbest` holds the one transcript).

    Returns one speechmt.decoding.translate.Translation per input: `source`, `text`, `nbest`, `chunks`
    (start, end seconds) and `chunk_texts`, `voiced` (each chunk less its edge silence; `timed_texts()` pairs
    them with the texts, as subtitles show them), `audio_seconds`, `error`, `warning` (audio too short to
    translate: an empty text and a warning, also issued through `warnings`).
    """
    beam = _checked("beam", opt.integer(1, opt.MAX_BEAM), beam)
    nbest = _checked("nbest", opt.integer(1, opt.MAX_BEAM), nbest)
    if nbest > beam:
        raise OptionError(f"nbest: invalid value '{nbest}': expected an integer from 1 to beam ({beam})")
    decode = {"len_penalty": _checked("len_penalty", opt.number(-10, 10), len_penalty),
              "max_len_a": _checked("max_len_a", opt.number(0, 10), max_len_a),
              "max_len_b": _checked("max_len_b", opt.integer(0, opt.MAX_OUTPUT_TOKENS), max_len_b),
              "min_len": _checked("min_len", opt.integer(0, opt.MAX_OUTPUT_TOKENS), min_len)}
    batch_size = _checked("batch_size", opt.integer(1, opt.MAX_BATCH), batch_size)
    seconds = _checked("max_chunk_seconds", opt.number(1, opt.MAX_CHUNK_SECONDS, lo_open=True), max_chunk_seconds)
    pause_ms = _checked("cut_pauses", opt.number(0, 10000), cut_pauses)
    if errors not in ("raise", "keep"):
        raise OptionError(f"errors: invalid value {str(errors)!r}: expected raise or keep")
    from speechmt.decoding.mbr import UTILITIES

    if mbr not in (None, *UTILITIES):
        raise OptionError(f"mbr: invalid value {str(mbr)!r}: expected chrf, bleu or None")
    samples = _checked("mbr_samples", opt.integer(0, opt.MAX_BEAM), mbr_samples)
    if samples and not mbr:
        raise OptionError("mbr_samples: only with mbr (chrf or bleu)")
    if mbr and beam < 2 and not samples:
        raise OptionError(f"mbr: needs a beam of 2 or more hypotheses, or mbr_samples, to choose from (beam is {beam})")
    decode.update(mbr=mbr, samples=samples)
    task = _task(task, TRANSLATE_TASKS)
    lm = _model(model, task, None if device is None else _device(device))
    limit = lm.max_input_seconds
    if limit is not None and seconds > limit:
        raise OptionError(f"max_chunk_seconds: invalid value '{seconds:g}': {lm.path} takes at most {limit:g} s of "
                          "audio at once")
    from speechmt.decoding.segment import SegmentConfig
    from speechmt.decoding.translate import translate as _translate

    items = [inputs] if isinstance(inputs, (str, os.PathLike)) or hasattr(inputs, "dtype") else list(inputs)
    return _translate(lm, items, beam=beam, batch_size=batch_size, segment=SegmentConfig(max_seconds=seconds, pause_cut_ms=pause_ms),
                      errors=errors, nbest=nbest, **decode)


def _model(model: LoadedModel | str | os.PathLike | None, task: str | None, device: str | None) -> LoadedModel:
    """`model` itself, or loaded from its path (None: the bundled model); a loaded model must already do
    `task` on `device` when they are given."""
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_model(model, device or "cpu", task)
    if task is not None and task != model.task:
        raise OptionError(f"task: invalid value {task!r}: the model was loaded for {model.task!r}; pass task to "
                          "load_model, or a checkpoint path to translate")
    if device is not None and _torch_device(device) != _torch_device(model.device):
        raise OptionError(f"device: invalid value {device!r}: the model was loaded on {model.device}; pass device "
                          "to load_model, or a checkpoint path to translate")
    return model


def _torch_device(name):
    """torch.device(name), "cuda" naming the current CUDA device's index."""
    import torch

    dev = torch.device(name)
    return torch.device("cuda", torch.cuda.current_device()) if dev.type == "cuda" and dev.index is None else dev
