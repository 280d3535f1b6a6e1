#!/usr/bin/env bash
# Usage (from recipes/mustc): bash ../../research/mustc/local/multilingual_vs_bilingual.sh DATA EXP [DIRECTIONS] [TEST]
# Goal 1 of issue 64 (cut to what the session's CPU allows): the multilingual model at 150 updates per direction
# (warm-up 100; DIRECTIONS default "en-fr en-es en-it") against a bilingual model of 150 updates per direction
# (warm-up 33: the same schedule per update of each direction), Whisper base frozen + LoRA on Whisper's decoder
# (conf/st_whisper_base_multilingual.yaml). TEST: the test split's prefix, the direction appended (tst-COMMON_ for
# MuST-C-mini; test_ for CoVoST-mini, DIRECTIONS "fr-en es-en it-en"); each direction's dev split is dev_<dir>.
# Resumable: a finished arm or benchmark is not redone.
set -euo pipefail
S=${SPEECHMT:-../../.venv/bin/speechmt}
CONF=conf/st_whisper_base_multilingual.yaml
D=${1:?prepared folder: speechmt data prepare mustc --tgt-langs "fr es it"}; E=${2:?experiment folder}
read -r -a DIRS <<< "${3:-en-fr en-es en-it}"; TEST=${4:-tst-COMMON_}
N=$((150 * ${#DIRS[@]})); LIST=$(IFS=,; echo "${DIRS[*]}")
common="data.dir=$D train.valid_decode=false train.save_interval_updates=50 train.keep_last=2"
mkdir -p "$E"
[ -f "$E/multi/checkpoint_$N.safetensors" ] || $S train --config $CONF $common "data.directions=[$LIST]" \
   train.max_updates=$N train.validate_interval_updates=$N train.save_dir=$E/multi > $E/multi.log 2>&1
for d in "${DIRS[@]}"; do
  [ -f "$E/bi_$d/checkpoint_150.safetensors" ] || /usr/bin/time -f "%e s wall" -o $E/bi_$d.time \
     $S train --config $CONF $common "data.directions=[$d]" data.valid_split=dev_$d train.max_updates=150 \
     train.warmup_updates=33 train.validate_interval_updates=150 train.save_dir=$E/bi_$d >> $E/bi_$d.log 2>&1
done
for d in "${DIRS[@]}"; do
  [ -f $E/bench_$d/benchmark.json ] || $S research benchmark --data $D --split $TEST$d \
      --model $E/bi_$d/checkpoint_150.safetensors --model $E/multi/checkpoint_$N.safetensors \
      --name bilingual-150 --name multilingual-$N --beam 5 --threads 2 --out $E/bench_$d > $E/bench_$d.log 2>&1
done
$S research report "${DIRS[@]/#/$E/bench_}" --out $E/REPORT.md \
   --title "multilingual vs bilingual at equal total updates: ${DIRS[*]}" > $E/report.log 2>&1 || true
echo done > $E/goal.done
