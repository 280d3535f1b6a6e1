#!/usr/bin/env bash
# Issue 33, parts 4-5: every bridge system in front of the LM decoder (Gemma 3 270M behind the CTC bridge) trained at
# one budget from the same start, then analysed and scored side by side in one `speechmt research benchmark --analysis`
# report (systems named by variant first, Spearman's rho of each gap measure against BLEU in benchmark.md).
#   baseline   conf/st_lm_gemma_ctc.yaml             xstnet   conf/st_lm_gemma_ctc_xstnet.yaml
#   lut        conf/st_lm_gemma_ctc_lut.yaml         chimera  conf/st_lm_gemma_ctc_chimera.yaml
#   fat-st     conf/st_lm_gemma_ctc_fatst.yaml, after FAT-MLM conf/fat_mlm_lm_gemma_ctc.yaml
#   align      conf/st_lm_gemma_ctc_align.yaml       procrustes conf/st_lm_gemma_ctc_procrustes.yaml (MT run only)
#   fusion     conf/st_lm_gemma_ctc_fusion.yaml      fusion-gate  the same, its gates starting at 0.5 (half the mix)
#   fusion-fast  fusion-gate with the fusion's gates and layer weights at 50x the learning rate (train.lr_scale),
#              so that a handful of scalars move as far in 200 updates as the adapters' matrices do
#   procrustes-ls  procrustes with a least-squares map fitted on 1,000 utterances (train.init_map, init_procrustes)
#   NAME-bf16  NAME trained with train.precision=bf16 (a row to compare bf16 runs with at equal precision)
# Every system starts from the MT run (--mt, decoder.) and the CTC run (--ctc, speech_encoder.,ctc_head.) of stage 15
# (run.sh --lm-ctc-conf conf/ctc_lm_gemma.yaml --lm-st-conf conf/st_lm_gemma_ctc.yaml). A killed run resumes where
# it stopped; a system whose checkpoint_avg exists is not trained again, nor one with an analysis analysed, nor one
# with a benchmark decoded
# again (delete its folder to redo it). Each system is the average of its last --average saved checkpoints
# ($exp/sem_NAME/checkpoint_avg.safetensors), benchmarked alone into $exp/sem_NAME/bench; the report at --out joins
# those rows (research benchmark --compare) with every analysis, so systems can be added one session at a time.
# It runs in recipes/mustc (data/, exp/ there; relative options are read from there), from wherever it is called;
# the variants' configs are research/mustc/conf/'s, the baseline's recipes/mustc/conf/st_lm_gemma_ctc.yaml. Usage:
#   research/mustc/local/semantic_on_lm.sh [--data data/en-de] [--exp exp/en-de] [--mt CKPT] [--ctc CKPT] [--systems "baseline ..."]
#       [--split tst-COMMON] [--beam 5] [--limit N] [--analyze-split dev] [--analyze-limit N] [--out DIR] [--average N]
#       [--overrides "key=value ..."]   (added to every `speechmt train`; a smoke test: "train.max_updates=4")
set -euo pipefail
cd "$(dirname "$0")/../../../recipes/mustc"
source ../common/env.sh

data=data/en-de
exp=exp/en-de
mt=""                       # default: $exp/lm_mt/checkpoint_avg.safetensors
ctc=""                      # default: $exp/lm_ctc/checkpoint_last.safetensors
systems="baseline xstnet lut chimera fat-st align procrustes fusion"
split=tst-COMMON
beam=5
limit=""                    # only the first N utterances of $split in the benchmark
analyze_split=dev
analyze_limit=""            # only the first N (>= 4) utterances of $analyze_split in each analysis
out=../../research/mustc/reports/semantic-on-lm
average=2                   # the last N saved checkpoints of each run, averaged
overrides=""                # key=value overrides for every training, separated by spaces
usage() {
    echo "usage: $0 [--data DIR] [--exp DIR] [--mt CKPT] [--ctc CKPT] [--systems \"$systems\"] [--split S]"
    echo "          [--beam N] [--limit N] [--analyze-split S] [--analyze-limit N] [--out DIR] [--average N]"
    echo "          [--overrides \"k=v ...\"]"
}
parse_options "$@"
mt=${mt:-$exp/lm_mt/checkpoint_avg.safetensors}
ctc=${ctc:-$exp/lm_ctc/checkpoint_last.safetensors}
start="\"$mt:decoder.\", \"$ctc:speech_encoder.,ctc_head.\""

