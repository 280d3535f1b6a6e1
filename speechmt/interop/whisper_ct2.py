"""Imports OpenAI Whisper weights in CTranslate2 format (a folder with model.bin, config.json, tokenizer.json,
as faster-whisper runs them) into a Hugging Face folder that `WhisperForConditionalGeneration`,
`WhisperProcessor`, AutoTokenizer and AutoFeatureExtractor load offline.

The CTranslate2 `model.bin` (binary versions 4-6, as `ctranslate2.specs.model_spec` writes it; read here with
struct and numpy, never pickle) is, little-endian:
    u32 version | string spec name | u32 revision | u32 n, then n x (string name | u8 rank | u32 dims[rank] |
    u8 dtype | u32 nbytes | data) | u32 n, then n x (string alias | string name of the variable it repeats)
where a string is u16 length (with the final NUL) + UTF-8 bytes + NUL, and dtype is an index into
(float32, int8, int16, int32, float16, bfloat16). Tensors equal to one that sorts earlier are written once
and aliased (Whisper's tied output projection is an alias of the decoder's embeddings).

The mapping inverts ctranslate2's WhisperLoader (converters/transformers.py):
- `{encoder,decoder}/layer_N/self_attention/linear_0` holds q, k, v fused along the output axis; the k part
  of the fused bias is zero (Whisper's k_proj has no bias) and is dropped; `linear_1` is out_proj.
- `decoder/layer_N/attention` is the cross-attention: linear_0 = q, linear_1 = k and v fused, linear_2 = out.
- LayerNorm gamma/beta -> weight/bias; `ffn/linear_0/1` -> fc1/fc2; `position_encodings/encodings` ->
  embed_positions.weight (offset 0 in Whisper); `decoder/embeddings` -> embed_tokens and the tied proj_out.
- Quantized weights (int8/int16 with a `weight_scale`) are dequantized (value / scale) to float32.
Scalars (num_heads, activation, pre_norm, ...) feed the config or are checked, never copied as tensors.

Usage: `import_whisper(ct2_dir, out_dir)`; `speechmt import whisper DIR --out HF_DIR` on the command line.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from speechmt.interop import HFImportError
from speechmt.interop.folders import write_folder

__all__ = ["CT2Model", "generation_config", "hf_state_dict", "import_whisper", "read_ct2_model", "whisper_config"]

SUPPORTED_VERSIONS = (4, 5, 6)
DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, "bfloat16")  # ctranslate2 DataType ids
SPEC_NAME = "WhisperSpec"
MAX_INITIAL_TIMESTAMP_INDEX = 50  # as the openai/whisper-* generation configs on the HF hub
_NON_LANGUAGE = {
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|nospeech|>",
    "<|notimestamps|>",
}
_LAYER = re.compile(r"(encoder|decoder)/layer_(\d+)/(.+)")
_SIMPLE = {  # CTranslate2 scope (without /weight, /gamma, ...) -> HF module, outside the fused attentions
    "encoder/conv1": "model.encoder.conv1",
    "encoder/conv2": "model.encoder.conv2",
    "encoder/layer_norm": "model.encoder.layer_norm",
    "decoder/layer_norm": "model.decoder.layer_norm",
    "encoder/position_encodings": "model.encoder.embed_positions",
    "decoder/position_encodings": "model.decoder.embed_positions",
    "decoder/embeddings": "model.decoder.embed_tokens",
    "decoder/projection": "proj_out",
}
_IN_LAYER = {
    "self_attention/layer_norm": "self_attn_layer_norm",
    "attention/layer_norm": "encoder_attn_layer_norm",
    "ffn/layer_norm": "final_layer_norm",
    "ffn/linear_0": "fc1",
    "ffn/linear_1": "fc2",
}
_PARAM = {"weight": "weight", "bias": "bias", "gamma": "weight", "beta": "bias", "encodings": "weight"}
# Fused attention projections: scope inside a layer -> (HF attention module, the projections it holds).
_FUSED = {
    "self_attention/linear_0": ("self_attn", ("q_proj", "k_proj", "v_proj")),
    "self_attention/linear_1": ("self_attn", ("out_proj",)),
    "attention/linear_0": ("encoder_attn", ("q_proj",)),
    "attention/linear_1": ("encoder_attn", ("k_proj", "v_proj")),
    "attention/linear_2": ("encoder_attn", ("out_proj",)),
}


@dataclass
class CT2Model:
    """The content of a CTranslate2 model.bin: spec name and revision, every variable by name (aliases
    resolved to the same array), and which names were aliases."""

    spec: str
    revision: int
    version: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)


class _Reader:
    """Sequential little-endian reads from a bytes buffer; running past its end is a truncated file."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise HFImportError(
                f"{self.path}: truncated CTranslate2 model (needs {self.pos + n} bytes, has {len(self.data)})"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str):
        values = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))
        return values if len(fmt) > 1 else values[0]

    def string(self) -> str:
        raw = self.take(self.unpack("H"))
        if not raw or raw[-1] != 0:
            raise HFImportError(f"{self.path}: not a CTranslate2 model (bad string at byte {self.pos})")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise HFImportError(f"{self.path}: not a CTranslate2 model (bad string at byte {self.pos})") from None


