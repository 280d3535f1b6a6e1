"""Manifests: round trip, a malformed line named by file and line, and a missing split named with the
splits that are prepared (one line for every command that reads a split)."""

from pathlib import Path

import pytest

from speechmt.data.manifest import ManifestError, Record, read_manifest, read_split, split_manifest, write_manifest


def _record(i: int) -> Record:
    return Record(
        id=f"ted_1_{i}",
        audio="wav/ted_1.wav",
        offset=1.5 * i,
        duration=1.25,
        n_frames=125,
        src_text=f"sentence {i}",
        tgt_text=f"Satz {i}",
        speaker="spk.1",
        src_lang="en",
        tgt_lang="de",
    )


def test_records_round_trip_in_order(tmp_path):
    records = [_record(i) for i in range(3)]
    assert write_manifest(tmp_path / "dev.jsonl", records) == 3
    assert read_manifest(tmp_path / "dev.jsonl") == records
    assert read_split(tmp_path, "dev") == records
    assert [p.name for p in tmp_path.iterdir()] == ["dev.jsonl"]  # no temporary file left


def test_a_malformed_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    write_manifest(path, [_record(0)])
    path.write_text(path.read_text() + '{"id": "ted_1_1"}\n')
    with pytest.raises(ManifestError, match=rf"^{path}:2: malformed manifest record"):
        read_manifest(path)


def test_a_missing_split_names_the_prepared_ones(tmp_path):
    for split in ("train", "dev"):
        write_manifest(tmp_path / f"{split}.jsonl", [_record(0)])
    assert split_manifest(tmp_path, "dev") == tmp_path / "dev.jsonl"
    with pytest.raises(ManifestError) as e:
        split_manifest(tmp_path, "tst-COMMON")
    assert str(e.value) == f"{tmp_path / 'tst-COMMON.jsonl'}: no split 'tst-COMMON' in {tmp_path}; prepared: dev, train"
    with pytest.raises(ManifestError) as e:
        read_split(tmp_path / "nope", "dev")
    assert str(e.value) == (
        f"{tmp_path / 'nope' / 'dev.jsonl'}: no split 'dev' in {tmp_path / 'nope'} (no such folder); prepared: none"
    )


def test_manifests_are_read_without_the_audio_libraries():
    """The peer scripts read manifests in .venv-peers, which has numpy but neither soundfile nor torch."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules.update(soundfile=None, torch=None, scipy=None)\n"
        "from speechmt.data.manifest import iter_manifest, read_split\n"
        "assert 'speechmt.audio' not in sys.modules"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stderr