conf_of() {  # a system's config
    case "$1" in
        *-bf16) conf_of "${1%-bf16}" ;;
        fusion-gate|fusion-fast) echo ../../research/mustc/conf/st_lm_gemma_ctc_fusion.yaml ;;
        procrustes-ls) echo ../../research/mustc/conf/st_lm_gemma_ctc_procrustes.yaml ;;
        baseline) echo conf/st_lm_gemma_ctc.yaml ;;
        fat-st) echo ../../research/mustc/conf/st_lm_gemma_ctc_fatst.yaml ;;
        xstnet|lut|chimera|align|procrustes|fusion) echo "../../research/mustc/conf/st_lm_gemma_ctc_$1.yaml" ;;
        *) echo "$0: unknown system $1" >&2; exit 2 ;;
    esac
}

variant_overrides() {  # what a system's name adds to its config
    local name=$1
    if [[ $name == *-bf16 ]]; then printf 'train.precision=bf16 '; name=${name%-bf16}; fi
    case "$name" in
        fusion-gate) echo "model.fusion.gate=0.5" ;;
        fusion-fast) echo 'model.fusion.gate=0.5 train.lr_scale={"fusion.*":50}' ;;
        procrustes-ls) echo "train.init_map=least_squares train.init_procrustes=1000" ;;
        *) echo ;;
    esac
}

train() {  # train NAME CONF INIT_FROM: one run into $exp/sem_NAME; a killed run resumes, a finished one is kept
    local dir="$exp/sem_$1"
    if [ -f "$dir/checkpoint_avg.safetensors" ]; then log "$1: $dir has finished"; return; fi
    log "$1: training $2 -> $dir"
    # shellcheck disable=SC2046,SC2086  # key=value word lists
    speechmt_train --config "$2" data.dir="$data" train.save_dir="$dir" train.init_from="[$3]" \
        $(variant_overrides "$1") $overrides
}

averaged() {  # averaged NAME: the average of the run's last $average numbered checkpoints, written once
    local dir="$exp/sem_$1" ckpts
    if [ ! -f "$dir/checkpoint_avg.safetensors" ]; then
        mapfile -t ckpts < <(ls "$dir"/checkpoint_[0-9]*.safetensors | sort -V | tail -n "$average")
        log "$1: averaging ${ckpts[*]##*/}" >&2
        "$SPEECHMT" average "${ckpts[@]}" --out "$dir/checkpoint_avg.safetensors" >&2
    fi
    echo "$dir/checkpoint_avg.safetensors"
}

compares=() analyses=()
for system in $systems; do
    case "$system" in
        fat-st) train fat-mlm ../../research/mustc/conf/fat_mlm_lm_gemma_ctc.yaml "$start"
                train fat-st "$(conf_of fat-st)" "$start, \"$exp/sem_fat-mlm/checkpoint_last.safetensors:semantic.\"" ;;
        procrustes*) train "$system" "$(conf_of "$system")" "\"$mt:decoder.\"" ;;  # its projection is set by Procrustes
        *) train "$system" "$(conf_of "$system")" "$start" ;;
    esac
    ckpt=$(averaged "$system")
    if [ ! -f "$exp/sem_$system/analysis/analysis.json" ]; then
        log "$system: analysing $ckpt on $analyze_split"
        "$SPEECHMT" research analyze --model "$ckpt" --data "$data" --split "$analyze_split" --out "$exp/sem_$system/analysis" \
            ${analyze_limit:+--limit "$analyze_limit"}
    fi
    if [ ! -f "$exp/sem_$system/bench/benchmark.json" ]; then
        log "$system: benchmark on $split (beam $beam)"
        "$SPEECHMT" research benchmark --model "$ckpt" --name "$system" --data "$data" --split "$split" --beam "$beam" \
            --out "$exp/sem_$system/bench" ${limit:+--limit "$limit"}
    fi
    compares+=(--compare "$exp/sem_$system/bench/benchmark.json")
    analyses+=(--analysis "$system=$exp/sem_$system/analysis")
done

log "report: ${systems// /, } on $split (beam $beam) -> $out"
"$SPEECHMT" research benchmark "${compares[@]}" "${analyses[@]}" --data "$data" --split "$split" --out "$out" \
    ${limit:+--limit "$limit"}