def _array(raw: bytes, dtype_id: int, shape: tuple[int, ...], path: Path, name: str) -> np.ndarray:
    """One variable's bytes as a numpy array (bfloat16 widened exactly to float32)."""
    if dtype_id >= len(DTYPES):
        raise HFImportError(f"{path}: unknown dtype id {dtype_id} for {name}")
    bf16 = DTYPES[dtype_id] == "bfloat16"
    if len(raw) % (2 if bf16 else np.dtype(DTYPES[dtype_id]).itemsize):
        raise HFImportError(f"{path}: {name} has {len(raw)} bytes, not a whole number of values")
    array = np.frombuffer(raw, np.uint16 if bf16 else DTYPES[dtype_id])
    if bf16:
        array = (array.astype(np.uint32) << 16).view(np.float32)
    if array.size != int(np.prod(shape, dtype=np.int64)):
        raise HFImportError(f"{path}: {name} holds {array.size} values for shape {list(shape)}")
    return array.reshape(shape)


def read_ct2_model(path: str | os.PathLike) -> CT2Model:
    """Reads a CTranslate2 model.bin (binary versions 4-6). Errors name the file: HFImportError."""
    path = Path(path)
    if not path.is_file():
        raise HFImportError(f"{path}: no such file (a CTranslate2 folder holds model.bin)")
    r = _Reader(path.read_bytes(), path)
    version = r.unpack("I")
    if version not in SUPPORTED_VERSIONS:
        raise HFImportError(
            f"{path}: CTranslate2 binary version {version} is not supported "
            f"(expected one of {', '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    spec, revision = r.string(), r.unpack("I")
    variables = {}
    for _ in range(r.unpack("I")):
        name = r.string()
        shape = tuple(r.unpack("I") for _ in range(r.unpack("B")))
        dtype_id, nbytes = r.unpack("BI")
        variables[name] = _array(r.take(nbytes), dtype_id, shape, path, name)
    aliases = {}
    for _ in range(r.unpack("I")):
        alias, target = r.string(), r.string()
        if target not in variables:
            raise HFImportError(f"{path}: alias {alias} names a missing variable {target}")
        aliases[alias], variables[alias] = target, variables[target]
    if r.pos != len(r.data):
        raise HFImportError(f"{path}: {len(r.data) - r.pos} unexpected bytes after the last alias")
    return CT2Model(spec, revision, version, variables, aliases)


def _dequantized(variables: dict[str, np.ndarray], scope: str) -> np.ndarray:
    """scope/weight as floats: an int8/int16 weight divided by its per-row (or single) weight_scale."""
    weight = variables[f"{scope}/weight"]
    scale = variables.get(f"{scope}/weight_scale")
    if scale is None:
        return weight
    scale = np.asarray(scale, np.float32)
    return weight.astype(np.float32) / scale.reshape(scale.shape + (1,) * (weight.ndim - scale.ndim))


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array))  # a writable copy


def _layer_tensors(stack: str, index: str, scope: str, param: str, value: np.ndarray) -> dict[str, torch.Tensor]:
    """HF names and tensors of one variable inside encoder/decoder layer `index` (fused ones split)."""
    prefix = f"model.{stack}.layers.{index}"
    if scope in _IN_LAYER:
        return {f"{prefix}.{_IN_LAYER[scope]}.{_PARAM[param]}": _tensor(value)}
    if scope not in _FUSED:
        raise KeyError(scope)
    module, projections = _FUSED[scope]
    parts = np.split(value, len(projections), axis=0)
    out = {}
    for proj, part in zip(projections, parts):
        if proj == "k_proj" and param == "bias":
            if np.any(part):
                raise ValueError(f"{stack}/layer_{index}/{scope}/bias has a non-zero key bias, which Whisper lacks")
            continue
        out[f"{prefix}.{module}.{proj}.{param}"] = _tensor(part)
    return out


