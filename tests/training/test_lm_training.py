"""Training with a causal LM as the decoder: MT through the LM's own embeddings, ST through a frozen (cached)
Whisper encoder and a bridge, LoRA delta checkpoints that load from their bases, and one checkpoint decoding
several tasks by prompt. A tiny random Gemma 3 and a tiny random Whisper, both in local folders."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from speechmt.checkpoint import load_checkpoint
from speechmt.cli.main import main
from speechmt.config import DataConfig, ExperimentConfig, TrainConfig
from speechmt.decoding.translate import load_model
from speechmt.evaluation.evaluate import decode_split, references
from speechmt.models.config import ModelConfig
from speechmt.training.run import run_training
from tests.lm_helpers import tiny_lm_dir
from tests.whisper_helpers import tiny_whisper_dir

LORA = {
    "rank": 8,
    "alpha": 16,
    "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm_train"), hidden=64)


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return tiny_whisper_dir(tmp_path_factory.mktemp("tiny_whisper_lm"), d_model=32)


def lm_config(data: Path, lm: Path, save_dir: Path, model: dict, **train) -> ExperimentConfig:
    defaults = dict(
        task="st",
        lr=3e-3,
        warmup_updates=5,
        max_updates=120,
        save_dir=str(save_dir),
        save_interval_updates=60,
        validate_interval_updates=60,
        log_interval=50,
        seed=1,
        label_smoothing=0.0,
        keep_last=2,
        valid_decode=False,
    )
    base = {
        "decoder": {"kind": "lm", "name_or_path": str(lm), "finetune": "full"},
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "n_heads": 2,
    }
    return ExperimentConfig(
        model=ModelConfig(**{**base, **model}),
        data=DataConfig(
            dir=str(data),
            spec_augment="",
            max_tokens=4000,
            max_sentences=6,
            src_lang="en",
            tgt_lang="de",
            lang_tag=True,
        ),
        train=TrainConfig(**{**defaults, **train}),
    )


def _last(save_dir: Path) -> Path:
    return save_dir / "checkpoint_last.safetensors"


def _exact(lm, data, split, task):
    decoded = decode_split(lm, data, split, lm.decode_options(beam=2))
    refs = references(task, decoded.records)
    return sum(h == r for h, r in zip(decoded.hyps, refs)), list(zip(decoded.hyps, refs))


@pytest.fixture(scope="module")
def trained_mt(tiny_data, lm_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("lm_mt")
    cfg = lm_config(
        tiny_data,
        lm_dir,
        save_dir,
        {"text_encoder": {"embed_only": True, "embeddings": "lm"}},
        task="mt",
        lr=1e-2,
        max_updates=80,
        save_interval_updates=80,
        validate_interval_updates=80,
    )
    run_training(cfg)
    return cfg, save_dir


def test_lm_mt_learns_its_training_translations_and_stores_the_lm_by_reference(trained_mt, tiny_data, lm_dir):
    _, save_dir = trained_mt
    ckpt = load_checkpoint(_last(save_dir))
    assert ckpt["tokenizers"]["tgt"]["kind"] == "lm" and ckpt["tokenizers"]["src"]["config"]["role"] == "source"
    assert (
        "tokenizer_json" not in ckpt["tokenizers"]["tgt"] and len(ckpt["tokenizers"]["tgt"]["config"]["sha256"]) == 64
    )
    assert "base" not in ckpt  # every weight trains (finetune full): a whole checkpoint
    lm = load_model(_last(save_dir))
    assert lm.task == "mt" and lm.tokenizer.kind == "lm"
    exact, pairs = _exact(lm, tiny_data, "train", "mt")
    assert exact >= 5, pairs


def test_bf16_autocast_trains_on_the_cpu_with_float32_weights(trained_mt, tiny_data, lm_dir, tmp_path):
    fp32_cfg, fp32_dir = trained_mt
    cfg = lm_config(
        tiny_data,
        lm_dir,
        tmp_path,
        {"text_encoder": {"embed_only": True, "embeddings": "lm"}},
        task="mt",
        lr=1e-2,
        max_updates=80,
        save_interval_updates=80,
        validate_interval_updates=80,
        precision="bf16",
    )
    run_training(cfg)
    ckpt = load_checkpoint(_last(tmp_path))
    assert {t.dtype for t in ckpt["model"].values() if t.is_floating_point()} == {torch.float32}  # master weights
    logged = [
        next(r for r in map(json.loads, (d / "train_log.jsonl").read_text().splitlines()) if r["type"] == "train")
        for d in (fp32_dir, tmp_path)
    ]
    # the same batches from the same weights: bf16 matmuls move the loss at update 50 a little, not much
    assert logged[0]["step"] == logged[1]["step"] == 50 and logged[0]["loss"] != logged[1]["loss"]
    assert logged[1]["loss"] == pytest.approx(logged[0]["loss"], abs=0.15)
    exact, pairs = _exact(load_model(_last(tmp_path)), tiny_data, "train", "mt")
    assert exact >= 5, pairs


def test_lm_mt_with_retrieved_examples_reads_them_in_training_and_in_evaluation(tiny_data, lm_dir, tmp_path):
    from speechmt.checkpoint import CheckpointError
    from speechmt.data.manifest import ManifestError, read_split
    from speechmt.data.retrieval import read_examples, retrieve_splits
    from speechmt.decoding.cascade import translate_texts
    from speechmt.tokenizers.lm import few_shot_source
    from speechmt.training.builders import build_dataset, tokenizers_for

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    retrieve_splits(data, ["train", "dev"], ["train"], k=2)
    decoder = {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "full", "examples": 1}
    cfg = lm_config(
        data,
        lm_dir,
        tmp_path / "exp",
        {"text_encoder": {"embed_only": True, "embeddings": "lm"}, "decoder": decoder},
        task="mt",
        lr=1e-2,
        max_updates=80,
        save_interval_updates=80,
        validate_interval_updates=80,
    )
    records = read_split(data, "train")
    composed = [
        few_shot_source(r.src_text, ex[:1], "en", "de") for r, ex in zip(records, read_examples(data, "train", records))
    ]
    assert all("\nGerman: " in c for c in composed)  # every training sentence shares a word with another
    toks = tokenizers_for(cfg)
    dataset = build_dataset(cfg, "train", toks, None, train=True)
    assert [list(dataset[i].src_ids) for i in range(len(records))] == [toks.src.encode(c) for c in composed]
    run_training(cfg)
    lm = load_model(_last(tmp_path / "exp"))
    assert lm.examples == 1
    decoded = decode_split(lm, data, "train", lm.decode_options(beam=2))
    assert [r.src_text for r in decoded.records] == [r.src_text for r in records]  # the report's sources stay plain
    assert decoded.memory_lengths == [len(toks.src.encode(c)) for c in composed]  # what the model read
    exact = sum(h == r.tgt_text for h, r in zip(decoded.hyps, records))
    assert exact >= 5, list(zip(decoded.hyps, [r.tgt_text for r in records]))
    with pytest.raises(ManifestError, match="no retrieved examples for split 'tst-COMMON'"):
        decode_split(lm, data, "tst-COMMON", lm.decode_options(beam=2))
    with pytest.raises(CheckpointError, match="reads 1 retrieved examples before each source"):
        translate_texts(lm, ["Hello."], lm.decode_options(beam=2))


@pytest.fixture(scope="module")
def trained_st(tiny_data, lm_dir, whisper_dir, tmp_path_factory):
    """ST + ASR on a frozen tiny Whisper (cached), conv-shrunk 4x, into the LM with LoRA."""
    save_dir = tmp_path_factory.mktemp("lm_st")
    model = {
        "encoder": {"kind": "whisper", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        "shrink": {"kind": "conv", "channels": 64},
        "lora": LORA,
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "lora"},
    }
    stages = [
        {"name": "bridge", "updates": 30, "freeze": ["decoder."], "tasks": [{"task": "st"}]},
        {"name": "st+asr", "tasks": [{"task": "st"}, {"task": "asr"}]},
    ]
    cfg = lm_config(
        tiny_data, lm_dir, save_dir, model, stages=stages, max_updates=60, lr=5e-3, save_interval_updates=30
    )
    run_training(cfg)
    return cfg, save_dir


def test_lm_st_delta_checkpoint_holds_the_bridge_and_adapters_and_reloads_exactly(
    trained_st, tiny_data, lm_dir, whisper_dir
):
    _, save_dir = trained_st
    ckpt = load_checkpoint(_last(save_dir))
    assert ckpt["base"]["sources"] == [str(whisper_dir), str(lm_dir)]
    keys = set(ckpt["model"])
    assert keys and all(k.startswith(("speech_encoder.proj", "shrink.")) or ".lora_" in k for k in keys), sorted(keys)[
        :5
    ]
    assert any(".lora_" in k for k in keys) and any(k.startswith("shrink.") for k in keys)
    assert ckpt["model_config"]["d_model"] == 64
    assert len(ckpt["resolved"]["decoder.vocab"]) == ckpt["model_config"]["tgt_vocab_size"]  # derived: the bundle's
    assert not {"vocab", "prompt"} & set(ckpt["model_config"]["decoder"])
    a, b = load_model(_last(save_dir)), load_model(_last(save_dir))
    options = a.decode_options(beam=2)
    assert decode_split(a, tiny_data, "dev", options).hyps == decode_split(b, tiny_data, "dev", options).hyps
    state = {k: v for k, v in a.model.state_dict().items() if k in keys}
    assert all(torch.equal(state[k], ckpt["model"][k].to(state[k].dtype)) for k in keys)


def test_one_lm_checkpoint_decodes_each_task_by_its_prompt(trained_st):
    _, save_dir = trained_st
    st, asr = load_model(_last(save_dir)), load_model(_last(save_dir), task="asr")
    tok = st.tokenizer
    assert tok.to_lm_ids(st.decode_options().prefix) == tok.text_ids("German:")
    assert tok.to_lm_ids(asr.decode_options().prefix) == tok.text_ids("English:")
    assert st.decode_options().bos_id == tok.bos_id == 2 and tok.to_lm_ids([tok.bos_id]) == tok.text_ids("\n")


def test_a_stage_that_freezes_the_lm_still_saves_its_adapters(trained_st):
    _, save_dir = trained_st
    during = load_checkpoint(save_dir / "checkpoint_30.safetensors")  # the end of the bridge stage
    after = load_checkpoint(_last(save_dir))
    assert set(during["model"]) == set(after["model"])
    lora_b = [k for k in during["model"] if ".lora_B." in k]
    assert lora_b and all(during["model"][k].abs().max() == 0 for k in lora_b)  # peft starts B at zero: untouched
    assert all(after["model"][k].abs().max() > 0 for k in lora_b)  # they train in stage 2


@pytest.fixture(scope="module")
def trained_ctc_bridge(tiny_data, lm_dir, whisper_dir, tmp_path_factory):
    """The CTC bridge (shrink.embed lm): a CTC stage over the LM's tokens with the LM frozen, then ST + CTC."""
    save_dir = tmp_path_factory.mktemp("lm_ctc")
    model = {
        "encoder": {"kind": "whisper", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        "shrink": {"kind": "ctc", "embed": "lm"},
        "lora": LORA,
        "text_encoder": {"embed_only": True, "embeddings": "lm"},
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "lora"},
    }
    stages = [
        {"name": "ctc", "updates": 40, "freeze": ["decoder."], "tasks": [{"task": "st", "objectives": {"ctc": 1.0}}]},
        {"name": "st", "tasks": [{"task": "st", "objectives": {"ce": 1.0, "ctc": 0.3}}]},
    ]
    cfg = lm_config(
        tiny_data,
        lm_dir,
        save_dir,
        model,
        stages=stages,
        max_updates=60,
        lr=5e-3,
        save_interval_updates=20,
        validate_interval_updates=20,
        log_interval=10,
    )
    run_training(cfg)
    return cfg, save_dir


