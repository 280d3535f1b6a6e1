"""The CTC head over the acoustic states: a linear layer to the transcript's labels.

Its labels are the ids of the source tokenizer (a SentencePiece vocabulary: blank 4, text from 5), or, for a
language-model decoder (`vocab` given), a trimmed set of the LM's own tokens: label 5 + i is LM id vocab[i],
labels 0-4 keep the SentencePiece layout (pad, unk, bos, eos, blank), and an LM id outside `vocab` is unk.
Transcripts then come in LM ids (the LM's source-side tokenizer) and `labels` maps them to the head's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from speechmt.tokenizers.sentencepiece import SPECIAL_PIECES, Tokenizer

FIRST_LABEL = len(SPECIAL_PIECES)  # the first text label
CTC_BLANK_ID = Tokenizer.blank_id  # the CTC blank of every SentencePiece tokenizer
RESOLVED = "ctc_vocab"
"""The name in the model bundle's `resolved` (speechmt.bundle.ModelBundle.resolved) of a CTC head's LM ids (a list):
its `vocab`, which a run derives from its training transcripts (speechmt.training.builders.resolved_for)."""


class CTCHead(nn.Linear):
    """x (B, T, D) -> logits (B, T, size). `vocab` (V',) LM ids of labels FIRST_LABEL.. (size = FIRST_LABEL + V'),
    or empty: labels are the source tokenizer's ids."""

    def __init__(self, dim: int, size: int, vocab: tuple[int, ...] = ()):
        super().__init__(dim, size)
        if vocab and size != FIRST_LABEL + len(vocab):
            raise ValueError(
                f"a CTC head over {len(vocab)} LM tokens has {FIRST_LABEL + len(vocab)} labels, not {size}"
            )
        lookup = torch.full((max(vocab) + 1 if vocab else 0,), Tokenizer.unk_id, dtype=torch.long)
        lookup[torch.tensor(vocab, dtype=torch.long)] = torch.arange(FIRST_LABEL, FIRST_LABEL + len(vocab))
        self.register_buffer("lookup", lookup, persistent=False)
        self.register_buffer("vocab", torch.tensor(vocab, dtype=torch.long), persistent=False)

    def labels(self, ids: Tensor) -> Tensor:
        """Transcript ids (any shape) -> the head's labels: the same ids, or with an LM vocabulary the label of
        each LM id (unk for one outside it)."""
        if not self.vocab.numel():
            return ids
        inside = ids < self.lookup.numel()
        return torch.where(inside, self.lookup[ids.clamp(max=self.lookup.numel() - 1)], Tokenizer.unk_id)

    def lm_ids(self, labels: Tensor) -> Tensor:
        """Text labels (>= FIRST_LABEL) -> their LM ids (the inverse of `labels`)."""
        return self.vocab[labels - FIRST_LABEL]


class LabelEmbeddings:
    """() -> (V', D): an LM decoder's input embeddings (scaled as it scales them) of a CTC head's text labels,
    read at each call (they follow the LM's table and device). Held by the CTC shrink outside its modules."""

    def __init__(self, head: CTCHead, decoder: nn.Module):
        self.head, self.decoder = head, decoder

    def __call__(self) -> Tensor:
        return self.decoder.embed(self.head.vocab)
