"""speechmt.config: the YAML form of ExperimentConfig round-trips, overrides are YAML scalars on
section.key, and a bad config is a ConfigError naming the option (type checks of values: tests/cli/test_options.py)."""

from pathlib import Path

import pytest
import yaml

from speechmt.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    TrainConfig,
    apply_overrides,
    load_config,
    save_config,
)
from speechmt.models.config import PRESETS, ModelConfig
from speechmt.models.encoders.wav2vec2 import Wav2Vec2EncoderConfig
from speechmt.models.encoders.whisper import WhisperEncoderConfig
from speechmt.models.finetune import LoraSettings
from speechmt.tasks.schedule import Stage, TaskData

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
# experiment configs (pretrain-audio's w2v_pretrain_*.yaml are flat PretrainAudioConfig files)
EXPERIMENT_CONFS = sorted(
    p
    for folder in (RECIPES, RECIPES.parent / "research")
    for p in folder.glob("*/conf/*.yaml")
    if not p.name.startswith("w2v_pretrain")
)  # the research log's configs load too


def _rich_config() -> ExperimentConfig:
    """Every kind of value away from its default: tuples, dicts, None, a two-stage schedule."""
    hf_config = {"model_type": "wav2vec2", "conv_dim": [8, 8], "nested": {"x": 1.5}}
    model = ModelConfig(
        encoder=Wav2Vec2EncoderConfig(hf_config=hf_config, mask_time_length=3, layerdrop=0.1),
        lora=LoraSettings(targets=("q_proj", "v_proj")),
        d_model=96,
        n_heads=3,
        tgt_vocab_size=123,
        dropout=0.25,
        semantic={"kind": "xstnet", "options": {"layers": 2}},
        shrink={"kind": "conv", "kernel": 3},
    )
    data = DataConfig(dir="/data/x", src_lang="fr", lang_tag=False, max_tokens=500, spec_augment="")
    stages = [
        Stage(
            name="mt", tasks=[TaskData("mt", {"ce": 1.0}, valid_split="dev")], updates=20, freeze=["speech_encoder."]
        ),
        Stage(
            name="all",
            tasks=[TaskData("st", {"ce": 0.7, "ctc": 0.3}), TaskData("asr", data_dir="/data/y", split="tr", ratio=2.5)],
            mix="sample",
        ),
    ]
    train = TrainConfig(
        stages=stages,
        lr=5e-4,
        adam_betas=(0.9, 0.999),
        precision="bf16",
        weight_decay=0.01,
        label_smoothing=0.2,
        max_epochs=3,
    )
    return ExperimentConfig(model=model, data=data, train=train)


def test_yaml_round_trip(tmp_path):
    cfg = _rich_config()
    save_config(cfg, tmp_path / "c.yaml")
    back = load_config(tmp_path / "c.yaml")
    assert back == cfg
    assert back.train.adam_betas == (0.9, 0.999) and type(back.train.adam_betas) is tuple
    assert back.model.encoder.mask_time_length == 3 and back.model.lora.targets == ("q_proj", "v_proj")
    assert back.model.encoder.hf_config == {"model_type": "wav2vec2", "conv_dim": [8, 8], "nested": {"x": 1.5}}
    assert [s.name for s in back.train.stages] == ["mt", "all"] and isinstance(back.train.stages[1], Stage)
    assert back.train.stages[1].tasks[1] == TaskData("asr", {"ce": 1.0}, "/data/y", "tr", None, 2.5)
    assert back.train.stages[0].tasks[0].valid_split == "dev" and back.train.stages[0].freeze == ["speech_encoder."]
    # the file is plain YAML: lists for tuples, nothing Python-specific
    plain = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert plain["train"]["adam_betas"] == [0.9, 0.999] and plain["model"]["encoder"]["hf_config"]["conv_dim"] == [8, 8]
    assert plain["model"]["shrink"] == {"kind": "conv", "channels": 1024, "kernel": 3, "layers": 2}
    assert plain["train"]["stages"][1]["tasks"][0]["objectives"] == {"ce": 0.7, "ctc": 0.3}
    assert "!!python" not in (tmp_path / "c.yaml").read_text()
    # and a second round gives the same text
    save_config(back, tmp_path / "d.yaml")
    assert (tmp_path / "d.yaml").read_text() == (tmp_path / "c.yaml").read_text()


