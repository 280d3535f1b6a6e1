#!/usr/bin/env bash
# Builds both synthetic mini corpora (MuST-C-mini en-de, CoVoST-mini de-en and es-en) in the released
# layouts, from Debian packages installed by `make setup`: run.sh [--size tiny|small|full] [--out DIR].
set -euo pipefail
cd "$(dirname "$0")"
source ../common/env.sh

size=small
out=corpora
seed=0
jobs=2
usage() { echo "usage: $0 [--size tiny|small|full] [--out DIR] [--seed 0] [--jobs 2]"; }
parse_options "$@"

log "MuST-C-mini ($size) -> $out/mustc"
"$SPEECHMT" data synth mustc --size "$size" --out "$out/mustc" --seed "$seed" --jobs "$jobs"
log "CoVoST-mini ($size) -> $out/covost2"
"$SPEECHMT" data synth covost2 --size "$size" --out "$out/covost2" --seed "$seed" --jobs "$jobs"
