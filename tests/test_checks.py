"""One checker for configs, variant options and command-line options (speechmt.checks): what a value may be is
declared once on the field or the option's type, and a bad value is one line naming the option."""

import pytest

from speechmt import checks
from speechmt.checks import MAX_BEAM, Check, ConfigError, field_check, field_problems
from speechmt.cli import parse_args
from speechmt.config import DataConfig, TrainConfig, load_config
from speechmt.models.semantic.chimera import ChimeraOptions
from speechmt.models.semantic.lut import LUTOptions
from speechmt.tasks.align import AlignConfig


@pytest.fixture
def admitted(monkeypatch):
    """The (value, kind) pairs Check.admits was asked about: the one place a value is held to its Check."""
    seen, admits = [], Check.admits

    def spy(self, value, kind):
        seen.append((value, kind))
        return admits(self, value, kind)

    monkeypatch.setattr(Check, "admits", spy)
    return seen


def test_a_bad_config_field_is_one_line_from_the_fields_check(admitted):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["data.max_tokens=0"])
    assert str(e.value) == "invalid value '0' for data.max_tokens: expected an integer >= 1"
    assert field_check(DataConfig, "max_tokens") == Check(lo=1)
    assert (0, int) in admitted


def test_a_bad_variant_option_is_one_line_from_the_fields_check(admitted):
    with pytest.raises(ValueError) as e:
        ChimeraOptions(memory=0)
    assert str(e.value) == "bad ModelConfig: semantic chimera memory must be an integer >= 1, got 0"
    assert field_check(ChimeraOptions, "memory") == Check(lo=1)
    assert (0, int) in admitted
    with pytest.raises(ConfigError) as e:  # from a config: the same line, named with the section
        load_config(None, ["model.semantic.kind=lut", "model.semantic.options={distance: l3}"])
    assert str(e.value) == "model: bad ModelConfig: semantic lut distance must be one of mse, cosine, got 'l3'"


def test_a_bad_command_line_option_is_one_line_from_the_options_check(admitted, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["translate", "a.wav", "--beam", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err[-1] == (
        f"speechmt translate: error: argument --beam: invalid value '0': expected an integer from 1 to {MAX_BEAM}"
    )
    assert (0, int) in admitted


def test_what_is_allowed_is_said_one_way():
    assert Check(1).allowed(int) == "an integer >= 1"
    assert Check(1, 256).allowed(int) == "an integer from 1 to 256"
    assert Check(0, lo_in=False).allowed(float) == "a finite number > 0"
    assert Check(0, 1, hi_in=False).allowed(float) == "a finite number >= 0 and < 1"
    assert Check(-10, 10).allowed(float) == "a number from -10 to 10"
    assert Check(1, 3600.0, lo_in=False).allowed(float) == "a finite number > 1 and <= 3600"
    assert Check(choices=("mse", "cosine")).allowed(str) == "one of mse, cosine"
    assert Check().allowed(bool) == "true or false"
    assert Check(1, note="or null").allowed(int) == "an integer >= 1 (or null)"


@pytest.mark.parametrize("value, ok", [(1, True), (0, False), (True, False), (1.0, False), ("1", False)])
def test_an_integer_check_takes_integers_only(value, ok):
    assert Check(1).admits(value, int) is ok


@pytest.mark.parametrize("value, ok", [(0.5, True), (0, True), (1, False), (float("nan"), False), (False, False)])
def test_a_number_check_takes_finite_numbers_in_its_bounds(value, ok):
    assert Check(0, 1, hi_in=False).admits(value, float) is ok


def test_field_problems_list_every_bad_field_and_pass_null_where_the_type_allows_it():
    assert field_problems(ChimeraOptions(heads=None)) == []
    options = object.__new__(LUTOptions)  # unchecked, to ask about several bad fields at once
    object.__setattr__(options, "__dict__", {**LUTOptions().__dict__, "layers": 0, "init": "zero"})
    assert field_problems(options, "lut.") == [
        "lut.layers must be an integer >= 1, got 0",
        "lut.init must be one of random, identity, got 'zero'",
    ]
    with pytest.raises(ValueError, match=r"^train.align: text must be one of detach, anchor, got 'x'$"):
        AlignConfig(text="x")


def test_every_range_is_declared_on_its_field():
    assert not hasattr(checks, "RANGES") and not hasattr(checks, "PRETRAIN_RANGES")
    assert field_check(TrainConfig, "lr") == Check(0, lo_in=False)
    assert field_check(TrainConfig, "device") == Check(device=True)
    assert field_check(TrainConfig, "save_dir") is None
