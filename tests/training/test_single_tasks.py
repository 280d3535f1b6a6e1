"""ASR alone and MT alone, each trained by the trainer to fit its data and decode its exact targets."""

import pytest

from speechmt import load_model
from speechmt.evaluation.evaluate import decode_split, references, score
from speechmt.training.run import run_training
from tests.helpers import tiny_config


@pytest.mark.parametrize("task, metric, perfect", [("asr", "WER", 0.0), ("mt", "BLEU", 100.0)])
def test_a_single_task_run_fits_its_training_split_exactly(tiny_data, tmp_path, task, metric, perfect):
    cfg = tiny_config(
        tiny_data,
        tmp_path,
        task=task,
        max_updates=150,
        lr=3e-3,
        warmup_updates=20,
        save_interval_updates=0,
        validate_interval_updates=0,
        valid_decode=False,
        label_smoothing=0.0,
    )
    cfg.data.valid_split = ""
    if task == "mt":
        cfg.model.text_encoder.layers = 2
    run_training(cfg)
    lm = load_model(tmp_path / "checkpoint_last.safetensors")
    assert lm.task == task
    decoded = decode_split(lm, tiny_data, "train", lm.decode_options(beam=1), 4000)
    refs = references(task, decoded.records)
    assert len(refs) == 6 and score(task, decoded.hyps, refs)[metric].score == pytest.approx(perfect)
    assert decoded.hyps == refs  # every transcript (asr) or translation (mt) exactly
