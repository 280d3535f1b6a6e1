"""A tiny random causal LM (Gemma 3 architecture) with a small byte-level BPE tokenizer, saved to a local
folder as `save_pretrained` writes one: the offline stand-in for gemma-3-270m in the tests."""

from __future__ import annotations

from pathlib import Path

import torch

ASSETS = Path(__file__).parent / "assets" / "mustc" / "en-de" / "data"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0-3, Gemma's order
LM_RESOLVED = {"decoder.vocab": [5, 6, 7], "decoder.prompt": [2]}
"""What a run derives for an LM decoder (build_model's `resolved`): an output vocabulary of three LM ids and a
prompt of <bos> alone, for models whose decoder's outputs the test does not read."""


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
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
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
    config = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=16,
        max_position_embeddings=512,
        layer_types=(["sliding_attention", "full_attention"] * layers)[:layers],
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(seed)
    Gemma3ForCausalLM(config).save_pretrained(folder)
    return folder


CTC_TRANSCRIPTS = ["The weather is nice today.", "Please open the window."]


def ctc_bridge_model(lm_dir: Path, transcripts: list[str] = CTC_TRANSCRIPTS, **overrides):
    """(a tiny conv-encoder model with the CTC bridge into the tiny LM at lm_dir (shrink.embed lm, its CTC head over
    the transcripts' LM tokens), the LM's source tokenizer), in eval mode; `overrides`: ModelConfig fields (a
    semantic layer; decoder fields merge into the LM decoder's)."""
    from speechmt.models.build import build_model
    from speechmt.models.config import preset
    from speechmt.models.ctc_head import FIRST_LABEL
    from speechmt.tokenizers.lm import LMTokenizer

    src = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    tgt = LMTokenizer.trimmed(str(lm_dir), ["Das Wetter ist schön."], ["<de>"])
    vocab = tuple(dict.fromkeys(i for t in transcripts for i in src.encode(t)))
    torch.manual_seed(0)
    cfg = preset(
        "tiny",
        n_heads=2,
        dropout=0.0,
        ctc=True,
        src_vocab_size=FIRST_LABEL + len(vocab),
        shrink=dict(kind="ctc", embed="lm"),
        text_encoder=dict(embed_only=True, embeddings="lm"),
        **{
            **overrides,
            "decoder": dict(kind="lm", name_or_path=str(lm_dir), **overrides.get("decoder", {})),
        },
    )
    return build_model(cfg, resolved={**lm_resolved(tgt), "ctc_vocab": list(vocab)}).eval(), src


def lm_resolved(tgt, language: str = "en") -> dict:
    """What a run derives for an LM decoder from its target tokenizer `tgt` (LMTokenizer.trimmed): build_model's
    `resolved`, its output vocabulary and its prompt naming `language`."""
    return {"decoder.vocab": list(tgt.config.vocab), "decoder.prompt": list(tgt.prompt_ids(language))}


def spelled_logits(labels: list[int], size: int, margin: float = 40.0) -> torch.Tensor:
    """CTC logits (T, size) whose argmax spells blank (4), then each label twice followed by a blank."""
    blank = 4
    frames = [blank] + [x for label in labels for x in (label, label, blank)]
    logits = torch.zeros(len(frames), size)
    logits[torch.arange(len(frames)), torch.tensor(frames)] = margin
    return logits


def certain_ctc(model, ids: list[list[int]]):
    """The encoder output (zero states) of a CTC certain of the transcripts `ids` (LM ids), before shrinking."""
    from speechmt.models.encoders import EncoderOutput

    rows = [spelled_logits(model.ctc_head.labels(torch.tensor(x)).tolist(), model.config.src_vocab_size) for x in ids]
    frames = torch.tensor([len(r) for r in rows])
    logits = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    return EncoderOutput(torch.zeros(len(ids), logits.size(1), model.config.d_model), frames, logits, frames)


def train_whisper_lm(data, lm: Path, whisper: Path, encoder_kind: str, save_dir: Path, mt: bool = False) -> Path:
    """A model (Whisper encoder `encoder_kind`, frozen, and the LM) trained for ST (`mt`: ST and MT, the LM
    reading source text) for one update on the prepared corpus `data`; its checkpoint path."""
    from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
    from speechmt.models.config import ModelConfig
    from speechmt.training.run import run_training

    text = {"text_encoder": {"embed_only": True, "embeddings": "lm"}} if mt else {}
    model = ModelConfig(
        encoder={"kind": encoder_kind, "name_or_path": str(whisper), "finetune": "frozen"},
        decoder={"kind": "lm", "name_or_path": str(lm), "finetune": "full"},
        n_heads=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **text,
    )
    stages = [{"name": "st+mt", "tasks": [{"task": "st"}, {"task": "mt"}]}] if mt else []
    cfg = ExperimentConfig(
        model=model,
        data=DataConfig(
            dir=str(data),
            spec_augment="",
            max_tokens=4000,
            max_sentences=6,
            src_lang="en",
            tgt_lang="de",
            lang_tag=True,
            whisper_pad_seconds=30.0,
        ),
        train=TrainConfig(
            task="st",
            lr=1e-3,
            warmup_updates=1,
            max_updates=1,
            seed=1,
            save_dir=str(save_dir),
            save_interval_updates=1,
            keep_last=1,
            validate_interval_updates=1,
            log_interval=1,
            valid_decode=False,
            stages=stages,
        ),
    )
    run_training(cfg)
    return save_dir / "checkpoint_last.safetensors"
