"""Model configs from before the nesting: a flat dict (checkpoints, YAML files and overrides written before
`ModelConfig` had one sub-config per module) turned into today's nested one.

    {"encoder": "whisper", "encoder_layers": 6, "freeze_encoder": True, "lora_rank": 32, ...}
 -> {"encoder": {"kind": "whisper", "layers": 6, "finetune": "frozen"}, "lora": {"rank": 32}, ...}

`FLAT_NAMES` maps every old name to its nested path; the encoder's three exclusive fine-tuning flags
(`FINETUNE_FLAGS`) became the one setting `encoder.finetune`. Shared settings (d_model, dropout, vocabulary
sizes, ...) kept their place. A nested dict passes through unchanged, and a mixed one (a preset's nested
form with flat overrides) is merged; an option set twice to different values is a ValueError.

What a build derives is no config field: `RESOLVED_FIELDS` names the fields configs once held for it, which
`migrate_model_config` drops and `resolved_fields` takes out of an old checkpoint's config for the model bundle's
`resolved` (speechmt.bundle), where a build writes and reads them now. A pretrained part's `hf_config` is both: what
the user gives (overrides over the pretrained config, a random init's architecture) and, in a checkpoint written
before the move, the complete config its build derived. `resolved_fields` copies an old checkpoint's to `resolved`
("encoder.hf_config", "decoder.hf_config": HF_CONFIGS), and `checkpoint_config` leaves it out of the config of a
part that loads a pretrained model, whose own fields the user did not write (a random init's is kept: it is the
architecture the config asks for).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FINETUNE_FLAGS",
    "FLAT_NAMES",
    "GROUPS",
    "HF_CONFIGS",
    "checkpoint_config",
    "checkpoint_resolved",
    "merge_model_configs",
    "RESOLVED_FIELDS",
    "migrate_model_config",
    "migrate_model_override",
    "resolved_fields",
]

GROUPS = ("encoder", "shrink", "text_encoder", "semantic", "decoder", "lora", "fusion")
"""The sub-configs of ModelConfig (fields holding a dataclass, a mapping in dict form)."""
DEFAULT_KINDS = {"encoder": "conv", "shrink": "none", "semantic": "identity", "decoder": "transformer"}
"""The kind of a sub-config that names none."""

FLAT_NAMES: dict[str, tuple[str, str]] = {
    "encoder": ("encoder", "kind"),
    "encoder_layers": ("encoder", "layers"),
    "input_dim": ("encoder", "input_dim"),
    "subsampler": ("encoder", "subsampler"),
    "conv_channels": ("encoder", "conv_channels"),
    "conv_kernels": ("encoder", "conv_kernels"),
    "encoder_name_or_path": ("encoder", "name_or_path"),
    "encoder_hf_config": ("encoder", "hf_config"),
    "encoder_layerdrop": ("encoder", "layerdrop"),
    "freeze_feature_extractor": ("encoder", "freeze_feature_extractor"),
    "mask_time_prob": ("encoder", "mask_time_prob"),
    "mask_time_length": ("encoder", "mask_time_length"),
    "gradient_checkpointing": ("encoder", "gradient_checkpointing"),
    "shrink": ("shrink", "kind"),
    "shrink_channels": ("shrink", "channels"),
    "shrink_kernel": ("shrink", "kernel"),
    "shrink_mode": ("shrink", "mode"),
    "text_encoder_layers": ("text_encoder", "layers"),
    "share_text_encoder": ("text_encoder", "shared"),
    "semantic": ("semantic", "kind"),
    "semantic_options": ("semantic", "options"),
    "decoder": ("decoder", "kind"),
    "decoder_layers": ("decoder", "layers"),
    "decoder_name_or_path": ("decoder", "name_or_path"),
    "decoder_hf_config": ("decoder", "hf_config"),
    "decoder_finetune": ("decoder", "finetune"),
    "tie_embeddings": ("decoder", "tie_embeddings"),
    "output_bias": ("decoder", "output_bias"),
    "lora_rank": ("lora", "rank"),
    "lora_alpha": ("lora", "alpha"),
    "lora_dropout": ("lora", "dropout"),
    "lora_targets": ("lora", "targets"),
}
"""Old flat name -> (sub-config, field)."""

FINETUNE_FLAGS: dict[str, str] = {"freeze_encoder": "frozen", "lna_finetune": "lna", "encoder_lora": "lora"}
"""The old encoder fine-tuning flags (at most one true) -> the encoder.finetune mode each meant."""

RESOLVED_FIELDS: dict[tuple[str, ...], str] = {
    ("encoder", "asr_prompt"): "encoder.asr_prompt",
    ("decoder", "vocab"): "decoder.vocab",
    ("decoder", "prompt"): "decoder.prompt",
    ("ctc_vocab",): "ctc_vocab",
}
"""The path of a field (sub-config and field, or a shared field) a config held for what the build or the run
derived, before that moved to the model bundle's `resolved` -> its name there: whisper_asr's search prompt (from the
Whisper model's generation config), an LM decoder's trimmed output vocabulary and its prompt before the source, and
the LM tokens a CTC head writes (LM ids, from the LM's tokenizer and the training transcripts)."""


HF_CONFIGS: dict[str, str] = {"encoder": "encoder.hf_config", "decoder": "decoder.hf_config"}
"""Slot -> the name in the model bundle's `resolved` of the complete HF config its pretrained part was built with (a
dict, as the HF config's to_dict gives it): written by the part's build, read when a checkpoint's model is rebuilt
(its pretrained model need not be at hand when its weights follow; speechmt.models.components.hf_fields)."""


def migrate_model_config(d: Mapping[str, Any]) -> dict[str, Any]:
    """`d` in the nested form: old flat names moved into their sub-config, sub-configs given as dataclasses
    turned into dicts, other keys (shared settings, a YAML file's `preset`, unknown names) kept as they are;
    RESOLVED_FIELDS dropped (a build derives them: `resolved_fields` keeps an old checkpoint's)."""
    out = _nested(d)
    for *groups, name in RESOLVED_FIELDS:
        parent = _parent(out, groups)
        if parent is not None:
            parent.pop(name, None)
    return out


def resolved_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """What an old checkpoint's model config `d` (any form migrate_model_config reads) held of RESOLVED_FIELDS, by
    their names in the bundle's `resolved` (sequences as lists), and its parts' hf_config (HF_CONFIGS: the complete
    config a build wrote there before it moved); empty ones (not filled in yet) left out."""
    out, nested = {}, _nested(d)
    for (*groups, name), key in RESOLVED_FIELDS.items():
        value = (_parent(nested, groups) or {}).get(name)
        if value:
            out[key] = list(value) if isinstance(value, (list, tuple)) else value
    for group, key in HF_CONFIGS.items():
        value = (_parent(nested, [group]) or {}).get("hf_config")
        if value:
            out[key] = dict(value)
    return out


def checkpoint_resolved(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's `resolved` (speechmt.bundle.ModelBundle.resolved): its own entry, over what its model config
    held of RESOLVED_FIELDS when it was written before they moved (resolved_fields)."""
    return {**resolved_fields(ckpt.get("model_config") or {}), **dict(ckpt.get("resolved") or {})}


def checkpoint_config(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's model config in the nested form (migrate_model_config) holding what its user gave: a part that
    loads a pretrained model (a name_or_path; Whisper's decoder: its own or the encoder's) has no hf_config where the
    one it holds is the complete config of checkpoint_resolved (a checkpoint written before that moved to the
    bundle's `resolved`, which its rebuild reads instead); a random init's architecture stays."""
    config = migrate_model_config(ckpt["model_config"])
    resolved = checkpoint_resolved(ckpt)
    for group, key in HF_CONFIGS.items():
        part = _parent(config, [group])
        if (
            part
            and part.get("hf_config")
            and part["hf_config"] == resolved.get(key)
            and _loads_pretrained(config, group)
        ):
            config[group] = {**part, "hf_config": {}}
    return config


def _loads_pretrained(config: dict[str, Any], group: str) -> bool:
    """Whether sub-config `group` of the nested `config` names a pretrained model (Whisper's decoder defaults to
    the encoder's: ModelConfig.whisper_decoder_source)."""
    part = _parent(config, [group]) or {}
    if part.get("name_or_path"):
        return True
    return (
        group == "decoder"
        and part.get("kind") == "whisper"
        and bool((_parent(config, ["encoder"]) or {}).get("name_or_path"))
    )


def _parent(d: dict[str, Any], groups: list[str]) -> dict[str, Any] | None:
    """The dict at path `groups` inside `d` (`d` itself for no groups); None where the path holds none."""
    node: Any = d
    for group in groups:
        node = node.get(group) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _nested(d: Mapping[str, Any]) -> dict[str, Any]:
    """migrate_model_config's nesting alone (RESOLVED_FIELDS kept)."""
    flags = [k for k in FINETUNE_FLAGS if d.get(k)]
    if len(flags) > 1:
        raise ValueError("bad ModelConfig: freeze_encoder, lna_finetune and encoder_lora exclude each other")
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key in FINETUNE_FLAGS:
            _flag(key, value)
            if value:
                _put(out, ("encoder", "finetune"), FINETUNE_FLAGS[key], key)
        elif key in GROUPS and _is_group(value):
            for name, v in _as_dict(value).items():
                _put(out, (key, name), v, f"{key}.{name}")
        elif key in FLAT_NAMES:
            _put(out, FLAT_NAMES[key], value, key)
        else:
            _put(out, (key,), value, key)
    return out


def migrate_model_override(model: Mapping[str, Any], key: str, value: Any) -> tuple[list[str], Any]:
    """The nested path (below `model`) and value of one override `model.<key>=value`, `key` dotted and
    possibly in the old flat names; `model` is the nested section it applies to (an old flag set to false
    ends its own fine-tuning mode only)."""
    parts = key.split(".")
    head, rest = parts[0], parts[1:]
    if head in FINETUNE_FLAGS and not rest:
        _flag(head, value)
        encoder = model.get("encoder")
        current = encoder.get("finetune", "full") if isinstance(encoder, Mapping) else "full"
        mode = FINETUNE_FLAGS[head]
        return ["encoder", "finetune"], mode if value else ("full" if current == mode else current)
    if head in FLAT_NAMES and not (head in GROUPS and (rest or _is_group(value))):
        return [*FLAT_NAMES[head], *rest], value
    return parts, value


def merge_model_configs(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Two nested model-config dicts merged: `overrides` wins, field by field within each sub-config; a
    sub-config whose kind `overrides` changes is replaced whole (another kind has other options)."""
    out = {**base, **overrides}
    for group in GROUPS:
        old, new = base.get(group), overrides.get(group)
        kinds = [d.get("kind", DEFAULT_KINDS.get(group)) for d in (old, new) if isinstance(d, Mapping)]
        if isinstance(old, Mapping) and isinstance(new, Mapping) and kinds[0] == kinds[1]:
            out[group] = {**old, **new}
    return out


def _is_group(value: Any) -> bool:
    return isinstance(value, Mapping) or (dataclasses.is_dataclass(value) and not isinstance(value, type))


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"bad ModelConfig: {name} must be true or false, got {value!r}")


def _put(out: dict[str, Any], path: tuple[str, ...], value: Any, given_as: str) -> None:
    """Sets out[path...] = value; ValueError when another name already set it to something else."""
    *groups, name = path
    target = out
    for group in groups:
        target = target.setdefault(group, {})
        if not isinstance(target, dict):
            raise ValueError(f"bad ModelConfig: {given_as} sets {'.'.join(path)} but {group} is {target!r}")
    if name in target and target[name] != value:
        raise ValueError(
            f"bad ModelConfig: {given_as}={value!r} sets {'.'.join(path)} a second time (already {target[name]!r})"
        )
    target[name] = value
