#!/usr/bin/env bash
# Real speech in every direction it exists here, benchmarked and put in one table per benchmark:
#   English -> de, fr, es, it on tst-REAL (60 real English segments, references written for speechmt), and
#   fr, es, it -> English on the Asterisk prompts (46 real recordings per language).
# Systems: the peers that exist for each direction (faster-whisper base's own translate task into English; the
# zero-shot cascade faster-whisper base -> Gemma 3 270M, 3-shot, in every direction) and the speechmt models
# named in MODELS_EN_X / MODELS_X_EN ("NAME=CHECKPOINT@DIRECTION ...", e.g. "speechmt-default=speechmt/pretrained/
# mustc_mini_en_de.safetensors@de", the default), each scored on its direction(s) only.
# Writes the per-direction `speechmt research benchmark` folders, the peers' hypotheses files and REPORT.md (from
# `speechmt research report`) under OUT/mustc-tst-REAL-en-x and OUT/covost2-real-x-en.
# Needs `make setup` and `make peers`; WORK (default OUT/work) holds the built audio and prepared data.
# Usage: bash benchmarks/real_speech/directions.sh OUT
set -euo pipefail
OUT=${1:?usage: directions.sh OUT}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-$OUT/work}
SPEECHMT=${SPEECHMT:-$ROOT/.venv/bin/speechmt}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PEERS_PYTHON=${PEERS_PYTHON:-$ROOT/.venv-peers/bin/python}
MODELS_EN_X=${MODELS_EN_X:-speechmt-default=$ROOT/speechmt/pretrained/mustc_mini_en_de.safetensors@de}
MODELS_X_EN=${MODELS_X_EN:-}
cd "$ROOT"

# the audio and the prepared splits (tst-REAL_en-<t>, test_<s>-en)
[ -d "$WORK/real/en-de" ] || bash "$HERE/build.sh" "$WORK/real"
[ -d "$WORK/real-x-en" ] || "$SPEECHMT" data synth real --out "$WORK/real-x-en" --tst-real "$WORK/real"
[ -f "$WORK/data-en-x/tst-REAL_en-it.jsonl" ] || "$SPEECHMT" data prepare mustc --root "$WORK/real" \
    --tgt-langs "de fr es it" --splits tst-REAL --out "$WORK/data-en-x"
[ -f "$WORK/data-x-en/test_it-en.jsonl" ] || "$SPEECHMT" data prepare covost2 --root "$WORK/real-x-en" \
    --src-langs "fr es it" --tgt-lang en --out "$WORK/data-x-en"

models_for() {  # "NAME=CKPT@DIR ..." and a direction's code -> the --model/--name options of that direction
    local item name rest
    for item in $1; do
        name=${item%%=*}; rest=${item#*=}
        [ "${rest##*@}" = "$2" ] && printf -- '--model %s --name %s ' "${rest%@*}" "$name"
    done
    return 0
}

bench() {  # DATA SPLIT DIR MODEL_OPTIONS PEER...: one direction's benchmark
    local data=$1 split=$2 dir=$3 models=$4; shift 4
    local opts=()
    for peer in "$@"; do opts+=(--peer "$peer"); done
    # shellcheck disable=SC2086
    "$SPEECHMT" research benchmark --data "$data" --split "$split" --out "$dir/$split" --threads 2 "${opts[@]}" $models
    rm -f "$dir/$split"/*.png  # 46-60 clips: the length plots say nothing
}

X_EN=$OUT/covost2-real-x-en; mkdir -p "$X_EN/peers"
for s in fr es it; do
    split=test_$s-en
    [ -f "$X_EN/peers/fw-translate.$split.json" ] || "$PEERS_PYTHON" benchmarks/peers/faster_whisper_peer.py \
        --data "$WORK/data-x-en" --split "$split" --task translate --beam 5 --threads 2 \
        --out "$X_EN/peers/fw-translate.$split.json"
    [ -f "$X_EN/peers/cascade.$split.json" ] || "$PYTHON" benchmarks/peers/cascade_whisper_gemma.py \
        --data "$WORK/data-x-en" --split "$split" --out "$X_EN/peers/cascade.$split.json"
    bench "$WORK/data-x-en" "$split" "$X_EN" "$(models_for "$MODELS_X_EN" "$s")" \
        "$X_EN/peers/fw-translate.$split.json" "$X_EN/peers/cascade.$split.json"
done
"$SPEECHMT" research report "$X_EN"/test_{fr,es,it}-en --out "$X_EN/REPORT.md" \
    --title "Real speech into English (Asterisk prompts, 46 clips per language)"

EN_X=$OUT/mustc-tst-REAL-en-x; mkdir -p "$EN_X/peers"
for t in de fr es it; do
    split=tst-REAL_en-$t
    [ -f "$EN_X/peers/cascade.$split.json" ] || "$PYTHON" benchmarks/peers/cascade_whisper_gemma.py \
        --data "$WORK/data-en-x" --split "$split" --out "$EN_X/peers/cascade.$split.json"
    bench "$WORK/data-en-x" "$split" "$EN_X" "$(models_for "$MODELS_EN_X" "$t")" "$EN_X/peers/cascade.$split.json"
done
"$SPEECHMT" research report "$EN_X"/tst-REAL_en-{de,fr,es,it} --out "$EN_X/REPORT.md" \
    --title "tst-REAL: real English speech into four MuST-C languages (60 segments)"
rm -f "$X_EN"/peers/*.asr.json "$X_EN"/peers/*.tsv "$EN_X"/peers/*.asr.json "$EN_X"/peers/*.tsv
