"""The bundled models (the default, and `multilingual` by name) load from the package alone and translate the
example clips as recorded; `export_model` keeps what inference needs, in float16, and the exported model decodes
as the original."""

import csv
from pathlib import Path

import pytest
import torch

import speechmt.pretrained as pretrained
from speechmt import load_model, translate
from speechmt.checkpoint import CheckpointError, load_checkpoint
from speechmt.cli import main
from speechmt.models.build import count_parameters
from speechmt.models.config import ModelConfig
from speechmt.pretrained import BUNDLED, DEFAULT_MODEL, default_model_path, export_model, model_path

EXAMPLES = Path(__file__).parents[2] / "examples"


def _expected() -> dict[str, str]:
    """file -> the bundled model's recorded translation (examples/default_model_outputs.tsv)."""
    with open(EXAMPLES / "default_model_outputs.tsv", encoding="utf-8") as f:
        return {row["file"]: row["translation"] for row in csv.DictReader(f, delimiter="\t")}


def test_default_model_is_bundled_small_and_loads_as_float32():
    path = default_model_path()
    assert path == DEFAULT_MODEL and path.stat().st_size <= 25 * 10**6
    state = load_checkpoint(path)
    assert "train_state" not in state and "optimizer" not in state
    assert all(v.dtype == torch.float16 for v in state["model"].values() if v.is_floating_point())
    assert state["base"]["sources"] == ["whisper-base", "gemma-3-270m"] and len(state["base"]["sha256"]) == 64
    # the file holds the projection and the LM's adapters; Whisper base and Gemma 3 270M are set-up's
    assert all(".lora_" in k or k.startswith("speech_encoder.proj.") for k in state["model"])
    lm = load_model(path)  # from $SPEECHMT_HOME/whisper-base and gemma-3-270m, their checksum checked
    assert lm.task == "st" and lm.tokenizer.kind == "lm" and lm.frontend.name == "whisper_mel"
    assert lm.frontend.config.n_mels == 80 and lm.frontend.config.pad_seconds == 15  # trained at 30 s, level at 15 s
    assert (lm.min_input_samples, lm.max_input_seconds) == (201, 30.0)  # one log-mel frame; Whisper's window
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())
    assert (
        count_parameters(lm.model, trainable_only=True)
        == sum(v.numel() for v in state["model"].values() if v.is_floating_point())
        == 4_125_312
    )
    assert 340_000_000 < count_parameters(lm.model) < 350_000_000  # Whisper base + Gemma 3 270M + the adapters
    assert state["provenance"]["data"].startswith("MuST-C-mini full")


def test_default_model_translates_the_examples_as_recorded():
    expected = _expected()
    lm = load_model(default_model_path())
    results = translate(lm, [EXAMPLES / f for f in expected], beam=5)
    assert {Path(r.source).name: r.text for r in results} == expected


def test_the_default_model_reads_whispers_own_search_into_gemma_with_lora():
    """Whisper base transcribes (frozen, encoder whisper_asr, asr_embed lm); a Linear(512 -> 640) of its decoder's
    states and LoRA rank 16 in the 7 projections of Gemma 3 270M's 18 layers train: 328,320 + 3,796,992."""
    state = load_checkpoint(default_model_path())
    cfg = ModelConfig.from_dict(state["model_config"])
    assert (cfg.encoder.kind, cfg.encoder.name_or_path, cfg.encoder.finetune, cfg.encoder.asr_embed) == (
        "whisper_asr",
        "whisper-base",
        "frozen",
        "lm",
    )
    assert (cfg.decoder.kind, cfg.decoder.name_or_path, cfg.decoder.finetune, cfg.lora.rank, cfg.lora.alpha) == (
        "lm",
        "gemma-3-270m",
        "lora",
        16,
        32,
    )
    sizes = {
        part: sum(v.numel() for k, v in state["model"].items() if k.startswith(part))
        for part in ("speech_encoder.", "decoder.")
    }
    assert sizes == {"speech_encoder.": 512 * 640 + 640, "decoder.": 4_125_312 - 328_320}


def test_cli_translate_uses_the_default_model(capsys):
    clip = sorted(_expected())[0]
    assert main(["translate", str(EXAMPLES / clip), "--timing"]) == 0
    file, text, timing = capsys.readouterr().out.rstrip("\n").split("\t")
    assert file == str(EXAMPLES / clip) and text == _expected()[clip] and timing.endswith("s of audio")


def test_missing_default_model_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pretrained, "DEFAULT_MODEL", tmp_path / "gone.safetensors")
    assert main(["translate", str(EXAMPLES / sorted(_expected())[0])]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"speechmt: error: {tmp_path / 'gone.safetensors'}: the bundled default model is missing from this "
        "installation; pass --model CHECKPOINT"
    )


MULTILINGUAL = ("en-de", "en-fr", "en-es", "en-it", "de-en", "fr-en", "es-en", "it-en")


