"""Progress of long jobs (speechmt.progress): off a terminal, one line per interval with count, rate and time
left, driven here by a fake clock; on a terminal, a tqdm bar; and the long commands' loops report through it
(prepare, synth, the encoder cache, evaluate, analyze), checked with a zero interval."""

import io
import threading

import numpy as np
import pytest
import torch

from speechmt import progress as pg
from speechmt.progress import Progress, batch_starts, clock_text, progress


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_lines_at_the_interval_with_count_rate_and_time_left():
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(100, "decode dev", "utt", stream=out, interval=30, mode="lines", clock=clock, background=False)
    for _ in range(4):  # 4 utterances in 20 s: no line before the interval
        clock.now += 5
        bar.update()
    assert _lines(out) == []
    clock.now += 10  # 30 s: 5 done, 1/6 utt/s, 95 left at that rate
    bar.update()
    assert _lines(out) == ["speechmt: decode dev: 5/100 utt (5%), 0.167 utt/s, 0:00:30 elapsed, 0:09:30 left"]
    clock.now += 29
    bar.update(5)
    assert len(_lines(out)) == 1  # 29 s after the last line
    clock.now += 1
    bar.update(10)  # 60 s: 20 done
    assert _lines(out)[-1] == "speechmt: decode dev: 20/100 utt (20%), 0.333 utt/s, 0:01:00 elapsed, 0:04:00 left"
    clock.now += 15
    bar.close()
    assert _lines(out)[-1] == "speechmt: decode dev: done, 20 utt in 0:01:15, 0.267 utt/s"
    assert len(_lines(out)) == 3


def test_a_job_shorter_than_the_interval_prints_nothing():
    clock, out = FakeClock(), io.StringIO()
    with Progress(3, "short", "it", stream=out, interval=30, mode="lines", clock=clock, background=False) as bar:
        for _ in range(3):
            clock.now += 1
            bar.update()
    assert out.getvalue() == ""


def test_unknown_total_has_no_time_left():
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(None, "read", "file", stream=out, interval=10, mode="lines", clock=clock, background=False)
    clock.now += 10
    bar.update(4)
    assert _lines(out) == ["speechmt: read: 4 file, 0.4 file/s, 0:00:10 elapsed"]


def test_nothing_done_yet_has_an_unknown_time_left():
    clock = FakeClock()
    bar = Progress(10, "x", "utt", stream=io.StringIO(), interval=1, mode="lines", clock=clock, background=False)
    clock.now += 3725
    assert bar.line() == "x: 0/10 utt (0%), 0 utt/s, 1:02:05 elapsed, ? left"
    assert clock_text(0.4) == "0:00:00" and clock_text(86399.6) == "24:00:00"


def test_background_thread_prints_while_a_step_takes_longer_than_the_interval():
    out, printed = io.StringIO(), threading.Event()

    class Watched(io.StringIO):
        def write(self, text):
            printed.set()
            return out.write(text)

    with Progress(2, "slow batch", "utt", stream=Watched(), interval=0.05, mode="lines"):
        assert printed.wait(5.0)  # no update at all: the thread printed on time
    lines = _lines(out)
    assert lines[0].startswith("speechmt: slow batch: 0/2 utt (0%), 0 utt/s, 0:00:00 elapsed, ? left")
    assert lines[-1].startswith("speechmt: slow batch: done, 0 utt in 0:00:0")


def test_auto_mode_is_a_bar_on_a_terminal_and_lines_elsewhere():
    term = Terminal()
    bar = Progress(5, "prepare", "utt", stream=term, interval=0)
    assert bar.mode == "bar"
    bar.update(5)
    bar.close()
    assert "prepare" in term.getvalue() and "speechmt:" not in term.getvalue()
    assert Progress(5, "p", stream=io.StringIO(), interval=0, background=False).mode == "lines"
    assert Progress(5, "p", stream=io.StringIO(), enabled=False).mode == "off"
    with pytest.raises(ValueError, match="progress mode must be one of auto, bar, lines, off; got 'loud'"):
        Progress(5, "p", mode="loud")


def test_environment_sets_interval_and_mode(monkeypatch):
    out = io.StringIO()
    monkeypatch.setenv(pg.INTERVAL_ENV, "0")
    for _ in progress(range(3), "every item", "it", stream=out):
        pass
    assert [line.split(",")[0] for line in _lines(out)] == [
        "speechmt: every item: 1/3 it (33%)",
        "speechmt: every item: 2/3 it (67%)",
        "speechmt: every item: 3/3 it (100%)",
        "speechmt: every item: done",
    ]
    monkeypatch.setenv(pg.MODE_ENV, "off")
    out = io.StringIO()
    list(progress(range(3), "silent", stream=out))
    assert out.getvalue() == ""
    monkeypatch.setenv(pg.MODE_ENV, "lines")
    assert Progress(1, "t", stream=Terminal(), background=False).mode == "lines"
    monkeypatch.setenv(pg.INTERVAL_ENV, "soon")
    with pytest.warns(
        UserWarning,
        match="SPEECHMT_PROGRESS_INTERVAL='soon' is not a number of seconds >= 0; progress lines every 30 s",
    ):
        assert Progress(1, "t", stream=io.StringIO(), background=False).interval == 30.0
    monkeypatch.delenv(pg.INTERVAL_ENV)
    assert pg.env_interval() == 30.0


