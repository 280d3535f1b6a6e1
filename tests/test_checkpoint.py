"""The checkpoint format (safetensors + JSON): exact round trips of every kind of value a checkpoint holds,
tied tensors stored once, optimiser/scheduler/RNG states that continue identically, atomic writes (an
exception or kill -9 mid-write leaves the old file), no bigger than torch.save, one-line errors."""

import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import speechmt.checkpoint as checkpoint
from speechmt.checkpoint import FORMAT, CheckpointError, file_kind, load_checkpoint, save_checkpoint
from speechmt.models.build import build_model
from speechmt.models.config import preset
from speechmt.training.optim import build_optimizer, build_scheduler
from speechmt.training.state import rng_state, set_rng_state


def _every_kind() -> dict:
    """A nested state with every kind of value the callers put in a checkpoint."""
    emb = torch.randn(6, 4)
    return {
        "model": {
            "decoder.embed.weight": emb,
            "decoder.output.weight": emb,
            "half": torch.randn(3).half(),
            "bf16": torch.randn(2, 2).bfloat16(),
            "f64": torch.randn(2).double(),
            "long": torch.arange(5),
            "mask": torch.tensor([True, False]),
            "scalar": torch.tensor(7.0),
            "empty": torch.empty(0, 3),
            "transposed": torch.randn(3, 5).t(),
            "row": emb[2:4],
        },
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}, 1: {}},
            "param_groups": [{"betas": (0.9, 0.98), "params": [0, 1], "foreach": None, "amsgrad": False}],
        },
        "rng": {"numpy": np.random.get_state(), "python": random.getstate(), "torch": torch.get_rng_state()},
        "tokenizers": {
            "src": None,
            "tgt": {
                "config": {"lang_tags": ("<en>", "<de>"), "vocab_size": 150},
                "model": b"\x00\x80proto\xff",
                "empty": b"",
            },
        },
        "floats": [math.inf, -math.inf, math.nan, -0.0, 1e-300, 0.1],
        "ints": [0, -1, 2**70],
        "flags": [True, False],
        "mixed_keys": {1: "one", "1": "string one", (2, 3): "tuple", None: 0, 1.5: "float", "$odd": "escaped"},
        "np_scalar": np.float64(2.5),
        "np_matrix": np.arange(6, dtype=np.int16).reshape(2, 3).T,
        "nested": [[(), {}], ([],)],
        "text": "Grüße – „x“",
    }


def _assert_same(a, b, path="state"):
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert type(k) is [type(x) for x in b if x == k][0], f"{path}: key {k!r}"
            _assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}/{i}")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b)), path


def test_round_trip_of_every_kind_of_value_is_exact(tmp_path):
    state = _every_kind()
    save_checkpoint(tmp_path / "c.safetensors", state)
    back = load_checkpoint(tmp_path / "c.safetensors")
    assert back.pop("format") == FORMAT
    _assert_same(state, back)
    assert type(back["rng"]["python"][1]) is tuple and back["rng"]["numpy"][1].dtype == np.uint32
    assert back["model"]["decoder.embed.weight"] is back["model"]["decoder.output.weight"]
    random.setstate(back["rng"]["python"])
    np.random.set_state(back["rng"]["numpy"])
    with safe_open(tmp_path / "c.safetensors", framework="pt") as f:
        names, metadata = set(f.keys()), f.metadata()
    # tied weights once; a slice of a stored tensor copied (safetensors refuses shared storage)
    assert "model/decoder.output.weight" not in names and {"model/decoder.embed.weight", "model/row"} <= names
    assert {"optimizer/state/0/exp_avg", "tokenizers/tgt/model", "rng/numpy/1"} <= names
    assert set(metadata) == {"format", "state"} and metadata["format"] == FORMAT
    doc = json.loads(metadata["state"])
    assert doc["model"]["decoder.output.weight"] == {"$tensor": "model/decoder.embed.weight"}
    assert doc["tokenizers"]["tgt"]["config"]["lang_tags"] == {"$tuple": ["<en>", "<de>"]}