def test_the_ctc_bridge_learns_the_transcripts_in_lm_tokens_and_reloads_exactly(trained_ctc_bridge, tiny_data, lm_dir):
    from speechmt.data.manifest import read_split
    from speechmt.tokenizers.lm import LMTokenizer

    _, save_dir = trained_ctc_bridge
    ckpt = load_checkpoint(_last(save_dir))
    src = LMTokenizer.from_pretrained(str(lm_dir), role="source")
    transcripts = [r.src_text for r in read_split(str(tiny_data), "train")]
    vocab = tuple(dict.fromkeys(i for t in transcripts for i in src.encode(t)))
    config = ckpt["model_config"]
    assert ckpt["resolved"]["ctc_vocab"] == list(vocab) and "ctc_vocab" not in config  # derived: the bundle's
    assert config["src_vocab_size"] == 5 + len(vocab)
    assert ckpt["model"]["ctc_head.weight"].shape[0] == 5 + len(vocab)
    log = [json.loads(line) for line in (save_dir / "train_log.jsonl").read_text().splitlines()]
    ctc = [(r["step"], r["ctc"]) for r in log if r["type"] == "train" and r["step"] <= 40]
    assert [s for s, _ in ctc] == [10, 20, 30, 40] and ctc[-1][1] < 0.7 * ctc[0][1], (
        ctc
    )  # the CTC over LM tokens learns
    a, b = load_model(_last(save_dir)), load_model(_last(save_dir))
    options = a.decode_options(beam=2)
    assert decode_split(a, tiny_data, "dev", options).hyps == decode_split(b, tiny_data, "dev", options).hyps


