"""speechmt.config: the YAML form of ExperimentConfig round-trips, overrides are YAML scalars on
section.key, and a bad config is a ConfigError naming the option (type checks of values: test_cli_options)."""

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
from speechmt.models.translator import PRESETS, ModelConfig
from speechmt.tasks.schedule import Stage, TaskData

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
# experiment configs (pretrain-audio's w2v_pretrain_*.yaml are flat PretrainAudioConfig files)
EXPERIMENT_CONFS = sorted(p for p in RECIPES.glob("*/conf/*.yaml") if not p.name.startswith("w2v_pretrain"))


def _rich_config() -> ExperimentConfig:
    """Every kind of value away from its default: tuples, dicts, None, a two-stage schedule."""
    model = ModelConfig(encoder="wav2vec2", encoder_hf_config={"model_type": "wav2vec2", "conv_dim": [8, 8],
                                                                "nested": {"x": 1.5}},
                        conv_kernels=(3, 3, 3), lora_targets=("q_proj", "v_proj"), d_model=96, n_heads=3,
                        tgt_vocab_size=123, dropout=0.25, semantic_options={"k": [1, 2]})
    data = DataConfig(dir="/data/x", src_lang="fr", lang_tag=False, max_tokens=500, spec_augment="")
    stages = [Stage(name="mt", tasks=[TaskData("mt", {"ce": 1.0}, valid_split="dev")], updates=20,
                    freeze=["speech_encoder."]),
              Stage(name="all", tasks=[TaskData("st", {"ce": 0.7, "ctc": 0.3}),
                                       TaskData("asr", data_dir="/data/y", split="tr", ratio=2.5)], mix="sample")]
    train = TrainConfig(stages=stages, lr=5e-4, adam_betas=(0.9, 0.999), precision="bf16", weight_decay=0.01,
                        label_smoothing=0.2, max_epochs=3)
    return ExperimentConfig(model=model, data=data, train=train)


def test_yaml_round_trip(tmp_path):
    cfg = _rich_config()
    save_config(cfg, tmp_path / "c.yaml")
    back = load_config(tmp_path / "c.yaml")
    assert back == cfg
    assert back.train.adam_betas == (0.9, 0.999) and type(back.train.adam_betas) is tuple
    assert back.model.conv_kernels == (3, 3, 3) and back.model.lora_targets == ("q_proj", "v_proj")
    assert [s.name for s in back.train.stages] == ["mt", "all"] and isinstance(back.train.stages[1], Stage)
    assert back.train.stages[1].tasks[1] == TaskData("asr", {"ce": 1.0}, "/data/y", "tr", None, 2.5)
    assert back.train.stages[0].tasks[0].valid_split == "dev" and back.train.stages[0].freeze == ["speech_encoder."]
    # the file is plain YAML: lists for tuples, nothing Python-specific
    plain = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert plain["train"]["adam_betas"] == [0.9, 0.999] and plain["model"]["conv_kernels"] == [3, 3, 3]
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
    cfg = load_config(tmp_path / "c.yaml", ["train.lr=1.0e-3", "data.max_tokens=500", "train.precision=bf16",
                                            "data.lang_tag=false", "train.adam_betas=[0.9, 0.99]",
                                            "model.conv_kernels=[3, 3]", "train.stages=[{tasks: [{task: asr}]}]"])
    assert cfg.train.lr == 0.001 and type(cfg.train.lr) is float
    assert cfg.data.max_tokens == 500 and type(cfg.data.max_tokens) is int
    assert cfg.train.max_updates == 10 and cfg.data.dir == "d"  # from the file, untouched
    assert cfg.train.precision == "bf16" and cfg.data.lang_tag is False
    assert cfg.train.adam_betas == (0.9, 0.99) and cfg.model.conv_kernels == (3, 3)
    assert cfg.train.stages == [Stage(name="0", tasks=[TaskData("asr")])]
    assert load_config(None, ["train.lr=0.0005"]).train.lr == 0.0005
    assert load_config(None, ["train.save_dir=exp/a=b"]).train.save_dir == "exp/a=b"  # split at the first =
    assert load_config(None, ["train.lr=1.0e-3", "train.lr=3.0e-3"]).train.lr == 0.003  # the last one wins


def test_apply_overrides_edits_the_dict():
    d = {"train": {"lr": 1.0}}
    assert apply_overrides(d, ["train.lr=2.5", "data.dir=x"]) is d
    assert d == {"train": {"lr": 2.5}, "data": {"dir": "x"}}


@pytest.mark.parametrize("item", ["lr=1", "train.lr", "model.encoder_hf_config.hidden_size=8", "=1", "train.=1", ".lr=1"])
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
    with pytest.raises(ConfigError, match=r"^unknown train option\(s\): alpha, zeta$"):
        load_config(tmp_path / "c.yaml")


def test_preset_and_its_overrides():
    cfg = load_config(None, ["model.preset=tiny", "model.d_model=32"])
    assert cfg.model == ModelConfig(**{**PRESETS["tiny"], "d_model": 32})
    assert (cfg.model.d_model, cfg.model.encoder_layers, cfg.model.tgt_vocab_size) == (32, 2, 64)
    with pytest.raises(ConfigError, match=r"unknown preset 'tinyy'; known: s2t_s, tiny"):
        load_config(None, ["model.preset=tinyy"])
    with pytest.raises(ConfigError, match=r"unexpected keyword argument 'dmodel'"):
        load_config(None, ["model.preset=tiny", "model.dmodel=32"])


@pytest.mark.parametrize("override,message", [
    ("train.precision=fp8", "train: unknown precision 'fp8'; expected fp32, bf16 or fp16"),
    ("train.task=tts", "train: unknown task 'tts'; expected st, asr or mt"),
    ("train.stages=[{tasks: [{task: tts}]}]", "train: unknown task 'tts'; expected one of st, asr, mt"),
    ("train.stages=[{tasks: [{task: st}]}, {tasks: [{task: mt}]}]",
     "train: stage '0' is not the last: give it updates or epochs to end"),
])
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
    with pytest.raises(ConfigError, match=r"^unknown section\(s\): lr;"):
        load_config(tmp_path / "flat.yaml")
    (tmp_path / "empty.yaml").write_text("train:\nmodel:\n")
    assert load_config(tmp_path / "empty.yaml", ["train.lr=0.5"]).train.lr == 0.5  # an empty section is empty
    (tmp_path / "list.yaml").write_text("train: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"^train: expected a mapping of options, got \[1, 2\]$"):
        load_config(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match=r"^override 'train.lr=1': section train is not a mapping"):
        load_config(tmp_path / "list.yaml", ["train.lr=1"])


def test_model_errors_are_prefixed_once():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.d_model=63", "model.n_heads=2"])
    assert str(e.value) == "model: bad ModelConfig: d_model 63 is not divisible by n_heads 2"
