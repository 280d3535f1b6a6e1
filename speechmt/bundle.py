"""The model bundle: everything a checkpoint holds beside the weights and the training state, typed, written and
read here alone (as torchaudio's pipeline bundles carry a model with its sample rate and labels): the model
config, the tokenizers, the front end, the tasks the decoder does with the tag that starts each one's output,
the decoder's side and first input, the pretrained base a checkpoint of trained parameters sits on, and what
the model's build and run derived (`resolved`: values no config field holds, which the builders read back).

Its checkpoint form is the one speechmt has always written: "model_config", "tokenizers", "features",
"task", "decoder_tag", "decoder_tags", "decoder_side", "decoder_start", "base" and "resolved" (KEYS); checkpoints
of every earlier version read back (one without decoder_tags does its own task only, with its decoder_tag; one
whose model config held a derived value has it moved to `resolved`: speechmt.models.migrate.RESOLVED_FIELDS, and
the complete HF configs of its pretrained parts, migrate.checkpoint_config).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from speechmt.checkpoint import CheckpointError
from speechmt.data.manifest import split_direction
from speechmt.frontend import Frontend, frontend_from_state
from speechmt.models.config import ModelConfig
from speechmt.models.migrate import checkpoint_config, checkpoint_resolved
from speechmt.tokenizers.pair import AnyTokenizer, Tokenizers

KEYS = (
    "model_config",
    "tokenizers",
    "features",
    "task",
    "decoder_tag",
    "decoder_tags",
    "decoder_side",
    "decoder_start",
    "base",
    "resolved",
    "directions",
)
"""A checkpoint's keys that the bundle writes and reads; with "model" (the weights) what inference needs."""
DECODER_STARTS = ("bos", "eos")  # the decoder's first input: <s>, or </s> (models converted from fairseq)
SIDES = ("src", "tgt")