@pytest.fixture(scope="module")
def trained_whisper_asr(tiny_data, lm_dir, whisper_dir, tmp_path_factory):
    """Whisper's own search (whisper_asr, 30 s input, cached) into the LM: the projection alone, then + LoRA."""
    import dataclasses

    save_dir = tmp_path_factory.mktemp("lm_wasr")
    model = {
        "encoder": {"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        "lora": LORA,
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "lora"},
    }
    stages = [
        {"name": "bridge", "updates": 20, "freeze": ["decoder."], "tasks": [{"task": "st"}]},
        {"name": "st", "tasks": [{"task": "st"}]},
    ]
    cfg = lm_config(
        tiny_data,
        lm_dir,
        save_dir,
        model,
        stages=stages,
        max_updates=60,
        lr=1e-2,
        save_interval_updates=60,
        log_interval=10,
    )
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, whisper_pad_seconds=30.0))
    run_training(cfg)
    return cfg, save_dir


def test_st_through_whisper_own_search_trains_on_cached_states_and_reloads_exactly(
    trained_whisper_asr, tiny_data, whisper_dir, lm_dir
):
    # a random tiny Whisper transcribes every clip alike (one token repeated): its states barely differ, so this
    # checks the plumbing (cache, delta checkpoint, loss falling, exact reload), not that it tells clips apart
    _, save_dir = trained_whisper_asr
    ckpt = load_checkpoint(_last(save_dir))
    assert ckpt["base"]["sources"] == [str(whisper_dir), str(lm_dir)]
    keys = set(ckpt["model"])
    assert keys and all(k.startswith("speech_encoder.proj") or ".lora_" in k for k in keys), sorted(keys)[:5]
    encoder = ckpt["model_config"]["encoder"]
    hf = ckpt["resolved"]["encoder.hf_config"]  # the complete HF config the build derived: the bundle's
    assert ckpt["resolved"]["encoder.asr_prompt"] == [hf["decoder_start_token_id"]]
    assert set(ckpt["resolved"]) == {
        "encoder.asr_prompt",
        "decoder.vocab",
        "decoder.prompt",
        "encoder.hf_config",
        "decoder.hf_config",
    }
    assert "asr_prompt" not in encoder and encoder["hf_config"] == {}  # what the build derived is no config field
    metas = [json.loads(p.read_text()) for p in (tiny_data / "encoder_cache").glob("*/meta.json")]
    assert any(m["encoder"] == "WhisperAsrEncoder" and m["frontend"]["pad_seconds"] == 30 for m in metas)
    log = [json.loads(line) for line in (save_dir / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if r["type"] == "train"]
    assert len(losses) == 6 and losses[-1] < 0.8 * losses[0], losses
    a, b = load_model(_last(save_dir)), load_model(_last(save_dir))
    options = a.decode_options(beam=2)
    assert decode_split(a, tiny_data, "dev", options).hyps == decode_split(b, tiny_data, "dev", options).hyps


def test_the_align_objective_trains_a_whisper_asr_projection_toward_the_lm_embeddings(
    tiny_data, lm_dir, whisper_dir, tmp_path
):
    """align on asr_embed states: the run hands the encoder the LM's table of Whisper's pieces, the objective pairs
    each cached token's projection with the LM's embedding of its text, and its loss falls as the projection learns."""
    import dataclasses

    model = {
        "encoder": {
            "kind": "whisper_asr",
            "name_or_path": str(whisper_dir),
            "finetune": "frozen",
            "asr_embed": "states",
            "asr_state": "before",
        },
        "text_encoder": {"embed_only": True, "embeddings": "lm"},
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "frozen"},
    }
    stages = [{"name": "align", "tasks": [{"task": "st", "objectives": {"align": 1.0}}]}]
    cfg = lm_config(
        tiny_data,
        lm_dir,
        tmp_path,
        model,
        stages=stages,
        max_updates=30,
        lr=3e-2,
        save_interval_updates=30,
        validate_interval_updates=30,
        log_interval=5,
    )
    run_training(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, whisper_pad_seconds=30.0)))
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if r["type"] == "train"]
    assert len(losses) == 6 and losses[-1] < 0.5 * losses[0], losses
    assert set(load_checkpoint(_last(tmp_path))["model"]) == {"speech_encoder.proj.weight", "speech_encoder.proj.bias"}


