"""Converters from other toolkits' checkpoints into speechmt checkpoints.

`import_hf_s2t` (in `speechmt.interop.hf_s2t`, which needs `transformers`): Hugging Face Speech2Text,
the port of fairseq's s2t_transformer.
`import_gguf` (in `speechmt.interop.gguf`, which needs `transformers`, `gguf` and `accelerate`): a causal LM in
llama.cpp's GGUF format (e.g. Gemma 3 270M) into a plain Hugging Face folder.
"""


class HFImportError(ValueError):
    """A model that cannot be imported; the message (one line) names it and says why."""


__all__ = ["HFImportError"]
