"""The peer scripts under benchmarks/peers (run in the peers' own environment) as far as they run without their
peer library: which language Whisper is told."""

import importlib.util
import sys
from pathlib import Path

import pytest

from speechmt.data.manifest import Record, write_manifest

PEER = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "faster_whisper_peer.py"


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("faster_whisper_peer", PEER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _clips(peer, folder, langs):
    """The peer's clips of a split whose records name `langs` as their source languages."""
    records = [
        Record(
            id=f"u{i}",
            audio="a.wav",
            offset=0.0,
            duration=1.0,
            n_frames=100,
            src_text="x",
            tgt_text="y",
            speaker="s",
            src_lang=lang,
            tgt_lang="en",
        )
        for i, lang in enumerate(langs)
    ]
    write_manifest(folder / "test.jsonl", records)
    return peer.read_clips(folder, "test")


def test_whisper_is_told_the_manifests_source_language_unless_given(peer, tmp_path):
    assert peer.source_language(_clips(peer, tmp_path, ["es", "es"]), None) == "es"
    assert peer.source_language(_clips(peer, tmp_path, ["es", "es"]), "de") == "de"  # --language wins
    with pytest.raises(peer.PeerError, match="source languages de, es; pass --language"):
        peer.source_language(_clips(peer, tmp_path, ["es", "de"]), None)
    with pytest.raises(peer.PeerError, match="no source language; pass --language"):
        peer.source_language(_clips(peer, tmp_path, ["", ""]), None)
    assert peer.parse_args(["--data", "d", "--split", "s", "--out", "o"]).language is None