def test_init_procrustes_fits_a_whisper_asr_projection_from_the_encoder_cache_as_from_a_live_search(
    tiny_data, lm_dir, whisper_dir, tmp_path, monkeypatch
):
    """train.init_procrustes on asr_embed states reads the states training reads: the encoder cache (built before
    the fit), or with data.cache_encoder false a live search; both hand the fit the same pairs (float16's rounding
    of the cached states aside) and the run starts from the fitted projection."""
    import dataclasses

    import numpy as np

    from speechmt.training import procrustes

    fitted = []
    fit = procrustes.fit_least_squares
    monkeypatch.setattr(procrustes, "fit_least_squares", lambda x, y: fitted.append((x, y)) or fit(x, y))
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    model = {
        "encoder": {
            "kind": "whisper_asr",
            "name_or_path": str(whisper_dir),
            "finetune": "frozen",
            "asr_embed": "states",
            "asr_state": "both",
        },
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "frozen"},
    }
    biases = []
    for cache in (True, False):
        cfg = lm_config(
            data, lm_dir, tmp_path / f"exp{cache}", model, max_updates=0, init_procrustes=4, init_map="least_squares"
        )
        cfg = dataclasses.replace(
            cfg, data=dataclasses.replace(cfg.data, whisper_pad_seconds=30.0, cache_encoder=cache, valid_split="")
        )
        run_training(cfg)
        biases.append(load_checkpoint(_last(tmp_path / f"exp{cache}"))["model"]["speech_encoder.proj.bias"])
        assert any((data / "encoder_cache").iterdir())  # built by the first run for training, read by its fit
    (cx, cy), (x, y) = fitted
    assert x.shape[0] > 4 and x.shape[1] == 64 and cx.shape == x.shape
    np.testing.assert_array_equal(cy, y)  # the same tokens, read off the cached states
    np.testing.assert_allclose(cx, x, atol=2e-2)
    assert not np.array_equal(cx, x)  # the first fit read the cache's float16 states, not a search of its own
    torch.testing.assert_close(biases[0], biases[1], atol=1e-2, rtol=0)
    m = fit(x, y)
    torch.testing.assert_close(
        biases[1], torch.from_numpy(m.y_mean - m.scale * m.x_mean @ m.w).float(), atol=1e-5, rtol=0
    )


