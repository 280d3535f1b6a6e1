"""FAT-MLM (Zheng, Chen, Ma, Liu and Huang, ICML 2021, "Fused Acoustic and Text Encoding for Multimodal
Bilingual Pretraining and Speech Translation"): one Transformer encoder over the concatenation

    [ conv-subsampled fbank embeddings | source text token embeddings | target text token embeddings ]

each part scaled by sqrt(D), with its own sinusoidal positions (from 0) and a learned segment (language)
embedding (0 speech, 1 source text, 2 target text). Parts a batch lacks are absent: the parts of an example
are packed back to back (no padding between them), so its length is the sum of its parts' lengths. Spans of
subsampled speech frames are replaced by a learned mask vector and reconstructed, through a linear
upsampling head, as the fbank frames they cover (subsampled frame i covers fbank frames [f i, f i + f), f the
subsampling factor; L1 or L2); 15% of the text tokens are masked as BERT (80% a learned mask vector, 10% a
random token, 10% unchanged) and predicted through the tied embedding of their side (cross entropy).

On Whisper (`encoder.kind: whisper`, `finetune: frozen`; WhisperFatMLM) the acoustic embeddings are the
frozen Whisper encoder's states (projected to D only when the widths differ; the trainer caches them once per
split and feeds them as `precomputed` batches), with no scaling and no sinusoidal positions (they carry
Whisper's own); the fused stack is `options.layers` Transformer layers of their own, which can start as the
identity (`init: identity`), and the reconstruction target of a masked state is that frozen state itself
(factor 1; the head is Linear(D, Whisper's width)). With `decoder.kind: whisper` the model takes Whisper's
dimensions and vocabulary (as the ST model with Whisper's decoder would), the target text is in Whisper's
tokens (only its text ids, below <|endoftext|>, are masked or drawn) and the target embedding starts from
Whisper's decoder token embedding.

Built by `build_model` for `model.semantic.kind: fat_mlm` (options: FatMLMOptions) with the conv or the
whisper encoder; trained by the task `fat` (speech with transcript and translation) or `fat_text` (text pairs)
and the objective `fat_mlm` (`fat_mlm_loss`; the forward pass computes no loss). Masks come from the model's
own generator, reseeded from (seed, update) before every update (`before_update`), so a resumed run draws the
same masks; in eval mode every call draws from a generator seeded with `seed` alone.

FAT-ST: `translator_state(state)` maps a FAT-MLM state dict onto a Translator's names (see there), which
`train.init_encoder_from` applies by itself to a FAT-MLM checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.models.encoders.conv import ConvEncoder, subsampler
from speechmt.models.encoders.whisper import WhisperEncoder, whisper_output_lengths
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder, check_init, config_stack, \
    embedding, is_count
from speechmt.sequence import lengths_to_padding_mask
from speechmt.tokenizer import SPECIAL_PIECES, Tokenizer

SPEECH, SOURCE, TARGET = 0, 1, 2  # segment ids
SEGMENT_OF = {"speech": SPEECH, "src": SOURCE, "tgt": TARGET}


@dataclass(frozen=True)
class FatMLMOptions:
    """`speech_mask`: share of each utterance's subsampled frames masked, in spans of `speech_span` frames;
    `speech_loss`: l1 or l2 on the masked fbank frames (mean per value), weighted by `speech_weight`;
    `token_mask`: probability that a text token (not a special or tag) is predicted, of which 80% are
    replaced by the mask vector, 10% by a random token, 10% left; `seed`: of the mask generator. Whisper
    encoder only: `layers` of the fused stack (required there; the conv variant's stack is its encoder's,
    encoder.layers) and its `init`, "random" or "identity" (zeroed residual branches, no final norm: FAT-ST's
    xstnet stack with the same init then starts as this one)."""

    speech_mask: float = 0.3
    speech_span: int = 5
    speech_loss: str = "l1"
    speech_weight: float = 1.0
    token_mask: float = 0.15
    seed: int = 1
    layers: int | None = None
    init: str = "random"

    def __post_init__(self):
        check_init("fat_mlm", self.init)
        problems = [
            not 0 <= self.speech_mask < 1 and f"speech_mask must be in [0, 1), got {self.speech_mask!r}",
            not (isinstance(self.speech_span, int) and self.speech_span >= 1) and
            f"speech_span must be an integer >= 1, got {self.speech_span!r}",
            self.speech_loss not in ("l1", "l2") and f"speech_loss must be l1 or l2, got {self.speech_loss!r}",
            not 0 <= self.speech_weight < float("inf") and f"speech_weight must be >= 0, got {self.speech_weight!r}",
            not 0 <= self.token_mask < 1 and f"token_mask must be in [0, 1), got {self.token_mask!r}",
            self.layers is not None and not is_count(self.layers, 1)
            and f"layers must be an integer >= 1, got {self.layers!r}",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError(f"bad ModelConfig: semantic fat_mlm {problems[0]}")


@dataclass
class TokenMask:
    """BERT masking of one text side: `inputs` (B, S) the ids fed (10% of predicted ones random), `masked`
    (B, S) positions fed the mask vector, `predicted` (B, S) positions whose original id is a target."""

    inputs: Tensor
    masked: Tensor
    predicted: Tensor


@dataclass
class FatMasks:
    """speech (B, T') masked subsampled frames; src, tgt: TokenMask; None for an absent or unmasked part."""

    speech: Tensor | None = None
    src: TokenMask | None = None
    tgt: TokenMask | None = None


@dataclass
class FatOutput:
    """The fused encoder's states x (B, L, D) with lengths (B,) (the sum of the parts' lengths), segment ids
    (B, L) (-1 at padding), and each present part's states {"speech" | "src" | "tgt": (x (B, T_p, D),
    lengths (B,))} taken back out of x; on Whisper, `speech_states` (B, T_p, H): the frozen encoder's states
    the speech part was made of (the reconstruction targets)."""

    x: Tensor
    lengths: Tensor
    segments: Tensor
    parts: dict[str, tuple[Tensor, Tensor]]
    speech_states: Tensor | None = None


def span_mask(lengths: Tensor, share: float, span: int, generator: torch.Generator) -> Tensor:
    """(B,) lengths -> (B, max length) bool: per row round(share * length) frames masked, in non-overlapping
    spans of `span` (the last one shorter), placed uniformly among the real frames (CPU)."""
    width = int(lengths.max()) if len(lengths) else 0
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, n_frames in enumerate(lengths.tolist()):
        n = round(share * n_frames)
        if n == 0:
            continue
        sizes = [span] * (n // span) + ([n % span] if n % span else [])
        k, free = len(sizes), n_frames - n
        slots = torch.randperm(free + k, generator=generator)[:k].sort().values.tolist()
        done = 0
        for j, (slot, size) in enumerate(zip(slots, sizes)):
            start = slot - j + done  # free frames before span j, plus the spans before it
            mask[b, start: start + size] = True
            done += size
    return mask


def token_mask(tokens: Tensor, lengths: Tensor, share: float, first_text_id: int, vocab_size: int,
               generator: torch.Generator) -> TokenMask:
    """BERT masking of tokens (B, S): each real token with an id in [first_text_id, vocab_size) (the text ids)
    is predicted with probability `share`; of those, 80% fed the mask vector, 10% a random text id, 10%
    itself."""
    tokens = tokens.cpu()
    real = ~lengths_to_padding_mask(lengths.cpu(), tokens.size(1)) & (tokens >= first_text_id) & (tokens < vocab_size)
    predicted = real & (torch.rand(tokens.shape, generator=generator) < share)
    kind = torch.rand(tokens.shape, generator=generator)
    masked, randomised = predicted & (kind < 0.8), predicted & (kind >= 0.8) & (kind < 0.9)
    random_ids = torch.randint(first_text_id, vocab_size, tokens.shape, generator=generator)
    return TokenMask(torch.where(randomised, random_ids, tokens), masked, predicted)


def reconstruction_frames(speech_mask: Tensor, feat_lengths: Tensor, width: int, factor: int) -> Tensor:
    """The fbank frames the masked subsampled frames cover: speech_mask (B, T') -> (B, width) bool, frame t
    True when subsampled frame t // factor is masked and t < its utterance's length."""
    frames = speech_mask.repeat_interleave(factor, dim=1)[:, :width]
    frames = F.pad(frames, (0, width - frames.size(1)))
    return frames & ~lengths_to_padding_mask(feat_lengths.to(frames.device), width)


def _pack(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Parts [(x (B, T_p, D), lengths (B,))] -> each example's parts back to back, x (B, L, D) with L the
    longest sum of lengths, lengths (B,), and each part's offsets (B,)."""
    x0 = parts[0][0]
    batch = x0.size(0)
    rows = torch.arange(batch, device=x0.device)
    lengths = torch.stack([n for _, n in parts]).sum(0)
    out = x0.new_zeros(batch, int(lengths.max()), x0.size(2))
    offset, offsets = torch.zeros_like(lengths), []
    for x, n in parts:
        steps = torch.arange(x.size(1), device=x.device)
        valid = steps[None, :] < n[:, None]  # (B, T_p)
        where = (offset[:, None] + steps[None, :])[valid]
        out = out.index_put((rows[:, None].expand_as(valid)[valid], where), x[valid].to(out.dtype))
        offsets.append(offset)
        offset = offset + n
    return out, lengths, offsets


def _unpack(x: Tensor, offset: Tensor, width: int, lengths: Tensor) -> Tensor:
    """The part at `offset` (B,) of width `width` and `lengths` (B,) out of x (B, L, D) -> (B, width, D),
    zero past the lengths."""
    steps = torch.arange(width, device=x.device)
    index = (offset[:, None] + steps[None, :]).clamp(max=x.size(1) - 1)
    part = x.gather(1, index[..., None].expand(-1, -1, x.size(2)))
    return part.masked_fill((steps[None, :] >= lengths[:, None])[..., None], 0.0)


class FatMLM(nn.Module):
    """The fused acoustic and text encoder with its masking, upsampling head and tied token predictions.
    `speech_encoder` is a ConvEncoder whose subsampler embeds the speech and whose Transformer stack
    (`speech_encoder.encoder`) runs over the whole concatenation (the names FAT-ST's encoder has).
    The head `reconstruct` maps a fused speech state to the `factor` input frames of `frame_dim` values it
    covers; `tgt_text_ids` (lo, hi): the target ids that are text (masked, predicted, drawn at random), by
    default [first_text_id, V)."""

    def __init__(self, config, speech_encoder: nn.Module, src_embedding: nn.Embedding, tgt_embedding: nn.Embedding,
                 options: FatMLMOptions, factor: int, frame_dim: int, tgt_text_ids: tuple[int, int] | None = None):
        super().__init__()
        dim = config.d_model
        self.config, self.options, self.tgt_text_ids = config, options, tgt_text_ids
        self.speech_encoder, self.src_embedding, self.tgt_embedding = speech_encoder, src_embedding, tgt_embedding
        self.segments = nn.Embedding(3, dim)
        self.speech_mask = nn.Parameter(torch.empty(dim).normal_(0.0, dim**-0.5))
        self.token_mask = nn.Parameter(torch.empty(dim).normal_(0.0, dim**-0.5))
        nn.init.normal_(self.segments.weight, 0.0, dim**-0.5)
        self.factor = factor  # input frames per fused speech state
        self.reconstruct = nn.Linear(dim, factor * frame_dim)
        self.scale = math.sqrt(dim)
        self.generator = torch.Generator().manual_seed(options.seed)

    def before_update(self, step: int) -> None:
        """Reseeds the mask generator from (seed, step): the masks of an update depend on nothing else."""
        self.generator.manual_seed((self.options.seed * 1_000_003 + step) % 2**63)

    def speech_lengths(self, feat_lengths: Tensor, precomputed: bool = False) -> Tensor:
        """Input lengths (B,) -> lengths of the speech part (B,): the subsampled frames."""
        return self.speech_encoder.subsampler.output_lengths(feat_lengths)

    def draw_masks(self, feat_lengths: Tensor | None, src: Tensor | None, src_lengths: Tensor | None,
                   tgt: Tensor | None, tgt_lengths: Tensor | None, first_text_id: int = len(SPECIAL_PIECES),
                   precomputed: bool = False) -> FatMasks:
        """Masks for a batch (fbank lengths (B,), or Whisper's mel or `precomputed` state lengths; token ids
        (B, S), (B, U) with lengths), from the model's generator in training, from a fresh one seeded with
        `seed` in eval mode."""
        o = self.options
        gen = self.generator if self.training else torch.Generator().manual_seed(o.seed)
        masks = FatMasks()
        if feat_lengths is not None:
            masks.speech = span_mask(self.speech_lengths(feat_lengths.cpu(), precomputed), o.speech_mask,
                                     o.speech_span, gen)
        if src is not None:
            masks.src = token_mask(src, src_lengths, o.token_mask, first_text_id, self.src_embedding.num_embeddings,
                                   gen)
        if tgt is not None:
            lo, hi = self.tgt_text_ids or (first_text_id, self.tgt_embedding.num_embeddings)
            masks.tgt = token_mask(tgt, tgt_lengths, o.token_mask, lo, hi, gen)
        return masks

    def _speech(self, feats: Tensor, lengths: Tensor, mask: Tensor | None,
                precomputed: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
        """feats (B, T, F) -> subsampled embeddings (B, T', D) (masked frames: the mask vector) * sqrt(D) +
        positions + the speech segment, their lengths, and no states (the targets are the fbank frames)."""
        x, lengths = self.speech_encoder.subsampler(feats, lengths)
        if mask is not None:
            x = torch.where(mask.to(x.device)[..., None], self.speech_mask.to(x.dtype), x)
        return self.speech_encoder.positions(x * self.scale) + self.segments.weight[SPEECH], lengths, None

    def _text_input(self, x: Tensor, segment: int) -> Tensor:
        """Scaled token embeddings (B, S, D) -> + positions + the side's segment."""
        return self.speech_encoder.positions(x) + self.segments.weight[segment]

    def _text(self, tokens: Tensor, lengths: Tensor, table: nn.Embedding, segment: int,
              mask: TokenMask | None) -> tuple[Tensor, Tensor]:
        """tokens (B, S) -> embeddings (B, S, D) (masked ones: the mask vector) * sqrt(D) + positions +
        the side's segment."""
        if mask is not None:
            tokens = mask.inputs.to(tokens.device)
        x = table(tokens)
        if mask is not None:
            x = torch.where(mask.masked.to(x.device)[..., None], self.token_mask.to(x.dtype), x)
        return self._text_input(x * self.scale, segment), lengths

    def _fuse(self, packed: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The fused stack over the packed parts (B, L, D)."""
        return self.speech_encoder.encoder(self.speech_encoder.dropout(packed), lengths)

    def forward(self, feats: Tensor | None = None, feat_lengths: Tensor | None = None, src: Tensor | None = None,
                src_lengths: Tensor | None = None, tgt: Tensor | None = None, tgt_lengths: Tensor | None = None,
                masks: FatMasks | None = None, precomputed: bool = False) -> FatOutput:
        """Any non-empty subset of speech feats (B, T, F) (on Whisper: log-mel, or its cached states when
        `precomputed`), source ids (B, S), target ids (B, U), each with lengths (B,), with `masks` applied
        (None: unmasked) -> FatOutput over their concatenation."""
        masks = masks or FatMasks()
        speech = None if feats is None else self._speech(feats, feat_lengths, masks.speech, precomputed)
        inputs = {"speech": None if speech is None else speech[:2],
                  "src": None if src is None else self._text(src, src_lengths, self.src_embedding, SOURCE, masks.src),
                  "tgt": None if tgt is None else self._text(tgt, tgt_lengths, self.tgt_embedding, TARGET, masks.tgt)}
        present = {k: v for k, v in inputs.items() if v is not None}
        if not present:
            raise ValueError("FAT-MLM needs at least one of speech, source text and target text")
        packed, lengths, offsets = _pack(list(present.values()))
        steps = torch.arange(packed.size(1), device=packed.device)[None, :]
        segments = torch.full(packed.shape[:2], -1, dtype=torch.long, device=packed.device)
        for name, offset, (_, n) in zip(present, offsets, present.values()):
            segments[(steps >= offset[:, None]) & (steps < (offset + n)[:, None])] = SEGMENT_OF[name]
        x, lengths = self._fuse(packed, lengths)
        parts = {k: (_unpack(x, off, v[0].size(1), v[1]), v[1]) for (k, v), off in zip(present.items(), offsets)}
        return FatOutput(x, lengths, segments, parts, None if speech is None else speech[2])

    def reconstruction(self, speech_states: Tensor) -> Tensor:
        """Fused speech states (B, T', D) -> predicted input frames (B, T' * factor, F)."""
        b, t, _ = speech_states.shape
        return self.reconstruct(speech_states).view(b, t * self.factor, -1)

    def reconstruction_pairs(self, out: FatOutput, speech_mask: Tensor, feats: Tensor,
                             feat_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """(predicted, target) (N, F) of the N input frames the masked speech states cover: the fbank frames."""
        frames = reconstruction_frames(speech_mask.to(feats.device), feat_lengths, feats.size(1), self.factor)
        return self.reconstruction(out.parts["speech"][0])[:, :feats.size(1)][frames], feats[frames]

    def token_logits(self, states: Tensor, side: str) -> Tensor:
        """Text states (B, S, D) -> logits (B, S, V) through the side's ("src" or "tgt") tied embedding."""
        table = self.src_embedding if side == "src" else self.tgt_embedding
        return states @ table.weight.t()


class WhisperFatMLM(FatMLM):
    """FAT-MLM over a frozen Whisper encoder (`speech_encoder`, a WhisperEncoder: its states, projected to D
    when the widths differ, are the acoustic embeddings) with a fused Transformer `stack` of its own. Speech
    states are neither scaled nor given positions (Whisper's are in them) and get no input dropout (as xstnet's
    identity-initialised speech path); text parts are embeddings * sqrt(D) + positions + segment, then dropout
    (as the text embedder). A masked state is reconstructed as itself, the frozen Whisper state (factor 1)."""

    def __init__(self, config, speech_encoder: WhisperEncoder, stack: TransformerEncoder, src_embedding: nn.Embedding,
                 tgt_embedding: nn.Embedding, options: FatMLMOptions, tgt_text_ids: tuple[int, int] | None = None):
        dim = config.d_model
        super().__init__(config, speech_encoder, src_embedding, tgt_embedding, options, 1, speech_encoder.hidden_size,
                         tgt_text_ids)
        self.stack = stack
        self.positions = SinusoidalPositionalEncoding(dim, config.position_offset)
        self.dropout = nn.Dropout(config.dropout)

    def speech_lengths(self, feat_lengths: Tensor, precomputed: bool = False) -> Tensor:
        """Mel frame lengths (B,) -> Whisper's state lengths; `precomputed` (cached states): unchanged."""
        return feat_lengths if precomputed else whisper_output_lengths(feat_lengths)

    def _speech(self, feats: Tensor, lengths: Tensor, mask: Tensor | None,
                precomputed: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
        """Log-mel (B, T, n_mels), or the cached states (B, T', H) when `precomputed` -> the projected states
        (B, T', D) (masked ones: the mask vector) + the speech segment, lengths, and the states themselves."""
        if precomputed:
            states = feats
        else:
            with torch.no_grad():  # frozen
                states, lengths = self.speech_encoder.states(feats, lengths)
        x = self.speech_encoder.project(states, lengths).x
        if mask is not None:
            x = torch.where(_fit(mask, x.size(1)).to(x.device)[..., None], self.speech_mask.to(x.dtype), x)
        return x + self.segments.weight[SPEECH], lengths, states

    def _text_input(self, x: Tensor, segment: int) -> Tensor:
        return self.dropout(self.positions(x) + self.segments.weight[segment])

    def _fuse(self, packed: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.stack(packed, lengths)

    def reconstruction_pairs(self, out: FatOutput, speech_mask: Tensor, feats: Tensor,
                             feat_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """(predicted, target) (N, H) of the N masked speech states: the frozen Whisper states themselves."""
        states = out.speech_states
        masked = _fit(speech_mask, states.size(1)).to(states.device)
        return self.reconstruct(out.parts["speech"][0])[masked], states[masked]


def _fit(mask: Tensor, width: int) -> Tensor:
    """A (B, T) mask cut or padded (False) to (B, width)."""
    return F.pad(mask[:, :width], (0, max(width - mask.size(1), 0)))


def fat_mlm_loss(model: FatMLM, feats: Tensor | None, feat_lengths: Tensor | None, src: Tensor | None,
                 src_lengths: Tensor | None, tgt: Tensor | None, tgt_lengths: Tensor | None,
                 first_text_id: int = len(SPECIAL_PIECES), precomputed: bool = False
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Draws masks, runs the model and returns speech_weight * the reconstruction loss (mean per masked input
    value: fbank, or Whisper's states, `precomputed` or not) + the token cross entropy (mean per predicted
    token); a part with nothing masked adds 0. Stats: both parts and the masked frame and token counts."""
    masks = model.draw_masks(feat_lengths, src, src_lengths, tgt, tgt_lengths, first_text_id, precomputed=precomputed)
    out = model(feats, feat_lengths, src, src_lengths, tgt, tgt_lengths, masks, precomputed=precomputed)
    zero = out.x.sum() * 0.0  # keeps the graph when nothing is masked
    speech, n_frames = zero, 0
    if "speech" in out.parts:
        pred, target = model.reconstruction_pairs(out, masks.speech, feats, feat_lengths)
        n_frames = pred.size(0)
        if n_frames:
            diff = pred.float() - target.float()
            speech = (diff.abs() if model.options.speech_loss == "l1" else diff.pow(2)).mean()
    nll, n_tokens = zero, 0
    for side, tokens, mask in (("src", src, masks.src), ("tgt", tgt, masks.tgt)):
        if mask is None or not mask.predicted.any():
            continue
        predicted = mask.predicted.to(tokens.device)
        logits = model.token_logits(out.parts[side][0][predicted], side)  # (N, V)
        nll = nll + F.cross_entropy(logits.float(), tokens[predicted], reduction="sum")
        n_tokens += int(predicted.sum())
    tokens_loss = nll / max(n_tokens, 1)
    loss = model.options.speech_weight * speech + tokens_loss
    return loss, {"speech": speech.detach(), "tokens": tokens_loss.detach(),
                  "masked_frames": torch.tensor(float(n_frames)), "masked_tokens": torch.tensor(float(n_tokens))}


def fat_mlm(cfg, pretrained: bool = True, **options) -> FatMLM:
    """Builds FAT-MLM from a ModelConfig (conv encoder: subsampler and `encoder.layers` Transformer layers
    of the shared dimensions; whisper encoder: see _whisper_fat_mlm; src and tgt vocabularies) and FatMLMOptions
    fields. `pretrained`: load Whisper's weights (else, a checkpoint's follow, built from the stored config)."""
    o = FatMLMOptions(**options)
    if cfg.encoder.kind not in ("conv", "whisper"):
        raise ValueError(f"bad ModelConfig: semantic fat_mlm needs the conv encoder or Whisper's, got "
                         f"{cfg.encoder.kind!r}")
    if cfg.src_vocab_size <= 0 or cfg.tgt_vocab_size <= 0:
        raise ValueError("bad ModelConfig: semantic fat_mlm needs src_vocab_size and tgt_vocab_size > 0")
    if cfg.encoder.kind == "whisper":
        return _whisper_fat_mlm(cfg, o, pretrained)
    if o.layers is not None or o.init != "random":
        raise ValueError("bad ModelConfig: semantic fat_mlm options layers and init are the whisper encoder's (the "
                         "conv variant's stack is its encoder's, encoder.layers)")
    e = cfg.encoder
    stack = config_stack(cfg, e.layers)
    speech = ConvEncoder(subsampler(e.subsampler, e.input_dim, e.conv_channels, cfg.d_model, e.conv_kernels), stack,
                         cfg.d_model, cfg.dropout, cfg.position_offset)
    return FatMLM(cfg, speech, embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id),
                  embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id), o,
                  2 ** len(speech.subsampler.convs), e.input_dim)  # fbank frames per subsampled frame


def _whisper_fat_mlm(cfg, o: FatMLMOptions, pretrained: bool) -> WhisperFatMLM:
    """FAT-MLM on the frozen Whisper encoder of encoder.name_or_path (or encoder.hf_config). With decoder.kind
    whisper the model takes the Whisper decoder's dimensions and vocabulary (translator.whisper_decoder_config),
    its target text ids are those below <|endoftext|> and, `pretrained`, its target embedding starts as the
    Whisper decoder's token embedding (the same load as the encoder's when they name the same model)."""
    from speechmt.models.finetune import set_finetuning
    from speechmt.models.whisper import hf_config_dict, whisper_decoder_config, whisper_encoder_from_hf, \
        whisper_models

    problems = [cfg.encoder.finetune != "frozen" and "reconstructs the frozen Whisper encoder's states: it needs "
                f"encoder.finetune frozen, got {cfg.encoder.finetune!r}",
                o.layers is None and "on the whisper encoder needs options.layers (the fused stack's layers)"]
    if any(problems):
        raise ValueError(f"bad ModelConfig: semantic fat_mlm {next(p for p in problems if p)}")
    hf_enc, hf_dec = whisper_models(cfg, pretrained)
    tgt_text_ids = None
    if hf_dec is not None:
        cfg = whisper_decoder_config(cfg, hf_dec)
        tgt_text_ids = (0, int(hf_dec.config.eos_token_id))  # Whisper's text ids lie below <|endoftext|>
    speech = whisper_encoder_from_hf(hf_enc, cfg.d_model, cfg.encoder.layerdrop)
    cfg = replace(cfg, encoder=replace(cfg.encoder, hf_config=hf_config_dict(hf_enc)))
    set_finetuning(speech.model, "frozen")
    tgt = embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id)
    if hf_dec is not None and pretrained:
        with torch.no_grad():
            tgt.weight.copy_(hf_dec.model.decoder.embed_tokens.weight)
    return WhisperFatMLM(cfg, speech, config_stack(cfg, o.layers, o.init == "identity"),
                         embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id), tgt, o, tgt_text_ids)


DECODER_FROM_ENCODER = {"attn_norm.": "self_norm.", "attn.": "self_attn.", "ffn_norm.": "ffn_norm.", "ffn.": "ffn."}
"""FAT-ST: encoder layer i's modules -> decoder layer i's (cross-attention and its norm stay as built)."""


def translator_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A FAT-MLM state dict on a Translator's names (FAT-ST; `train.init_encoder_from` keeps those whose
    name is under its init_prefixes and whose shape agrees). The conv variant:
    - speech_encoder.* -> speech_encoder.* (subsampler and Transformer stack, unchanged; with the conv2d
      subsampler the speech segment / sqrt(D) is added to subsampler.out.bias, exactly the FAT-MLM input);
    - src_embedding.weight + the source segment / sqrt(D) -> text_encoder.embedding.weight (exactly the FAT-MLM
      input of a source text; all-zero rows, the padding, stay zero);
    - tgt_embedding.weight + the target segment / sqrt(D) -> decoder.embed.weight and decoder.output.weight
      (the shift adds h . c to every logit of a position: the softmax is unchanged);
    - speech_encoder.encoder.layers.<i>.{attn_norm, attn, ffn_norm, ffn} -> decoder.layers.<i>.{self_norm,
      self_attn, ffn_norm, ffn}, speech_encoder.encoder.norm -> decoder.norm (the paper's decoder from the
      encoder's weights).
    The conv1d subsampler ends in a GLU, so its speech segment has nowhere to go and is left out; the mask
    vectors, segments and reconstruction head are pretraining only.
    The Whisper variant (a state with `stack.*`), for an ST model with Whisper's encoder, `text_encoder:
    {embed_only: true}`, `semantic: xstnet` with `segments: true` and the same layers and init, and Whisper's
    decoder:
    - stack.* -> semantic.stack.* (the fused stack is the shared one);
    - the speech segment -> row 0 (speech) of semantic.segments.weight, row 1 (source text) zero;
    - src_embedding.weight + the source segment / sqrt(D) -> text_encoder.embedding.weight, as above;
    - speech_encoder.* (the frozen Whisper encoder, and its projection if any) unchanged.
    The decoder stays Whisper's: nothing of the target side (embedding, segment) is mapped."""
    segments = state["segments.weight"]
    scale = math.sqrt(segments.size(1))

    def shifted(table: Tensor, segment: int) -> Tensor:
        return torch.where(table.abs().sum(1, keepdim=True) > 0, table + segments[segment] / scale, table)

    out = {k: v for k, v in state.items() if k.startswith("speech_encoder.")}
    out["text_encoder.embedding.weight"] = shifted(state["src_embedding.weight"], SOURCE)
    if any(k.startswith("stack.") for k in state):  # Whisper
        out.update({"semantic." + k: v for k, v in state.items() if k.startswith("stack.")})
        out["semantic.segments.weight"] = torch.stack([segments[SPEECH], torch.zeros_like(segments[SOURCE])])
        return out
    bias = "speech_encoder.subsampler.out.bias"
    if bias in out:
        out[bias] = out[bias] + segments[SPEECH] / scale
    out["decoder.embed.weight"] = out["decoder.output.weight"] = shifted(state["tgt_embedding.weight"], TARGET)
    layers = "speech_encoder.encoder.layers."
    for name, value in state.items():
        if name.startswith(layers):
            index, rest = name[len(layers):].split(".", 1)
            for old, new in DECODER_FROM_ENCODER.items():
                if rest.startswith(old):
                    out[f"decoder.layers.{index}.{new}{rest[len(old):]}"] = value
        elif name.startswith("speech_encoder.encoder.norm."):
            out["decoder.norm." + name.rsplit(".", 1)[1]] = value
    return out
