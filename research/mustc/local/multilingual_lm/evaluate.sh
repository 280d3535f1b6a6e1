#!/usr/bin/env bash
# Issue 64 part 6: the multilingual bundled-model candidate beside the default and the peers on real speech.
#   evaluate.sh EXP WORK OUT MT_DATA [PEERS]
# EXP: the run of conf mt_lm_gemma_wasr_multilingual.yaml (averages its last two checkpoints, exports at 15 s as
# the default); WORK: benchmarks/real_speech/directions.sh's work folder (built audio, prepared splits); OUT: the
# reports; PEERS: an earlier directions.sh OUT whose peers' hypotheses are reused.
# Also scores the text MT on each direction's dev pairs (MT_DATA/dev_<s>-<t>, mt_text.py's folder).
set -euo pipefail
EXP=${1:?}; WORK=${2:?}; OUT=${3:?}; DATA=${4:?}; PEERS=${5:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
S=$ROOT/.venv/bin/speechmt
mkdir -p "$OUT"
last=$(ls "$EXP"/checkpoint_[0-9]*.safetensors | sed 's/.*checkpoint_\([0-9]*\).safetensors/\1/' | sort -n | tail -2)
set -- $last
M=$OUT/multilingual.safetensors
[ -f "$M" ] || {
    "$S" average "$EXP/checkpoint_$1.safetensors" "$EXP/checkpoint_$2.safetensors" --out "$OUT/avg.safetensors"
    "$S" export "$OUT/avg.safetensors" --out "$M" --whisper-pad-seconds 15
}
if [ -n "$PEERS" ]; then
    for b in mustc-tst-REAL-en-x covost2-real-x-en; do
        mkdir -p "$OUT/$b/peers"; cp -n "$PEERS/$b/peers/"*.json "$OUT/$b/peers/" 2>/dev/null || true
    done
fi
MODELS_EN_X="speechmt-default=$ROOT/speechmt/pretrained/mustc_mini_en_de.safetensors@de"
for t in de fr es it; do MODELS_EN_X+=" speechmt-multilingual=$M@$t"; done
MODELS_X_EN=""
for s in fr es it; do MODELS_X_EN+=" speechmt-multilingual=$M@$s"; done
WORK=$WORK MODELS_EN_X=$MODELS_EN_X MODELS_X_EN=${X_EN:-$MODELS_X_EN} bash "$ROOT/benchmarks/real_speech/directions.sh" "$OUT"
mkdir -p "$OUT/mt"
for d in en-de en-fr en-es en-it de-en fr-en es-en it-en; do
    [ -f "$OUT/mt/$d/report.json" ] || "$S" evaluate --model "$M" --task mt --data "$DATA" --split "dev_$d" --beam 5 \
        --out "$OUT/mt/$d" --name "multilingual MT $d" > "$OUT/mt/$d.log" 2>&1 || echo "mt $d failed"
done
