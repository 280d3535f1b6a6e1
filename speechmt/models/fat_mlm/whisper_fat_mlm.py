"""FAT-MLM on a frozen Whisper encoder (WhisperFatMLM): Whisper's cached states as the acoustic embeddings,
reconstructed as themselves, in a fused stack of its own (see speechmt.models.fat_mlm)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from speechmt.models.encoders.whisper import WhisperEncoder, whisper_output_lengths
from speechmt.models.fat_mlm.masking import fit_mask
from speechmt.models.fat_mlm.model import SPEECH, FatMLM, FatMLMOptions, FatOutput
from speechmt.models.layers import SinusoidalPositionalEncoding, TransformerEncoder, config_stack, embedding
from speechmt.tokenizers.sentencepiece import Tokenizer


class WhisperFatMLM(FatMLM):
    """FAT-MLM over a frozen Whisper encoder (`speech_encoder`, a WhisperEncoder: its states, projected to D
    when the widths differ, are the acoustic embeddings) with a fused Transformer `stack` of its own. Speech
    states are neither scaled nor given positions (Whisper's are in them) and get no input dropout (as xstnet's
    identity-initialised speech path); text parts are embeddings * sqrt(D) + positions + segment, then dropout
    (as the text embedder). A masked state is reconstructed as itself, the frozen Whisper state (factor 1)."""

    def __init__(
        self,
        config,
        speech_encoder: WhisperEncoder,
        stack: TransformerEncoder,
        src_embedding: nn.Embedding,
        tgt_embedding: nn.Embedding,
        options: FatMLMOptions,
        tgt_text_ids: tuple[int, int] | None = None,
    ):
        dim = config.d_model
        super().__init__(
            config, speech_encoder, src_embedding, tgt_embedding, options, 1, speech_encoder.hidden_size, tgt_text_ids
        )
        self.stack = stack
        self.positions = SinusoidalPositionalEncoding(dim, config.position_offset)
        self.dropout = nn.Dropout(config.dropout)

    def speech_lengths(self, feat_lengths: Tensor, precomputed: bool = False) -> Tensor:
        """Mel frame lengths (B,) -> Whisper's state lengths; `precomputed` (cached states): unchanged."""
        return feat_lengths if precomputed else whisper_output_lengths(feat_lengths)

    def _speech(
        self, feats: Tensor, lengths: Tensor, mask: Tensor | None, precomputed: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Log-mel (B, T, n_mels), or the cached states (B, T', H) when `precomputed` -> the projected states
        (B, T', D) (masked ones: the mask vector) + the speech segment, lengths, and the states themselves."""
        if precomputed:
            states = feats
        else:
            with torch.no_grad():  # frozen
                states, lengths = self.speech_encoder.states(feats, lengths)
        x = self.speech_encoder.project(states, lengths).x
        if mask is not None:
            x = torch.where(fit_mask(mask, x.size(1)).to(x.device)[..., None], self.speech_mask.to(x.dtype), x)
        return x + self.segments.weight[SPEECH], lengths, states

    def _text_input(self, x: Tensor, segment: int) -> Tensor:
        return self.dropout(self.positions(x) + self.segments.weight[segment])

    def _fuse(self, packed: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.stack(packed, lengths)

    def reconstruction_pairs(
        self, out: FatOutput, speech_mask: Tensor, feats: Tensor, feat_lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(predicted, target) (N, H) of the N masked speech states: the frozen Whisper states themselves."""
        states = out.speech_states
        masked = fit_mask(speech_mask, states.size(1)).to(states.device)
        return self.reconstruct(out.parts["speech"][0])[masked], states[masked]


def whisper_fat_mlm(cfg, o: FatMLMOptions, pretrained: bool, resolved: dict | None = None) -> WhisperFatMLM:
    """FAT-MLM on the frozen Whisper encoder of encoder.name_or_path (or encoder.hf_config; `resolved`'s complete HF
    configs, a checkpoint's, where it holds them: speechmt.models.components.HF_CONFIGS). With decoder.kind
    whisper the model takes the Whisper decoder's dimensions and vocabulary (translator.whisper_decoder_config),
    its target text ids are those below <|endoftext|> and, `pretrained`, its target embedding starts as the
    Whisper decoder's token embedding (the same load as the encoder's when they name the same model). The model's
    `resolved` holds `resolved` with the complete HF configs this build derived."""
    from speechmt.models.components import HF_CONFIGS
    from speechmt.models.encoders.whisper import hf_config_dict, whisper_encoder_from_hf
    from speechmt.models.finetune import set_finetuning
    from speechmt.models.hf_whisper import whisper_decoder_config, whisper_models

    problems = [
        cfg.encoder.finetune != "frozen"
        and "reconstructs the frozen Whisper encoder's states: it needs "
        f"encoder.finetune frozen, got {cfg.encoder.finetune!r}",
        o.layers is None and "on the whisper encoder needs options.layers (the fused stack's layers)",
    ]
    if any(problems):
        raise ValueError(f"bad ModelConfig: semantic fat_mlm {next(p for p in problems if p)}")
    resolved = dict(resolved or {})
    hf_enc, hf_dec = whisper_models(cfg, pretrained, resolved)
    tgt_text_ids = None
    if hf_dec is not None:
        cfg = whisper_decoder_config(cfg, hf_dec)
        resolved.setdefault(HF_CONFIGS["decoder"], hf_config_dict(hf_dec))
        tgt_text_ids = (0, int(hf_dec.config.eos_token_id))  # Whisper's text ids lie below <|endoftext|>
    speech = whisper_encoder_from_hf(hf_enc, cfg.d_model, cfg.encoder.layerdrop)
    resolved.setdefault(HF_CONFIGS["encoder"], hf_config_dict(hf_enc))
    set_finetuning(speech.model, "frozen")
    tgt = embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id)
    if hf_dec is not None and pretrained:
        with torch.no_grad():
            tgt.weight.copy_(hf_dec.model.decoder.embed_tokens.weight)
    model = WhisperFatMLM(
        cfg,
        speech,
        config_stack(cfg, o.layers, o.init == "identity"),
        embedding(cfg.src_vocab_size, cfg.d_model, Tokenizer.pad_id),
        tgt,
        o,
        tgt_text_ids,
    )
    model.resolved = resolved
    return model
