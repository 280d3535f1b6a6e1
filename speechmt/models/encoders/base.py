"""What every encoder returns, the shape of an acoustic encoder, and what every encoder kind's options say."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from torch import Tensor

from speechmt.models.components import KindOptions

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
        ctc, ctc_lengths = (
            None if t is None else t.index_select(0, index) for t in (self.ctc_logits, self.ctc_lengths)
        )
        return EncoderOutput(self.x.index_select(0, index), self.lengths.index_select(0, index), ctc, ctc_lengths)


class AcousticEncoder(Protocol):
    """Features (B, T, F), or waveforms (B, T) for the wav2vec2 encoder, with lengths (B,) -> EncoderOutput
    (without CTC logits: the model adds those)."""

    def __call__(self, feats: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput: ...

    def states_frozen(self) -> bool:
        """True when the encoder's states are computed by nothing trained, so a split's can be cached once
        (speechmt.data.encoder_cache): a Whisper encoder's, when frozen."""


@dataclass
class EncoderConfig(KindOptions):
    """What the rest of the package may ask of an acoustic encoder, whatever its kind: each kind's options
    dataclass (speechmt.models.registry.ENCODERS) derives from this one and sets what differs."""

    kind: str = ""
    # the options of some kinds, read as these values for a kind without them (a kind's own field replaces each)
    name_or_path: ClassVar[str] = ""  # the pretrained model it starts from
    hf_config: ClassVar[dict] = {}
    finetune: ClassVar[str] = "full"
    frozen_layers: ClassVar[int] = 0  # bottom layers frozen whatever finetune says (their states cacheable)
    layerdrop: ClassVar[float] = 0.0
    gradient_checkpointing: ClassVar[bool] = False
    base_dtype: ClassVar[str] = "float32"  # the type its frozen weights are kept in
    frontend: ClassVar[str] = "fbank"
    """The front end (speechmt.frontend, by name) whose output the encoder reads: fbank, waveform or whisper_mel."""
    reads_stored_features: ClassVar[bool] = False
    """True when it reads the features preparation stored (fbank), not audio."""
    transcribes: ClassVar[bool] = False
    """True when the encoder is a speech recogniser whose states are those of its own transcript (a cascade's
    first half): its ASR output is that transcript, and its vectors meet the LM's embeddings token by token."""

    @property
    def cacheable_states(self) -> bool:
        """True when some of the encoder's states are computed by nothing trained, so data.cache_encoder can
        cache them once per split."""
        return False

    def transcript_tokenizer(self):
        """The tokenizer that reads the encoder's own transcript ids (an encoder that `transcribes`: task asr of its
        model is that transcript); None for an encoder that writes none."""
        return None
