"""The FAT-MLM model (Zheng et al., ICML 2021): the fused acoustic and text encoder over

    [ conv-subsampled fbank embeddings | source text token embeddings | target text token embeddings ]

with segment embeddings, mask vectors, the upsampling reconstruction head and tied token predictions; its
loss (fat_mlm_loss) and the conv variant's builder. The package docstring (speechmt.models.fat_mlm) tells
the whole of it; the Whisper variant is in speechmt.models.fat_mlm.whisper_fat_mlm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.models.encoders.conv import ConvEncoder, subsampler
from speechmt.models.fat_mlm.masking import FatMasks, TokenMask, reconstruction_frames, span_mask, token_mask
from speechmt.models.layers import STACK_INITS, config_stack, embedding
from speechmt.tokenizers.sentencepiece import SPECIAL_PIECES, Tokenizer

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

    speech_mask: float = checked(0.3, lo=0, hi=1, hi_in=False)
    speech_span: int = checked(5, lo=1)
    speech_loss: str = checked("l1", choices=("l1", "l2"))
    speech_weight: float = checked(1.0, lo=0)
    token_mask: float = checked(0.15, lo=0, hi=1, hi_in=False)
    seed: int = 1
    layers: int | None = checked(None, lo=1)
    init: str = checked("random", choices=STACK_INITS)

    def __post_init__(self):
        raise_problems("bad ModelConfig", field_problems(self), "semantic fat_mlm")


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


def pack_parts(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, list[Tensor]]:
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


def unpack_part(x: Tensor, offset: Tensor, width: int, lengths: Tensor) -> Tensor:
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

    def __init__(
        self,
        config,
        speech_encoder: nn.Module,
        src_embedding: nn.Embedding,
        tgt_embedding: nn.Embedding,
        options: FatMLMOptions,
        factor: int,
        frame_dim: int,
        tgt_text_ids: tuple[int, int] | None = None,
    ):
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
        # what its build derived (the Whisper variant's complete HF configs; speechmt.bundle.ModelBundle.resolved)
        self.resolved: dict[str, Any] = {}

    def before_update(self, step: int) -> None:
        """Reseeds the mask generator from (seed, step): the masks of an update depend on nothing else."""
        self.generator.manual_seed((self.options.seed * 1_000_003 + step) % 2**63)

    def speech_lengths(self, feat_lengths: Tensor, precomputed: bool = False) -> Tensor:
        """Input lengths (B,) -> lengths of the speech part (B,): the subsampled frames."""
        return self.speech_encoder.subsampler.output_lengths(feat_lengths)

    def draw_masks(
        self,
        feat_lengths: Tensor | None,
        src: Tensor | None,
        src_lengths: Tensor | None,
        tgt: Tensor | None,
        tgt_lengths: Tensor | None,
        first_text_id: int = len(SPECIAL_PIECES),
        precomputed: bool = False,
    ) -> FatMasks:
        """Masks for a batch (fbank lengths (B,), or Whisper's mel or `precomputed` state lengths; token ids
        (B, S), (B, U) with lengths), from the model's generator in training, from a fresh one seeded with
        `seed` in eval mode."""
        o = self.options
        gen = self.generator if self.training else torch.Generator().manual_seed(o.seed)
        masks = FatMasks()
        if feat_lengths is not None:
            masks.speech = span_mask(
                self.speech_lengths(feat_lengths.cpu(), precomputed), o.speech_mask, o.speech_span, gen
            )
        if src is not None:
            masks.src = token_mask(
                src, src_lengths, o.token_mask, first_text_id, self.src_embedding.num_embeddings, gen
            )
        if tgt is not None:
            lo, hi = self.tgt_text_ids or (first_text_id, self.tgt_embedding.num_embeddings)
            masks.tgt = token_mask(tgt, tgt_lengths, o.token_mask, lo, hi, gen)
        return masks

    def _speech(
        self, feats: Tensor, lengths: Tensor, mask: Tensor | None, precomputed: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """feats (B, T, F) -> subsampled embeddings (B, T', D) (masked frames: the mask vector) * sqrt(D) +
        positions + the speech segment, their lengths, and no states (the targets are the fbank frames)."""
        x, lengths = self.speech_encoder.subsampler(feats, lengths)
        if mask is not None:
            x = torch.where(mask.to(x.device)[..., None], self.speech_mask.to(x.dtype), x)
        return self.speech_encoder.positions(x * self.scale) + self.segments.weight[SPEECH], lengths, None

    def _text_input(self, x: Tensor, segment: int) -> Tensor:
        """Scaled token embeddings (B, S, D) -> + positions + the side's segment."""
        return self.speech_encoder.positions(x) + self.segments.weight[segment]

    def _text(
        self, tokens: Tensor, lengths: Tensor, table: nn.Embedding, segment: int, mask: TokenMask | None
    ) -> tuple[Tensor, Tensor]:
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

    def forward(
        self,
        feats: Tensor | None = None,
        feat_lengths: Tensor | None = None,
        src: Tensor | None = None,
        src_lengths: Tensor | None = None,
        tgt: Tensor | None = None,
        tgt_lengths: Tensor | None = None,
        masks: FatMasks | None = None,
        precomputed: bool = False,
    ) -> FatOutput:
        """Any non-empty subset of speech feats (B, T, F) (on Whisper: log-mel, or its cached states when
        `precomputed`), source ids (B, S), target ids (B, U), each with lengths (B,), with `masks` applied
        (None: unmasked) -> FatOutput over their concatenation."""
        masks = masks or FatMasks()
        speech = None if feats is None else self._speech(feats, feat_lengths, masks.speech, precomputed)
        inputs = {
            "speech": None if speech is None else speech[:2],
            "src": None if src is None else self._text(src, src_lengths, self.src_embedding, SOURCE, masks.src),
            "tgt": None if tgt is None else self._text(tgt, tgt_lengths, self.tgt_embedding, TARGET, masks.tgt),
        }
        present = {k: v for k, v in inputs.items() if v is not None}
        if not present:
            raise ValueError("FAT-MLM needs at least one of speech, source text and target text")
        packed, lengths, offsets = pack_parts(list(present.values()))
        steps = torch.arange(packed.size(1), device=packed.device)[None, :]
        segments = torch.full(packed.shape[:2], -1, dtype=torch.long, device=packed.device)
        for name, offset, (_, n) in zip(present, offsets, present.values()):
            segments[(steps >= offset[:, None]) & (steps < (offset + n)[:, None])] = SEGMENT_OF[name]
        x, lengths = self._fuse(packed, lengths)
        parts = {k: (unpack_part(x, off, v[0].size(1), v[1]), v[1]) for (k, v), off in zip(present.items(), offsets)}
        return FatOutput(x, lengths, segments, parts, None if speech is None else speech[2])

    def reconstruction(self, speech_states: Tensor) -> Tensor:
        """Fused speech states (B, T', D) -> predicted input frames (B, T' * factor, F)."""
        b, t, _ = speech_states.shape
        return self.reconstruct(speech_states).view(b, t * self.factor, -1)

    def reconstruction_pairs(
        self, out: FatOutput, speech_mask: Tensor, feats: Tensor, feat_lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(predicted, target) (N, F) of the N input frames the masked speech states cover: the fbank frames."""
        frames = reconstruction_frames(speech_mask.to(feats.device), feat_lengths, feats.size(1), self.factor)
        return self.reconstruction(out.parts["speech"][0])[:, : feats.size(1)][frames], feats[frames]

    def token_logits(self, states: Tensor, side: str) -> Tensor:
        """Text states (B, S, D) -> logits (B, S, V) through the side's ("src" or "tgt") tied embedding."""
        table = self.src_embedding if side == "src" else self.tgt_embedding
        return states @ table.weight.t()


def fat_mlm_loss(
    model: FatMLM,
    feats: Tensor | None,
    feat_lengths: Tensor | None,
    src: Tensor | None,
    src_lengths: Tensor | None,
    tgt: Tensor | None,
    tgt_lengths: Tensor | None,
    first_text_id: int = len(SPECIAL_PIECES),
    precomputed: bool = False,
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
    return loss, {
        "speech": speech.detach(),
        "tokens": tokens_loss.detach(),
        "masked_frames": torch.tensor(float(n_frames)),
        "masked_tokens": torch.tensor(float(n_tokens)),
    }


def conv_fat_mlm(cfg, o: FatMLMOptions) -> FatMLM:
    """FAT-MLM on the conv encoder of a ModelConfig: its subsampler and `encoder.layers` Transformer layers of
    the shared dimensions as the fused stack; src and tgt vocabularies of the config's sizes."""
    if o.layers is not None or o.init != "random":
        raise ValueError(
            "bad ModelConfig: semantic fat_mlm options layers and init are the whisper encoder's (the "
            "conv variant's stack is its encoder's, encoder.layers)"
        )
    e = cfg.encoder
    stack = config_stack(cfg, e.layers)
    speech = ConvEncoder(
        subsampler(e.subsampler, e.input_dim, e.conv_channels, cfg.d_model, e.conv_kernels),
        stack,
        cfg.d_model,
        cfg.dropout,
        cfg.position_offset,
    )
    return FatMLM(
        cfg,
        speech,
        embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id),
        embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id),
        o,
        2 ** len(speech.subsampler.convs),
        e.input_dim,
    )  # fbank frames per subsampled frame
