"""The recipes' published settings: each config that claims one (recipes/published_settings.yaml) holds every value
of fairseq's published command and architecture, the recipes' run.sh defaults and options match, PUBLISHED.md is
the same table; and `speechmt average` takes the last N epoch checkpoints of a folder, as fairseq averages."""

import re
from pathlib import Path

import pytest
import torch
import yaml

from speechmt.audio import FbankConfig, SpecAugmentConfig
from speechmt.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from speechmt.checks import ConfigError
from speechmt.cli import main
from speechmt.config import load_config
from speechmt.data.prepare import PrepareConfig
from speechmt.tokenizers.sentencepiece import TokenizerConfig
from speechmt.training.run import average, numbered_checkpoints
from speechmt.training.state import update_freq_per_rank

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TABLE = yaml.safe_load((RECIPES / "published_settings.yaml").read_text(encoding="utf-8"))
SETTINGS = TABLE["settings"]
SPEECHMT_DEFAULTS = {
    "prepare": PrepareConfig(),
    "fbank": FbankConfig(),
    "spec_augment.lb": SpecAugmentConfig.policy("lb"),
    "vocabulary": TokenizerConfig(),
}


def _items(part: str) -> list[tuple[str, str, dict]]:
    """(setting, key, {value, source}) for every entry of `part` of every setting."""
    return [(name, key, entry) for name, s in SETTINGS.items() for key, entry in s.get(part, {}).items()]


def _id(item) -> str:
    return f"{item[0]}:{item[1]}"


def _plain(value):
    """Tuples as lists, recursively, so that a config value compares with its YAML form."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _lookup(obj, path: str):
    """`obj`'s value at a dotted path; a number indexes a list (train.stages.0.updates)."""
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def _run_sh_defaults(recipe: str) -> dict[str, str]:
    """The variables run.sh sets at its top (`name=value  # comment`, the first assignment of each), as strings."""
    text = (RECIPES / recipe / "run.sh").read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for m in re.finditer(r"^([a-z_]+)=(\S*)", text, re.M):
        found.setdefault(m.group(1), m.group(2).strip('"'))
    return found


def test_the_table_names_every_published_setting_with_its_sources():
    assert sorted(SETTINGS) == ["covost2-asr", "covost2-st", "mustc-asr", "mustc-st"]
    assert re.fullmatch(r"[0-9a-f]{40}", TABLE["fairseq_commit"])
    for name, setting in SETTINGS.items():
        assert (RECIPES / setting["config"]).is_file(), name
        entries = [
            e for part in ("values", "speechmt", "run_sh", "run_sh_options") for e in setting.get(part, {}).values()
        ]
        assert len(setting["values"]) == 35 + (5 if name == "covost2-st" else 0)
        assert all(set(e) == {"value", "source"} and e["source"].strip() for e in entries), name


@pytest.mark.parametrize("item", _items("values"), ids=_id)
def test_config_value_is_the_published_one(item):
    name, key, entry = item
    cfg = load_config(RECIPES / SETTINGS[name]["config"])
    assert _plain(_lookup(cfg, key)) == entry["value"], f"{SETTINGS[name]['config']} {key}: {entry['source']}"


@pytest.mark.parametrize("item", _items("speechmt"), ids=_id)
def test_speechmt_default_is_the_published_one(item):
    _, key, entry = item
    section, _, field = key.rpartition(".")
    assert _plain(getattr(SPEECHMT_DEFAULTS[section], field)) == entry["value"], entry["source"]


@pytest.mark.parametrize("item", _items("run_sh"), ids=_id)
def test_run_sh_default_is_the_published_one(item):
    name, key, entry = item
    recipe = SETTINGS[name]["config"].split("/")[0]
    assert _run_sh_defaults(recipe)[key] == str(entry["value"]), entry["source"]


@pytest.mark.parametrize("item", _items("run_sh_options"), ids=_id)
def test_published_run_sh_option_exists_and_the_readme_passes_it(item):
    name, key, entry = item
    recipe = SETTINGS[name]["config"].split("/")[0]
    assert key in _run_sh_defaults(recipe)  # run.sh accepts only the options it defines
    option = f"--{key.replace('_', '-')} {entry['value']}"
    assert option in (RECIPES / recipe / "README.md").read_text(encoding="utf-8"), option


def test_the_fairseq_s2t_settings_in_numbers():
    """The values the issue names, read through the configs themselves."""
    mustc_st, mustc_asr = (load_config(RECIPES / "mustc" / "conf" / f"{t}_s2t_s.yaml") for t in ("st", "asr"))
    covost_st, covost_asr = (load_config(RECIPES / "covost2" / "conf" / f"{t}_s2t_s.yaml") for t in ("st", "asr"))
    assert mustc_st.train.adam_betas == (0.9, 0.999) and (mustc_st.train.lr, mustc_asr.train.lr) == (2e-3, 1e-3)
    # fairseq's global batch: 8 batches of 40k frames for 1 GPU, i.e. 320k padded frames per update on any GPU count
    assert mustc_st.train.update_freq * mustc_st.data.max_tokens // mustc_st.train.update_freq_world_size == 320000
    assert covost_asr.train.update_freq * covost_asr.data.max_tokens == 400000
    assert (covost_asr.train.max_updates, covost_st.train.max_updates, mustc_st.train.max_updates) == (
        60000,
        30000,
        100000,
    )
    assert (covost_asr.model.dropout, covost_st.model.dropout) == (0.15, 0.1)
    assert [(s.updates, s.freeze) for s in covost_st.train.stages] == [(1000, ["speech_encoder."]), (0, [])]
    for cfg in (mustc_st, mustc_asr, covost_st, covost_asr):
        assert (cfg.train.save_interval_epochs, cfg.train.keep_last_epochs, cfg.train.save_interval_updates) == (
            1,
            10,
            0,
        )


