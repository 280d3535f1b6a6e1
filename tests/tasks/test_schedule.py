import pytest

from speechmt.config import ConfigError, ExperimentConfig, TrainConfig
from speechmt.tasks import Stage, TaskData, stages_of
from speechmt.tasks.schedule import parse_stages


def test_a_config_without_stages_is_one_stage_of_its_task():
    (stage,) = stages_of(TrainConfig(task="asr", ctc_weight=0.3, max_epochs=7))
    assert stage.epochs == 7 and stage.updates == 0 and stage.mix == "together"
    assert [(t.task, t.objectives) for t in stage.tasks] == [("asr", {"ce": 0.7, "ctc": 0.3})]
    (stage,) = stages_of(TrainConfig(task="mt"))
    assert stage.tasks[0].weights == {"ce": 1.0} and stage.epochs == 0


def test_stages_from_yaml_dicts():
    cfg = ExperimentConfig.from_dict(
        {
            "train": {
                "stages": [
                    {"name": "mt", "tasks": [{"task": "mt"}], "updates": 100, "freeze": ["speech_encoder."]},
                    {
                        "tasks": [{"task": "st", "objectives": {"ce": 0.7, "ctc": 0.3}}, {"task": "mt", "ratio": 2}],
                        "mix": "sample",
                    },
                ]
            }
        }
    )
    first, second = cfg.train.stages
    assert (first.name, first.updates, first.freeze, first.tasks[0].weights) == (
        "mt",
        100,
        ["speech_encoder."],
        {"ce": 1.0},
    )
    assert second.name == "1" and second.mix == "sample" and [t.key for t in second.tasks] == ["st", "mt"]
    assert second.tasks[0].weights == {"ce": 0.7, "ctc": 0.3} and second.tasks[1].ratio == 2
    assert stages_of(cfg.train) == cfg.train.stages
    again = ExperimentConfig.from_dict(cfg.to_dict())  # saved with the checkpoint, read back the same
    assert again.train.stages == cfg.train.stages


def test_zero_weights_are_not_computed_and_keys_name_their_data():
    spec = TaskData("st", {"ce": 1.0, "ctc": 0.0}, data_dir="extra", split="train2")
    assert spec.weights == {"ce": 1.0} and spec.key == "st@extra/train2"


def test_fat_streams_keep_parts_and_their_keys_name_them():
    cfg = ExperimentConfig.from_dict(
        {
            "train": {
                "stages": [
                    {
                        "tasks": [
                            {"task": "fat", "objectives": {"fat_mlm": 1}},
                            {"task": "fat", "objectives": {"fat_mlm": 1}, "parts": ["speech", "src"]},
                            {"task": "fat_text", "objectives": {"fat_mlm": 1}, "parts": ["tgt"], "data_dir": "mono"},
                        ]
                    }
                ]
            }
        }
    )
    tasks = cfg.train.stages[0].tasks
    assert [t.parts for t in tasks] == [[], ["speech", "src"], ["tgt"]]
    assert [t.key for t in tasks] == ["fat", "fat[speech+src]", "fat_text[tgt]@mono"]
    assert ExperimentConfig.from_dict(cfg.to_dict()).train.stages == cfg.train.stages


def test_a_ramped_weight_grows_linearly_over_the_stages_first_updates():
    spec = TaskData("st", {"ce": 1.0, "contrastive": 0.8, "ctc": 0.0}, ramp={"contrastive": 4})
    assert [spec.weights_at(k)["contrastive"] for k in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8])
    assert spec.weights_at(0)["ce"] == 1.0 and "ctc" not in spec.weights_at(0) and spec.weights_at(3) == spec.weights
    assert TaskData("st").weights_at(0) == {"ce": 1.0}
    cfg = ExperimentConfig.from_dict(
        {
            "train": {
                "stages": [
                    {"tasks": [{"task": "st", "objectives": {"ce": 1, "contrastive": 1}, "ramp": {"contrastive": 100}}]}
                ]
            }
        }
    )
    assert cfg.train.stages[0].tasks[0].ramp == {"contrastive": 100}
    assert ExperimentConfig.from_dict(cfg.to_dict()).train.stages == cfg.train.stages


