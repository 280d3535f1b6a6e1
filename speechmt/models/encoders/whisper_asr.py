"""The `whisper_asr` kind: a cascade with a bridge, ASR -> bridge -> LM, in the encoder slot. Whisper (the ASR)
transcribes the utterance with its own search (speechmt.decoding.transcribe), and its decoder's hidden states at the
transcript's tokens, handed over (the bridge), are what the model's decoder (the LM) reads: the "searchable hidden
intermediates" of Dalmia et al., NAACL 2021 (ESPnet's multi-decoder ST), here with a pretrained Whisper as the ASR
sub-net. This module holds the ASR's parts and the bridge (the projection, the cache layout); the search is given
to the encoder when the model is built (speechmt.models.build.build_model's `transcription`); the hand-overs and
their tables are speechmt.models.encoders.whisper_handover; the search's interface, the tokens it never writes and
the transcript's tokens read back for the align objective and train.init_procrustes are
speechmt.models.encoders.whisper_transcript.

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

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.components import HF_CONFIGS, BuildParts, ModelConfigT, PretrainedOptions, kind_field
from speechmt.models.decoder import TransformerDecoder
from speechmt.models.encoders.base import EncoderConfig, EncoderOutput, Record, note
from speechmt.models.encoders.whisper import WhisperEncoder, hf_config_dict
from speechmt.models.encoders.whisper_handover import (
    PieceEmbeddings,
    TranscriptTokens,
    retokenized,
    soft_tokens,
    unpack_ids,
)
from speechmt.models.encoders.whisper_transcript import TranscriptionSearch
from speechmt.models.hf_whisper import (
    whisper_asr_prompt,
    whisper_decoder_from_hf,
    whisper_language_ids,
    whisper_lm_table,
    whisper_lm_text,
    whisper_transcript_tokenizer,
)
from speechmt.sequence import lengths_to_padding_mask

Languages = Sequence[str | None] | None
"""Each row's source language code ("de"), None or "" where not given: Whisper detects it."""

WHISPER_FRAMES = 3000
"""Mel frames of Whisper's 30 s input window."""

MIN_PAD_SECONDS = 10
"""The least padding the search is given: below it Whisper base hears worse (tst-REAL WER 5.9 / 5.6 / 6.9 at
30 / 15 / 10 s) and, unpadded, loops (WER 728; benchmarks/whisper_window_wer.py)."""

MAX_TOKENS = 160
"""Transcript tokens searched at most per utterance (a 30 s window holds about 100 English tokens)."""

EMBED_KEYS = ("states", "lm", "text")
"""Each cache layout's code in the cache key (`states_part`): append, never reorder (older caches keep theirs).
embed "states" caches what embed "lm" does (the prompt's last state, then one per token), so the two share a
cache; code "states" is its layout from before asr_state (the states alone), which no longer matches."""

ASR_STATES = ("after", "before", "both")
"""What embed "states" projects for a token (EncoderConfig.asr_state): the state after it, before it, or both."""

LANGUAGES_RESOLVED = "encoder.asr_languages"
"""The model bundle's `resolved` entry of a model of several source languages: {code: Whisper's language token} of
each (a run's start puts the codes of its directions' sources there, a build their tokens); absent for one source."""

ASR_EMBEDS = ("states", "lm", "text")
"""What a transcript token becomes (WhisperASRConfig.asr_embed)."""


@dataclass
class WhisperASRConfig(PretrainedOptions, EncoderConfig):
    """encoder kind "whisper_asr", a cascade's ASR and bridge: a whole Whisper model, frozen, transcribing its
    padded input; its decoder's states at the transcript's tokens, handed to the decoder (module docstring). Needs
    data.whisper_pad_seconds of at least MIN_PAD_SECONDS."""

    kind: str = kind_field("whisper_asr")
    finetune: str = "frozen"  # its search is not trained: frozen is the one mode
    # the transcripts' language: the search's prompt (<|startoftranscript|> <|lang|> <|transcribe|>
    # <|notimestamps|>) comes from the Whisper model's generation config for it when the model is first built, and
    # is kept in the model bundle's `resolved` ("encoder.asr_prompt")
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

    def transcript_tokenizer(self):
        """Whisper's own tokenizer (speechmt.tokenizers.whisper, from the model's tokenizer.json): what reads its
        transcript ids. One-line errors: no name_or_path, no tokenizer.json."""
        return whisper_transcript_tokenizer(self.name_or_path)


