"""A translation memory for models that read retrieved examples (decoder.examples), built at run time from
installed Debian packages (none of its text is in this repository).

`build_memory(out)` writes into the folder `out` (default $SPEECHMT_HOME/ding-en-de, which the name `ding-en-de`
finds):
- `memory.jsonl`: every English-German pair of the Ding dictionary (Debian `trans-de-en`, GPL-2+) that passes
  synth-mt's filters (speechmt_corpora.mt_filters), as manifest records with empty audio (ids ding_0, ding_1, ...),
  minus every sentence of MuST-C-mini's dev and test regions (either side; `split_pool` with the corpus' seed
  gives them without voicing: every size's dev and test sentences are among them), so that decoding a mini
  corpus' dev or test set never finds its own translation;
- `summary.json`: the pairs, the source's licence and package, the filters' drops by reason, the sentences held
  out and the sha256 of memory.jsonl;
- `NOTICE`: where the text comes from and its licence.
The folder is written under a temporary name and renamed: it is complete or absent.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from speechmt.data.manifest import write_manifest
from speechmt.data.retrieval import MEMORY_FILE
from speechmt_corpora.common import SynthError, ensure_free, publish, split_pool, staging_dir
from speechmt_corpora.mt_filters import key
from speechmt_corpora.mt_sources import SOURCES, SourcePaths
from speechmt_corpora.mt_text import FILTERS, _records, gather
from speechmt_corpora.mustc import DING_STREAM
from speechmt_corpora.text import ding_pairs

NAME = "ding-en-de"  # the folder under $SPEECHMT_HOME: the name a model's decoder.memory or --memory gives


def held_out_sentences(seed: int = 0, paths: SourcePaths | None = None) -> set[str]:
    """Keys (speechmt_corpora.mt_filters.key) of both sides of every sentence in MuST-C-mini's dev and test
    regions for `seed`, the sentences `speechmt data synth mustc --seed SEED` voices for dev and tst-COMMON
    (any size)."""
    _, splits = split_pool(ding_pairs((paths or SourcePaths()).ding), "full", seed, DING_STREAM)
    return {key(text) for name in ("dev", "test") for p in splits[name] for text in (p.src, p.tgt)}


def build_memory(out: Path, seed: int = 0, paths: SourcePaths | None = None) -> dict:
    """Writes the translation memory folder `out` (see the module docstring) and returns its summary. SynthError
    (one line) when `out` already holds files or Ding is not installed or gives no pair."""
    out = Path(out)
    ensure_free(out)
    paths = paths or SourcePaths()
    if not Path(paths.ding).is_file():
        raise SynthError(f"{paths.ding} not found: install the Debian package trans-de-en (the Ding dictionary)")
    held = held_out_sentences(seed, paths)
    pairs, entries = gather(("ding",), "en", "de", held, paths)
    if not pairs:
        raise SynthError(f"no translation pair from {paths.ding}: {entries['ding'].get('status')}")
    staging = staging_dir(out)
    write_manifest(staging / MEMORY_FILE, _records(pairs, "en", "de"))
    summary = {
        "memory": MEMORY_FILE,
        "pair": "en-de",
        "pairs": len(pairs),
        "source": entries["ding"],
        "held_out": {
            "what": f"both sides of MuST-C-mini's dev and test sentences (data synth mustc --seed {seed})",
            "sentences": len(held),
            "seed": seed,
        },
        "filters": {k: v for k, v in FILTERS.items() if k != "corpus sentences"},
        "sha256": hashlib.sha256((staging / MEMORY_FILE).read_bytes()).hexdigest(),
    }
    (staging / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    ding = SOURCES["ding"]
    (staging / "NOTICE").write_text(
        f"English-German translation pairs from the Ding dictionary (Debian package {ding.packages}, {ding.licence}),\n"
        "filtered and written by `speechmt data synth-memory` on this machine; not part of speechmt's repository.\n"
        "Redistributing this folder is redistributing GPL-2+ text: its terms apply.\n",
        encoding="utf-8",
    )
    publish(staging, out)
    return {"out": str(out), **summary}
