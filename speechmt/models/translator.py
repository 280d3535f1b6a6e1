"""The translation model: acoustic encoder (`conv` on fbank, `wav2vec2` on waveforms or `whisper` on log-mel
features) + CTC head, optional length shrinking (`conv` or `ctc`), optional text encoder, semantic layer,
Transformer decoder (trained from scratch, Whisper's pretrained one or a pretrained LM).

`Translator` composes the modules it is given (constructor injection); its config is a
speechmt.models.config.ModelConfig and speechmt.models.build.build_model, the one place where variants are
chosen, builds it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import Tensor, nn

from speechmt.models.config import ModelConfig
from speechmt.models.decoder import DecoderCache, TransformerDecoder
from speechmt.models.encoders import AcousticEncoder, EncoderOutput, Record, TextEncoder, note
from speechmt.models.fusion import LayerFusion
from speechmt.models.semantic import SEMANTICS, SemanticLayer
from speechmt.models.shrink import Shrink
from speechmt.sequence import concat_padded

__all__ = ["Translator"]


class Translator(nn.Module):
    """Speech (or text) encoder -> semantic layer -> Transformer decoder. No forward: tasks call encode_*
    and decode; `states` returns every stage's states by name."""

    def __init__(
        self,
        config: ModelConfig,
        speech_encoder: AcousticEncoder,
        decoder: TransformerDecoder,
        text_encoder: TextEncoder | None = None,
        ctc_head: nn.Linear | None = None,
        shrink: Shrink | None = None,
        semantic: SemanticLayer | None = None,
        fusion: LayerFusion | None = None,
    ):
        super().__init__()
        self.fusion = fusion
        self.config = config
        self.speech_encoder, self.decoder = speech_encoder, decoder
        self.text_encoder, self.ctc_head, self.shrink = text_encoder, ctc_head, shrink
        self.semantic = semantic if semantic is not None else SEMANTICS["identity"](config)
        self.resolved: dict[str, Any] = {}  # what its build derived (build_model; speechmt.bundle.ModelBundle.resolved)

    def encode_speech(
        self, feats: Tensor, lengths: Tensor, precomputed: bool = False, record: Record | None = None, task: str = ""
    ) -> EncoderOutput:
        """feats (B, T, F) fbank (conv encoder), waves (B, T) at 16 kHz (wav2vec2) or log-mel (B, T, n_mels)
        (whisper), lengths (B,) -> EncoderOutput x (B, T', D), lengths; with a CTC head ctc_logits (B, T_a,
        V_src) on the acoustic states and their lengths ctc_lengths (B,); T' = T_a unless the states are shrunk.
        `precomputed`: feats are the frozen encoder's cached states (B, T_a, H) (speechmt.data.encoder_cache).
        `record`: see `states`. `task`: the fusion partition to run through (models/fusion.py)."""
        out = self.bridge_speech(feats, lengths, precomputed, record, task)
        return self._semantic(self.semantic.speech, out, record, "speech")

    def bridge_speech(
        self, feats: Tensor, lengths: Tensor, precomputed: bool = False, record: Record | None = None, task: str = ""
    ) -> EncoderOutput:
        """encode_speech up to the semantic layer: what it reads (the acoustic states, CTC logits, shrunk)."""
        sub = None if record is None and self.fusion is None else {}
        if precomputed:
            note(sub, self.speech_encoder.states_name, feats, lengths)
            out = self.speech_encoder.project(feats, lengths, sub)
        else:
            out = self.speech_encoder(feats, lengths, sub)
        if self.fusion is not None:
            out = self.fusion(sub, out, self.speech_encoder, task)
        _merge(record, "speech.encoder.", sub)
        if self.ctc_head is not None:
            out = replace(out, ctc_logits=self.ctc_head(out.x), ctc_lengths=out.lengths)
        if self.shrink is not None:
            out = self.shrink(out)
            note(record, "speech.shrink", out.x, out.lengths)
        return out

    def encode_text(self, tokens: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """tokens (B, S), lengths (B,) -> EncoderOutput x (B, S, D), lengths. `record`: see `states`."""
        if self.text_encoder is None:
            raise ValueError(
                "this model has no text encoder: build it with text_encoder.layers > 0 or "
                "text_encoder.embed_only (and src_vocab_size > 0) to encode text"
            )
        sub = None if record is None else {}
        out = self.text_encoder(tokens, lengths, sub)
        _merge(record, "text.encoder.", sub)
        return self._semantic(self.semantic.text, out, record, "text")

    def prefixed(self, out: EncoderOutput, prefix: Tensor, prefix_lengths: Tensor) -> EncoderOutput:
        """`out` (the speech path's x (B, T, D), lengths) read after a text `prefix` (B, P) of source ids with
        lengths (B,) (retrieved examples, decoder.examples): each row's prefix embeddings (encode_text) then its own
        states, x (B, max(P_i + T_i), D), lengths P_i + T_i. CTC outputs are kept as they are."""
        text = self.encode_text(prefix, prefix_lengths)
        x, lengths = concat_padded(text.x, text.lengths, out.x, out.lengths)
        return replace(out, x=x, lengths=lengths)

    @staticmethod
    def _semantic(path, out: EncoderOutput, record: Record | None, side: str) -> EncoderOutput:
        sub = None if record is None else {}
        out = path(out, sub)
        _merge(record, f"{side}.semantic.", sub)
        note(record, f"{side}.out", out.x, out.lengths)
        return out

    def states(self, inputs: Tensor, lengths: Tensor, modality: str = "speech", precomputed: bool = False) -> Record:
        """Every stage's states on the way to the decoder, in order, as {name: (x (B, T, D), lengths (B,))}:
        speech: "speech.encoder.<...>" (the acoustic encoder's own: "subsampled"/"conv", "layer.<i>",
        "out", "projected"), "speech.shrink", "speech.semantic.<...>", "speech.out"; text: "text.encoder.
        <...>" ("embedded", "layer.<i>", "out"), "text.semantic.<...>", "text.out". "<side>.out" is what the
        decoder attends to. Padded frames are arbitrary: use the lengths. For the analysis tool and the
        distance losses; no gradients are stopped."""
        record: Record = {}
        if modality == "speech":
            self.encode_speech(inputs, lengths, precomputed, record)
        elif modality == "text":
            self.encode_text(inputs, lengths, record)
        else:
            raise ValueError(f"unknown modality {modality!r}; expected speech or text")
        return record

    def decode(self, tokens: Tensor, enc: EncoderOutput, cache: DecoderCache | None = None) -> Tensor:
        """tokens (B, U) decoder input (only the new positions with a cache) -> logits (B, U, tgt_vocab_size)."""
        return self.decoder(tokens, enc.x, enc.lengths, cache)

    def new_cache(self) -> DecoderCache:
        return self.decoder.new_cache()


def _merge(record: Record | None, prefix: str, sub: Record | None) -> None:
    if record is not None and sub:
        record.update({prefix + k: v for k, v in sub.items()})
