"""wav2vec 2.0 self-supervised pretraining as a model the trainer trains (Baevski et al., NeurIPS 2020), on
Hugging Face's Wav2Vec2ForPreTraining: spans of CNN frames are masked, and the Transformer output at each
masked frame must pick its quantised CNN frame among `num_negatives` distractors from the same utterance
(contrastive loss), while a diversity loss keeps the codebooks in use. Masks and negatives come from
transformers' own `_compute_mask_indices` and `_sample_negative_indices`, over unpadded frames only (numpy's
global generator, which checkpoints carry).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from speechmt.sequence import lengths_to_padding_mask


@dataclass
class PretrainingSettings:
    """Masking and gumbel annealing (start, floor, decay per update), and the HF config the model was built
    from (saved in checkpoints)."""

    mask_prob: float = 0.65
    mask_length: int = 10
    min_masks: int = 2
    gumbel_temperature: tuple[float, float, float] = (2.0, 0.5, 0.999995)
    hf_config: dict = field(default_factory=dict)


def masks_and_negatives(
    frames: Tensor, width: int, settings: PretrainingSettings, num_negatives: int
) -> tuple[np.ndarray, np.ndarray]:
    """Masked spans over the unpadded frames (B, T') bool, and for every frame `num_negatives` distractors
    (B, T', K): indices into the flattened (B * T') frames, drawn from the masked frames of its utterance."""
    from transformers.models.wav2vec2.modeling_wav2vec2 import _compute_mask_indices, _sample_negative_indices

    s = settings
    valid = (~lengths_to_padding_mask(frames.cpu(), width)).long()
    mask = _compute_mask_indices((len(frames), width), s.mask_prob, s.mask_length, valid, s.min_masks)
    return mask, _sample_negative_indices((len(frames), width), num_negatives, mask)


class Wav2Vec2Pretraining(nn.Module):
    """A Wav2Vec2ForPreTraining (`model`) with its masking settings (`config`)."""

    def __init__(self, model: nn.Module, config: PretrainingSettings):
        super().__init__()
        self.model, self.config = model, config

    def before_update(self, step: int) -> None:
        """Anneals the gumbel softmax temperature: max(start * decay^step, floor)."""
        start, floor, decay = self.config.gumbel_temperature
        self.model.set_gumbel_temperature(max(start * decay**step, floor))

    def loss(self, waves: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """waves (B, T), lengths (B,) samples -> (contrastive + diversity loss per masked frame, stats)."""
        hf = self.model
        frames = hf._get_feat_extract_output_lengths(lengths)
        width = int(hf._get_feat_extract_output_lengths(torch.tensor(waves.size(1))))
        mask, negatives = masks_and_negatives(frames, width, self.config, hf.config.num_negatives)
        padding = lengths_to_padding_mask(lengths, waves.size(1))
        attention_mask = (~padding).long() if hf.config.feat_extract_norm == "layer" else None
        out = hf(
            waves.masked_fill(padding, 0.0),
            attention_mask=attention_mask,
            mask_time_indices=torch.from_numpy(mask).to(waves.device),
            sampled_negative_indices=torch.from_numpy(negatives).to(waves.device),
        )
        n = float(mask.sum())
        stats = {
            "contrastive": out.contrastive_loss.detach() / n,
            "diversity": out.diversity_loss.detach() / n,
            "perplexity": out.codevector_perplexity.detach(),
            "masked_frames": torch.tensor(n),
        }
        return out.loss / n, stats
