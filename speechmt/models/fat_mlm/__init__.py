"""FAT-MLM (Zheng, Chen, Ma, Liu and Huang, ICML 2021, "Fused Acoustic and Text Encoding for Multimodal
Bilingual Pretraining and Speech Translation"): one Transformer encoder over the concatenation

    [ conv-subsampled fbank embeddings | source text token embeddings | target text token embeddings ]

each part scaled by sqrt(D), with its own sinusoidal positions (from 0) and a learned segment (language)
embedding (0 speech, 1 source text, 2 target text). Parts a batch lacks are absent: the parts of an example
are packed back to back (no padding between them), so its length is the sum of its parts' lengths. Spans of
subsampled speech frames are replaced by a learned mask vector and reconstructed, through a linear
upsampling head, as the fbank frames they cover (subsampled frame i covers fbank frames [f i, f i + f), f the
subsampling factor; L1 or L2); 15% of the text tokens are masked as BERT (80% a learned mask vector, 10% a
random token, 10% unchanged) and predicted through the tied embedding of their side (cross entropy).

On Whisper (`encoder.kind: whisper`, `finetune: frozen`; WhisperFatMLM) the acoustic embeddings are the
frozen Whisper encoder's states (projected to D only when the widths differ; the trainer caches them once per
split and feeds them as `precomputed` batches), with no scaling and no sinusoidal positions (they carry
Whisper's own); the fused stack is `options.layers` Transformer layers of their own, which can start as the
identity (`init: identity`), and the reconstruction target of a masked state is that frozen state itself
(factor 1; the head is Linear(D, Whisper's width)). With `decoder.kind: whisper` the model takes Whisper's
dimensions and vocabulary (as the ST model with Whisper's decoder would), the target text is in Whisper's
tokens (only its text ids, below <|endoftext|>, are masked or drawn) and the target embedding starts from
Whisper's decoder token embedding.

Named in a config as `model.semantic: {kind: fat_mlm, options: ...}` (the form of every config and checkpoint
of it; options: FatMLMOptions), but no semantic layer and no Translator: built by its own builder, `fat_mlm`
below (speechmt.models.build picks it), with the conv or the whisper encoder; trained by the task `fat` (speech with transcript and translation) or
`fat_text` (text pairs) and the objective `fat_mlm` (`fat_mlm_loss`; the forward pass computes no loss).
Masks come from the model's own generator, reseeded from (seed, update) before every update
(`before_update`), so a resumed run draws the same masks; in eval mode every call draws from a generator
seeded with `seed` alone.

FAT-ST: `translator_state(state)` maps a FAT-MLM state dict onto a Translator's names (see there), which
`train.init_encoder_from` applies by itself to a FAT-MLM checkpoint.

Files: masking.py (span and token masks), model.py (FatMLM, its loss, the conv builder), whisper.py
(WhisperFatMLM and its builder), transfer.py (translator_state).
"""

from __future__ import annotations

from speechmt.models.fat_mlm.masking import FatMasks, TokenMask, reconstruction_frames, span_mask, token_mask
from speechmt.models.fat_mlm.model import (
    SEGMENT_OF,
    SOURCE,
    SPEECH,
    TARGET,
    FatMLM,
    FatMLMOptions,
    FatOutput,
    conv_fat_mlm,
    fat_mlm_loss,
)
from speechmt.models.fat_mlm.transfer import DECODER_FROM_ENCODER, translator_state
from speechmt.models.fat_mlm.whisper_fat_mlm import WhisperFatMLM, whisper_fat_mlm


def fat_mlm(cfg, pretrained: bool = True, resolved: dict | None = None) -> FatMLM:
    """Builds FAT-MLM from a ModelConfig (conv encoder: conv_fat_mlm; whisper encoder: whisper_fat_mlm; src
    and tgt vocabularies; its options: semantic.options, FatMLMOptions fields). `pretrained`: load Whisper's
    weights (else, a checkpoint's follow, built from the stored config and `resolved`, the checkpoint bundle's: the
    complete HF configs of the Whisper parts). The model's `resolved` holds what its build derived (those configs)."""
    o = FatMLMOptions(**cfg.semantic.options)  # checked when the config was read (SemanticConfig)
    if cfg.encoder.kind not in ("conv", "whisper"):
        raise ValueError(
            f"bad ModelConfig: semantic fat_mlm needs the conv encoder or Whisper's, got {cfg.encoder.kind!r}"
        )
    if cfg.src_vocab_size <= 0 or cfg.tgt_vocab_size <= 0:
        raise ValueError("bad ModelConfig: semantic fat_mlm needs src_vocab_size and tgt_vocab_size > 0")
    if cfg.encoder.kind == "whisper":
        return whisper_fat_mlm(cfg, o, pretrained, resolved)
    model = conv_fat_mlm(cfg, o)
    model.resolved = dict(resolved or {})
    return model


__all__ = [
    "DECODER_FROM_ENCODER",
    "SEGMENT_OF",
    "SOURCE",
    "SPEECH",
    "TARGET",
    "FatMLM",
    "FatMLMOptions",
    "FatMasks",
    "FatOutput",
    "TokenMask",
    "WhisperFatMLM",
    "conv_fat_mlm",
    "fat_mlm",
    "fat_mlm_loss",
    "reconstruction_frames",
    "span_mask",
    "token_mask",
    "translator_state",
    "whisper_fat_mlm",
]
