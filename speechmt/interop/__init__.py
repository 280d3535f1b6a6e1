"""Converters from other toolkits' checkpoints into speechmt checkpoints.

`import_hf_s2t` (in `speechmt.interop.hf_s2t`, which needs `transformers`): Hugging Face Speech2Text,
the port of fairseq's s2t_transformer.
"""


class HFImportError(ValueError):
    """A model that cannot be imported; the message (one line) names it and says why."""


__all__ = ["HFImportError"]
