#!/usr/bin/env bash
# Usage (from recipes/mustc): bash ../../research/mustc/local/multilingual_peers.sh DATA EXP [DIRECTIONS] [TEST]
# Issue 64 part 7: multilingual_vs_bilingual.sh's per-direction benchmarks (EXP/bench_<dir>) with the peers that
# exist for each direction beside them, all on the same utterances:
#   - faster-whisper base's own translate task (directions into English only),
#   - the zero-shot cascade faster-whisper base -> Gemma 3 270M 3-shot (every direction),
#   - with BUNDLED=path (e.g. speechmt/pretrained/mustc_mini_multilingual.safetensors): that model too (slow on
#     these voices: Whisper base's zero-shot search loops on much of them, e.g. ~80 % WER on CoVoST-mini French).
# Writes EXP/peers/*.json, EXP/all_<dir>/ (one `research benchmark` folder per direction, the bilingual and
# multilingual rows taken from EXP/bench_<dir> by --compare) and EXP/REPORT-peers.md. Needs `make peers`.
# Resumable: a finished peer file or benchmark is not redone.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
S=${SPEECHMT:-$ROOT/.venv/bin/speechmt}
PY=${PYTHON:-$ROOT/.venv/bin/python}
PEERS_PY=${PEERS_PYTHON:-$ROOT/.venv-peers/bin/python}
BUNDLED=${BUNDLED:-}
bundled=(); [ -z "$BUNDLED" ] || bundled=(--model "$BUNDLED" --name speechmt-multilingual)
D=${1:?prepared folder}; E=${2:?experiment folder of multilingual_vs_bilingual.sh}
read -r -a DIRS <<< "${3:-en-fr en-es en-it}"; TEST=${4:-tst-COMMON_}
mkdir -p "$E/peers"
for d in "${DIRS[@]}"; do
  split=$TEST$d; peers=()
  if [ "${d#*-}" = en ]; then
    fw=$E/peers/fw-translate.$split.json; peers+=(--peer "$fw")
    [ -f "$fw" ] || "$PEERS_PY" "$ROOT/benchmarks/peers/faster_whisper_peer.py" --data "$D" --split "$split" \
        --task translate --beam 5 --threads 2 --out "$fw" > "$E/peers/fw.$d.log" 2>&1
  fi
  cascade=$E/peers/cascade.$split.json; peers+=(--peer "$cascade")
  [ -f "$cascade" ] || "$PY" "$ROOT/benchmarks/peers/cascade_whisper_gemma.py" --data "$D" --split "$split" \
      --out "$cascade" > "$E/peers/cascade.$d.log" 2>&1
  [ -f "$E/all_$d/benchmark.json" ] || "$S" research benchmark --data "$D" --split "$split" \
      --compare "$E/bench_$d/benchmark.json" "${peers[@]}" "${bundled[@]}" \
      --beam 5 --threads 2 --out "$E/all_$d" > "$E/all_$d.log" 2>&1
  cp -n "$E/bench_$d"/hyp.*.txt "$E/all_$d/" 2>/dev/null || true
done
"$S" research report "${DIRS[@]/#/$E/all_}" --out "$E/REPORT-peers.md" \
   --title "multilingual vs bilingual, and the peers: ${DIRS[*]}"