def test_decoder_tags_of_a_multi_task_model_round_trip_as_plain_json(tmp_path):
    """{task: tag or None} (what a multi-task run decodes) comes back equal, in order, None kept."""
    tags = {"st": "<de>", "asr": "<|en|>", "mt": None}
    save_checkpoint(tmp_path / "c.safetensors", {"decoder_side": "tgt", "decoder_tags": tags})
    back = load_checkpoint(tmp_path / "c.safetensors")
    assert back["decoder_tags"] == tags and list(back["decoder_tags"]) == ["st", "asr", "mt"]
    assert back["decoder_side"] == "tgt"
    with safe_open(tmp_path / "c.safetensors", framework="pt") as f:
        assert json.loads(f.metadata()["state"])["decoder_tags"] == tags  # no tags: a plain JSON object


def test_map_location_and_a_format_key_in_the_state(tmp_path):
    save_checkpoint(
        tmp_path / "c.safetensors",
        {"format": "ignored", "w": torch.ones(2), "b": b"xy", "n": np.ones(2, dtype=np.float32)},
    )
    back = load_checkpoint(tmp_path / "c.safetensors", map_location=torch.device("meta"))
    assert back["format"] == FORMAT and back["w"].device.type == "meta" and back["w"].shape == (2,)
    assert back["b"] == b"xy" and back["n"].tolist() == [1.0, 1.0]


def test_optimizer_scheduler_and_rng_continue_identically(tmp_path):
    torch.manual_seed(0)
    model = build_model(preset("tiny", dropout=0.0))
    opt = build_optimizer(model, 1e-3, (0.9, 0.98), 0.01)
    sched = build_scheduler(opt, 4)

    def step():
        loss = sum((p.float() ** 2).mean() for p in model.parameters()) * torch.rand(())
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()

    for _ in range(3):
        step()
    save_checkpoint(
        tmp_path / "c.safetensors",
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "rng": rng_state(),
        },
    )
    for _ in range(2):
        step()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    after = (random.random(), np.random.rand(), torch.rand(()).item())

    ckpt = load_checkpoint(tmp_path / "c.safetensors")
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    set_rng_state(ckpt["rng"])
    for _ in range(2):
        step()
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())
    assert (random.random(), np.random.rand(), torch.rand(()).item()) == after
    assert isinstance(next(iter(ckpt["optimizer"]["state"])), int) and sched.last_epoch == 5


def test_no_bigger_than_torch_save(tmp_path):
    model = build_model(preset("tiny"))
    opt = build_optimizer(model, 1e-3, (0.9, 0.98), 0.0)
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    for state in (
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": rng_state()},
        {"model": {k: v.half() for k, v in model.state_dict().items()}},
    ):
        pickled = io.BytesIO()
        torch.save({"format": "speechmt-checkpoint-1", **state}, pickled)
        save_checkpoint(tmp_path / "c.safetensors", state)
        assert (tmp_path / "c.safetensors").stat().st_size <= len(pickled.getvalue())


def test_unstorable_values_are_named(tmp_path):
    with pytest.raises(TypeError, match="cannot store a set in a checkpoint .at train_state/kept."):
        save_checkpoint(tmp_path / "c.safetensors", {"train_state": {"kept": {1, 2}}})
    assert not (tmp_path / "c.safetensors").exists() and not list(tmp_path.iterdir())


def test_files_get_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "c.safetensors", {"w": torch.ones(1)})
    finally:
        os.umask(old)
    assert (tmp_path / "c.safetensors").stat().st_mode & 0o777 == 0o644


