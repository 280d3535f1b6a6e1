"""What every encoder returns, and the shape of an acoustic encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

Record = dict[str, tuple[Tensor, Tensor]]
"""Named intermediate states {name: (x (B, T, D), lengths (B,))}, filled in order by the modules a `record`
is passed to (speechmt.models.translator.Translator.states). Padded frames of x are arbitrary."""


def note(record: Record | None, name: str, x: Tensor, lengths: Tensor) -> None:
    """Adds (x, lengths) to `record` under `name`; nothing when record is None (training, decoding)."""
    if record is not None:
        record[name] = (x, lengths)


@dataclass
class EncoderOutput:
    """Encoder states x (B, T', D) with lengths (B,) int64; padded frames of x are zero.

    ctc_logits (B, T_ctc, src_vocab_size): raw CTC logits (no log_softmax) when the model has a CTC head,
    with their own lengths ctc_lengths (B,): the acoustic states' lengths, which differ from `lengths` once
    the states are shrunk (given CTC logits without them, they are `lengths`).

    What an objective needs beyond these it reads from the module that has it, by type (speechmt.tasks.objectives).
    """

    x: Tensor
    lengths: Tensor
    ctc_logits: Tensor | None = None
    ctc_lengths: Tensor | None = None

    def __post_init__(self):
        if self.ctc_logits is not None and self.ctc_lengths is None:
            self.ctc_lengths = self.lengths

    def select(self, index: Tensor) -> "EncoderOutput":
        """The batch rows `index` (B',), in that order (repeats allowed, e.g. to expand for beam search)."""
        ctc, ctc_lengths = (None if t is None else t.index_select(0, index)
                            for t in (self.ctc_logits, self.ctc_lengths))
        return EncoderOutput(self.x.index_select(0, index), self.lengths.index_select(0, index), ctc, ctc_lengths)


class AcousticEncoder(Protocol):
    """Features (B, T, F), or waveforms (B, T) for the wav2vec2 encoder, with lengths (B,) -> EncoderOutput
    (without CTC logits: the model adds those)."""

    def __call__(self, feats: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput: ...

    def states_frozen(self) -> bool:
        """True when the encoder's states are computed by nothing trained, so a split's can be cached once
        (speechmt.data.encoder_cache): a Whisper encoder's, when frozen."""
