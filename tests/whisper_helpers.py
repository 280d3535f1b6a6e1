"""A tiny random Whisper model folder, as `save_pretrained` writes one, for tests: a small byte-level BPE
trained here with Whisper's special tokens (same order as the real multilingual vocabulary, fewer
languages), a WhisperConfig of a few thousand parameters per layer, a preprocessor config."""

from __future__ import annotations

from pathlib import Path

import torch

LANGUAGES = ("en", "de", "es", "fr")
TEXTS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "die katze sitzt auf der matte",
    "ein hund rennt im park",
    "hello world",
    "guten morgen",
    "good morning",
    "thank you very much",
    "vielen dank",
    "where is the station",
    "wo ist der bahnhof",
]


def whisper_specials() -> list[str]:
    """Whisper's special tokens in vocabulary order (eot, sot, languages, tasks, ..., notimestamps)."""
    return (
        ["<|endoftext|>", "<|startoftranscript|>"]
        + [f"<|{lang}|>" for lang in LANGUAGES]
        + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    )


def tiny_whisper_tokenizer_json() -> str:
    """tokenizer.json of a byte-level BPE (~300 pieces) followed by Whisper's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(TEXTS * 3, trainer)
    tok.add_special_tokens(whisper_specials())
    return tok.to_str()


def tiny_whisper_dir(
    folder: Path, d_model: int = 32, layers: int = 2, seed: int = 0, multilingual: bool = False
) -> Path:
    """Writes a random tiny WhisperForConditionalGeneration with its tokenizer and feature extractor config
    into `folder` (save_pretrained layout) and returns it. `multilingual`: its generation config names the
    language and task tokens as a multilingual Whisper's does (lang_to_id, task_to_id, no_timestamps_token_id),
    so that its transcription prompt is <|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>."""
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_json = tiny_whisper_tokenizer_json()
    (folder / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    eot = tok.token_to_id("<|endoftext|>")
    config = WhisperConfig(
        vocab_size=tok.get_vocab_size(),
        num_mel_bins=80,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_source_positions=1500,
        max_target_positions=64,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=tok.token_to_id("<|startoftranscript|>"),
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    if multilingual:
        g = model.generation_config
        g.lang_to_id = {f"<|{lang}|>": tok.token_to_id(f"<|{lang}|>") for lang in LANGUAGES}
        g.task_to_id = {task: tok.token_to_id(f"<|{task}|>") for task in ("transcribe", "translate")}
        g.no_timestamps_token_id = tok.token_to_id("<|notimestamps|>")
        g._from_model_config = False  # else from_pretrained makes it again from the model config, without them
    model.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(folder)
    return folder