def build_whisper_asr_encoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[WhisperAsrEncoder, ModelConfigT]:
    """Whisper transcribing (frozen), its decoder's states projected to d_model (with asr_embed lm or text: plus
    the LM decoder's embeddings of its tokens), and `cfg` as it is; its complete HF config goes to `parts.resolved`
    ("encoder.hf_config"). The search's prompt is `parts.resolved`'s "encoder.asr_prompt" (a checkpoint's), else
    made for asr_language and put there. A model of several sources (`parts.resolved`'s "encoder.asr_languages":
    their codes, or a checkpoint's {code: token}) transcribes each utterance in its own language
    (WhisperAsrEncoder's `languages`)."""
    e, hf_model = cfg.encoder, parts.hf_encoder
    prompt = tuple(parts.resolved.get("encoder.asr_prompt") or whisper_asr_prompt(hf_model, e.asr_language))
    parts.resolved["encoder.asr_prompt"] = [int(i) for i in prompt]
    languages = parts.resolved.get(LANGUAGES_RESOLVED) or {}
    if languages and not isinstance(languages, dict):  # the run's source codes: their tokens, resolved here
        languages = whisper_language_ids(hf_model, e.name_or_path, languages)
    if languages:
        parts.resolved[LANGUAGES_RESOLVED] = {str(k): int(v) for k, v in languages.items()}
    if e.asr_embed != "states" and not cfg.decoder.lm_tokens:
        raise ValueError(f"encoder.asr_embed {e.asr_embed} needs decoder 'lm' (its input embeddings are the table)")
    tokenizers = (e.name_or_path, cfg.decoder.name_or_path, int(hf_model.config.eos_token_id), parts.decoder)
    pieces = whisper_lm_table(*tokenizers) if e.asr_embed == "lm" else None
    text = whisper_lm_text(*tokenizers) if e.asr_embed == "text" else None
    speech = whisper_asr_encoder_from_hf(
        hf_model,
        cfg.d_model,
        prompt,
        pieces,
        beam=e.asr_beam,
        text=text,
        state=e.asr_state,
        transcription=parts.transcription,
        languages=languages or None,
    )
    parts.resolved.setdefault(HF_CONFIGS["encoder"], hf_config_dict(hf_model))
    return speech, cfg