@pytest.mark.parametrize(
    "stages, message",
    [
        ([{"tasks": [{"task": "tts"}]}], "unknown task 'tts'; expected one of st, asr, mt"),
        (
            [{"tasks": [{"task": "st", "objectives": {"bleu": 1}}]}],
            "task st: unknown objective 'bleu'; expected one of",
        ),
        (
            [{"tasks": [{"task": "st", "objectives": {"ce": -1}}]}],
            "objective ce weight must be a finite number >= 0, got -1",
        ),
        (
            [{"tasks": [{"task": "st", "objectives": {"ce": float("nan")}}]}],
            "weight must be a finite number >= 0, got nan",
        ),
        ([{"tasks": [{"task": "st", "ratio": 0}]}], "task st: ratio must be a finite number > 0, got 0"),
        ([{"tasks": [{"task": "st", "lr": 1}]}], "unknown task option(s): lr"),
        ([{"tasks": [{"task": "st", "ramp": {"ctc": 10}}]}], "task st: ramp names 'ctc', not one of its objectives"),
        (
            [{"tasks": [{"task": "st", "ramp": {"ce": 0}}]}],
            "task st: ramp of ce must be an integer >= 1 (updates), got 0",
        ),
        ([{"tasks": [{"task": "st", "ramp": 10}]}], "task st: ramp must be a mapping {objective: updates}, got 10"),
        (
            [{"tasks": [{"task": "st", "parts": ["speech"]}]}],
            "task st: parts are for the FAT-MLM tasks fat and fat_text",
        ),
        (
            [{"tasks": [{"task": "fat_text", "objectives": {"fat_mlm": 1}, "parts": ["speech"]}]}],
            "task fat_text: parts must be distinct names among src, tgt, got ['speech']",
        ),
        (
            [{"tasks": [{"task": "fat", "objectives": {"fat_mlm": 1}, "parts": ["src", "src"]}]}],
            "task fat: parts must be distinct names among speech, src, tgt, got ['src', 'src']",
        ),
        (
            [{"tasks": [{"task": "fat", "objectives": {"fat_mlm": 1}, "parts": "speech"}]}],
            "task fat: parts must be a list of names, got 'speech'",
        ),
        ([{"tasks": []}], "tasks must be a non-empty list"),
        ([{"tasks": [{"task": "st"}, {"task": "st"}]}], "a task appears twice on the same data (st, st)"),
        ([{"tasks": [{"task": "st"}], "mix": "zip"}], "unknown mix 'zip'; expected one of together, sample"),
        ([{"tasks": [{"task": "st"}], "updates": -3}], "updates must be an integer >= 0, got -3"),
        (
            [{"tasks": [{"task": "mt"}]}, {"tasks": [{"task": "st"}]}],
            "stage '0' is not the last: give it updates or epochs",
        ),
        ([{"task": "st", "epochs": 1}], "stage 0: unknown option(s): task"),
        ("st", "stages must be a list, got str"),
    ],
)
def test_bad_stages_are_one_line_config_errors(stages, message):
    with pytest.raises(ConfigError) as e:
        ExperimentConfig.from_dict({"train": {"stages": stages}})
    assert message in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("train: ")


def test_ctc_weight_and_stages_do_not_mix():
    with pytest.raises(ConfigError, match="with train.stages give ctc as an objective weight"):
        ExperimentConfig.from_dict({"train": {"ctc_weight": 0.3, "stages": [{"tasks": [{"task": "st"}]}]}})


def test_stage_objects_pass_through():
    stage = Stage("x", [TaskData("mt")], updates=5)
    assert parse_stages([stage]) == [stage]
