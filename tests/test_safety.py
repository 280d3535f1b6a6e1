"""Model files cannot run code: a pickle whose unpickling would create a marker file, under a .pt or a
.safetensors name, is refused by every path that loads a model or checkpoint (exit 2, one stderr line, the
marker never appears); `speechmt convert --trust` alone unpickles, and its output loads and translates as
the original."""

import pytest
import torch
import yaml

import speechmt
from speechmt.checkpoint import FORMAT, CheckpointError, load_checkpoint
from speechmt.cli import main
from speechmt.config import save_config
from tests.conftest import ASSETS
from tests.helpers import tiny_config, tiny_wav2vec2_fields

WAV = ASSETS / "mustc/en-de/data/train/wav/ted_1.wav"


class _OpensAFile:
    """Unpickles as open(path, "w"): running code, made visible by the file it creates."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def _crafted(path, marker):
    """An "old speechmt checkpoint" that creates `marker` when unpickled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": "speechmt-checkpoint-1", "model": {"w": _OpensAFile(marker)}}, path)
    return path


def _pickle_error(path) -> str:
    return (
        f"speechmt: error: {path}: an old pickled speechmt checkpoint; pickles can run code, so it is not "
        f"loaded. Convert it once, if you trust its source: speechmt import convert {path} --out NEW.safetensors "
        "--trust"
    )


def test_the_crafted_file_does_run_code_when_unpickled(tmp_path):
    marker = tmp_path / "marker"
    evil = _crafted(tmp_path / "evil.pt", marker)
    torch.load(evil, weights_only=False)["model"]["w"].close()  # what speechmt did before
    assert marker.exists()


@pytest.fixture(params=["evil.pt", "evil.safetensors"])
def evil(request, tmp_path):
    """(crafted file, marker path): the same pickle under either name; detection is by content."""
    marker = tmp_path / "marker"
    return _crafted(tmp_path / "models" / request.param, marker), marker


def _refused(capsys, argv, path) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == _pickle_error(path) + "\n" and "Traceback" not in err


def test_load_model_and_load_checkpoint_refuse(evil):
    path, marker = evil
    for load in (speechmt.load_model, load_checkpoint):
        with pytest.raises(CheckpointError) as e:
            load(path)
        assert f"speechmt: error: {e.value}" == _pickle_error(path)
    assert not marker.exists()


def test_translate_evaluate_benchmark_refuse(evil, tiny_data, tmp_path, capsys):
    path, marker = evil
    _refused(capsys, ["translate", str(WAV), "--model", str(path)], path)
    _refused(capsys, ["translate", str(WAV), "--cascade", str(path), str(path)], path)
    _refused(
        capsys,
        ["evaluate", "--model", str(path), "--data", str(tiny_data), "--split", "dev", "--out", str(tmp_path / "ev")],
        path,
    )
    _refused(
        capsys,
        [
            "research",
            "benchmark",
            "--model",
            str(path),
            "--data",
            str(tiny_data),
            "--split",
            "dev",
            "--out",
            str(tmp_path / "bench"),
        ],
        path,
    )
    assert not marker.exists()


def test_average_export_convert_refuse(evil, tmp_path, capsys):
    path, marker = evil
    _refused(capsys, ["average", str(path), str(path), "--out", str(tmp_path / "avg.safetensors")], path)
    _refused(capsys, ["export", str(path), "--out", str(tmp_path / "m.safetensors")], path)
    assert main(["import", "convert", str(path), "--out", str(tmp_path / "new.safetensors")]) == 2
    assert capsys.readouterr().err == (
        f"speechmt: error: {path}: converting unpickles it, and a pickle can run any "
        "code; pass --trust only if you trust where the file came from\n"
    )
    assert not marker.exists() and not list(tmp_path.glob("*.safetensors"))


