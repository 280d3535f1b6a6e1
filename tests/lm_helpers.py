"""A tiny random causal LM (Gemma 3 architecture) with a small byte-level BPE tokenizer, saved to a local
folder as `save_pretrained` writes one: the offline stand-in for gemma-3-270m in the tests."""

from __future__ import annotations

from pathlib import Path

import torch

ASSETS = Path(__file__).parent / "assets" / "mustc" / "en-de" / "data"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0-3, Gemma's order


def corpus_texts() -> list[str]:
    """Every English and German line of the committed MuST-C replica, and the prompts' language names."""
    lines = [line for path in sorted(ASSETS.glob("*/txt/*.[ed][ne]")) for line in path.read_text().splitlines()]
    return lines + ["English: German: Spanish:"]


def tiny_lm_tokenizer_json() -> str:
    """tokenizer.json of a byte-level BPE (~400 pieces) over corpus_texts, specials first (pad 0, eos 1, bos 2, unk 3)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_texts() * 3, trainer)
    return tok.to_str()


def tiny_lm_dir(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Writes config.json, model.safetensors and tokenizer.json of a random Gemma 3 LM (a sliding-window layer
    and a global one) into `folder` and returns it."""
    from tokenizers import Tokenizer
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_json = tiny_lm_tokenizer_json()
    (folder / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    vocab = Tokenizer.from_str(tokenizer_json).get_vocab_size(with_added_tokens=True)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                              num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                              query_pre_attn_scalar=16, sliding_window=16, max_position_embeddings=512,
                              layer_types=(["sliding_attention", "full_attention"] * layers)[:layers],
                              pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(seed)
    Gemma3ForCausalLM(config).save_pretrained(folder)
    return folder