def hf_state_dict(ct2: CT2Model, path: Path | str = "model.bin") -> dict[str, torch.Tensor]:
    """Every tensor of a WhisperSpec as WhisperForConditionalGeneration's state dict (proj_out included,
    the same tensor as embed_tokens when CTranslate2 aliased them). Dtypes are kept (float16 stays float16)
    except quantized weights, dequantized to float32."""
    state = {}
    for name, value in ct2.variables.items():
        scope, _, param = name.rpartition("/")
        if value.ndim == 0 or param in ("weight_scale", "weight_zero") or param not in _PARAM:
            continue  # scalars (num_heads, activation, ...) go to the config; scales are applied below
        if param == "weight":
            value = _dequantized(ct2.variables, scope)
        try:
            m = _LAYER.fullmatch(scope)
            if m:
                state.update(_layer_tensors(m.group(1), m.group(2), m.group(3), param, value))
            else:
                state[f"{_SIMPLE[scope]}.{_PARAM[param]}"] = _tensor(value)
        except KeyError:
            raise HFImportError(f"{path}: variable {name} has no Whisper counterpart") from None
        except ValueError as e:
            raise HFImportError(f"{path}: {e}") from None
    if "proj_out.bias" in state:
        if torch.any(state.pop("proj_out.bias") != 0):
            raise HFImportError(f"{path}: decoder/projection/bias is not zero; Whisper's output has no bias")
    if ct2.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight":
        state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    return state


def _scalar(ct2: CT2Model, name: str, path: Path) -> int:
    if name not in ct2.variables:
        raise HFImportError(f"{path}: {name} is missing; not a complete WhisperSpec")
    return int(ct2.variables[name])


def _num_layers(ct2: CT2Model, stack: str) -> int:
    indices = {
        int(m.group(2))
        for m in map(_LAYER.fullmatch, (n.rpartition("/")[0] for n in ct2.variables))
        if m and m.group(1) == stack
    }
    return max(indices) + 1 if indices else 0


