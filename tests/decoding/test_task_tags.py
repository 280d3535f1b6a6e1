"""One multi-task checkpoint transcribes and translates: it names the tag of every task it decodes
(decoder_tags) and the tokenizer its decoder writes (decoder_side); load_model(task=...) and
`speechmt translate|evaluate --task` pick them; old checkpoints without those keys load as before."""

import json

import pytest
import torch

import speechmt.decoding.search as search_module
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.cli import main
from speechmt.data.manifest import read_manifest
from speechmt.data.vocab import train_from_manifests
from speechmt.decoding.translate import load_model
from speechmt.models.hf_whisper import WhisperDecoderConfig
from speechmt.pretrained import export_model
from speechmt.tasks import Stage, TaskData
from speechmt.tokenizers.sentencepiece import Tokenizer, TokenizerConfig
from speechmt.training.builders import decoder_tags
from speechmt.training.run import run_training
from tests.conftest import ASSETS
from tests.helpers import tiny_config

WAV = ASSETS / "mustc/en-de/data/dev/wav/ted_3.wav"
QUICK = ["--beam", "2", "--max-len-b", "4"]  # a tiny model: a few tokens are enough to see the prefix


def _stages(cfg, asr_objectives=None):
    """MT for 2 updates, then ST + ASR + MT: one joint vocabulary, one decoder for all three."""
    cfg.train.stages = [
        Stage("mt", [TaskData("mt")], updates=2),
        Stage("all", [TaskData("st"), TaskData("asr", asr_objectives or {"ce": 1.0}), TaskData("mt")]),
    ]
    return cfg


@pytest.fixture(scope="module")
def multi(tiny_data, tmp_path_factory):
    """The last checkpoint of a 4-update MT -> ST+ASR+MT run."""
    out, threads = tmp_path_factory.mktemp("multi"), torch.get_num_threads()
    cfg = _stages(
        tiny_config(
            tiny_data, out, max_updates=4, valid_decode=False, save_interval_updates=4, validate_interval_updates=100
        )
    )
    cfg.model.text_encoder.layers = cfg.model.encoder.layers
    torch.set_num_threads(1)  # as the tests (conftest's _one_thread is set up after module fixtures)
    try:
        state = run_training(cfg)
    finally:
        torch.set_num_threads(threads)
    assert state.step == 4 and state.stage == 1
    return out / "checkpoint_last.safetensors"


@pytest.fixture(scope="module")
def joint(tiny_data):
    return Tokenizer.load(tiny_data / "spm.model")


@pytest.fixture(scope="module")
def transcripts_only(tiny_data):
    """A vocabulary other than the joint one (transcripts only, 60 pieces): shows which side is taken."""
    return train_from_manifests(
        [tiny_data / "train.jsonl"], ("src_text",), TokenizerConfig(vocab_size=60, lang_tags=("<en>",), num_threads=1)
    )


def _variant(path, out, drop=(), **changes):
    """A copy of checkpoint `path` at `out` without the keys `drop`, with `changes`."""
    state = load_checkpoint(path)
    state = {**{k: v for k, v in state.items() if k not in drop}, **changes}
    save_checkpoint(out, state)
    return out


def test_decoder_tags_name_every_task_whose_decoder_is_trained(tiny_data, tmp_path):
    cfg = _stages(tiny_config(tiny_data, tmp_path))
    assert decoder_tags(cfg) == {"st": "<de>", "mt": "<de>", "asr": "<en>"}
    assert list(decoder_tags(cfg)) == ["st", "mt", "asr"]  # the main task first
    assert decoder_tags(_stages(tiny_config(tiny_data, tmp_path), {"ctc": 1.0})) == {"st": "<de>", "mt": "<de>"}
    cfg.data.lang_tag = False
    assert decoder_tags(cfg) == {"st": None, "mt": None, "asr": None}
    cfg.data.lang_tag, cfg.model.decoder = True, WhisperDecoderConfig()
    assert decoder_tags(cfg) == {"st": "<|de|>", "mt": "<|de|>", "asr": "<|en|>"}