def _recorded_multilingual() -> dict[str, dict[str, str]]:
    """target language -> file -> the multilingual model's recorded translation (examples/multilingual_model_outputs.tsv)."""
    out: dict[str, dict[str, str]] = {}
    with open(EXAMPLES / "multilingual_model_outputs.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out.setdefault(row["tgt_lang"], {})[row["file"]] = row["translation"]
    return out


def test_the_multilingual_model_is_bundled_by_name_with_its_eight_directions(capsys):
    path = model_path("multilingual")
    assert path == BUNDLED["multilingual"] and path.stat().st_size <= 25 * 10**6
    assert model_path(None) == model_path("default") == DEFAULT_MODEL and model_path("x.safetensors") == "x.safetensors"
    state = load_checkpoint(path)
    assert all(".lora_" in k or k.startswith("speech_encoder.proj.") for k in state["model"])
    assert sum(v.numel() for v in state["model"].values()) == 4_125_312  # the default's shape
    assert set(state["resolved"]["encoder.asr_languages"]) == {"en", "de", "fr", "es", "it"}
    # the hand-over is Whisper's beam-5 transcript as Gemma's own text, the state projection at zero
    encoder = state["model_config"]["encoder"]
    assert (encoder["asr_embed"], encoder["asr_beam"]) == ("text", 5)
    assert all(float(v.abs().max()) == 0.0 for k, v in state["model"].items() if k.startswith("speech_encoder.proj."))
    lm = load_model("multilingual", tgt_lang="fr")
    assert tuple(lm.directions) == MULTILINGUAL and lm.tag == "<fr>"
    clip = sorted(_recorded_multilingual()["fr"])[0]
    assert translate(lm, [EXAMPLES / clip], beam=5)[0].text == _recorded_multilingual()["fr"][clip]
    assert main(["translate", "--model", "multilingual", "--tgt-lang", "ru", str(EXAMPLES / clip)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "*-ru: the model was not trained in that direction; it knows "
            + ", ".join(MULTILINGUAL)
            + " (name --src-lang / --tgt-lang)"
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("tgt", ["de", "fr"])
def test_the_multilingual_model_translates_the_examples_as_recorded(tgt):
    expected = _recorded_multilingual()[tgt]
    results = translate(load_model("multilingual", tgt_lang=tgt), [EXAMPLES / f for f in expected], beam=5)
    assert {Path(r.source).name: r.text for r in results} == expected


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tiny_data):
    """A tiny ST checkpoint trained for 4 updates (with optimiser and training state)."""
    from speechmt.config import save_config
    from tests.helpers import tiny_config

    exp = tmp_path_factory.mktemp("exp")
    cfg = tiny_config(tiny_data, exp, max_updates=4, valid_decode=False)
    save_config(cfg, exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return exp / "checkpoint_last.safetensors"


def test_export_keeps_inference_state_in_float16(tiny_checkpoint, tmp_path, tiny_data):
    info = export_model(tiny_checkpoint, tmp_path / "m.safetensors", provenance={"data": "replica"})
    full, slim = load_checkpoint(tiny_checkpoint), load_checkpoint(tmp_path / "m.safetensors")
    assert full["model_config"]["encoder"]["kind"] == "conv"  # checkpoints store the nested config
    assert "train_state" in full and "train_state" not in slim and slim["provenance"] == {"data": "replica"}
    assert info["params"] == sum(v.numel() for v in full["model"].values() if v.is_floating_point())
    for k, v in full["model"].items():
        assert torch.equal(slim["model"][k], v.half() if v.is_floating_point() else v)
    a, b = load_model(tiny_checkpoint), load_model(tmp_path / "m.safetensors")
    feats = torch.randn(2, 60, 80)
    lengths = torch.tensor([60, 41])
    with torch.no_grad():
        ea, eb = a.model.encode_speech(feats, lengths), b.model.encode_speech(feats, lengths)
        assert (ea.x - eb.x).abs().max() < 2e-2
        prefix = torch.tensor([[2, 5, 9, 11], [2, 7, 7, 3]])
        la, lb = a.model.decode(prefix, ea), b.model.decode(prefix, eb)
    assert la.shape == (2, 4, a.model.config.tgt_vocab_size)
    assert (la.log_softmax(-1) - lb.log_softmax(-1)).abs().max() < 5e-2  # float16 rounding of the weights only
    again = tmp_path / "again.safetensors"
    export_model(tmp_path / "m.safetensors", again)  # a re-export keeps the provenance
    assert load_checkpoint(again)["provenance"] == {"data": "replica"}
    with pytest.raises(
        CheckpointError, match="--whisper-pad-seconds is for models on Whisper's log-mel input; this one reads fbank$"
    ):
        export_model(tiny_checkpoint, tmp_path / "x.safetensors", whisper_pad_seconds=15)


def test_export_memory_for_a_model_without_examples_is_one_line(tiny_checkpoint, tmp_path, capsys):
    assert main(["export", str(tiny_checkpoint), "--out", str(tmp_path / "m.safetensors"), "--memory", "tm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"speechmt: error: {tiny_checkpoint}: cannot name a translation memory"
    )
    assert "decoder.memory: not an option of decoder 'transformer'" in err and not (tmp_path / "m.safetensors").exists()


def test_cli_export_fp32_is_exact(tiny_checkpoint, tmp_path, capsys):
    assert main(["export", str(tiny_checkpoint), "--out", str(tmp_path / "m32.safetensors"), "--fp32"]) == 0
    assert "float32 weights, inference only" in capsys.readouterr().out
    full, slim = load_checkpoint(tiny_checkpoint), load_checkpoint(tmp_path / "m32.safetensors")
    assert all(torch.equal(slim["model"][k], v) for k, v in full["model"].items())
