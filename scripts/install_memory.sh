#!/usr/bin/env bash
# Builds the translation memory that the bundled model reads its retrieved examples from (decoder.memory
# `ding-en-de`) at ${SPEECHMT_HOME:-$HOME/.cache/speechmt}/ding-en-de: every filtered English-German pair of the
# Ding dictionary (Debian package trans-de-en, GPL-2+; `install_system_deps.sh` installs it), none of
# MuST-C-mini's dev or test sentences (`speechmt synth-memory`, which writes the folder under a temporary name
# and renames it: it is complete or absent). Ding's text is GPL-2+: it is built here, never shipped.
# Idempotent: does nothing when the folder is complete. Without trans-de-en it says so and exits 0 (the rest of
# speechmt works; the bundled model then asks for the memory in one line).
# Usage: bash scripts/install_memory.sh [VENV]      (`make python-deps` and `make setup` run it)
set -euo pipefail
VENV=${1:-.venv}
OUT="${SPEECHMT_HOME:-$HOME/.cache/speechmt}/ding-en-de"
DING=/usr/share/trans/de-en
if [ -s "$OUT/memory.jsonl" ] && [ -s "$OUT/summary.json" ]; then
    echo "install_memory: $OUT is complete"
    exit 0
fi
if [ ! -s "$DING" ]; then
    echo "install_memory: $DING not found (Debian package trans-de-en): no translation memory at $OUT;" \
         "the bundled model needs one (install trans-de-en, then run this again)" >&2
    exit 0
fi
rm -rf "$OUT"  # an incomplete folder (a complete build is renamed into place whole)
mkdir -p "$(dirname "$OUT")"
"$VENV/bin/speechmt" synth-memory --out "$OUT" --ding "$DING" > /dev/null
echo "install_memory: $OUT ($(wc -l < "$OUT/memory.jsonl") Ding pairs, GPL-2+: $OUT/NOTICE)"