@dataclass
class ModelBundle:
    """A model's config, tokenizers and front end, and how its decoder is driven: `decoder_tags` maps each task
    it decodes to the tag that starts the output (the main `task` first), `decoder_side` says which tokenizer
    the decoder writes with (None: "src" for asr, else "tgt", as checkpoints before it), `decoder_start` its
    first input; `base` names the pretrained weights a checkpoint of trained parameters sits on; `resolved` holds
    what the model's build and run derived, by name (speechmt.models.build.build_model's: "encoder.asr_prompt",
    "decoder.vocab", "decoder.prompt", "ctc_vocab", and the complete HF configs of its pretrained parts,
    "encoder.hf_config" and "decoder.hf_config");
    `directions` the languages it was trained in: {task: {"en-fr": the tag that starts that direction's output}}
    (empty for a checkpoint from before they were recorded: its one direction, decoder_tags')."""

    config: ModelConfig
    tokenizers: Tokenizers
    frontend: Frontend
    task: str = "st"
    decoder_tags: dict[str, str | None] = field(default_factory=dict)
    decoder_side: str | None = None
    decoder_start: str = "bos"
    base: dict | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    directions: dict[str, dict[str, str | None]] = field(default_factory=dict)

    def tag(self, task: str) -> str | None:
        """The tag that starts the decoder's output for `task`; CheckpointError for a task it does not do."""
        tags = {self.task: None, **self.decoder_tags}
        if task not in tags:
            raise CheckpointError(f"not trained for task {task!r}; it does {', '.join(tags)}")
        return tags[task]

    def direction_tag(self, task: str, src_lang: str | None = None, tgt_lang: str | None = None) -> str | None:
        """The tag that starts `task`'s output in the direction (src_lang, tgt_lang) (None: any the model knows;
        its main tag when both are None): pick_tag over the directions it was trained in (a model that hears its
        source, `hears_source`, needs no src_lang)."""
        return pick_tag(self.directions.get(task) or {}, self.tag(task), src_lang, tgt_lang, self.hears_source)

    def sources(self) -> list[str]:
        """The source languages of the directions it was trained in (any task), in order ([] before they were
        recorded)."""
        return list(dict.fromkeys(split_direction(d)[0] for known in self.directions.values() for d in known))

    @property
    def hears_source(self) -> bool:
        """Whether each utterance's source language, when not given, is heard: a speech encoder that transcribes
        (whisper_asr) in a model of several sources, which Whisper tells apart (its detected language)."""
        encoder = getattr(self.config, "encoder", None)  # (a bundle made for its tags alone has no config)
        return bool(getattr(encoder, "transcribes", False)) and len(self.sources()) > 1

    def decoder_tokenizer(self, task: str) -> AnyTokenizer:
        """The tokenizer the decoder writes `task`'s output with."""
        side = self.decoder_side or ("src" if task == "asr" else "tgt")
        return self.tokenizers.src if side == "src" else self.tokenizers.tgt

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's entries (KEYS; "base" only for a checkpoint on a pretrained base, "resolved" only when
        the build derived something)."""
        state = {
            "model_config": asdict(self.config),
            "tokenizers": self.tokenizers.state_dict(),
            "features": self.frontend.state_dict(),
            "task": self.task,
            "decoder_tag": self.decoder_tags.get(self.task),
            "decoder_tags": dict(self.decoder_tags),
            "decoder_side": self.decoder_side,
            "decoder_start": self.decoder_start,
        }
        state |= {"base": self.base} if self.base is not None else {}
        state |= {"directions": {t: dict(d) for t, d in self.directions.items()}} if self.directions else {}
        return state | ({"resolved": dict(self.resolved)} if self.resolved else {})

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], path: str | os.PathLike = "checkpoint") -> "ModelBundle":
        """The bundle of a loaded checkpoint; CheckpointError (one line naming `path`) when something a model
        needs is missing or does not fit."""
        try:
            config = ModelConfig.from_dict(checkpoint_config(ckpt))
            resolved = checkpoint_resolved(ckpt)
            tokenizers = Tokenizers.from_state_dict(ckpt["tokenizers"])
            frontend = frontend_from_state(ckpt["features"])
        except (AttributeError, KeyError, RuntimeError, TypeError, ValueError) as e:
            raise CheckpointError(
                f"{path}: checkpoint lacks or mismatches what a model needs ({str(e).splitlines()[0]})"
            ) from None
        if frontend.name != config.encoder.frontend:
            raise CheckpointError(
                f"{path}: its encoder reads {config.encoder.frontend} input, but the checkpoint "
                f"has no such front-end settings (features.{config.encoder.frontend})"
            )
        task, start, side = ckpt.get("task", "st"), ckpt.get("decoder_start", "bos"), ckpt.get("decoder_side")
        tags, directions = ckpt.get("decoder_tags") or {}, ckpt.get("directions") or {}
        problem = (
            start not in DECODER_STARTS
            and f"unknown decoder_start {start!r}; expected 'bos' or 'eos'"
            or side not in (None, *SIDES)
            and f"unknown decoder_side {side!r}; expected 'src' or 'tgt'"
            or not isinstance(tags, dict)
            and f"decoder_tags must map tasks to tags, got {type(tags).__name__}"
            or not (isinstance(directions, dict) and all(isinstance(d, dict) for d in directions.values()))
            and "directions must map tasks to {direction: tag}"
        )
        if problem:
            raise CheckpointError(f"{path}: {problem}")
        return cls(
            config,
            tokenizers,
            frontend,
            task,
            {task: ckpt.get("decoder_tag"), **tags},
            side or None,
            start,
            ckpt.get("base"),
            resolved,
            directions,
        )


def pick_tag(
    known: dict[str, str | None],
    main: str | None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    hears_source: bool = False,
) -> str | None:
    """The tag of the one direction of `known` ({"en-fr": tag}) with the languages asked (None: any), `main` when
    neither is asked; CheckpointError, one line naming the directions known, for none or several. A model of
    one direction from before directions were recorded (`known` empty) knows its tag's language alone. A model
    that `hears_source` (Whisper tells its sources apart) needs no src_lang: directions that differ in their
    source alone, with one tag, are that tag."""
    if src_lang is None and tgt_lang is None:
        return main
    if not known:
        code = TAG_LANGUAGE.fullmatch(main or "")
        if tgt_lang is None or code is None or code.group(1) == tgt_lang:
            return main
        raise CheckpointError(f"{tgt_lang}: the model writes {code.group(1)} only")
    fits = [d for d in known if _fits(d, src_lang, tgt_lang)]
    if hears_source and src_lang is None and fits and len({known[d] for d in fits}) == 1:
        return known[fits[0]]
    if len(fits) != 1:
        what = "knows several such directions" if fits else "was not trained in that direction"
        wanted = f"{src_lang or '*'}-{tgt_lang or '*'}"
        raise CheckpointError(f"{wanted}: the model {what}; it knows {', '.join(known)} (name --src-lang / --tgt-lang)")
    return known[fits[0]]


def direction_source(known: dict[str, str | None], src_lang: str | None, tgt_lang: str | None) -> str | None:
    """The source language of the direction asked: `src_lang`, else the one source of the directions of `known`
    with target `tgt_lang` (None: several, or none asked)."""
    if src_lang is not None or tgt_lang is None:
        return src_lang
    sources = {split_direction(d)[0] for d in known if _fits(d, None, tgt_lang)}
    return sources.pop() if len(sources) == 1 else None


TAG_LANGUAGE = re.compile(r"<\|?([a-z]{2,3}(?:-[A-Z]{2})?)\|?>")  # <de>, Whisper's <|de|>


def _fits(name: str, src_lang: str | None, tgt_lang: str | None) -> bool:
    """Whether direction `name` ("en-fr") has the source and target asked for (None: any)."""
    src, tgt = split_direction(name)
    return src_lang in (None, src) and tgt_lang in (None, tgt)
