"""`speechmt data vocab`: a SentencePiece tokenizer trained on the texts of prepared manifests."""

from __future__ import annotations

import os
from typing import Sequence

from speechmt.data.manifest import manifest_texts
from speechmt.tokenizers.sentencepiece import Tokenizer, TokenizerConfig, train_tokenizer


def train_from_manifests(
    paths: Sequence[str | os.PathLike], fields: Sequence[str], config: TokenizerConfig
) -> Tokenizer:
    """Trains on manifest texts: ("tgt_text",) for a target vocabulary, ("src_text",) for ASR, both for
    a joint one."""
    return train_tokenizer(manifest_texts(paths, fields), config)
