#!/usr/bin/env bash
# CoVoST 2 <src_lang>-><tgt_lang> recipe, staged: run.sh --stage N --stop-stage M.
#   0  build CoVoST-mini (synthetic, same layout; de->en and es->en) at $root when --mini is given
#   1  prepare train (train + train_covost), dev, test: manifests, fbank80, global CMVN, summary
#   2  SentencePiece vocabularies: unigram $st_vocab on the target side (ST), $asr_vocab on the source (ASR)
# Stages run unchanged on the released corpus (Common Voice 4 clips + CoVoST 2 TSVs) and on the mini one.
set -euo pipefail
cd "$(dirname "$0")"
source ../common/env.sh

stage=1
stop_stage=2
root=corpora/covost2        # holds <src_lang>/clips, <src_lang>/validated.tsv, <src_lang>/covost_v2.*.tsv
src_lang=de
tgt_lang=en
mini=""                     # tiny, small or full: build CoVoST-mini at $root in stage 0
seed=0
jobs=2
data=""                     # default: data/$src_lang-$tgt_lang
st_vocab=8000
asr_vocab=5000

usage() {
    echo "usage: $0 [--stage N] [--stop-stage M] [--root DIR] [--src-lang de] [--tgt-lang en]"
    echo "          [--mini tiny|small|full] [--data DIR] [--jobs 2] [--st-vocab 8000] [--asr-vocab 5000]"
}
parse_options "$@"
data=${data:-data/$src_lang-$tgt_lang}

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ] && [ -n "$mini" ]; then
    log "stage 0: CoVoST-mini ($mini) at $root"
    "$SPEECHMT" synth --corpus covost2 --size "$mini" --out "$root" --seed "$seed" --jobs "$jobs"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
    log "stage 1: prepare $root ($src_lang -> $tgt_lang) -> $data"
    "$SPEECHMT" prepare covost2 --root "$root" --src-lang "$src_lang" --tgt-lang "$tgt_lang" --out "$data" \
        --jobs "$jobs"
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
    log "stage 2: vocabularies in $data"
    "$SPEECHMT" vocab "$data/train.jsonl" --field tgt --vocab-size "$st_vocab" \
        --lang-tags "<$src_lang>" "<$tgt_lang>" --out "$data/spm_st_$st_vocab.model"
    "$SPEECHMT" vocab "$data/train.jsonl" --field src --vocab-size "$asr_vocab" \
        --lang-tags "<$src_lang>" --out "$data/spm_asr_$asr_vocab.model"
fi
log "done (stages $stage..$stop_stage)"
