"""The `fat_bridge` objective: FAT-MLM (Zheng et al., ICML 2021, "Fused Acoustic and Text Encoding for Multimodal
Bilingual Pretraining and Speech Translation") on the CTC bridge in front of a language-model decoder, the
pretraining FAT-ST in front of the LM starts from.

There the speech and the source text already live in one space, the LM's input embeddings: the bridge's segments
(soft token embeddings, shrink.embed lm) and the transcript's own embeddings (text_encoder.embeddings lm). The
fused encoder is the model's shared XSTNet stack with modality vectors (semantic xstnet, segments: true), so a
FAT-MLM run and the FAT-ST run that follows are one architecture and `train.init_from=[<run>:semantic.]` carries
the stack over. Each utterance's [speech segments | transcript tokens] go through the stack packed back to back
(XSTNetEncoder.fused): spans of segments and BERT-style tokens are masked, both with the "nothing heard" vector
(the mean of the CTC labels' embeddings, what an all-blank utterance reads; no parameter that FAT-ST would lack);
a masked segment is reconstructed as its own bridge vector (squared error, mean per value), a masked token
predicted through the LM's tied embeddings of the CTC labels (cross entropy, mean per token). The monolingual
FAT-MLM (speech + transcript); masks from a generator seeded by the global RNG, which the trainer seeds.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from speechmt.models.ctc_head import FIRST_LABEL, LabelEmbeddings
from speechmt.models.fat_mlm import FatMLMOptions, span_mask, token_mask
from speechmt.models.semantic import XSTNetEncoder

BRIDGE_MASKS = FatMLMOptions(speech_mask=0.3, speech_span=2, speech_loss="l2", token_mask=0.15)
"""The masking: 30 % of the segments in spans of 2 (a segment is about a token), 15 % of the tokens."""


def _check(model, batch) -> None:
    semantic = model.semantic
    if not (
        isinstance(semantic, XSTNetEncoder)
        and semantic.segments is not None
        and model.ctc_head is not None
        and model.config.shrink.embed == "lm"
        and batch.feats is not None
        and batch.src is not None
    ):
        raise ValueError(
            "the fat_bridge objective needs the CTC bridge into an LM (shrink.embed lm), semantic xstnet "
            "with segments: true, and audio batches (st or asr) with their transcripts"
        )


def fat_bridge(model, batch, enc, s) -> tuple[Tensor, dict[str, Tensor]]:
    """speech_weight x the reconstruction of the masked segments + the masked tokens' cross entropy (both means);
    stats: both parts and the masked segment and token counts. `enc` is unused: the stack reads the bridge's
    output (Translator.bridge_speech) fused with the transcript."""
    _check(model, batch)
    o = BRIDGE_MASKS
    gen = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
    speech = model.bridge_speech(batch.feats, batch.feat_lengths, batch.precomputed, task="st")
    text = model.text_encoder(batch.src, batch.src_lengths, None)
    table = LabelEmbeddings(model.ctc_head, model.decoder)().to(speech.x.dtype)  # (V', D) labels FIRST_LABEL..
    nothing = table.mean(0)
    masked = span_mask(speech.lengths.cpu(), o.speech_mask, o.speech_span, gen).to(speech.x.device)
    speech_in = torch.where(masked[..., None], nothing, speech.x)
    labels = model.ctc_head.labels(batch.src)
    tm = token_mask(labels, batch.src_lengths, o.token_mask, FIRST_LABEL, model.config.src_vocab_size, gen)
    inputs, hidden, predicted = (t.to(labels.device) for t in (tm.inputs, tm.masked, tm.predicted))
    text_in = torch.where((inputs != labels)[..., None], table[(inputs - FIRST_LABEL).clamp(min=0)], text.x)
    text_in = torch.where(hidden[..., None], nothing, text_in)
    speech_out, text_out = model.semantic.fused(replace(speech, x=speech_in), replace(text, x=text_in))
    zero = speech_out.sum() * 0.0  # keeps the graph when nothing is masked
    rec = (speech_out[masked].float() - speech.x.detach()[masked].float()).pow(2).mean() if masked.any() else zero
    nll = zero
    if predicted.any():
        logits = text_out[predicted] @ table.t()  # (N, V')
        nll = F.cross_entropy(logits.float(), labels[predicted] - FIRST_LABEL)
    return o.speech_weight * rec + nll, {
        "speech": rec.detach(),
        "tokens": nll.detach(),
        "masked_frames": masked.sum().float(),
        "masked_tokens": predicted.sum().float(),
    }
