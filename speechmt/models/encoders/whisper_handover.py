"""What Whisper's transcript becomes for a language-model decoder in the whisper_asr cascade (ASR -> bridge -> LM;
speechmt.models.encoders.whisper_asr): the bridge's hand-overs and their tables. Embed "lm": each transcript token as
Whisper's distribution over it times each candidate piece's embedding (`soft_tokens`), a piece's embedding the mean
of the LM's input embeddings of its text's tokens (`PieceEmbeddings`, built by `whisper_lm_pieces`); embed "text":
the transcript re-tokenised as the LM reads source text, each LM token with the Whisper piece that completes it
(`TranscriptTokens`, on GPT-2's byte-level alphabet: `piece_bytes`; `retokenized`), its id packed beside the states
in the encoder cache (`pack_ids`, `unpack_ids`).
"""

from __future__ import annotations

import codecs
from typing import Callable

import torch
from torch import Tensor, nn

from speechmt.models.encoders.whisper_transcript import WhisperAsr, token_logits

TOP_K = 16
"""Candidates per token in embed "lm"'s soft embeddings."""

MAX_PIECE_TOKENS = 8
"""LM tokens kept per Whisper piece in embed "lm"'s table (a piece's text rarely needs more than 3)."""

ID_BASE = 2048
"""embed "text" stores each LM id as two channels (id // ID_BASE, id % ID_BASE) beside the states: the encoder
cache's float16 holds every integer up to 2048 exactly."""


class PieceEmbeddings:
    """Whisper token ids (...,) -> the mean of an LM decoder's input embeddings (scaled as it scales them) of each
    piece's LM tokens (..., D); `pieces` (V_w, L): those LM ids, -1 padded. Read at each call (they follow the
    LM's table); held by the encoder outside its modules, as the CTC bridge holds its LabelEmbeddings."""

    def __init__(self, pieces: Tensor, decoder: nn.Module):
        self.pieces, self.decoder = pieces, decoder

    def __call__(self, ids: Tensor) -> Tensor:
        lm_ids = self.pieces.to(ids.device)[ids]  # (..., L)
        valid = (lm_ids >= 0)[..., None]
        vectors = self.decoder.embed(lm_ids.clamp(min=0)) * valid  # (..., L, D)
        return vectors.sum(-2) / valid.sum(-2).clamp(min=1)


def whisper_lm_pieces(piece_text: Callable[[int], str], lm_text_ids: Callable[[str], list[int]], eos_id: int) -> Tensor:
    """(eos_id + 1, MAX_PIECE_TOKENS) the LM ids (`lm_text_ids`: text -> ids, no specials) of each Whisper text
    piece's text (`piece_text`: id -> text), -1 padded; <|endoftext|>'s row is empty."""
    pieces = torch.full((eos_id + 1, MAX_PIECE_TOKENS), -1, dtype=torch.long)
    for i in range(eos_id):
        ids = lm_text_ids(piece_text(i))[:MAX_PIECE_TOKENS]
        pieces[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return pieces


def byte_level_bytes() -> dict[str, int]:
    """GPT-2's byte-level alphabet (Whisper's BPE): the printable character standing for each byte -> the byte."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    }
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def piece_bytes(tokens: list[str]) -> list[bytes]:
    """Byte-level BPE pieces as the tokenizer stores them ("\u0120Gr\u00c3\u00b6") -> their bytes (b" Gr\xc3\xb6"); a piece
    may end inside a character."""
    table = byte_level_bytes()
    return [b"".join(bytes([table[c]]) if c in table else c.encode("utf-8") for c in t) for t in tokens]


class TranscriptTokens:
    """Whisper ids of one transcript -> (the LM's ids of its text, as the LM encodes source text: " " + the
    stripped text; for each, the index of the Whisper piece whose bytes complete it). `pieces`: each Whisper
    text piece's bytes; `text_offsets`: text -> (LM ids, (start, end) character offsets); `fallback`: the LM id
    read for a transcript of whitespace alone. `embed(lm_ids)` is the LM decoder's input embedding (held
    outside the encoder's modules, as PieceEmbeddings)."""

    def __init__(
        self,
        pieces: list[bytes],
        text_offsets: Callable[[str], tuple[list[int], list[tuple[int, int]]]],
        decoder: nn.Module,
        fallback: int,
    ):
        self.pieces, self.text_offsets, self.decoder, self.fallback = pieces, text_offsets, decoder, int(fallback)

    def __call__(self, ids: list[int]) -> tuple[list[int], list[int]]:
        utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        chars, owner = [], []
        for k, i in enumerate(ids):
            chunk = utf8.decode(self.pieces[i])
            chars.append(chunk)
            owner += [k] * len(chunk)
        tail = utf8.decode(b"", final=True)  # a transcript ending inside a character
        chars.append(tail)
        owner += [len(ids) - 1] * len(tail)
        text = "".join(chars)
        body, lead = text.strip(), len(text) - len(text.lstrip())
        lm_ids, offsets = self.text_offsets(" " + body) if body else ([], [])
        if not lm_ids:
            return [self.fallback], [0]
        # LM character j >= 1 is text character lead + j - 1; a token of the added space alone reads the first piece
        return list(lm_ids), [owner[lead + max(end - 1, 1) - 1] for _, end in offsets]

    def embed(self, lm_ids: Tensor) -> Tensor:
        return self.decoder.embed(lm_ids)


def pack_ids(ids: Tensor) -> Tensor:
    """LM ids (...,) -> (..., 2) float channels (id // ID_BASE, id % ID_BASE)."""
    return torch.stack([ids // ID_BASE, ids % ID_BASE], -1).float()


def unpack_ids(channels: Tensor) -> Tensor:
    """pack_ids' channels (..., 2), in any float dtype -> the ids (...,)."""
    hi, lo = channels.float().round().long().unbind(-1)
    return hi * ID_BASE + lo


def soft_tokens(asr: WhisperAsr, before: Tensor) -> Tensor:
    """The states before each transcript token (B, U, H) -> the LM's soft embeddings of those tokens (B, U, D):
    Whisper's distribution over the token (top TOP_K, renormalised; <|endoftext|> excluded) times each
    candidate piece's LM embedding (the encoder's PieceEmbeddings; embed "lm")."""
    top, ids = token_logits(asr, before).topk(min(TOP_K, asr.eos_id), dim=-1)  # (B, U, K)
    vectors = asr._pieces[0](ids)  # (B, U, K, D)
    return (top.softmax(-1)[..., None].to(vectors.dtype) * vectors).sum(-2)


def retokenized(asr: WhisperAsr, ids: list[list[int]], states: Tensor) -> tuple[Tensor, Tensor]:
    """Whisper's transcripts (ids per row) and their states (B, U, H) -> per LM token of each re-tokenised
    transcript (the encoder's TranscriptTokens; embed "text") the state of the piece completing it and the token's
    packed id (B, U', H + 2), padded rows zero, and lengths (B,)."""
    rows = [asr._text[0](i) for i in ids]
    lengths = torch.tensor([len(lm_ids) for lm_ids, _ in rows], device=states.device)
    out = states.new_zeros(len(rows), int(lengths.max()), states.size(-1) + 2)
    for row, (lm_ids, pos) in enumerate(rows):
        out[row, : len(pos), :-2] = states[row, torch.tensor(pos, device=states.device)]
        out[row, : len(pos), -2:] = pack_ids(torch.tensor(lm_ids, device=states.device))
    return out, lengths