def test_the_published_global_batch_on_1_to_8_gpus():
    """fairseq's 8 batches for 1 GPU: per-rank batches on W GPUs, frames per update the same; 3 GPUs cannot share 8."""
    cfg = load_config(RECIPES / "mustc" / "conf" / "st_s2t_s.yaml")
    t = cfg.train
    per_rank = {w: update_freq_per_rank(t.update_freq, t.update_freq_world_size, w) for w in (1, 2, 4, 8)}
    assert per_rank == {1: 8, 2: 4, 4: 2, 8: 1}
    assert {w * n * cfg.data.max_tokens for w, n in per_rank.items()} == {320000}
    with pytest.raises(ConfigError, match="3 ranks cannot share evenly"):
        update_freq_per_rank(t.update_freq, t.update_freq_world_size, 3)


def _cell(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_published_md_is_the_same_table():
    """Each row of PUBLISHED.md's settings table, `key` | one cell per setting, holds the YAML's values."""
    text = (RECIPES / "PUBLISHED.md").read_text(encoding="utf-8")
    names = list(SETTINGS)
    assert f"| key | {' | '.join(names)} |" in text
    keys = dict.fromkeys(k for part in ("values", "run_sh", "run_sh_options") for _, k, _ in _items(part))
    for key in keys:
        cells = []
        for name in names:
            found = [SETTINGS[name].get(p, {}).get(key) for p in ("values", "run_sh", "run_sh_options")]
            entry = next((e for e in found if e is not None), None)
            cells.append(_cell(entry["value"]) if entry else "")
        row = f"| `{key}` | {' | '.join(cells)} |"
        assert row in text, row


# --- averaging by epochs ---


def _checkpoints(folder: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """Small checkpoints whose one weight is the file's index in `names` (0., 1., ...) times [1, 2, 3]."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = {}
    for i, name in enumerate(names):
        weights[name] = torch.tensor([1.0, 2.0, 3.0]) * i
        save_checkpoint(folder / name, {"model": {"w": weights[name]}, "config": {"n": i}, "train_state": {"step": i}})
    return weights


NAMES = [
    "checkpoint_500.safetensors",
    "checkpoint_1000.safetensors",
    "checkpoint_1500.safetensors",
    "checkpoint_epoch1.safetensors",
    "checkpoint_epoch2.safetensors",
    "checkpoint_epoch3.safetensors",
    "checkpoint_epoch10.safetensors",
    "checkpoint_epoch11.safetensors",
    "checkpoint_last.safetensors",
    "checkpoint_best.safetensors",
]


def test_numbered_checkpoints_by_update_and_by_epoch_in_numeric_order(tmp_path):
    _checkpoints(tmp_path, NAMES)
    assert [p.name for p in numbered_checkpoints(tmp_path)] == NAMES[:3]
    assert [p.name for p in numbered_checkpoints(tmp_path, "epoch")] == NAMES[3:8]


def test_average_takes_the_last_epochs_when_the_folder_has_them(tmp_path):
    weights = _checkpoints(tmp_path, NAMES)
    used = average([str(tmp_path)], 3, str(tmp_path / "avg.safetensors"))
    assert [p.name for p in used] == [
        "checkpoint_epoch3.safetensors",
        "checkpoint_epoch10.safetensors",
        "checkpoint_epoch11.safetensors",
    ]
    # the files' indices in NAMES are 5, 6 and 7: the mean weight is 6 * [1, 2, 3]
    avg = load_checkpoint(tmp_path / "avg.safetensors")
    assert torch.equal(avg["model"]["w"], torch.tensor([6.0, 12.0, 18.0]))
    assert torch.equal(avg["model"]["w"], sum(weights[p.name] for p in used) / 3)
    assert "train_state" not in avg


def test_average_by_update_keeps_the_old_window_and_epoch_demands_epochs(tmp_path):
    _checkpoints(tmp_path / "both", NAMES)
    used = average([str(tmp_path / "both")], 2, str(tmp_path / "avg.safetensors"), by="update")
    assert [p.name for p in used] == ["checkpoint_1000.safetensors", "checkpoint_1500.safetensors"]
    assert torch.equal(load_checkpoint(tmp_path / "avg.safetensors")["model"]["w"], torch.tensor([1.5, 3.0, 4.5]))
    _checkpoints(tmp_path / "old", NAMES[:3])  # a run without epoch checkpoints: auto averages its update ones
    assert [p.name for p in average([str(tmp_path / "old")], 10, str(tmp_path / "old.safetensors"))] == NAMES[:3]
    with pytest.raises(CheckpointError, match=r"no checkpoint_epoch<E>\.safetensors in .*old.*save_interval_epochs"):
        average([str(tmp_path / "old")], 10, str(tmp_path / "x.safetensors"), by="epoch")


def test_average_command_by_epoch(tmp_path, capsys):
    _checkpoints(tmp_path, NAMES)
    out = tmp_path / "avg.safetensors"
    assert main(["average", str(tmp_path), "--last", "2", "--by", "epoch", "--out", str(out)]) == 0
    assert (
        "average of 2 checkpoints (checkpoint_epoch10.safetensors, checkpoint_epoch11.safetensors)"
        in capsys.readouterr().out
    )
    assert torch.equal(load_checkpoint(out)["model"]["w"], torch.tensor([6.5, 13.0, 19.5]))
