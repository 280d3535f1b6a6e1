#!/usr/bin/env bash
# On the GPU machine, from the repository root (README.md beside this file): joins the GGUF parts in $XFER
# (default /root/xfer), imports them, trains the arms "all" and "corpus" of mt_lm_gemma_device.yaml for at most
# SECONDS each, and packs their LoRA tensors into $OUT.
# usage: bash research/mustc/local/device_mt/train_arms.sh SECONDS [key=value overrides...]
set -u
T=$1; shift
HERE=$(dirname "$0")
export SPEECHMT_HOME=${SPEECHMT_HOME:-/root/smh} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
X=${XFER:-/root/xfer}; mkdir -p $X $SPEECHMT_HOME ${OUT:-/tmp/out}
PY=${PY:-python3}
if [ ! -d $SPEECHMT_HOME/gemma-3-270m ]; then
  cat $X/part.* | gzip -d > $X/slim.gguf || exit 4
  $PY -m speechmt import gguf $X/slim.gguf --out $SPEECHMT_HOME/gemma-3-270m || exit 5
fi
[ -d $X/data ] || { mkdir -p $X/data && tar -xzf $HERE/data.tar.gz -C $X/data; } || exit 6
for arm in all corpus; do
  timeout $T $PY -m speechmt train --config ${CONF:-$HERE/mt_lm_gemma_device.yaml} data.dir=$X/data/$arm train.save_dir=$X/exp/$arm "$@" > ${OUT:-/tmp/out}/$arm.log 2>&1
  echo "arm $arm rc $?"; tail -2 ${OUT:-/tmp/out}/$arm.log
done
$PY $HERE/pack.py $X/exp ${OUT:-/tmp/out}