class WhisperAsrEncoder(nn.Module):
    """The ASR and the bridge of the whisper_asr cascade: mels (B, 3000, n_mels) -> Whisper's transcript, found by
    `transcription` (speechmt.decoding.transcribe) -> its decoder states (B, U, H) -> the hand-over to the decoder,
    Linear to `dim`.

    `prompt`: the decoder's first inputs (<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>);
    `eos_id`: <|endoftext|>; every id above it is a special token (timestamps, tags) and never generated;
    `transcription`: the search (None: a model that only reads cached states, or is saved, averaged, exported);
    `languages`: a model of several source languages, {code: Whisper's language token} of each ("de": <|de|>'s id),
    transcribes each utterance in its own (given, else detected among them: `heard`), the prompt's language token
    (its second) replaced; empty: one source, every utterance from `prompt`."""

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
        transcription: TranscriptionSearch | None = None,
        languages: dict[str, int] | None = None,
    ):
        super().__init__()
        self.transcription = transcription
        self.languages = {str(k): int(v) for k, v in sorted((languages or {}).items())}
        if self.languages and len(prompt) < 2:
            raise ValueError(
                "a whisper_asr encoder of several source languages needs a prompt with a language token "
                "(<|startoftranscript|> <|lang|> ...): a multilingual Whisper's"
            )
        if state not in ASR_STATES:
            raise ValueError(f"unknown whisper_asr state {state!r}; expected one of {', '.join(ASR_STATES)}")
        if state != "after" and (pieces is not None or text is not None):
            raise ValueError(f"the whisper_asr state {state!r} is for embed states only")
        self.state = state
        self._targets: tuple[PieceEmbeddings, ...] = ()  # whisper_transcript.set_targets: the align objective's table
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
        """What `states` computes with (the cache key's weights): both Whisper parts and the prompt; with several
        source languages their tokens too (an utterance's entry is then its own language's: the cache is built
        with each record's src_lang, speechmt.data.encoder_cache)."""
        return (
            {f"encoder.{k}": v for k, v in self.encoder.model.state_dict().items()}
            | {f"decoder.{k}": v for k, v in self.decoder.state_dict().items()}
            | {
                "prompt": torch.tensor(
                    [*self.prompt, self.eos_id, self.max_tokens, EMBED_KEYS.index(self.layout)]
                    + ([self.beam] if self.beam > 1 else [])
                )
            }
            | ({"languages": torch.tensor(list(self.languages.values()))} if self.languages else {})
        )  # greedy, one source: the keys as before

    def states_frozen(self) -> bool:
        """True when neither Whisper part trains (always so: `states` searches without gradients)."""
        return not any(p.requires_grad for m in (self.encoder, self.decoder) for p in m.parameters())

    @torch.no_grad()
    def states(
        self, mels: Tensor, lengths: Tensor, record: Record | None = None, languages: Languages = None
    ) -> tuple[Tensor, Tensor]:
        """mels (B, T, n_mels) padded to at least MIN_PAD_SECONDS each, T <= 3000, lengths (B,) -> Whisper's decoder
        states at its transcript's tokens (B, U, H), padded positions zero, and the transcripts' lengths (B,) (at
        least 1 token each), after the prompt's last state: (B, 1 + U, H), lengths 1 + U (embed "states", "lm"); with
        embed "text" one row per LM token of the re-tokenised transcript: the state of the piece completing it and
        its packed id (B, U', H + 2) (`retokenized`). `languages`: see `heard`."""
        return self.search(mels, lengths, record, languages)[:2]

    @torch.no_grad()
    def search(
        self, mels: Tensor, lengths: Tensor, record: Record | None = None, languages: Languages = None
    ) -> tuple[Tensor, Tensor, list[list[int]]]:
        """`states` and the transcripts they are the states of (`transcripts`), from one search."""
        return self.heard(mels, lengths, record, languages)[:3]

    @torch.no_grad()
    def heard(
        self,
        mels: Tensor,
        lengths: Tensor,
        record: Record | None = None,
        languages: Languages = None,
        among: Sequence[str] = (),
    ) -> tuple[Tensor, Tensor, list[list[int]], list[str]]:
        """`search`'s states, their lengths and the transcripts, and the language each row was transcribed in. With
        several source languages (`languages` of the encoder) each row's own: `languages`' code for it, or where that
        is None or "" (or `languages` is None) the one Whisper detects among `among` (empty: the encoder's;
        `language_prompts`); with one source every row is transcribed from `prompt` and its language is "" (the
        given ones are not read)."""
        memory, memory_lengths = self._memory(mels, lengths)
        note(record, "whisper.out", memory, memory_lengths)
        prompts, spoken = self.language_prompts(memory, memory_lengths, languages, among)
        found = self._search().transcript(self, memory, memory_lengths, prompts)
        if self._text is not None:
            x, token_lengths = retokenized(self, found.ids, found.states)
        else:
            x, token_lengths = torch.cat([found.first[:, None], found.states], dim=1), found.lengths + 1
        note(record, "asr", x, token_lengths)
        return x, token_lengths, found.ids, spoken

    @torch.no_grad()
    def transcripts(self, mels: Tensor, lengths: Tensor, languages: Languages = None) -> list[list[int]]:
        """mels (B, T, n_mels) padded as `states` reads them, lengths (B,) -> Whisper's transcript of each row: its
        text token ids (each below eos_id; at least one), found by the configured search (greedy, or a beam of
        `beam`): the transcript whose states `states` hands on, and the model's output for task asr. `languages`:
        see `heard`."""
        return self.heard_transcripts(mels, lengths, languages)[0]

    @torch.no_grad()
    def heard_transcripts(
        self, mels: Tensor, lengths: Tensor, languages: Languages = None, among: Sequence[str] = ()
    ) -> tuple[list[list[int]], list[str]]:
        """`transcripts` and the language each row was transcribed in (as `heard`'s)."""
        memory, memory_lengths = self._memory(mels, lengths)
        prompts, spoken = self.language_prompts(memory, memory_lengths, languages, among)
        return self._search().tokens(self, memory, memory_lengths, prompts), spoken

    def language_prompts(
        self, memory: Tensor, memory_lengths: Tensor, languages: Languages = None, among: Sequence[str] = ()
    ) -> tuple[Tensor | None, list[str]]:
        """Whisper's encoder states (B, S, H), their lengths (B,) and each row's source language (None, or a row's
        None or "": not given) -> each row's prompt (B, P), `prompt` with its language token (the second) that of
        the row's language, and those languages; a row not given one is heard in the language Whisper detects
        (openai/whisper's detect_language: speechmt.decoding.transcribe) among `among` (the sources of the
        directions into the target being written; empty: all the encoder's `languages`). With one source: (None,
        "" per row), every row transcribed from `prompt`. A one-line ValueError for a language the encoder does
        not transcribe."""
        rows = memory.size(0)
        if not self.languages:
            return None, [""] * rows
        given = list(languages) if languages is not None else [None] * rows
        if len(given) != rows:
            raise ValueError(f"{len(given)} source languages for a batch of {rows}")
        unknown = sorted({g for g in given if g and g not in self.languages})
        if unknown:
            raise ValueError(
                f"source language {', '.join(unknown)}: this model transcribes {', '.join(self.languages)} only"
            )
        missing = [row for row, g in enumerate(given) if not g]
        if missing:
            codes = [code for code in self.languages if code in among] or list(self.languages)
            tokens = torch.tensor([self.languages[c] for c in codes], device=memory.device)
            index = self._search().detect(self, memory[missing], memory_lengths[missing], tokens).tolist()
            for row, i in zip(missing, index):
                given[row] = codes[i]
        spoken = [str(g) for g in given]
        prompts = torch.tensor(self.prompt, device=memory.device).repeat(rows, 1)
        prompts[:, 1] = torch.tensor([self.languages[g] for g in spoken], device=memory.device)
        return prompts, spoken

    def _search(self) -> TranscriptionSearch:
        """The search this encoder was built with; a one-line ValueError for one built without."""
        if self.transcription is None:
            raise ValueError(
                "this whisper_asr encoder was built without its search: build the model with "
                "transcription=speechmt.decoding.transcribe.SEARCH (load_model and training do)"
            )
        return self.transcription

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

    def project(self, states: Tensor, lengths: Tensor, record: Record | None = None) -> EncoderOutput:
        """`states`' output (B, 1 + U, H) -> each token's state (`projected_states`: `state`'s choice) normalised
        (zero mean, unit variance; no gains: Whisper's final LayerNorm leaves its states ~290 long, a Gemma input
        embedding is ~26) -> Linear -> EncoderOutput x (B, U, D), padded positions zero. With embed "lm": the soft
        embeddings of the U tokens (`soft_tokens`) plus the projection of the states after them. With embed "text" (`retokenized`'
        (B, U', H + 2)): each LM token's input embedding plus the projection of its state."""
        if self._pieces is not None:
            before, states, lengths = states[:, :-1], states[:, 1:], lengths - 1
            x = soft_tokens(self, before) + self.proj(F.layer_norm(states, states.shape[-1:]))
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


