"""FAT-ST: a FAT-MLM state dict on a Translator's names (translator_state), which `train.init_encoder_from`
applies by itself to a FAT-MLM checkpoint."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from speechmt.models.fat_mlm.model import SOURCE, SPEECH, TARGET

DECODER_FROM_ENCODER = {"attn_norm.": "self_norm.", "attn.": "self_attn.", "ffn_norm.": "ffn_norm.", "ffn.": "ffn."}
"""FAT-ST: encoder layer i's modules -> decoder layer i's (cross-attention and its norm stay as built)."""


def translator_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A FAT-MLM state dict on a Translator's names (FAT-ST; `train.init_encoder_from` keeps those whose
    name is under its init_prefixes and whose shape agrees). The conv variant:
    - speech_encoder.* -> speech_encoder.* (subsampler and Transformer stack, unchanged; with the conv2d
      subsampler the speech segment / sqrt(D) is added to subsampler.out.bias, exactly the FAT-MLM input);
    - src_embedding.weight + the source segment / sqrt(D) -> text_encoder.embedding.weight (exactly the FAT-MLM
      input of a source text; all-zero rows, the padding, stay zero);
    - tgt_embedding.weight + the target segment / sqrt(D) -> decoder.embed.weight and decoder.output.weight
      (the shift adds h . c to every logit of a position: the softmax is unchanged);
    - speech_encoder.encoder.layers.<i>.{attn_norm, attn, ffn_norm, ffn} -> decoder.layers.<i>.{self_norm,
      self_attn, ffn_norm, ffn}, speech_encoder.encoder.norm -> decoder.norm (the paper's decoder from the
      encoder's weights).
    The conv1d subsampler ends in a GLU, so its speech segment has nowhere to go and is left out; the mask
    vectors, segments and reconstruction head are pretraining only.
    The Whisper variant (a state with `stack.*`), for an ST model with Whisper's encoder, `text_encoder:
    {embed_only: true}`, `semantic: xstnet` with `segments: true` and the same layers and init, and Whisper's
    decoder:
    - stack.* -> semantic.stack.* (the fused stack is the shared one);
    - the speech segment -> row 0 (speech) of semantic.segments.weight, row 1 (source text) zero;
    - src_embedding.weight + the source segment / sqrt(D) -> text_encoder.embedding.weight, as above;
    - speech_encoder.* (the frozen Whisper encoder, and its projection if any) unchanged.
    The decoder stays Whisper's: nothing of the target side (embedding, segment) is mapped."""
    segments = state["segments.weight"]
    scale = math.sqrt(segments.size(1))

    def shifted(table: Tensor, segment: int) -> Tensor:
        return torch.where(table.abs().sum(1, keepdim=True) > 0, table + segments[segment] / scale, table)

    out = {k: v for k, v in state.items() if k.startswith("speech_encoder.")}
    out["text_encoder.embedding.weight"] = shifted(state["src_embedding.weight"], SOURCE)
    if any(k.startswith("stack.") for k in state):  # Whisper
        out.update({"semantic." + k: v for k, v in state.items() if k.startswith("stack.")})
        out["semantic.segments.weight"] = torch.stack([segments[SPEECH], torch.zeros_like(segments[SOURCE])])
        return out
    bias = "speech_encoder.subsampler.out.bias"
    if bias in out:
        out[bias] = out[bias] + segments[SPEECH] / scale
    out["decoder.embed.weight"] = out["decoder.output.weight"] = shifted(state["tgt_embedding.weight"], TARGET)
    layers = "speech_encoder.encoder.layers."
    for name, value in state.items():
        if name.startswith(layers):
            index, rest = name[len(layers) :].split(".", 1)
            for old, new in DECODER_FROM_ENCODER.items():
                if rest.startswith(old):
                    out[f"decoder.layers.{index}.{new}{rest[len(old) :]}"] = value
        elif name.startswith("speech_encoder.encoder.norm."):
            out["decoder.norm." + name.rsplit(".", 1)[1]] = value
    return out
