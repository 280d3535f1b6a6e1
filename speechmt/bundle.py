"""The model bundle: everything a checkpoint holds beside the weights and the training state, typed, written and
read here alone (as torchaudio's pipeline bundles carry a model with its sample rate and labels): the model
config, the tokenizers, the front end, the tasks the decoder does with the tag that starts each one's output,
the decoder's side and first input, the pretrained base a checkpoint of trained parameters sits on, and what
the model's build derived (`resolved`: values no config field holds, which the builders read back).

Its checkpoint form is the one speechmt has always written: "model_config", "tokenizers", "features",
"task", "decoder_tag", "decoder_tags", "decoder_side", "decoder_start", "base" and "resolved" (KEYS); checkpoints
of every earlier version read back (one without decoder_tags does its own task only, with its decoder_tag; one
whose model config held a derived value has it moved to `resolved`: speechmt.models.migrate.RESOLVED_FIELDS).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from speechmt.checkpoint import CheckpointError
from speechmt.frontend import Frontend, frontend_from_state
from speechmt.models.config import ModelConfig
from speechmt.models.migrate import resolved_fields
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
    what the model's build derived, by name (speechmt.models.build.build_model's, e.g. "encoder.asr_prompt")."""

    config: ModelConfig
    tokenizers: Tokenizers
    frontend: Frontend
    task: str = "st"
    decoder_tags: dict[str, str | None] = field(default_factory=dict)
    decoder_side: str | None = None
    decoder_start: str = "bos"
    base: dict | None = None
    resolved: dict[str, Any] = field(default_factory=dict)

    def tag(self, task: str) -> str | None:
        """The tag that starts the decoder's output for `task`; CheckpointError for a task it does not do."""
        tags = {self.task: None, **self.decoder_tags}
        if task not in tags:
            raise CheckpointError(f"not trained for task {task!r}; it does {', '.join(tags)}")
        return tags[task]

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
        return state | ({"resolved": dict(self.resolved)} if self.resolved else {})

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], path: str | os.PathLike = "checkpoint") -> "ModelBundle":
        """The bundle of a loaded checkpoint; CheckpointError (one line naming `path`) when something a model
        needs is missing or does not fit."""
        try:
            config = ModelConfig.from_dict(ckpt["model_config"])
            resolved = {**resolved_fields(ckpt["model_config"]), **dict(ckpt.get("resolved") or {})}
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
        tags = ckpt.get("decoder_tags") or {}
        problem = (
            start not in DECODER_STARTS
            and f"unknown decoder_start {start!r}; expected 'bos' or 'eos'"
            or side not in (None, *SIDES)
            and f"unknown decoder_side {side!r}; expected 'src' or 'tgt'"
            or not isinstance(tags, dict)
            and f"decoder_tags must map tasks to tags, got {type(tags).__name__}"
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
        )
