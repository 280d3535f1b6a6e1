"""XSTNet's shared encoder (Ye, Wang and Li, Interspeech 2021, "End-to-end Speech Translation via
Cross-modal Progressive Training"): one Transformer encoder for both modalities. The speech path feeds it
the acoustic encoder's (shrunk) states with sinusoidal positions, prefixed by a learned `<audio>` embedding;
the text path feeds it token embeddings (the model's plain text embedder, `text_encoder.embed_only`). The
decoder's language tag chooses what it writes (ASR, ST or MT), so one model serves all three.

`init: identity` starts the shared stack as the identity (zeroed residual branches, no final norm; the speech
path adds no positions and no input dropout): inserted between a pretrained encoder and decoder (Whisper's),
the model then starts exactly where the plain ST model starts (with `audio_tag: false`), instead of feeding
the pretrained decoder a random stack's output.

`segments: true` adds a learned modality vector to each path's input before the stack (`segments.weight`, row 0
speech, row 1 source text, the rows of FAT-MLM's segment embedding of the same name; zero at first, so an
identity stack stays the identity): FAT-ST on Whisper (speechmt.models.fat_mlm.translator_state) starts it from
FAT-MLM's speech segment; `fused` runs both paths' inputs packed back to back through the stack, the FAT-MLM
pretraining of this stack on the CTC bridge in front of a language model (speechmt.tasks.fat_bridge).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.encoders.base import EncoderOutput, Record, note
from speechmt.models.fat_mlm.model import pack_parts, unpack_part
from speechmt.models.layers import STACK_INITS, SinusoidalPositionalEncoding, TransformerEncoder, config_stack
from speechmt.models.semantic.options import parse_options, text_positions


@dataclass(frozen=True)
class XSTNetOptions:
    """`layers` of the shared encoder; `audio_tag`: the learned <audio> prefix on the speech path; `init`:
    "random" (fairseq's initialisation, as the paper) or "identity"; `segments`: learned modality vectors (see
    the module docstring)."""

    layers: int = checked(6, lo=1)
    audio_tag: bool = True
    init: str = checked("random", choices=STACK_INITS)
    segments: bool = checked(False)

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self), "semantic xstnet")


class XSTNetEncoder(nn.Module):
    """The shared Transformer `stack` over either modality; (x (B, T, D), lengths (B,)) in and out."""

    def __init__(
        self,
        stack: TransformerEncoder,
        dim: int,
        dropout: float = 0.1,
        audio_tag: bool = True,
        position_offset: int = 0,
        speech_positions: bool = True,
        segments: bool = False,
        text_positions: bool = False,
    ):
        super().__init__()
        self.stack, self.text_positions = stack, text_positions and speech_positions
        self.dropout = nn.Dropout(dropout) if speech_positions else nn.Identity()
        self.positions = SinusoidalPositionalEncoding(dim, position_offset) if speech_positions else None
        self.audio = nn.Parameter(torch.randn(dim) * dim**-0.5) if audio_tag else None
        self.segments = nn.Embedding(2, dim) if segments else None  # rows: speech, source text
        if self.segments is not None:
            nn.init.zeros_(self.segments.weight)

    def _segment(self, x: torch.Tensor, row: int) -> torch.Tensor:
        return x if self.segments is None else x + self.segments.weight[row].to(x.dtype)

    def speech(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Acoustic states (B, T, D) -> shared states (B, T + 1, D) with the <audio> prefix (T without)."""
        x, lengths = enc.x if self.positions is None else self.positions(enc.x), enc.lengths
        x = self._segment(x, 0)
        if self.audio is not None:
            x = torch.cat([self.audio.to(x.dtype).expand(x.size(0), 1, -1), x], dim=1)  # (B, 1 + T, D)
            lengths = lengths + 1
            note(record, "tagged", x, lengths)
        x, lengths = self.stack(self.dropout(x), lengths, record)
        return replace(enc, x=x, lengths=lengths)

    def fused(self, speech: EncoderOutput, text: EncoderOutput) -> tuple[torch.Tensor, torch.Tensor]:
        """FAT-MLM's fused pass: each utterance's speech (B, T, D) and text (B, S, D) inputs, each prepared as its
        path prepares it (positions, segment vector; no <audio> tag), packed back to back (speech, then text)
        through the stack -> the states of the speech part (B, T, D) and of the text part (B, S, D)."""
        s = self._segment(speech.x if self.positions is None else self.positions(speech.x), 0)
        t = self._segment(self.positions(text.x) if self.text_positions else text.x, 1)
        packed, lengths, offsets = pack_parts([(s, speech.lengths), (t, text.lengths)])
        x, _ = self.stack(self.dropout(packed), lengths)
        return (
            unpack_part(x, offsets[0], s.size(1), speech.lengths),
            unpack_part(x, offsets[1], t.size(1), text.lengths),
        )

    def text(self, enc: EncoderOutput, record: Record | None = None) -> EncoderOutput:
        """Token embeddings (B, S, D) (with positions, or given the speech path's: text_positions) -> shared states
        (B, S, D)."""
        x = self.dropout(self.positions(enc.x)) if self.text_positions else enc.x
        x, lengths = self.stack(self._segment(x, 1), enc.lengths, record)
        return replace(enc, x=x, lengths=lengths)


def xstnet(cfg, **options) -> XSTNetEncoder:
    """The shared encoder at the model's dimensions; options: XSTNetOptions fields."""
    o = parse_options("xstnet", XSTNetOptions, options)
    identity = o.init == "identity"
    stack = config_stack(cfg, o.layers, identity)
    return XSTNetEncoder(
        stack, cfg.d_model, cfg.dropout, o.audio_tag, cfg.position_offset, not identity, o.segments, text_positions(cfg)
    )