def test_training_resume_and_init_encoder_from_refuse(evil, tiny_data, tmp_path, capsys):
    path, marker = evil
    exp = tmp_path / "exp"
    last = _crafted(exp / f"checkpoint_last{path.suffix}", marker)
    save_config(tiny_config(tiny_data, exp, max_updates=2), tmp_path / "conf.yaml")
    assert main(["train", "--config", str(tmp_path / "conf.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    if path.suffix == ".pt":  # a run of an older speechmt: how to convert it to resume
        assert err == (
            f"speechmt: error: {last}: a pickled checkpoint of an older speechmt, not loaded (pickles "
            f"can run code); to resume, convert it if you trust it: speechmt import convert {last} --out "
            f"{exp / 'checkpoint_last.safetensors'} --trust; or pass --no-resume to start afresh\n"
        )
    else:
        assert err == (
            _pickle_error(last) + "; no readable checkpoint_<step>.safetensors beside it either; pass "
            "--no-resume to start afresh\n"
        )
    assert last.exists()
    save_config(
        tiny_config(tiny_data, tmp_path / "st", max_updates=2, init_encoder_from=str(path)), tmp_path / "st.yaml"
    )
    _refused(capsys, ["train", "--config", str(tmp_path / "st.yaml")], path)
    assert not marker.exists()


def test_pretrain_audio_resume_refuses(evil, tiny_data, tmp_path, capsys):
    path, marker = evil
    out = tmp_path / "w2v"
    state = _crafted(out / "checkpoint_last.safetensors", marker)  # resumed as `train` resumes
    conf = tmp_path / "pre.yaml"
    conf.write_text(yaml.safe_dump({"hf_config": tiny_wav2vec2_fields(), "max_tokens": 500}))
    assert (
        main(
            [
                "research",
                "pretrain-audio",
                str(tiny_data / "train.jsonl"),
                "--out",
                str(out),
                "--config",
                str(conf),
                "max_updates=1",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        _pickle_error(state) + "; no readable checkpoint_<step>.safetensors beside it "
        "either; pass --no-resume to start afresh\n"
    )
    assert not marker.exists() and state.exists()


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """A 4-update ST checkpoint in the new format (optimiser, RNG and training state included)."""
    exp = tmp_path_factory.mktemp("exp")
    save_config(tiny_config(tiny_data, exp, max_updates=4, valid_decode=False), exp / "conf.yaml")
    assert main(["train", "--config", str(exp / "conf.yaml")]) == 0
    return exp / "checkpoint_last.safetensors"


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "dtype"):  # numpy
        return a.dtype == b.dtype and (a == b).all()
    return type(a) is type(b) and a == b


def test_convert_trust_makes_an_old_checkpoint_that_loads_and_translates_identically(trained, tmp_path, capsys):
    state = load_checkpoint(trained)
    old = tmp_path / "old.pt"
    torch.save({**state, "format": "speechmt-checkpoint-1"}, old)  # as speechmt 0.1 wrote checkpoints
    new = tmp_path / "new.safetensors"
    assert main(["import", "convert", str(old), "--out", str(new), "--trust"]) == 0
    n = len(state["model"])
    assert capsys.readouterr().out.startswith(f"{new}: {old} in the safe format ({n} model tensors, ")
    assert _same(load_checkpoint(new), state)
    a, b = speechmt.load_model(trained), speechmt.load_model(new)
    (ra,), (rb,) = speechmt.translate(a, [WAV], beam=3, nbest=3), speechmt.translate(b, [WAV], beam=3, nbest=3)
    assert ra.text == rb.text and ra.nbest == rb.nbest
    assert main(["import", "convert", str(new), "--out", str(tmp_path / "again.safetensors"), "--trust"]) == 2
    assert capsys.readouterr().err == f"speechmt: error: {new}: already a {FORMAT} file; nothing to convert\n"


def test_convert_with_trust_still_runs_no_code(tmp_path, capsys):
    marker = tmp_path / "marker"
    path = _crafted(tmp_path / "evil.pt", marker)
    assert main(["import", "convert", str(path), "--out", str(tmp_path / "new.safetensors"), "--trust"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speechmt: error: {path}: not a readable checkpoint, truncated or corrupt (")
    assert err.count("\n") == 1 and not marker.exists() and not list(tmp_path.glob("*.safetensors"))
