"""The `whisper_asr` acoustic encoder: Whisper's own recognition, searched, and its decoder's hidden states
as the speech representation (the "searchable hidden intermediates" of Dalmia et al., NAACL 2021, ESPnet's
multi-decoder ST, here with a pretrained Whisper as the ASR sub-net).

Whisper (encoder and decoder, frozen) transcribes the utterance greedily from its own padded input (the wave
zero-padded to 30 s, 3000 mel frames, Whisper's window, or to at least MIN_PAD_SECONDS: data.whisper_pad_seconds;
the padding keeps its zero-shot robustness on real speech: unpadded, it loops; benchmarks/whisper_window_wer.py);
the output is the decoder's final LayerNorm states at the transcript's tokens, one per token (each after
reading that token), projected to the model's width: a token-level sequence, so no shrink is needed, that
carries what Whisper heard and how sure it was, which a downstream translator (speechmt's LM decoder) reads
as it reads source text. Nothing before the projection trains, so `states` (the search and its states) is
computed once per split and cached (speechmt.data.encoder_cache); an update runs the projection alone.
`states` also keeps the prompt's last state, so that `state` (asr_state) can choose which state a token's vector
projects: "after" (the state after reading the token, above), "before" (the state that predicted it: Whisper's
output layer at it scores the token, so a linear map reaches the LM's embedding of the token's text more closely)
or "both" (the two concatenated, each normalised); all three read one cache.

With `embed` "lm" (a language-model decoder) each transcript token becomes what the LM reads for text, as the CTC
bridge's soft embeddings do (speechmt.models.shrink): Whisper's own distribution over that token (its output layer
at the state before it; top TOP_K, renormalised) times the LM's input embeddings of each candidate piece (the
mean over the LM tokens of that piece's text), plus the projection of the state after it, which starts at zero.
The LM's MT then translates Whisper's transcript from the first update, and the projection learns what the
text alone does not carry. `states` then also keeps the prompt's last state (the distribution of the first token).

With `embed` "text" the transcript is handed over as the LM's own text: its bytes are decoded and re-tokenised
as the LM tokenises source text, and each LM token becomes its own input embedding plus the projection of the
Whisper state that completes it (the piece whose bytes end that token's text). A piece's text and an LM token
rarely coincide outside English (Whisper's " Grö" "ße" against Gemma's " Größe"), and a mean over the LM tokens
of each piece is not text the LM has read; here, with the projection at zero, the model is exactly the cascade
(Whisper's transcript -> the LM's MT), and training starts from it.

Task asr of a model on this encoder is Whisper's transcript itself (`transcripts`, the configured search: greedy or
`asr_beam`), decoded by Whisper's own tokenizer (speechmt.decoding.translate.load_model): the model has heard the
speech through that search, and its decoder (an LM prompted for the source language, or one trained for asr)
would only write it again. The decoder's search options do not apply to it.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import BuildParts, PretrainedOptions, kind_field
from speechmt.models.decoder import TransformerDecoder
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput, Record, note
from speechmt.models.encoders.whisper import WhisperEncoder
from speechmt.sequence import lengths_to_padding_mask

if TYPE_CHECKING:
    from speechmt.models.config import ModelConfig

WHISPER_FRAMES = 3000
"""Mel frames of Whisper's 30 s input window."""

MIN_PAD_SECONDS = 10
"""The least padding the search is given: below it Whisper base hears worse (tst-REAL WER 5.9 / 5.6 / 6.9 at
30 / 15 / 10 s) and, unpadded, loops (WER 728; benchmarks/whisper_window_wer.py)."""

MAX_TOKENS = 160
"""Transcript tokens searched at most per utterance (a 30 s window holds about 100 English tokens)."""

TOP_K = 16
"""Candidates per token in embed "lm"'s soft embeddings."""

MAX_PIECE_TOKENS = 8
"""LM tokens kept per Whisper piece in embed "lm"'s table (a piece's text rarely needs more than 3)."""

EMBED_KEYS = ("states", "lm", "text")
"""Each cache layout's code in the cache key (`states_part`): append, never reorder (older caches keep theirs).
embed "states" caches what embed "lm" does (the prompt's last state, then one per token), so the two share a
cache; code "states" is its layout from before asr_state (the states alone), which no longer matches."""