def _token_ids(tokenizer_json: dict) -> dict[str, int]:
    """Every token of a tokenizer.json (the model's vocabulary and the added tokens) -> id."""
    ids = dict(tokenizer_json.get("model", {}).get("vocab", {}))
    ids.update({t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", [])})
    return ids


def _special_ids(ids: dict[str, int], path: Path) -> dict[str, int]:
    names = {
        "eot": "<|endoftext|>",
        "sot": "<|startoftranscript|>",
        "translate": "<|translate|>",
        "transcribe": "<|transcribe|>",
        "prev": "<|startofprev|>",
        "notimestamps": "<|notimestamps|>",
    }
    missing = [t for t in names.values() if t not in ids]
    if missing:
        raise HFImportError(f"{path}: not a Whisper tokenizer (lacks {', '.join(missing)})")
    return {k: ids[t] for k, t in names.items()}


def whisper_config(ct2: CT2Model, ct2_config: dict, tokenizer_json: dict, path: Path | str = "model.bin"):
    """The WhisperConfig of the model: dimensions and layer/head counts from the tensors and scalars, token ids
    from the tokenizer, suppressed tokens from CTranslate2's config.json (as the openai/whisper-* configs)."""
    from transformers import WhisperConfig

    path, v = Path(path), ct2.variables
    required = [
        "decoder/embeddings/weight",
        "encoder/conv1/weight",
        "encoder/position_encodings/encodings",
        "decoder/position_encodings/encodings",
        "encoder/layer_0/ffn/linear_0/weight",
        "decoder/layer_0/ffn/linear_0/weight",
    ]
    missing = [n for n in required if n not in v]
    if missing:
        raise HFImportError(f"{path}: {missing[0]} is missing; not a complete WhisperSpec")
    vocab_size, d_model = v["decoder/embeddings/weight"].shape
    special = _special_ids(_token_ids(tokenizer_json), path)
    return WhisperConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        num_mel_bins=v["encoder/conv1/weight"].shape[1],
        encoder_layers=_num_layers(ct2, "encoder"),
        decoder_layers=_num_layers(ct2, "decoder"),
        encoder_attention_heads=_scalar(ct2, "encoder/num_heads", path),
        decoder_attention_heads=_scalar(ct2, "decoder/num_heads", path),
        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=v["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=special["eot"],
        bos_token_id=special["eot"],
        eos_token_id=special["eot"],
        decoder_start_token_id=special["sot"],
        suppress_tokens=list(ct2_config.get("suppress_ids") or []),
        begin_suppress_tokens=list(ct2_config.get("suppress_ids_begin") or []),
        tie_word_embeddings="decoder/projection/weight" not in v
        or (ct2.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight"),
        architectures=["WhisperForConditionalGeneration"],
    )


def generation_config(config, ct2_config: dict, tokenizer_json: dict):
    """Whisper's GenerationConfig as the openai/whisper-* folders have it: language and task token ids,
    suppressed tokens, alignment heads, the default prompt (language detected, transcribe, no timestamps)."""
    from transformers import GenerationConfig

    ids = _token_ids(tokenizer_json)
    special = _special_ids(ids, Path("tokenizer.json"))
    names = {i: t for t, i in ids.items()}
    lang_ids = ct2_config.get("lang_ids") or [
        i for t, i in ids.items() if re.fullmatch(r"<\|[a-z]{2,3}(_[a-z]+)?\|>", t) and t not in _NON_LANGUAGE
    ]
    lang_to_id = {names[i]: int(i) for i in sorted(lang_ids)}
    multilingual = len(lang_to_id) > 1
    fields = dict(
        decoder_start_token_id=special["sot"],
        bos_token_id=special["eot"],
        eos_token_id=special["eot"],
        pad_token_id=special["eot"],
        max_length=config.max_target_positions,
        suppress_tokens=list(config.suppress_tokens or []),
        begin_suppress_tokens=list(config.begin_suppress_tokens or []),
        no_timestamps_token_id=special["notimestamps"],
        prev_sot_token_id=special["prev"],
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
        return_timestamps=False,
        is_multilingual=multilingual,
    )
    if ct2_config.get("alignment_heads"):
        fields["alignment_heads"] = [list(map(int, h)) for h in ct2_config["alignment_heads"]]
    if multilingual:
        fields |= dict(
            lang_to_id=lang_to_id,
            task_to_id={"transcribe": special["transcribe"], "translate": special["translate"]},
            forced_decoder_ids=[[1, None], [2, special["transcribe"]]],
        )
    return GenerationConfig(**fields)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise HFImportError(
            f"{path}: missing (a CTranslate2 Whisper folder holds model.bin, config.json, tokenizer.json)"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise HFImportError(f"{path}: not valid JSON ({e})") from None


def _tokenizer(tokenizer_file: Path, tokenizer_json: dict):
    """WhisperTokenizerFast over the tokenizer.json, its special added tokens declared as special."""
    from transformers import WhisperTokenizerFast

    specials = [t["content"] for t in tokenizer_json.get("added_tokens", []) if t.get("special")]
    return WhisperTokenizerFast(tokenizer_file=str(tokenizer_file), additional_special_tokens=specials)


def _model(config, state: dict[str, torch.Tensor], path: Path):
    """WhisperForConditionalGeneration holding exactly `state` (no missing or unexpected keys)."""
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise HFImportError(
            f"{path}: does not match WhisperForConditionalGeneration (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]})"
        )
    for key, tensor in state.items():
        want = model.state_dict()[key].shape
        if tensor.shape != want:
            raise HFImportError(f"{path}: {key} has shape {list(tensor.shape)}, the config implies {list(want)}")
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:
        model.proj_out.weight = model.model.decoder.embed_tokens.weight
    return model.eval()


def import_whisper(ct2_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Converts a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json) into a Hugging Face
    folder at `out_dir`: config.json, generation_config.json, model.safetensors (the source's float16 kept),
    tokenizer.json + tokenizer_config.json, preprocessor_config.json. The folder is written next to
    `out_dir` under a temporary name and renamed into place at the end (an existing `out_dir` is replaced).
    Returns `out_dir`. Errors (missing folder or file, truncated model.bin, not a Whisper spec): HFImportError
    with one line naming the file."""
    from transformers import WhisperFeatureExtractor

    ct2_dir, out_dir = Path(ct2_dir), Path(out_dir)
    if not ct2_dir.is_dir():
        raise HFImportError(f"{ct2_dir}: no such folder (expected a CTranslate2 Whisper model folder)")
    model_bin = ct2_dir / "model.bin"
    ct2 = read_ct2_model(model_bin)
    if ct2.spec != SPEC_NAME:
        raise HFImportError(f"{model_bin}: spec {ct2.spec or '(none)'} is not a Whisper model ({SPEC_NAME})")
    ct2_config = _read_json(ct2_dir / "config.json")
    tokenizer_json = _read_json(ct2_dir / "tokenizer.json")
    config = whisper_config(ct2, ct2_config, tokenizer_json, model_bin)
    model = _model(config, hf_state_dict(ct2, model_bin), model_bin)
    model.generation_config = generation_config(config, ct2_config, tokenizer_json)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        _tokenizer(ct2_dir / "tokenizer.json", tokenizer_json).save_pretrained(tmp)
        WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(tmp)

    return write_folder(out_dir, write)
