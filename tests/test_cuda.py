"""The CUDA path, where this machine has a GPU (skipped elsewhere; CI has none): the LM decoder's logits and beam
search, Whisper's transcript handed to the LM as text, and bf16 training of an LM-decoder model, each against
the same on the CPU. Run on a lent GPU machine with `pytest tests/test_cuda.py` (see research/mustc/LOG.md)."""

import dataclasses
import json

import pytest
import torch

from speechmt.decoding.search import DecodeOptions, beam_search
from speechmt.decoding.transcribe import SEARCH
from speechmt.decoding.translate import load_model
from speechmt.evaluation.evaluate import decode_split
from speechmt.models.build import build_model
from speechmt.models.config import ModelConfig
from speechmt.tasks.objectives import shift_right
from speechmt.training.run import run_training
from tests.lm_helpers import LM_RESOLVED, tiny_lm_dir
from tests.models.test_lm_decoder import TARGETS, batch_targets, lm_model, memory
from tests.models.test_whisper_asr import _mels
from tests.training.test_lm_training import lm_config
from tests.whisper_helpers import tiny_whisper_dir

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
GPU = torch.device("cuda")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_lm_dir(tmp_path_factory.mktemp("tiny_lm_cuda"), hidden=64)


@pytest.fixture(scope="module")
def tok(lm_dir):
    from speechmt.tokenizers.lm import LMTokenizer

    return LMTokenizer.trimmed(str(lm_dir), TARGETS, ["<de>", "<en>"])


@torch.no_grad()
def test_lm_decoder_logits_and_beam_search_on_the_gpu_equal_the_cpus(lm_dir, tok):
    torch.backends.cuda.matmul.allow_tf32 = False
    model = lm_model(lm_dir, tok)
    enc = memory([5, 2, 7], dim=64, seed=3)
    inputs = shift_right(batch_targets(tok, TARGETS)[0], tok.bos_id)
    cpu = model.decode(inputs, enc)
    gpu_model = lm_model(lm_dir, tok).to(GPU)
    gpu_enc = dataclasses.replace(enc, x=enc.x.to(GPU), lengths=enc.lengths.to(GPU))
    torch.testing.assert_close(gpu_model.decode(inputs.to(GPU), gpu_enc).cpu(), cpu, atol=1e-4, rtol=1e-4)
    options = DecodeOptions(
        beam_size=4,
        nbest=2,
        prefix=tok.prefix_ids("<de>"),
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        suppress=tok.suppress_ids,
        max_len_b=12,
    )
    on_cpu = [[h.tokens for h in hyps] for hyps in beam_search(model, enc, options)]
    on_gpu = [[h.tokens for h in hyps] for hyps in beam_search(gpu_model, gpu_enc, options)]
    assert on_gpu == on_cpu


@torch.no_grad()
def test_whispers_transcript_as_the_lms_text_on_the_gpu_equals_the_cpus(lm_dir, tmp_path):
    whisper = tiny_whisper_dir(tmp_path / "whisper", d_model=32)
    cfg = ModelConfig(
        encoder={
            "kind": "whisper_asr",
            "name_or_path": str(whisper),
            "finetune": "frozen",
            "asr_embed": "text",
            "asr_beam": 3,
        },
        decoder={"kind": "lm", "name_or_path": str(lm_dir), "finetune": "frozen"},
        n_heads=2,
    )
    torch.manual_seed(0)
    cpu = build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED).eval().speech_encoder
    gpu = build_model(cfg, transcription=SEARCH, resolved=LM_RESOLVED).eval().to(GPU).speech_encoder
    mels, lengths = _mels()
    states, n = cpu.states(mels, lengths)
    gpu_states, gpu_n = gpu.states(mels.to(GPU), lengths.to(GPU))
    assert gpu_n.tolist() == n.tolist()  # the same transcripts, re-tokenised alike
    torch.testing.assert_close(gpu_states.cpu(), states, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(gpu.project(gpu_states, gpu_n).x.cpu(), cpu.project(states, n).x, atol=1e-3, rtol=1e-3)


def _train_nll(save_dir) -> list[float]:
    lines = [json.loads(x) for x in (save_dir / "train_log.jsonl").read_text().splitlines()]
    return [x["ce_nll"] for x in lines if x["type"] == "train"]


def test_bf16_training_of_an_lm_decoder_on_the_gpu_learns_as_fp32_and_loads_on_the_cpu(tiny_data, lm_dir, tmp_path):
    """MT into the tiny LM, 80 updates each: fp32 on the CPU, fp32 and bf16 (autocast) on the GPU; each learns
    its training pairs (as tests/training/test_lm_training.py's MT on the CPU), and the bf16 model decodes
    alike on either device."""
    runs = {}
    for name, device, precision in (("cpu", "cpu", "fp32"), ("fp32", "cuda", "fp32"), ("bf16", "cuda", "bf16")):
        cfg = lm_config(
            tiny_data,
            lm_dir,
            tmp_path / name,
            {"text_encoder": {"embed_only": True, "embeddings": "lm"}},
            task="mt",
            lr=1e-2,
            max_updates=80,
            save_interval_updates=80,
            validate_interval_updates=80,
            log_interval=10,
            device=device,
            precision=precision,
        )
        run_training(cfg)
        runs[name] = _train_nll(tmp_path / name)
        assert runs[name][-1] < 0.25 * runs[name][0], runs
    models = [load_model(tmp_path / "bf16" / "checkpoint_last.safetensors", device=d) for d in ("cpu", "cuda")]
    assert next(models[1].model.parameters()).is_cuda
    decoded = [decode_split(m, tiny_data, "train", m.decode_options(beam=2)) for m in models]
    refs = [r.tgt_text for r in decoded[0].records]
    assert sum(h == r for h, r in zip(decoded[0].hyps, refs)) >= 5, list(zip(decoded[0].hyps, refs))
    assert sum(a == b for a, b in zip(decoded[0].hyps, decoded[1].hyps)) >= len(refs) - 1
