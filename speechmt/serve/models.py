"""The model a server answers with: one set of weights, decoding each task the checkpoint was trained for
(`/v1/audio/translations`: st, `/v1/audio/transcriptions`: asr), and the languages it reads and writes: one
direction, or each a multilingual model was trained in (LoadedModel.directions), picked per request."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from speechmt.decoding.translate import LoadedModel, in_direction
from speechmt.serve.config import ServeConfig

TASK_NAMES = {"st": "translate", "asr": "transcribe"}  # verbose_json's "task", as OpenAI names them


class DirectionError(ValueError):
    """A language a request (or the server's settings) asks for that the model was not trained in; `param` is
    the field at fault ("language": the source, "target_language")."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass
class ServedModel:
    """`tasks` maps "st" and/or "asr" to a LoadedModel; all share one Translator (the weights are held once).
    `source_language`, `target_language`: the default direction's (what a request that names no language gets);
    `default_direction` ("en-de") names it for a model of several directions (None for a model of one)."""

    name: str
    tasks: dict[str, LoadedModel]
    source_language: str | None
    target_language: str | None
    default_direction: str | None = None
    _in_direction: dict[tuple[str, str], LoadedModel] = field(default_factory=dict, repr=False, compare=False)

    def for_task(self, task: str) -> LoadedModel | None:
        return self.tasks.get(task)

    @property
    def any(self) -> LoadedModel:
        """The model of some task: the weights, front end and limits every task shares."""
        return next(iter(self.tasks.values()))

    @property
    def directions(self) -> list[str]:
        """The directions the model knows ("en-de", ...): a multilingual model's (task st's, else asr's), in its
        order; a model of one, its source-target where both are known; else none."""
        lm = self.tasks.get("st") or self.any
        if lm.directions:
            return list(lm.directions)
        if self.source_language and self.target_language:
            return [f"{self.source_language}-{self.target_language}"]
        return []

    def multilingual(self, task: str) -> bool:
        """Whether the model of `task` knows several directions (a model of one is served as before they were
        recorded: by its one source and target language)."""
        return len(self.tasks[task].directions) > 1

    def direction(self, task: str, source: str | None = None, target: str | None = None) -> str | None:
        """The direction of `task` a request asking for `source` and/or `target` (ISO codes; None: not asked)
        gets: None for a model of one direction (its languages are checked by the caller); the default direction
        when neither is asked, or when it fits what is; else the one that fits (several that fit must share one
        decoder tag). DirectionError naming the field at fault and the directions the model knows otherwise."""
        if not self.multilingual(task):
            return None
        known = self.tasks[task].directions
        default = self._default(task)
        if source is None and target is None:
            return default
        fits = [d for d in known if _fits(d, source, target)]
        if fits:
            if default in fits:
                return default
            if len({known[d] for d in fits}) == 1:
                return fits[0]
        sources = {s.lower() for s, _ in map(_split, known)}
        targets = {t.lower() for _, t in map(_split, known)}
        listed = ", ".join(known)
        if target is not None and target.lower() not in targets:
            raise DirectionError(
                "target_language", f"invalid value {target!r}: this model does not write {target}; it knows {listed}"
            )
        if source is not None and source.lower() not in sources:
            raise DirectionError(
                "language", f"invalid value {source!r}: this model does not read {source}; it knows {listed}"
            )
        if not fits:
            raise DirectionError(
                "target_language" if target is not None else "language",
                f"invalid value {(target if target is not None else source)!r}: this model was not trained in "
                f"direction {source or '*'}-{target or '*'}; it knows {listed}",
            )
        missing = "language" if source is None else "target_language"
        raise DirectionError(
            missing, f"several directions fit ({', '.join(fits)}): name {missing}; this model knows {listed}"
        )

    def model(self, task: str, direction: str | None = None) -> LoadedModel:
        """The model of `task` writing `direction` (None: as loaded): the same weights, that direction's tag and
        its source language (speechmt.decoding.translate.in_direction: the speech heard in it)."""
        lm = self.tasks[task]
        if direction is None or direction not in lm.directions:
            return lm
        key = (task, direction)
        if key not in self._in_direction:
            self._in_direction[key] = in_direction(lm, *_split(direction))
        return self._in_direction[key]

    def output_language(self, task: str, direction: str | None = None) -> str | None:
        """The ISO code of what `task` writes in `direction`: the target for st, the source for asr (None: the
        default direction's, where known)."""
        if direction is None:
            return self.target_language if task == "st" else self.source_language
        source, target = _split(direction)
        return target if task == "st" else source

    def _default(self, task: str) -> str | None:
        """The default direction as `task` knows it: the model's, or the first with the tag it decodes now."""
        known = self.tasks[task].directions
        if self.default_direction in known:
            return self.default_direction
        tagged = [d for d, tag in known.items() if tag == self.tasks[task].tag]
        return next(iter(tagged or known), None)


def _split(direction: str) -> tuple[str, str]:
    from speechmt.data.manifest import split_direction

    return split_direction(direction)


def _fits(direction: str, source: str | None, target: str | None) -> bool:
    """Whether `direction` ("en-de") has the source and target asked for (None: any; codes in any case)."""
    s, t = _split(direction)
    return (source is None or source.lower() == s.lower()) and (target is None or target.lower() == t.lower())


def load_served_model(config: ServeConfig) -> ServedModel:
    """Loads `config.model` (None: the bundled one) for its own task, adds the other of st/asr when the
    checkpoint decodes it, and reads its languages (config's codes first)."""
    from speechmt.api import load_model
    from speechmt.pretrained import model_path

    lm = load_model(config.model, config.device, None, config.dtype)  # type: ignore[arg-type]
    return served_model(lm, config, Path(os.fspath(model_path(config.model))))


def served_model(lm: LoadedModel, config: ServeConfig, path: Path | None = None) -> ServedModel:
    """A loaded model as the server serves it (`load_served_model`, or a test's model). A model of several
    directions serves them all; the default is the one config's languages name, else the one `lm` writes.
    CheckpointError (one line naming the directions the model knows) for config languages it was not trained in."""
    from speechmt.checkpoint import CheckpointError

    tasks = {lm.task: lm}
    for task in ("st", "asr"):
        if task not in tasks and (other := _other_task(lm, task)) is not None:
            tasks[task] = other
    tasks = dict(sorted(tasks.items(), key=lambda kv: kv[0] != "st"))
    source, target = model_languages(tasks)
    name = config.model_name or (path or Path(lm.path)).stem
    served = ServedModel(name, tasks, config.source_language or source, config.target_language or target)
    main = next(iter(tasks))
    if served.multilingual(main):
        try:
            default = served.direction(main, config.source_language, config.target_language if main == "st" else None)
        except DirectionError as e:
            raise CheckpointError(f"{lm.path}: the server's {e.param}: {e}") from None
        if default is not None:
            served.default_direction = default
            served.source_language, served.target_language = _split(default)
    return served


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
        lm,
        task=task,
        tag=tag,
        tokenizer=tokenizer,
        whisper_transcript=whisper,
        directions={} if whisper else dict(bundle.directions.get(task) or {}),
        _transcript_tokenizer=None,
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