ASR_STATES = ("after", "before", "both")
"""What embed "states" projects for a token (EncoderConfig.asr_state): the state after it, before it, or both."""

ID_BASE = 2048
"""embed "text" stores each LM id as two channels (id // ID_BASE, id % ID_BASE) beside the states: the encoder
cache's float16 holds every integer up to 2048 exactly."""

ASR_EMBEDS = ("states", "lm", "text")
"""What a transcript token becomes (WhisperASRConfig.asr_embed)."""


@dataclass
class WhisperASRConfig(PretrainedOptions, EncoderConfig):
    """encoder kind "whisper_asr": a whole Whisper model, frozen, transcribing its padded input (the cascade's
    first half): its decoder's states at the transcript's tokens (module docstring). Needs
    data.whisper_pad_seconds of at least MIN_PAD_SECONDS."""

    kind: str = kind_field("whisper_asr")
    finetune: str = "frozen"  # its search is not trained: frozen is the one mode
    # the decoder prompt's ids (<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>), filled in from the
    # Whisper model's generation config for `asr_language` when the model is built
    asr_prompt: tuple[int, ...] = ()
    asr_language: str = "en"
    asr_beam: int = checked(1, lo=1, hi=16)  # 1: greedy search; more: a beam search of that many
    # what each transcript token becomes: "states" (its decoder state, projected), "lm" (the LM decoder's soft
    # embeddings of Whisper's candidates for it, plus that projection) or "text" (the transcript re-tokenised as
    # the LM's own source text, each LM token's embedding plus the projection of the state of the Whisper piece
    # that completes it); lm and text need decoder 'lm'
    asr_embed: str = "states"
    # with asr_embed states: which of Whisper's decoder states a transcript token's vector projects: "after" (the
    # state after reading it), "before" (the state that predicted it: its output layer scores that token) or
    # "both" (the two concatenated)
    asr_state: str = "after"
    frontend: ClassVar[str] = "whisper_mel"
    transcribes: ClassVar[bool] = True

    def __post_init__(self):
        self.asr_prompt = tuple(int(i) for i in self.asr_prompt)
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "encoder.")
            + self.pretrained_problems("encoder")
            + [
                self.finetune != "frozen"
                and f"encoder whisper_asr needs encoder.finetune frozen (got {self.finetune!r}): its search is not trained",
                self.asr_embed not in ASR_EMBEDS
                and f"unknown encoder.asr_embed {self.asr_embed!r}; expected {', '.join(ASR_EMBEDS[:-1])} or {ASR_EMBEDS[-1]}",
                self.asr_state not in ASR_STATES
                and f"unknown encoder.asr_state {self.asr_state!r}; expected {', '.join(ASR_STATES[:-1])} or {ASR_STATES[-1]}",
                self.asr_state != "after"
                and self.asr_embed != "states"
                and f"encoder.asr_state {self.asr_state} needs encoder.asr_embed states (lm reads the state before each "
                f"token through Whisper's output layer already; text reads the one completing it)",
            ],
        )

    @property
    def cacheable_states(self) -> bool:
        return True


def build_whisper_asr_encoder(cfg: ModelConfig, parts: BuildParts) -> tuple[WhisperAsrEncoder, ModelConfig]:
    """Whisper transcribing (frozen), its decoder's states projected to d_model (with asr_embed lm or text: plus
    the LM decoder's embeddings of its tokens); `cfg` with the complete HF config and the search's prompt filled in."""
    from speechmt.models.hf_whisper import (
        hf_config_dict,
        whisper_asr_encoder_from_hf,
        whisper_asr_prompt,
        whisper_lm_table,
        whisper_lm_text,
    )

    e, hf_model = cfg.encoder, parts.hf_encoder
    prompt = e.asr_prompt or whisper_asr_prompt(hf_model, e.asr_language)
    if e.asr_embed != "states" and not cfg.decoder.lm_tokens:
        raise ValueError(f"encoder.asr_embed {e.asr_embed} needs decoder 'lm' (its input embeddings are the table)")
    tokenizers = (e.name_or_path, cfg.decoder.name_or_path, int(hf_model.config.eos_token_id), parts.decoder)
    pieces = whisper_lm_table(*tokenizers) if e.asr_embed == "lm" else None
    text = whisper_lm_text(*tokenizers) if e.asr_embed == "text" else None
    speech = whisper_asr_encoder_from_hf(
        hf_model, cfg.d_model, prompt, pieces, beam=e.asr_beam, text=text, state=e.asr_state
    )
    return speech, replace(cfg, encoder=replace(e, hf_config=hf_config_dict(hf_model), asr_prompt=prompt))


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