def test_batch_starts_counts_the_items_of_each_batch():
    out = io.StringIO()
    assert list(batch_starts(10, 4, "batches", "utt", stream=out, interval=0)) == [0, 4, 8]
    assert [line.split(",")[0] for line in _lines(out)] == [
        "speechmt: batches: 4/10 utt (40%)",
        "speechmt: batches: 8/10 utt (80%)",
        "speechmt: batches: 10/10 utt (100%)",
        "speechmt: batches: done",
    ]


# The long jobs report through it: a zero interval gives a line at every update.


@pytest.fixture
def every_update(monkeypatch):
    monkeypatch.setenv(pg.INTERVAL_ENV, "0")
    monkeypatch.setenv(pg.MODE_ENV, "lines")


def test_prepare_reports_feature_extraction(every_update, mustc_root, tmp_path, capsys):
    from speechmt.data.mustc import prepare_mustc
    from speechmt.data.prepare import PrepareConfig

    prepare_mustc(mustc_root, tmp_path / "data", "de", ("dev",), PrepareConfig(jobs=1))
    err = capsys.readouterr().err
    assert "speechmt: prepare dev: features: 1/" in err and "speechmt: prepare dev: features: done" in err


def test_synth_workers_report(every_update, capsys):
    from speechmt_corpora.common import run_parallel

    assert run_parallel(abs, [-1, -2, -3], 1, "synth mustc train", "talk") == [1, 2, 3]
    err = capsys.readouterr().err
    assert "speechmt: synth mustc train: 3/3 talk (100%)" in err and "synth mustc train: done, 3 talk" in err


def test_encoder_cache_reports(every_update, tmp_path, capsys):
    from speechmt.data.encoder_cache import build_encoder_cache

    sizes = [5, 7, 6]
    store = build_encoder_cache(
        lambda x, lengths: (x * 2, lengths),
        lambda i: torch.ones(sizes[i], 3),
        sizes,
        ["a", "b", "c"],
        tmp_path / "train",
        3,
        max_frames=8,
    )
    assert np.allclose(store.get(store.ids.index("b")), 2.0)
    err = capsys.readouterr().err
    assert "speechmt: encoder cache train: 3/3 utt (100%)" in err


class FakeTeacher:
    name, hidden_size = "fake", 2

    def identity(self) -> dict:
        return {"weights": "0"}

    def states(self, texts):
        return [torch.ones(len(t.split()), 4) for t in texts]


def test_teacher_cache_reports(every_update, tiny_data, capsys):
    from speechmt.data.manifest import read_manifest
    from speechmt.data.teacher_cache import cached_teacher_split

    records = read_manifest(tiny_data / "dev.jsonl")
    store = cached_teacher_split(tiny_data, "dev", FakeTeacher(), records, batch_size=1)
    assert sorted(store.ids) == sorted(r.id for r in records)
    assert f"speechmt: teacher cache dev: {len(records)}/{len(records)} utt (100%)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def checkpoint(tiny_data, tmp_path_factory) -> str:
    """A tiny ST model after 2 updates."""
    from tests.helpers import two_update_st

    return two_update_st(tiny_data, tmp_path_factory.mktemp("progress_exp"))


def test_analysis_speech_path_reports(every_update, checkpoint, tiny_data, capsys):
    from speechmt import load_model
    from speechmt.data.manifest import read_manifest
    from speechmt.evaluation.representations import speech_layers

    records = read_manifest(tiny_data / "train.jsonl")
    speech_layers(load_model(checkpoint), records, tiny_data, batch_size=4)
    err = capsys.readouterr().err
    assert "speechmt: analyze: speech path: 4/6 utt (67%)" in err and "analyze: speech path: 6/6 utt (100%)" in err


def test_evaluate_piped_prints_progress(every_update, checkpoint, tiny_data, tmp_path, capsys):
    from speechmt.cli import main

    assert (
        main(
            [
                "evaluate",
                "--model",
                checkpoint,
                "--data",
                str(tiny_data),
                "--split",
                "dev",
                "--beam",
                "1",
                "--max-len-b",
                "4",
                "--max-tokens",
                "300",
                "--out",
                str(tmp_path / "ev"),
            ]
        )
        == 0
    )
    err = [line for line in capsys.readouterr().err.splitlines() if "decode dev" in line]
    assert err[0].startswith("speechmt: decode dev with checkpoint_last.safetensors: ")
    assert err[-1].startswith("speechmt: decode dev with checkpoint_last.safetensors: done, ")
    assert all(" utt/s" in line for line in err) and "left" in err[0]