def _error(path) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_damaged_and_foreign_files_are_one_line_errors(tmp_path):
    save_checkpoint(tmp_path / "c.safetensors", {"model": {"w": torch.randn(100)}})
    blob = (tmp_path / "c.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(blob[: len(blob) - 10])
    assert _error(tmp_path / "cut.safetensors").startswith(
        f"{tmp_path / 'cut.safetensors'}: not a readable checkpoint, truncated or corrupt ("
    )
    (tmp_path / "header.safetensors").write_bytes(blob[:20] + b"#" + blob[21:])
    assert "not a readable checkpoint, truncated or corrupt" in _error(tmp_path / "header.safetensors")
    save_file({"w": torch.ones(2)}, tmp_path / "hf.safetensors", metadata={"format": "pt"})
    assert _error(tmp_path / "hf.safetensors") == (
        f"{tmp_path / 'hf.safetensors'}: not a speechmt model file (format 'pt'; this speechmt reads '{FORMAT}')"
    )
    save_file({"w": torch.ones(2)}, tmp_path / "plain.safetensors")
    assert _error(tmp_path / "plain.safetensors") == (
        f"{tmp_path / 'plain.safetensors'}: not a speechmt model file (a safetensors file without the '{FORMAT}' "
        "format tag and state)"
    )
    (tmp_path / "text.safetensors").write_text("hello, world\n")
    assert _error(tmp_path / "text.safetensors") == (
        f"{tmp_path / 'text.safetensors'}: not a speechmt model file "
        "(neither safetensors nor an old pickled checkpoint)"
    )
    (tmp_path / "empty.safetensors").write_bytes(b"")
    assert _error(tmp_path / "empty.safetensors").endswith("not a speechmt model file (an empty file)")
    save_file({}, tmp_path / "dangling.safetensors", metadata={"format": FORMAT, "state": '{"w": {"$tensor": "x"}}'})
    assert "not a readable checkpoint, truncated or corrupt" in _error(tmp_path / "dangling.safetensors")
    torch.save({"weights": 1}, tmp_path / "foreign.pt")
    assert _error(tmp_path / "foreign.pt") == (
        f"{tmp_path / 'foreign.pt'}: an old pickled speechmt checkpoint; pickles can run code, so it is not loaded. "
        f"Convert it once, if you trust its source: speechmt import convert {tmp_path / 'foreign.pt'} --out "
        "NEW.safetensors --trust"
    )
    assert _error(tmp_path / "none.safetensors") == f"{tmp_path / 'none.safetensors'}: checkpoint not found"


def test_atomic_save_leaves_the_old_checkpoint_on_failure(tmp_path, monkeypatch):
    save_checkpoint(tmp_path / "c.safetensors", {"model": {"w": torch.ones(2)}})

    def crash(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", crash)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "c.safetensors", {"model": {"w": torch.zeros(2)}})
    assert torch.equal(load_checkpoint(tmp_path / "c.safetensors")["model"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]  # no temporary file left


_WRITER = """
import sys, torch
from speechmt.checkpoint import save_checkpoint
i = 0
while True:
    i += 1
    save_checkpoint(sys.argv[1], {"i": i, "w": torch.full((1_000_000,), float(i))})
"""


def test_kill_9_while_writing_leaves_a_whole_checkpoint(tmp_path):
    path = tmp_path / "c.safetensors"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300  # generous: the machine may be busy
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and path.exists(), "the writer did not get to write"
        time.sleep(0.3)  # a few more writes, then kill -9 at whatever point the writer is
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    ckpt = load_checkpoint(path)
    assert ckpt["i"] >= 1 and torch.equal(ckpt["w"], torch.full((1_000_000,), float(ckpt["i"])))


def test_tied_tensors_stay_one_on_another_device(tmp_path):
    emb = torch.randn(4, 2)
    save_checkpoint(tmp_path / "c.safetensors", {"embed": emb, "output": emb})
    back = load_checkpoint(tmp_path / "c.safetensors", map_location="meta")
    assert back["embed"] is back["output"] and back["embed"].device.type == "meta"


def test_a_header_length_with_low_byte_0x80_is_not_taken_for_a_pickle(tmp_path):
    """A pickle starts with 0x80; so does a safetensors file whose 8-byte header length is 0x80 mod 256."""
    path = tmp_path / "c.safetensors"
    for pad in range(300):
        save_checkpoint(path, {"model": {"w": torch.ones(3)}, "note": "x" * pad})
        if path.read_bytes()[0] == 0x80:
            break
    assert path.read_bytes()[0] == 0x80 and file_kind(path) == "safetensors"
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(3))


def test_long_strings_are_stored_once_not_escaped_into_the_header(tmp_path):
    """A tokenizer's JSON (MBs of quotes) would be escaped twice inside the JSON header; it is a UTF-8 entry."""
    text = json.dumps({f'"piece{i}"': i for i in range(20000)}, ensure_ascii=False) + "ü€"
    save_checkpoint(tmp_path / "c.safetensors", {"tokenizer": {"json": text}, "short": "x" * 10})
    state = load_checkpoint(tmp_path / "c.safetensors")
    assert state["tokenizer"]["json"] == text and state["short"] == "x" * 10
    blob = (tmp_path / "c.safetensors").read_bytes()
    size, header = len(blob), int.from_bytes(blob[:8], "little")
    assert header < 2000 and size < len(text.encode()) + 3000