class WhisperAsrEncoder(nn.Module):
    """mels (B, 3000, n_mels) -> Whisper's greedy transcript -> its decoder states (B, U, H) -> Linear to `dim`.

    `prompt`: the decoder's first inputs (<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>);
    `eos_id`: <|endoftext|>; every id above it is a special token (timestamps, tags) and never generated."""

    def __init__(
        self,
        encoder: WhisperEncoder,
        decoder: TransformerDecoder,
        prompt: tuple[int, ...],
        eos_id: int,
        dim: int,
        max_tokens: int = MAX_TOKENS,
        pieces: PieceEmbeddings | None = None,
        beam: int = 1,
        text: TranscriptTokens | None = None,
        state: str = "after",
    ):
        super().__init__()
        if state not in ASR_STATES:
            raise ValueError(f"unknown whisper_asr state {state!r}; expected one of {', '.join(ASR_STATES)}")
        if state != "after" and (pieces is not None or text is not None):
            raise ValueError(f"the whisper_asr state {state!r} is for embed states only")
        self.state = state
        self._targets: tuple[PieceEmbeddings, ...] = ()  # set_targets: the align objective's table
        if beam < 1:
            raise ValueError(f"the whisper_asr search's beam must be at least 1, got {beam}")
        if pieces is not None and text is not None:
            raise ValueError("the whisper_asr encoder hands the LM either soft pieces or re-tokenised text, not both")
        self.beam = int(beam)
        self._pieces = (pieces,) if pieces is not None else None  # a tuple: the LM's table is not our submodule
        self._text = (text,) if text is not None else None
        if not prompt:
            raise ValueError("the whisper_asr encoder needs a decoder prompt (at least <|startoftranscript|>)")
        if encoder.splits_inside:
            raise ValueError("the whisper_asr encoder runs all of Whisper's encoder layers (no frozen_layers)")
        self.encoder, self.decoder = encoder, decoder
        self.prompt, self.eos_id = tuple(int(i) for i in prompt), int(eos_id)
        positions = getattr(getattr(decoder, "positions", None), "weight", None)  # Whisper's: learned, 448
        room = positions.size(0) - len(self.prompt) - 1 if positions is not None else max_tokens
        if room < 1:
            raise ValueError(
                f"the Whisper decoder's {positions.size(0)} positions leave no room after a prompt of "
                f"{len(self.prompt)}"
            )
        self.max_tokens = min(max_tokens, room)
        hidden = decoder.embed.embedding_dim
        self.proj = nn.Linear(hidden * (2 if state == "both" else 1), dim)
        if pieces is not None or text is not None:  # the LM reads Whisper's transcript at first
            nn.init.zeros_(self.proj.weight)
            nn.init.zeros_(self.proj.bias)

    @property
    def embed(self) -> str:
        """ "lm" when transcript tokens become the LM's soft piece embeddings, "text" when the transcript is
        re-tokenised as the LM's text, else "states"."""
        return "lm" if self._pieces is not None else "text" if self._text is not None else "states"

    @property
    def layout(self) -> str:
        """What `states` returns, as EMBED_KEYS names it: embed "states" and "lm" both keep the prompt's last
        state first ("lm"), embed "text" re-tokenises ("text")."""
        return "text" if self.embed == "text" else "lm"

    @property
    def hidden_size(self) -> int:
        """The width of `states`' output: Whisper's decoder width (+ 2 id channels with embed "text")."""
        return self.decoder.embed.embedding_dim + (2 if self._text is not None else 0)

    splits_inside = False
    states_name = "asr"

    def states_part(self) -> dict[str, Tensor]:
        """What `states` computes with (the cache key's weights): both Whisper parts and the prompt."""
        return (
            {f"encoder.{k}": v for k, v in self.encoder.model.state_dict().items()}
            | {f"decoder.{k}": v for k, v in self.decoder.state_dict().items()}
            | {
                "prompt": torch.tensor(
                    [*self.prompt, self.eos_id, self.max_tokens, EMBED_KEYS.index(self.layout)]
                    + ([self.beam] if self.beam > 1 else [])
                )
            }
        )  # greedy: the keys as before

    def states_frozen(self) -> bool:
        """True when neither Whisper part trains (always so: `states` searches without gradients)."""
        return not any(p.requires_grad for m in (self.encoder, self.decoder) for p in m.parameters())

    @torch.no_grad()
    def states(self, mels: Tensor, lengths: Tensor, record: Record | None = None) -> tuple[Tensor, Tensor]:
        """mels (B, T, n_mels) padded to at least MIN_PAD_SECONDS each, T <= 3000, lengths (B,) -> Whisper's decoder
        states at its transcript's tokens (B, U, H), padded positions zero, and the transcripts' lengths (B,) (at
        least 1 token each), after the prompt's last state: (B, 1 + U, H), lengths 1 + U (embed "states", "lm"); with
        embed "text" one row per LM token of the re-tokenised transcript: the state of the piece completing it and
        its packed id (B, U', H + 2) (`retokenized`)."""
        return self.search(mels, lengths, record)[:2]

    @torch.no_grad()
    def search(
        self, mels: Tensor, lengths: Tensor, record: Record | None = None
    ) -> tuple[Tensor, Tensor, list[list[int]]]:
        """`states` and the transcripts they are the states of (`transcripts`), from one search."""
        memory, memory_lengths = self._memory(mels, lengths)
        note(record, "whisper.out", memory, memory_lengths)
        ids, x, token_lengths, first = (
            self.transcribe(memory, memory_lengths) if self.beam == 1 else self.transcribe_beam(memory, memory_lengths)
        )
        if self._text is not None:
            x, token_lengths = self.retokenized(ids, x)
        else:
            x, token_lengths = torch.cat([first[:, None], x], dim=1), token_lengths + 1
        note(record, "asr", x, token_lengths)
        return x, token_lengths, ids

    @torch.no_grad()
    def transcripts(self, mels: Tensor, lengths: Tensor) -> list[list[int]]:
        """mels (B, T, n_mels) padded as `states` reads them, lengths (B,) -> Whisper's transcript of each row: its
        text token ids (each below eos_id; at least one), found by the configured search (greedy, or a beam of
        `beam`): the transcript whose states `states` hands on, and the model's output for task asr."""
        memory, memory_lengths = self._memory(mels, lengths)
        if self.beam == 1:
            return self.transcribe(memory, memory_lengths)[0]
        return self.beam_tokens(memory, memory_lengths)

    @torch.no_grad()
    def token_pairs(self, states: Tensor, lengths: Tensor, table: "PieceEmbeddings") -> tuple[Tensor, Tensor]:
        """Pairs for fitting the projection (train.init_procrustes; embed "states" only): `states`' output (B, 1 + U,
        H), cached or live, lengths (B,), `table` the LM's embeddings of Whisper's pieces -> each transcript token's
        projection input (its normalised state, `state`'s choice, as `project` reads it) (P, H or 2H) and the LM's
        input embedding of the token's text (P, D), P the transcripts' tokens in all, in order. The token is the
        search's own (`read_tokens`)."""
        if self.embed != "states":
            raise ValueError(
                f"train.init_procrustes fits a whisper_asr projection with asr_embed states only (with "
                f"{self.embed} the LM reads the transcript's embeddings already; the projection "
                f"starts at zero)"
            )
        inputs, _ = self.projected_states(states, lengths)
        tokens, pad = self.read_tokens(states, lengths)
        return inputs[~pad], table(tokens[~pad])

    def read_tokens(self, states: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """`states`' output (B, 1 + U, H) (embed "states"), lengths (B,) -> each transcript token's id (B, U), the
        one Whisper's output layer picks at the state before it: the greedy search's own token (ties that a cache's
        float16 rounding breaks the other way aside), padded positions 0; and the padding mask (B, U)."""
        if self.beam > 1:
            raise ValueError(
                f"a whisper_asr encoder's tokens are read off the state before each, which is the greedy "
                f"search's token; encoder.asr_beam is {self.beam}: set it to 1"
            )
        logits = self._token_logits(states[:, :-1])
        pad = lengths_to_padding_mask(lengths - 1, logits.size(1))
        return logits.argmax(-1).masked_fill(pad, 0), pad

    def set_targets(self, table: "PieceEmbeddings") -> None:
        """Gives embed "states" the LM's embeddings of Whisper's pieces (`table`), which `unit_targets` reads: built
        only for the align objective (4 s of tokenizing), so not when a model is built."""
        if self.embed != "states":
            raise ValueError(
                f"train.align pulls a whisper_asr encoder's projected states (asr_embed states) to "
                f"the LM's embeddings of their tokens; with asr_embed {self.embed} the LM reads those "
                f"embeddings already"
            )
        self._targets = (table,)

    @torch.no_grad()
    def unit_targets(self, states: Tensor, lengths: Tensor) -> Tensor:
        """`states`' output (B, 1 + U, H) (embed "states"), lengths (B,) -> the LM's input embedding of each
        transcript token's text (B, U, D), padded positions zero: the align objective's text side. The token is the
        one Whisper's output layer picks at the state before it: the greedy search's own token (ties that the
        cache's float16 rounding breaks the other way aside)."""
        if not self._targets:
            raise ValueError("the whisper_asr encoder has no table of the LM's embeddings (set_targets)")
        tokens, pad = self.read_tokens(states, lengths)
        return self._targets[0](tokens).masked_fill(pad[..., None], 0.0)

    def _memory(self, mels: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """mels (B, T, n_mels), lengths (B,) -> Whisper's encoder states (B, S, H) and their lengths (B,); a
        one-line ValueError for input longer than Whisper's window or padded less than MIN_PAD_SECONDS."""
        if mels.size(1) > WHISPER_FRAMES:
            raise ValueError(f"{mels.size(1) / 100:.1f} s of audio is longer than Whisper's 30 s window; cut it first")
        if len(lengths) and int(lengths.min()) < MIN_PAD_SECONDS * 100:
            raise ValueError(
                f"encoder whisper_asr reads input padded to at least {MIN_PAD_SECONDS} s "
                f"({MIN_PAD_SECONDS * 100} mel frames), got {int(lengths.min())}: set "
                f"data.whisper_pad_seconds from {MIN_PAD_SECONDS} to 30 (30: Whisper's own input)"
            )
        return self.encoder.states(mels, lengths)

    def retokenized(self, ids: list[list[int]], states: Tensor) -> tuple[Tensor, Tensor]:
        """Whisper's transcripts (ids per row) and their states (B, U, H) -> per LM token of each re-tokenised
        transcript the state of the piece completing it and the token's packed id (B, U', H + 2), padded rows
        zero, and lengths (B,)."""
        rows = [self._text[0](i) for i in ids]
        lengths = torch.tensor([len(lm_ids) for lm_ids, _ in rows], device=states.device)
        out = states.new_zeros(len(rows), int(lengths.max()), states.size(-1) + 2)
        for row, (lm_ids, pos) in enumerate(rows):
            out[row, : len(pos), :-2] = states[row, torch.tensor(pos, device=states.device)]
            out[row, : len(pos), -2:] = pack_ids(torch.tensor(lm_ids, device=states.device))
        return out, lengths

    def transcribe(self, memory: Tensor, memory_lengths: Tensor) -> tuple[list[list[int]], Tensor, Tensor, Tensor]:
        """Greedy search over Whisper's text tokens: memory (B, S, H) -> (token ids per row, states (B, U, H),
        lengths (B,), the prompt's last state (B, H)). The first token is never <|endoftext|> (nor a lone space, as Whisper's own first-step
        suppression), so every row has at least one token; a row stops at <|endoftext|> or max_tokens."""
        rows = memory.size(0)
        cache = self.decoder.new_cache()
        inputs = torch.tensor(self.prompt, device=memory.device).expand(rows, -1)
        h = first = self.decoder.hidden(inputs, memory, memory_lengths, cache)[:, -1]  # (B, H)
        done = torch.zeros(rows, dtype=torch.bool, device=memory.device)
        steps, states = [], []
        for step in range(self.max_tokens + 1):
            logits = self._allowed(self.decoder.output(h).float(), step == 0)
            if step == self.max_tokens:
                break
            token = logits.argmax(-1).masked_fill(done, self.eos_id)  # (B,)
            done |= token == self.eos_id
            if done.all():
                break
            h = self.decoder.hidden(token[:, None], memory, memory_lengths, cache)[:, -1]
            steps.append(token)
            states.append(h.masked_fill(done[:, None], 0.0))
        tokens = torch.stack(steps, 1)  # (B, U)
        lengths = (tokens != self.eos_id).sum(1)
        ids = [row[: int(n)] for row, n in zip(tokens.tolist(), lengths)]
        return ids, torch.stack(states, 1), lengths, first

    def transcribe_beam(self, memory: Tensor, memory_lengths: Tensor) -> tuple[list[list[int]], Tensor, Tensor, Tensor]:
        """As `transcribe`, the transcript found by beam search (`beam_tokens`); its states from one teacher-forced
        pass of Whisper's decoder over the prompt and the transcript."""
        ids = self.beam_tokens(memory, memory_lengths)
        lengths = torch.tensor([len(i) for i in ids], device=memory.device)
        tokens = torch.full((len(ids), int(lengths.max())), self.eos_id, dtype=torch.long, device=memory.device)
        for row, i in enumerate(ids):
            tokens[row, : len(i)] = torch.tensor(i, dtype=torch.long)
        prompt = torch.tensor(self.prompt, device=memory.device).expand(len(ids), -1)
        h = self.decoder.hidden(torch.cat([prompt, tokens], 1), memory, memory_lengths)  # (B, P + U, H)
        p = len(self.prompt)
        states = h[:, p:].masked_fill(lengths_to_padding_mask(lengths, tokens.size(1))[..., None], 0.0)
        return ids, states, lengths, h[:, p - 1]

    def beam_tokens(self, memory: Tensor, memory_lengths: Tensor) -> list[list[int]]:
        """Whisper's transcript of each row by beam search (`beam` hypotheses; the same bans as the greedy search;
        a hypothesis scores its summed log-probability, <|endoftext|>'s included, over its length with it; a row
        ends with `beam` finished hypotheses, or at max_tokens, where the live ones count as finished). The
        algorithm of speechmt.decoding.search.BeamSearch, which searches a Translator from the floor above models/
        (an encoder cannot call up to it), here over Whisper's decoder alone."""
        rows, k = memory.size(0), self.beam
        cache = self.decoder.new_cache()
        inputs = torch.tensor(self.prompt, device=memory.device).expand(rows, -1)
        h = self.decoder.hidden(inputs, memory, memory_lengths, cache)[:, -1].repeat_interleave(k, 0)  # (B K, H)
        # the beams of a row share its memory and its cross-attention keys/values: only self-attention is reordered
        cache.regroup(torch.arange(rows, device=memory.device).repeat_interleave(k), None, k)
        scores = torch.full((rows, k), float("-inf"), device=memory.device)
        scores[:, 0] = 0.0  # one live hypothesis per row at first
        hyps: list[list[int]] = [[] for _ in range(rows * k)]
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(rows)]
        for step in range(self.max_tokens + 1):
            logp = self._allowed(self.decoder.output(h).float(), step == 0).log_softmax(-1)  # (B K, V)
            if step == self.max_tokens:  # the live hypotheses end here (a done row has none: its scores are -inf)
                for r, j in (scores > float("-inf")).nonzero().tolist():
                    finished[r].append((float(scores[r, j]) / step, hyps[r * k + j]))
                break
            vocab = logp.size(-1)
            top, index = (scores.view(-1, 1) + logp).view(rows, -1).topk(2 * k, dim=-1)  # (B, 2K)
            keep = (torch.arange(rows, device=memory.device) * k)[:, None].repeat(1, k)  # a done row keeps its own
            token = torch.full((rows, k), self.eos_id, dtype=torch.long, device=memory.device)
            new = torch.full((rows, k), float("-inf"), device=memory.device)
            for r in range(rows):
                slot = 0
                for score, i in zip(top[r].tolist(), index[r].tolist()):
                    if slot == k or len(finished[r]) >= k or score == float("-inf"):
                        break
                    source, t = r * k + i // vocab, i % vocab
                    if t == self.eos_id:
                        finished[r].append((score / (step + 1), hyps[source]))
                        continue
                    keep[r, slot], token[r, slot], new[r, slot] = source, t, score
                    slot += 1
            if all(len(f) >= k for f in finished):
                break
            scores, index = new, keep.view(-1)
            hyps = [hyps[i] + [t] for i, t in zip(index.tolist(), token.view(-1).tolist())]
            cache.reorder(index, cross=False)
            h = self.decoder.hidden(token.view(-1, 1), memory, memory_lengths, cache)[:, -1]
        return [max(f, key=lambda s: s[0])[1] for f in finished]

    def _allowed(self, logits: Tensor, first: Tensor | bool) -> Tensor:
        """logits (..., V) with what the search never writes banned: ids above <|endoftext|>, and at a first step
        (`first`: bool, or (...,) bool) <|endoftext|> and a lone space."""
        logits = logits.clone()
        logits[..., self.eos_id + 1 :] = float("-inf")
        banned = [self.eos_id, *_space_ids(logits.size(-1), self.eos_id)]
        first = torch.as_tensor(first, device=logits.device)
        logits[..., banned] = logits[..., banned].masked_fill(first[..., None], float("-inf"))
        return logits

    def _token_logits(self, before: Tensor) -> Tensor:
        """The states before each transcript token (B, U, H) -> Whisper's logits for that token (B, U, V) in float32,
        what the search never writes and <|endoftext|> banned (a transcript token is never it)."""
        first = torch.zeros(before.shape[:2], dtype=torch.bool, device=before.device)
        first[:, 0] = True
        # contiguous: a sliced 3-D input makes nn.Linear expand the (V, H) weight to every row instead of folding
        logits = self._allowed(self.decoder.output(before.contiguous()).float(), first)
        logits[..., self.eos_id] = float("-inf")
        return logits

    def soft_tokens(self, before: Tensor) -> Tensor:
        """The states before each transcript token (B, U, H) -> the LM's soft embeddings of those tokens (B, U, D):
        Whisper's distribution over the token (top TOP_K, renormalised; <|endoftext|> excluded) times each
        candidate piece's LM embedding."""
        top, ids = self._token_logits(before).topk(min(TOP_K, self.eos_id), dim=-1)  # (B, U, K)
        vectors = self._pieces[0](ids)  # (B, U, K, D)
        return (top.softmax(-1)[..., None].to(vectors.dtype) * vectors).sum(-2)

    def project(self, states: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """`states`' output (B, 1 + U, H) -> each token's state (`projected_states`: `state`'s choice) normalised
        (zero mean, unit variance; no gains: Whisper's final LayerNorm leaves its states ~290 long, a Gemma input
        embedding is ~26) -> Linear -> EncoderOutput x (B, U, D), padded positions zero. With embed "lm": the soft
        embeddings of the U tokens (`soft_tokens`) plus the projection of the states after them. With embed "text" (`retokenized`'
        (B, U', H + 2)): each LM token's input embedding plus the projection of its state."""
        if self._pieces is not None:
            before, states, lengths = states[:, :-1], states[:, 1:], lengths - 1
            x = self.soft_tokens(before) + self.proj(F.layer_norm(states, states.shape[-1:]))
        elif self._text is not None:
            ids, states = unpack_ids(states[..., -2:]), states[..., :-2]
            x = self.proj(F.layer_norm(states, states.shape[-1:]))  # padded rows: id 0, zeroed below
            x = x + self._text[0].embed(ids).to(x.dtype)
        else:
            inputs, lengths = self.projected_states(states, lengths)
            x = self.proj(inputs)
        x = x.masked_fill(lengths_to_padding_mask(lengths, x.size(1))[..., None], 0.0)
        note(record, "projected", x, lengths)
        return EncoderOutput(x, lengths)

    def projected_states(self, states: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """embed "states": `states`' output (B, 1 + U, H), lengths (B,) -> what the projection reads for each of the U
        tokens, by `state`: the state after it, the one before it, or both concatenated, each normalised (B, U, H or
        2H), and the lengths U (B,)."""
        parts = {"before": states[:, :-1], "after": states[:, 1:]}
        chosen = ("before", "after") if self.state == "both" else (self.state,)
        return torch.cat([F.layer_norm(parts[c], parts[c].shape[-1:]) for c in chosen], -1), lengths - 1

    def forward(self, mels: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """mels (B, T, n_mels) padded to at least MIN_PAD_SECONDS each, T <= 3000, lengths (B,) -> EncoderOutput(x (B, U, D), lengths)."""
        return self.project(*self.states(mels, lengths, record), record)


def _space_ids(vocab: int, eos_id: int) -> list[int]:
    """Whisper's lone-space token (220 in its GPT-2 byte-level vocabulary), where the vocabulary has it."""
    return [220] if 220 < min(vocab, eos_id) else []