def test_the_checkpoint_stores_the_tag_of_each_task_and_the_decoder_side(multi, tmp_path):
    state = load_checkpoint(multi)
    assert state["decoder_tags"] == {"st": "<de>", "asr": "<en>", "mt": "<de>"}
    assert state["decoder_side"] == "tgt" and state["task"] == "st" and state["decoder_tag"] == "<de>"
    export_model(multi, tmp_path / "slim.safetensors")
    slim = load_checkpoint(tmp_path / "slim.safetensors")
    assert slim["decoder_tags"] == state["decoder_tags"] and slim["decoder_side"] == "tgt"


@pytest.mark.parametrize("task, tag", [(None, "<de>"), ("st", "<de>"), ("asr", "<en>"), ("mt", "<de>")])
def test_load_model_forces_the_tag_of_the_task_asked_for(multi, joint, task, tag):
    lm = load_model(multi, task=task)
    assert lm.task == (task or "st") and lm.tag == tag
    assert lm.decode_options().prefix == (joint.tag_id(tag),)
    assert joint.tag_id("<en>") != joint.tag_id("<de>")
    assert lm.tokenizer.to_bytes() == joint.to_bytes()  # the joint vocabulary for every task


def test_asr_of_a_multi_task_model_decodes_with_the_decoders_tokenizer(multi, joint, transcripts_only, tmp_path):
    """With another source vocabulary, decoder_side still gives the joint one (the old rule took src)."""
    tokenizers = {"src": transcripts_only.state_dict(), "tgt": joint.state_dict()}
    path = _variant(multi, tmp_path / "c.safetensors", tokenizers=tokenizers)
    lm = load_model(path, task="asr")
    assert len(joint) > len(transcripts_only)  # the sizes differ (140 and 60 with sentencepiece 0.2.3)
    assert lm.tokenizer.to_bytes() == joint.to_bytes() and len(lm.tokenizer) == len(joint)
    assert lm.source_tokenizer.to_bytes() == transcripts_only.to_bytes()
    assert lm.decode_options().prefix == (joint.tag_id("<en>"),)


