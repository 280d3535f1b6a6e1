"""The model a server answers with: one set of weights, decoding each task the checkpoint was trained for
(`/v1/audio/translations`: st, `/v1/audio/transcriptions`: asr), and the languages it reads and writes."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from speechmt.decoding.translate import LoadedModel
from speechmt.serve.config import ServeConfig

TASK_NAMES = {"st": "translate", "asr": "transcribe"}  # verbose_json's "task", as OpenAI names them


@dataclass
class ServedModel:
    """`tasks` maps "st" and/or "asr" to a LoadedModel; all share one Translator (the weights are held once)."""

    name: str
    tasks: dict[str, LoadedModel]
    source_language: str | None
    target_language: str | None

    def for_task(self, task: str) -> LoadedModel | None:
        return self.tasks.get(task)

    @property
    def any(self) -> LoadedModel:
        """The model of some task: the weights, front end and limits every task shares."""
        return next(iter(self.tasks.values()))


def load_served_model(config: ServeConfig) -> ServedModel:
    """Loads `config.model` (None: the bundled one) for its own task, adds the other of st/asr when the
    checkpoint decodes it, and reads its languages (config's codes first)."""
    from speechmt.api import load_model
    from speechmt.pretrained import default_model_path

    lm = load_model(config.model, config.device, None, config.dtype)  # type: ignore[arg-type]
    return served_model(lm, config, Path(os.fspath(config.model or default_model_path())))


def served_model(lm: LoadedModel, config: ServeConfig, path: Path | None = None) -> ServedModel:
    """A loaded model as the server serves it (`load_served_model`, or a test's model)."""
    tasks = {lm.task: lm}
    for task in ("st", "asr"):
        if task not in tasks and (other := _other_task(lm, task)) is not None:
            tasks[task] = other
    source, target = model_languages(tasks)
    name = config.model_name or (path or Path(lm.path)).stem
    return ServedModel(
        name,
        dict(sorted(tasks.items(), key=lambda kv: kv[0] != "st")),
        config.source_language or source,
        config.target_language or target,
    )


def _other_task(lm: LoadedModel, task: str) -> LoadedModel | None:
    """`lm` decoding `task` with the same weights (its tag and tokenizer for that task); None when the
    checkpoint was not trained for it."""
    from speechmt.bundle import ModelBundle
    from speechmt.checkpoint import CheckpointError, load_checkpoint
    from speechmt.decoding.translate import task_output

    try:
        bundle = ModelBundle.from_checkpoint(load_checkpoint(lm.path, map_location="cpu"), lm.path)
        tag, tokenizer, whisper = task_output(bundle, task, lm.path)
    except (CheckpointError, FileNotFoundError):
        return None
    return dataclasses.replace(
        lm, task=task, tag=tag, tokenizer=tokenizer, whisper_transcript=whisper, _transcript_tokenizer=None
    )


def model_languages(tasks: dict[str, LoadedModel]) -> tuple[str | None, str | None]:
    """(source, target) ISO 639-1 codes where the model says them: the target by task st's decoder tag (`<de>`),
    the source by task asr's tag (`<en>`) or a language-model decoder's prompt ("English:"); None where it does
    not."""
    from speechmt.tokenizers.lm import LANGUAGE_NAMES

    def code(tag: str | None) -> str | None:
        c = tag.strip("<>").split("-")[0].lower() if tag else None
        return c if c in LANGUAGE_NAMES else None

    names = {name: c for c, name in LANGUAGE_NAMES.items()}
    source = code(tasks["asr"].tag) if "asr" in tasks else None
    if source is None and "st" in tasks:
        try:
            source = names.get(tasks["st"].languages()[0])
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            source = None
    return source, code(tasks["st"].tag) if "st" in tasks else None