def test_defaults_round_trip_and_no_file_is_the_defaults(tmp_path):
    assert load_config(None) == ExperimentConfig()
    save_config(ExperimentConfig(), tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == ExperimentConfig()
    (tmp_path / "empty.yaml").write_text("")
    assert load_config(tmp_path / "empty.yaml") == ExperimentConfig()


@pytest.mark.parametrize("conf", EXPERIMENT_CONFS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_recipe_configs_load_and_round_trip(conf, tmp_path):
    cfg = load_config(conf)
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    assert type(cfg.train.lr) is float and cfg.train.lr > 0


def test_overrides_are_yaml_scalars(tmp_path):
    (tmp_path / "c.yaml").write_text("train:\n  lr: 2.0e-3\n  max_updates: 10\ndata:\n  dir: d\n")
    cfg = load_config(
        tmp_path / "c.yaml",
        [
            "train.lr=1.0e-3",
            "data.max_tokens=500",
            "train.precision=bf16",
            "data.lang_tag=false",
            "train.adam_betas=[0.9, 0.99]",
            "model.encoder.conv_kernels=[3, 3]",
            "train.stages=[{tasks: [{task: asr}]}]",
        ],
    )
    assert cfg.train.lr == 0.001 and type(cfg.train.lr) is float
    assert cfg.data.max_tokens == 500 and type(cfg.data.max_tokens) is int
    assert cfg.train.max_updates == 10 and cfg.data.dir == "d"  # from the file, untouched
    assert cfg.train.precision == "bf16" and cfg.data.lang_tag is False
    assert cfg.train.adam_betas == (0.9, 0.99) and cfg.model.encoder.conv_kernels == (3, 3)
    assert cfg.train.stages == [Stage(name="0", tasks=[TaskData("asr")])]
    assert load_config(None, ["train.lr=0.0005"]).train.lr == 0.0005
    assert load_config(None, ["train.save_dir=exp/a=b"]).train.save_dir == "exp/a=b"  # split at the first =
    assert load_config(None, ["train.lr=1.0e-3", "train.lr=3.0e-3"]).train.lr == 0.003  # the last one wins


def test_apply_overrides_edits_the_dict():
    d = {"train": {"lr": 1.0}}
    assert apply_overrides(d, ["train.lr=2.5", "data.dir=x"]) is d
    assert d == {"train": {"lr": 2.5}, "data": {"dir": "x"}}


@pytest.mark.parametrize("item", ["lr=1", "train.lr", "model.encoder..layers=8", "=1", "train.=1", ".lr=1"])
def test_malformed_override_names_the_form(item):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert str(e.value) == f"override {item!r}: expected section.key=value, e.g. train.lr=1e-3"


@pytest.mark.parametrize("section,key", [("train", "learning_rate"), ("data", "max_token"), ("model", "dmodel")])
def test_unknown_option_is_named(section, key):
    with pytest.raises(ConfigError, match=rf"unknown {section} option\(s\): {key}$"):
        load_config(None, [f"{section}.{key}=1"])


def test_unknown_options_in_a_file_are_all_named(tmp_path):
    (tmp_path / "c.yaml").write_text("train:\n  lr: 1.0\n  zeta: 1\n  alpha: 2\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown train option\(s\): alpha, zeta$"):
        load_config(tmp_path / "c.yaml")


def test_preset_and_its_overrides():
    cfg = load_config(None, ["model.preset=tiny", "model.d_model=32"])
    assert cfg.model == ModelConfig(**{**PRESETS["tiny"], "d_model": 32})
    assert (cfg.model.d_model, cfg.model.encoder.layers, cfg.model.tgt_vocab_size) == (32, 2, 64)
    with pytest.raises(ConfigError, match=r"unknown preset 'tinyy'; known: s2t_s, tiny"):
        load_config(None, ["model.preset=tinyy"])
    with pytest.raises(ConfigError, match=r"^unknown model option\(s\): dmodel$"):
        load_config(None, ["model.preset=tiny", "model.dmodel=32"])


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.precision=fp8", "train: unknown precision 'fp8'; expected fp32, bf16 or fp16"),
        ("train.task=tts", "train: unknown task 'tts'; expected st, asr or mt"),
        (
            "train.stages=[{tasks: [{task: tts}]}]",
            "train: unknown task 'tts'; expected one of st, asr, mt, audio, fat, fat_text",
        ),
        (
            "train.stages=[{tasks: [{task: st}]}, {tasks: [{task: mt}]}]",
            "train: stage '0' is not the last: give it updates or epochs to end",
        ),
    ],
)
def test_train_values_are_validated(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert str(e.value) == message


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_known_precisions(precision):
    assert load_config(None, [f"train.precision={precision}"]).train.precision == precision


def test_ctc_weight_belongs_to_one_stage_runs():
    with pytest.raises(ConfigError, match=r"train\.ctc_weight applies to one-stage runs"):
        load_config(None, ["train.ctc_weight=0.3", "train.stages=[{tasks: [{task: st}]}]"])
    assert load_config(None, ["train.ctc_weight=0.3"]).train.ctc_weight == 0.3


def test_model_values_are_validated():
    with pytest.raises(ConfigError, match=r"unknown encoder 'lstm'"):
        load_config(None, ["model.encoder=lstm"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path)  # a folder is not a config file
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: expected a mapping with model, data and train sections"):
        load_config(tmp_path / "list.yaml")


def test_numbers_without_a_dot_are_floats():
    """YAML 1.1 reads 1e-3 as a string; an override's number is a number however it is written."""
    cfg = load_config(None, ["train.lr=1e-3", "train.label_smoothing=2E-1", "data.dir=1e3x"])
    assert cfg.train.lr == 0.001 and cfg.train.label_smoothing == 0.2 and cfg.data.dir == "1e3x"


def test_unknown_sections_and_sections_that_are_not_mappings(tmp_path):
    with pytest.raises(ConfigError, match=r"^unknown section\(s\): trian; expected model, data and train$"):
        load_config(None, ["trian.lr=1.0"])
    (tmp_path / "flat.yaml").write_text("lr: 1.0\nmodel: {}\n")
    with pytest.raises(ConfigError, match=r"flat.yaml: unknown section\(s\): lr;"):
        load_config(tmp_path / "flat.yaml")
    (tmp_path / "empty.yaml").write_text("train:\nmodel:\n")
    assert load_config(tmp_path / "empty.yaml", ["train.lr=0.5"]).train.lr == 0.5  # an empty section is empty
    (tmp_path / "list.yaml").write_text("train: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"list.yaml: train: expected a mapping of options, got \[1, 2\]$"):
        load_config(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match=r"^override 'train.lr=1': section train is not a mapping"):
        load_config(tmp_path / "list.yaml", ["train.lr=1"])


def test_model_errors_are_prefixed_once():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.d_model=63", "model.n_heads=2"])
    assert str(e.value) == "model: bad ModelConfig: d_model 63 is not divisible by n_heads 2"


# -- the nested model section ---------------------------------------------------------------------------------

NESTED = """\
model:
  preset: tiny
  dropout: 0.2
  encoder:
    layers: 3
    conv_kernels: [3, 3]
  shrink: {kind: conv, channels: 32}
  text_encoder: {layers: 3, shared: true}
  decoder:
    tie_embeddings: false
  lora:
    alpha: 64
"""
# the same model in the flat names of before the nesting
FLAT = """\
model:
  preset: tiny
  dropout: 0.2
  encoder_layers: 3
  conv_kernels: [3, 3]
  shrink: conv
  shrink_channels: 32
  text_encoder_layers: 3
  share_text_encoder: true
  tie_embeddings: false
  lora_alpha: 64
"""


def test_nested_model_yaml_round_trips_and_equals_its_flat_form(tmp_path):
    (tmp_path / "nested.yaml").write_text(NESTED)
    (tmp_path / "flat.yaml").write_text(FLAT)
    cfg = load_config(tmp_path / "nested.yaml")
    assert cfg == load_config(tmp_path / "flat.yaml")
    m = cfg.model
    assert (m.d_model, m.dropout, m.encoder.layers, m.encoder.conv_kernels, m.encoder.conv_channels) == (
        64,
        0.2,
        3,
        (3, 3),
        64,
    )
    assert (m.shrink.kind, m.shrink.channels, m.text_encoder.shared, m.decoder.tie_embeddings) == (
        "conv",
        32,
        True,
        False,
    )
    assert m.lora.alpha == 64.0 and type(m.lora.alpha) is float  # check_config converts inside sub-configs too
    save_config(cfg, tmp_path / "saved.yaml")
    plain = yaml.safe_load((tmp_path / "saved.yaml").read_text())["model"]
    assert plain["encoder"]["conv_kernels"] == [3, 3] and plain["shrink"]["channels"] == 32
    assert "encoder_layers" not in plain and plain["text_encoder"] == {
        "layers": 3,
        "shared": True,
        "embed_only": False,
        "embeddings": "learned",
        "freeze_embeddings": False,
    }
    assert load_config(tmp_path / "saved.yaml") == cfg


def test_dotted_overrides_reach_nested_fields_and_old_flat_names_still_work(tmp_path):
    (tmp_path / "nested.yaml").write_text(NESTED)
    (tmp_path / "flat.yaml").write_text(FLAT)
    for conf in ("nested.yaml", "flat.yaml"):
        cfg = load_config(
            tmp_path / conf,
            [
                "model.encoder.layers=5",
                "model.text_encoder.layers=5",
                "model.shrink.kind=ctc",
                "model.semantic.kind=xstnet",
                "model.semantic.options.layers=1",
                "model.lora.rank=4",
            ],
        )
        m = cfg.model
        assert (m.encoder.layers, m.shrink.kind, m.shrink.mode, m.lora.rank) == (5, "ctc", "mean", 4)
        assert not hasattr(m.shrink, "channels")  # the conv shrink's options went with its kind
        assert m.semantic.options == {"layers": 1} and m.encoder.conv_kernels == (3, 3)  # the rest kept
        old = load_config(
            tmp_path / conf,
            [
                "model.encoder_layers=5",
                "model.text_encoder_layers=5",
                "model.shrink=ctc",
                "model.lora_rank=4",
                "model.semantic.kind=xstnet",
                "model.semantic_options={layers: 1}",
            ],
        )
        assert old == cfg
    whisper = ["model.encoder=whisper", "model.encoder_name_or_path=w", "model.decoder=whisper"]
    cfg = load_config(
        tmp_path / "nested.yaml", whisper + ["model.text_encoder.shared=false", "model.freeze_encoder=true"]
    )
    assert (cfg.model.encoder.kind, cfg.model.encoder.name_or_path) == ("whisper", "w")
    assert not hasattr(cfg.model.encoder, "layers")  # another kind: the conv encoder's options are dropped
    assert cfg.model.encoder.finetune == "frozen" and cfg.model.decoder.kind == "whisper"
    whisper = ["model.encoder.kind=whisper", "model.encoder.name_or_path=w"]
    # an old flag set false ends its own mode only
    assert (
        load_config(
            None, whisper + ["model.encoder.finetune=lora", "model.freeze_encoder=false"]
        ).model.encoder.finetune
        == "lora"
    )
    assert (
        load_config(None, whisper + ["model.freeze_encoder=true", "model.freeze_encoder=false"]).model.encoder.finetune
        == "full"
    )
    assert load_config(None, ["model.encoder={kind: whisper, name_or_path: w}"]).model.encoder == WhisperEncoderConfig(
        name_or_path="w"
    )


def test_apply_overrides_makes_the_model_section_nested():
    d = {"model": {"preset": "tiny", "encoder": "whisper", "encoder_name_or_path": "w"}}
    apply_overrides(d, ["model.encoder.frozen_layers=3", "model.decoder_layers=1"])
    assert d["model"] == {
        "preset": "tiny",
        "encoder": {"kind": "whisper", "name_or_path": "w", "frozen_layers": 3},
        "decoder": {"layers": 1},
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["model.encoder.kind=lstm"],
            "model: bad ModelConfig: unknown encoder 'lstm'; expected one of conv, wav2vec2, whisper, whisper_asr",
        ),
        (
            ["model.shrink.kind=ctc", "model.shrink.mode=max"],
            "model: bad ModelConfig: unknown shrink.mode 'max'; expected one of mean, first",
        ),
        (
            ["model.encoder.finetune=lora"],
            "model: bad ModelConfig: encoder.finetune: not an option of encoder 'conv' "
            "(its options: layers, input_dim, subsampler, conv_channels, conv_kernels)",
        ),
        (
            ["model.decoder.kind=whisper"],
            "model: bad ModelConfig: decoder 'whisper' needs decoder.name_or_path (or "
            "encoder.name_or_path) or decoder.hf_config",
        ),
        (
            ["model.semantic.kind=perceiver"],
            "model: bad ModelConfig: unknown semantic 'perceiver'; expected one of "
            "identity, lut, xstnet, chimera, fat_mlm",
        ),
        (
            ["model.encoder.layer=3"],
            "model: bad ModelConfig: encoder.layer: not an option of encoder 'conv' (its "
            "options: layers, input_dim, subsampler, conv_channels, conv_kernels)",
        ),
        (
            ["model.encoder.kind=whisper", "model.encoder.asr_beam=2"],
            "model: bad ModelConfig: encoder.asr_beam: not an option of encoder 'whisper' (its options: name_or_path, "
            "hf_config, finetune, frozen_layers, layerdrop, gradient_checkpointing, base_dtype)",
        ),
        (["model.preset=tiny", "model.lora.rnk=3"], "unknown model.lora option(s): rnk"),
        (["model.encoder.layers=abc"], "invalid value 'abc' for model.encoder.layers: expected an integer"),
        (["model.encoder.layers=-1"], "invalid value '-1' for model.encoder.layers: expected an integer >= 0"),
        (
            ["model.encoder.kind=conv", "model.encoder.kind.x=1"],
            "override 'model.encoder.kind.x=1': encoder.kind is not a mapping in the config",
        ),
        (
            ["model.encoder_layers=3", "model.encoder={layers: 4}", "model.freeze_encoder=maybe"],
            "override 'model.freeze_encoder=maybe': bad ModelConfig: freeze_encoder must be true or false, got 'maybe'",
        ),
    ],
)
def test_bad_nested_model_values_are_one_line(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert str(e.value) == message


def test_a_flat_file_with_contradicting_names_is_one_line(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  encoder_layers: 3\n  encoder:\n    layers: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml")
    assert str(e.value) == (
        f"{tmp_path / 'c.yaml'}: model: bad ModelConfig: encoder.layers=4 sets encoder.layers a second time (already 3)"
    )


def test_a_bad_model_value_in_a_file_names_the_file(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  semantic: {kind: lut, options: {init: zero}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml")
    assert str(e.value) == (
        f"{tmp_path / 'c.yaml'}: model: bad ModelConfig: semantic lut init must be one of random, identity, got 'zero'"
    )


@pytest.mark.parametrize(
    "text, where, problem",
    [
        ("model: [\n", "2:1", "expected the node content, but found '<stream end>'"),
        ("train:\n  lr: 1\n   seed: 2\n", "3:8", "mapping values are not allowed here"),
        ("data: {dir: x\n", "2:1", "expected ',' or '}', but got '<stream end>'"),
    ],
)
def test_malformed_yaml_is_one_line_naming_file_line_and_column(tmp_path, capfd, text, where, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}:{where}: not valid YAML: {problem}"
    from speechmt.cli import main

    for command in (["train", "--config", str(path)], ["research", "pretrain-audio", "--config", str(path)]):
        assert main(command) == 2
        err = capfd.readouterr().err
        assert err == f"speechmt: error: {path}:{where}: not valid YAML: {problem}\n"


def test_an_override_that_is_not_yaml_is_one_line():
    with pytest.raises(ConfigError, match=r"^value '\[' is not a YAML value"):
        load_config(None, ["data.dir=["])


def test_whisper_padding_is_seconds_and_the_older_flag_reads_as_30_s_or_none(tmp_path):
    assert load_config(None, ["data.whisper_pad_seconds=15"]).data.whisper_pad_seconds == 15.0
    assert load_config(None, ["data.whisper_pad_30s=true"]).data.whisper_pad_seconds == 30.0
    (tmp_path / "old.yaml").write_text("data:\n  whisper_pad_30s: false\n")
    assert load_config(tmp_path / "old.yaml").data.whisper_pad_seconds == 0.0
    assert load_config(tmp_path / "old.yaml", ["data.whisper_pad_30s=true"]).data.whisper_pad_seconds == 30.0
    with pytest.raises(ConfigError, match="^data: whisper_pad_30s must be true or false, got 15 "):
        load_config(None, ["data.whisper_pad_30s=15"])
    with pytest.raises(
        ConfigError, match="^invalid value '31' for data.whisper_pad_seconds: expected a number from 0 to 30$"
    ):
        load_config(None, ["data.whisper_pad_seconds=31"])


def test_a_half_precision_base_needs_autocast():
    with pytest.raises(ConfigError, match="model.decoder.base_dtype bfloat16 needs train.precision bf16 or fp16"):
        load_config(
            None,
            [
                "model.decoder.kind=lm",
                "model.decoder.name_or_path=lm",
                "model.decoder.finetune=lora",
                "model.decoder.base_dtype=bfloat16",
                "train.precision=fp32",
            ],
        )
    cfg = load_config(
        None,
        [
            "model.decoder.kind=lm",
            "model.decoder.name_or_path=lm",
            "model.decoder.finetune=lora",
            "model.decoder.base_dtype=bfloat16",
            "train.precision=bf16",
        ],
    )
    assert cfg.model.decoder.base_dtype == "bfloat16"