def test_a_task_the_checkpoint_was_not_trained_for_is_one_clear_error(multi, tmp_path, capsys):
    path = _variant(multi, tmp_path / "st_mt.safetensors", decoder_tags={"st": "<de>", "mt": "<de>"})
    with pytest.raises(CheckpointError) as e:
        load_model(path, task="asr")
    assert str(e.value) == f"{path}: not trained for task 'asr'; it does st, mt"
    assert main(["translate", str(WAV), "--model", str(path), "--task", "asr"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"speechmt: error: {path}: not trained for task 'asr'; it does st, mt\n"
    assert captured.out == ""


def test_an_old_checkpoint_without_the_new_keys_loads_as_before(multi, joint, transcripts_only, tmp_path):
    old = _variant(multi, tmp_path / "old.safetensors", drop=("decoder_tags", "decoder_side"))
    lm = load_model(old)
    assert (lm.task, lm.tag, lm.decode_options().prefix) == ("st", "<de>", (joint.tag_id("<de>"),))
    assert lm.tokenizer.to_bytes() == joint.to_bytes() and load_model(old, task="st").tag == "<de>"
    with pytest.raises(CheckpointError, match=r"old\.safetensors: not trained for task 'asr'; it does st$"):
        load_model(old, task="asr")
    # an old ASR checkpoint: its decoder writes with the source tokenizer, its own tag first
    tokenizers = {"src": transcripts_only.state_dict(), "tgt": joint.state_dict()}
    old_asr = _variant(old, tmp_path / "old_asr.safetensors", task="asr", decoder_tag="<en>", tokenizers=tokenizers)
    lm = load_model(old_asr)
    assert lm.task == "asr" and lm.tokenizer.to_bytes() == transcripts_only.to_bytes()
    assert lm.decode_options().prefix == (transcripts_only.tag_id("<en>"),)


def _record_decoder_starts(monkeypatch) -> list[torch.Tensor]:
    """The first decoder inputs (n, 1 + len(prefix)) of every search from now on."""
    starts, original = [], search_module.start_tokens

    def recording(options, n, device):
        starts.append(original(options, n, device))
        return starts[-1]

    monkeypatch.setattr(search_module, "start_tokens", recording)
    return starts


@pytest.mark.parametrize("task, tag", [("asr", "<en>"), ("st", "<de>")])
def test_cli_translate_task_forces_its_tag_first(multi, joint, monkeypatch, capsys, task, tag):
    starts = _record_decoder_starts(monkeypatch)
    assert main(["translate", str(WAV), "--model", str(multi), "--task", task, "--format", "json", *QUICK]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["file"] == str(WAV) and isinstance(line["text"], str) and "error" not in line
    assert starts and all(s.shape[1] == 2 for s in starts)  # bos, then the forced tag: the first token written
    assert {int(i) for s in starts for i in s[:, 0]} == {joint.bos_id}
    assert {int(i) for s in starts for i in s[:, 1]} == {joint.tag_id(tag)}


def test_cli_evaluate_task_asr_scores_wer_against_transcripts(multi, tiny_data, joint, monkeypatch, tmp_path, capsys):
    starts = _record_decoder_starts(monkeypatch)
    out = tmp_path / "ev"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(multi),
                "--task",
                "asr",
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--out",
                str(out),
                *QUICK,
            ]
        )
        == 0
    )
    assert "WER = " in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["n"] == 2 and set(report["metrics"]) == {"WER", "CER"} and report["extra"]["task"] == "asr"
    assert {int(i) for s in starts for i in s[:, 1]} == {joint.tag_id("<en>")}
    transcripts = [r.src_text for r in read_manifest(tiny_data / "dev.jsonl")]
    assert (out / "refs.txt").read_text().splitlines() == transcripts  # the references: transcripts, in order


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_task_goes_with_model_not_with_a_cascade(command, capsys):
    extra = [str(WAV)] if command == "translate" else ["--data", "d", "--split", "dev"]
    assert main([command, *extra, "--cascade", "a.safetensors", "b.safetensors", "--task", "asr"]) == 2
    assert capsys.readouterr().err == (
        f"speechmt {command}: error: argument --task: invalid value 'asr': --task "
        "picks a --model's task, not a cascade's\n"
    )
    if command == "translate":  # audio in: st or asr; evaluate also scores a multi-task model's text MT
        assert main([command, *extra, "--task", "mt"]) == 2
        assert "argument --task: invalid choice: 'mt' (choose from 'st', 'asr')" in capsys.readouterr().err


def test_one_multi_task_checkpoint_is_st_asr_mt_and_a_cascade_in_one_benchmark(multi, tiny_data, tmp_path, capsys):
    """XSTNet's comparison: the same checkpoint as end-to-end ST, ASR, text MT, and ASR -> MT cascade."""
    out = tmp_path / "bench"
    assert (
        main(
            [
                "research",
                "benchmark",
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--out",
                str(out),
                "--beam",
                "2",
                "--model",
                str(multi),
                "--model",
                str(multi),
                "--model",
                str(multi),
                "--task",
                "st",
                "--task",
                "asr",
                "--task",
                "mt",
                "--name",
                "st",
                "--name",
                "asr",
                "--name",
                "mt",
                "--cascade",
                str(multi),
                str(multi),
            ]
        )
        == 0
    )
    rows = json.loads((out / "benchmark.json").read_text())["systems"]
    assert [(r["name"], r["task"], r["n"]) for r in rows] == [
        ("st", "st", 2),
        ("asr", "asr", 2),
        ("mt", "mt", 2),
        (f"cascade {multi.parent.name}/{multi.stem} -> {multi.parent.name}/{multi.stem}", "st", 2),
    ]
    assert set(rows[1]["metrics"]) == {"WER", "CER"} and set(rows[2]["metrics"]) == {"BLEU", "chrF", "chrF++"}
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(multi),
                "--task",
                "mt",
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--out",
                str(tmp_path / "ev"),
                *QUICK,
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["extra"]["task"] == "mt"