def test_st_with_retrieved_examples_reads_them_before_the_speech(tiny_data, lm_dir, whisper_dir, tmp_path, monkeypatch):
    """decoder.examples on the speech path: training reads each utterance's retrieved examples (by its gold
    transcript) as the LM's text before Whisper's vectors; decoding finds them in a translation memory by the
    model's own transcript."""
    import dataclasses

    from speechmt.checkpoint import CheckpointError
    from speechmt.data.batching import collate_sequences
    from speechmt.data.manifest import read_split
    from speechmt.data.retrieval import read_examples, retrieve_splits
    from speechmt.decoding.translate import encode_inputs, encode_with_examples, with_memory
    from speechmt.tokenizers.lm import few_shot_source
    from speechmt.training.builders import build_dataset, tokenizers_for

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    retrieve_splits(data, ["train"], ["train"], k=2)
    model = {
        "encoder": {"kind": "whisper_asr", "name_or_path": str(whisper_dir), "finetune": "frozen"},
        "text_encoder": {"embed_only": True, "embeddings": "lm"},
        "lora": LORA,
        "decoder": {"kind": "lm", "name_or_path": str(lm_dir), "finetune": "lora", "examples": 1},
    }
    cfg = lm_config(
        data,
        lm_dir,
        tmp_path / "exp",
        model,
        max_updates=10,
        save_interval_updates=10,
        validate_interval_updates=10,
        lr=1e-2,
    )
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, whisper_pad_seconds=30.0, valid_split=""))
    toks = tokenizers_for(cfg)
    records = read_split(data, "train")
    dataset = build_dataset(cfg, "train", toks, None, train=True)
    prefixes = [few_shot_source("", ex[:1], "en", "de") for ex in read_examples(data, "train", records)]
    assert all(p.endswith("\nEnglish: ") for p in prefixes)  # encoded without the space: the speech follows
    assert [dataset[i].prefix.tolist() for i in range(len(records))] == [toks.src.encode(p) for p in prefixes]
    run_training(cfg)
    lm = load_model(_last(tmp_path / "exp"))
    assert lm.examples == 1 and lm.speech_examples and lm.languages() == ("English", "German")
    with pytest.raises(
        CheckpointError,
        match=r"reads 1 retrieved examples before the speech \(decoder.examples\) "
        r"and names no memory; give --memory",
    ):
        with_memory(lm, None)
    with pytest.raises(CheckpointError, match="this one reads none"):
        with_memory(load_model(_last(tmp_path / "exp"), task="asr"), [data / "train.jsonl"])
    lm = with_memory(lm, [data / "train.jsonl"])
    feats = [lm.frontend(w) for w in _waves(data, records[:2])]
    x, lengths = collate_sequences(feats)
    with pytest.raises(CheckpointError, match="names no memory; give --memory"):  # the API says what the CLI says
        encode_with_examples(load_model(_last(tmp_path / "exp")), x, lengths)
    states, state_lengths, ids = lm.model.speech_encoder.search(x, lengths)
    speech = lm.model.encode_speech(states, state_lengths, precomputed=True)
    # the tiny random Whisper hears no word, so no pair is found: the LM reads the speech alone
    assert not any(c.isalnum() for i in ids for c in lm.transcript_text(i))
    enc = encode_inputs(lm, feats)
    assert torch.equal(enc.lengths, speech.lengths) and torch.allclose(enc.x, speech.x)
    # as if Whisper heard the first two transcripts right: each one's nearest other pair comes first
    heard = iter([r.src_text for r in records[:2]])  # asked row by row
    lm.transcript_text = lambda i: next(heard)
    enc = encode_inputs(lm, feats)
    for b in range(2):
        found = lm.memory.search([records[b].src_text], 1)[0]
        assert found and found[0].src != records[b].src_text
        want = torch.tensor(toks.src.encode(few_shot_source("", [(found[0].src, found[0].tgt)], "en", "de")))
        p, n = len(want), int(speech.lengths[b])
        assert int(enc.lengths[b]) == p + n
        assert torch.allclose(enc.x[b, :p], lm.model.encode_text(want[None], torch.tensor([p])).x[0])
        assert torch.allclose(enc.x[b, p : p + n], speech.x[b, :n])
    del lm.transcript_text  # Whisper's own transcripts again
    evaluate = [
        "evaluate",
        "--model",
        str(_last(tmp_path / "exp")),
        "--data",
        str(data),
        "--split",
        "train",
        "--out",
        str(tmp_path / "eval"),
    ]
    for extra, line in (
        ([], "names no memory; give --memory"),
        (["--memory", str(data / "none.jsonl")], "none.jsonl: no such manifest for the translation memory"),
    ):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            assert main(evaluate + extra) == 2
        assert err.getvalue().count("\n") == 1 and line in err.getvalue(), err.getvalue()
    decoded = decode_split(lm, data, "train", lm.decode_options(beam=2), limit=3)
    assert len(decoded.hyps) == 3 and all(m > 0 for m in decoded.memory_lengths)
    # a model file that names its memory (export --memory: a name under $SPEECHMT_HOME) needs no --memory
    monkeypatch.setenv("SPEECHMT_HOME", str(tmp_path / "home"))
    exported = tmp_path / "model.safetensors"
    assert main(["export", str(_last(tmp_path / "exp")), "--out", str(exported), "--memory", "tm"]) == 0
    named = load_model(exported)
    assert named.model.config.decoder.memory == "tm"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "evaluate",
                    "--model",
                    str(exported),
                    "--data",
                    str(data),
                    "--split",
                    "train",
                    "--out",
                    str(tmp_path / "eval1"),
                ]
            )
            == 2
        )
    assert err.getvalue().count("\n") == 1 and "tm: no translation memory of that name" in err.getvalue()
    (tmp_path / "home" / "tm").mkdir(parents=True)
    shutil.copy(data / "train.jsonl", tmp_path / "home" / "tm" / "memory.jsonl")
    assert with_memory(named, None).memory.pairs == lm.memory.pairs
    assert decode_split(named, data, "train", named.decode_options(beam=2), limit=3).hyps == decoded.hyps
    # the Python API: the named memory is loaded on first use; or the one given
    import speechmt

    lazy = speechmt.load_model(exported)
    assert lazy.memory is None
    assert [t.text for t in speechmt.translate(lazy, _waves(data, records[:3]), beam=2)] == decoded.hyps
    assert lazy.memory.pairs == lm.memory.pairs
    given = speechmt.load_model(exported, memory=[data / "train.jsonl", data / "train.jsonl"])
    assert given.memory.pairs == lm.memory.pairs * 2
    # simultaneous: every step re-encodes the window, examples retrieved by the transcript so far; a policy that
    # waits to the end writes what offline greedy search writes from the examples and the whole input
    from speechmt.decoding.search import search
    from speechmt.decoding.simultaneous import SimultaneousConfig, translate_stream
    from speechmt.decoding.translate import encode_audio

    wave = _waves(data, records[:1])[0]
    lazy.transcript_text = lambda i: records[0].src_text  # as if Whisper heard it: examples are found
    enc = encode_audio(lazy, [wave])
    assert int(enc.lengths[0]) > int(speech.lengths[0])  # the examples' text before the speech
    options = lazy.decode_options(1, max_len_b=8)
    with torch.no_grad():
        offline = lazy.tokenizer.decode(search(lazy.model, enc, options)[0][0])
    streamed = translate_stream(lazy, wave, SimultaneousConfig("wait-k", k=1000, step_ms=200), options)
    assert streamed.text == offline.strip() and streamed.commits


def _waves(data: Path, records):
    from speechmt.data.manifest import record_audio

    return [record_audio(r, data) for r in records]