def whisper_asr_encoder_from_hf(
    hf_model: nn.Module,
    dim: int,
    prompt: tuple[int, ...],
    pieces=None,
    beam: int = 1,
    text=None,
    state: str = "after",
    transcription=None,
    languages: dict[str, int] | None = None,
) -> WhisperAsrEncoder:
    """The whisper_asr encoder of a loaded WhisperForConditionalGeneration:
    its encoder and decoder, frozen, searching from `prompt` (greedy, or a beam of `beam`) with `transcription`
    (speechmt.decoding.transcribe.SEARCH), projected to `dim`; `pieces` (PieceEmbeddings): asr_embed lm; `text`
    (TranscriptTokens): asr_embed text; `state`: asr_state; `languages`: {code: language token} of a model of
    several sources (each utterance transcribed in its own)."""
    decoder = whisper_decoder_from_hf(hf_model.model.decoder, int(hf_model.config.pad_token_id))
    encoder = WhisperEncoder(hf_model.model.encoder, hf_model.config.d_model)
    asr = WhisperAsrEncoder(
        encoder,
        decoder,
        prompt,
        int(hf_model.config.eos_token_id),
        dim,
        pieces=pieces,
        beam=beam,
        text=text,
        state=state,
        transcription=transcription,
        languages=languages,
    )
    asr.encoder.requires_grad_(False)
    asr.decoder.requires_grad_(False)
    return asr
