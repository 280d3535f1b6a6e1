#!/usr/bin/env bash
# The data ablation of issue 32 (part 4): the language-model decoder's ST (conf/st_lm_gemma_ctc.yaml: (a) text MT
# conf/mt_lm_gemma.yaml, (b) the CTC bridge conf/ctc_lm_gemma.yaml, (c) ST from both through train.init_from)
# trained twice at equal updates and batch sizes, on two prepared data folders that differ in their data only:
#   corpus-only  MuST-C-mini (built with a held-out voice) and its default extra MT text (`speechmt data synth-mt`:
#                Ding), the data every earlier LM-decoder run had;
#   all-data     the same plus each new source of issue 32: every installable parallel text (`speechmt data
#                synth-mt --sources all`), back-translated German ($bt_limit lines, by the LM), distilled source text
#                ($distill_limit lines of the corpus' English, by corpus-only's MT run (a)), the extra text's whole
#                sentences voiced by every installed voice but the held-out one, flite's included (`speechmt data
#                synth-tts`, $tts_limit pairs), and waveform augmentation of the training audio ($augment; the
#                encoder's states then not cached).
# Both are scored with `speechmt research benchmark` on tst-COMMON and on the held-out voice's tst-<voice> (the same
# sentences), systems named by data set first ("corpus-only lm-st", "all-data lm-mt", ...), BLEU per voice by
# benchmarks/bleu_by_voice.py, and the CPU seconds of every step (/usr/bin/time: user + system, summed over
# reruns) in cpu_time.tsv and cpu_time.md: all in $report.
#
# Resumable: a finished step leaves $work/done/<step> and is skipped on a rerun; a killed training resumes from
# its last checkpoint, a killed back-translation from its last finished line. It runs in recipes/mustc (data/, exp/,
# corpora/ and conf/ there; relative options are read from there), from wherever it is called:
#   research/mustc/local/data_ablation.sh [--size full] [--hold-out-voice kal] [--jobs 2] [--beam 5]
# A smoke test on a tiny budget (minutes; tiny random stand-ins for Whisper and Gemma under $SPEECHMT_HOME):
#   research/mustc/local/data_ablation.sh --size tiny --work /tmp/abl --report /tmp/abl/report --mt-updates 2 --ctc-updates 2 \
#       --st-updates 2 --bt-limit 4 --distill-limit 4 --tts-limit 10 --limit 4 --beam 1 \
#       --train-args "train.save_interval_updates=1 train.validate_interval_updates=1 data.max_tokens=600"
set -euo pipefail
cd "$(dirname "$0")/../../../recipes/mustc"
source ../common/env.sh

size=full                   # MuST-C-mini size: tiny, small or full
hold_out_voice=kal          # speaks tst-<voice> only (speechmt data synth --hold-out-voice)
seed=0
jobs=2
corpus=""                   # default: corpora/mustc-mini-$size-$hold_out_voice
work=""                     # prepared data, sources and models; default: exp/data-ablation-$size
report=../../research/mustc/reports/data-ablation
mt_conf=conf/mt_lm_gemma.yaml
ctc_conf=conf/ctc_lm_gemma.yaml
st_conf=conf/st_lm_gemma_ctc.yaml
mt_updates=""               # each run's train.max_updates; default: its config's
ctc_updates=""
st_updates=""
train_args=""               # more overrides for every training run, e.g. "train.threads=1"
bt_limit=2000               # German lines back-translated by the LM (Gemma 3 270M: ~0.4 lines/s on 2 cores)
distill_limit=2000          # corpus sentences distilled by corpus-only's MT model
tts_limit=3000              # extra sentences voiced (data synth-tts --sentences --min-words 4)
augment="data.augment_noise=0.3 data.augment_reverb=0.3 data.augment_telephone=0.2"
lm=gemma-3-270m             # the LM that back-translates (a folder, or a name under $SPEECHMT_HOME)
beam=5
limit=""                    # benchmark only the first N utterances of each test split

usage() {
    echo "usage: $0 [--size tiny|small|full] [--hold-out-voice kal] [--seed 0] [--jobs 2] [--corpus DIR] [--work DIR]"
    echo "          [--report ../../research/mustc/reports/data-ablation] [--mt-updates N] [--ctc-updates N] [--st-updates N]"
    echo "          [--train-args \"key=value ...\"] [--bt-limit 2000] [--distill-limit 2000] [--tts-limit 3000]"
    echo "          [--augment \"data.augment_noise=0.3 ...\"] [--lm gemma-3-270m] [--beam 5] [--limit N]"
}
parse_options "$@"
corpus=${corpus:-corpora/mustc-mini-$size-$hold_out_voice}
work=${work:-exp/data-ablation-$size}
data=$work/data                                 # the corpus prepared (corpus-only's data folder)
all=$work/all-data                              # all-data's data folder
sources=$work/sources
PYTHON=${PYTHON:-$(dirname "$SPEECHMT")/python}  # runs benchmarks/bleu_by_voice.py
[ -x "$PYTHON" ] || PYTHON=python3
mkdir -p "$work/done" "$report"
cpu_log=$work/cpu_time.tsv
[ -f "$cpu_log" ] || printf 'step\tuser_s\tsystem_s\twall_s\n' > "$cpu_log"

# Runs "$@" as step $1 unless it is done; appends its CPU seconds to $cpu_log (every attempt, so that a resumed
# step's total counts the killed part too) and marks it done when it succeeds.
step() {
    local name=$1; shift
    if [ -f "$work/done/$name" ]; then log "skip $name (done)"; return; fi
    log "$name"
    local t=$work/done/.$name.time
    /usr/bin/time -f "%U\t%S\t%e" -o "$t" "$@" || { tail -1 "$t" | sed "s/^/$name\t/" >> "$cpu_log"; return 1; }
    tail -1 "$t" | sed "s/^/$name\t/" >> "$cpu_log"
    rm -f "$t"
    date "+%F %T" > "$work/done/$name"
}

# Runs the shell function $2 as step $1 unless it is done (file work only: not timed).
once() {
    if [ -f "$work/done/$1" ]; then log "skip $1 (done)"; return; fi
    log "$1"
    "$2"
    date "+%F %T" > "$work/done/$1"
}

train_args_of() {  # $1: dataset; the overrides that make a run's data all-data's
    if [ "$1" = all-data ]; then echo "data.cache_encoder=false $augment"; fi
}

# (a), (b), (c) of dataset $1 on data folder $2 -> $work/$1/{lm_mt,lm_ctc,lm_st}
train_lm_st() {
    local set=$1 dir=$2 exp=$work/$1 extra
    extra="data.dir=$dir data.src_lang=en data.tgt_lang=de train.seed=$seed $train_args"
    # shellcheck disable=SC2086  # the overrides are words
    step "$set-lm_mt" "$SPEECHMT" train --config "$mt_conf" $extra train.save_dir="$exp/lm_mt" \
        ${mt_updates:+train.max_updates=$mt_updates}
    step "$set-lm_mt-avg" "$SPEECHMT" average "$exp/lm_mt" --last 2 --out "$exp/lm_mt/checkpoint_avg.safetensors"
    # shellcheck disable=SC2086
    step "$set-lm_ctc" "$SPEECHMT" train --config "$ctc_conf" $extra $(train_args_of "$set") \
        train.save_dir="$exp/lm_ctc" ${ctc_updates:+train.max_updates=$ctc_updates}
    # shellcheck disable=SC2086
    step "$set-lm_st" "$SPEECHMT" train --config "$st_conf" $extra $(train_args_of "$set") \
        train.save_dir="$exp/lm_st" ${st_updates:+train.max_updates=$st_updates} \
        train.init_from="[\"$exp/lm_mt/checkpoint_avg.safetensors:decoder.\", \"$exp/lm_ctc/checkpoint_last.safetensors:speech_encoder.,ctc_head.\"]"
    step "$set-lm_st-avg" "$SPEECHMT" average "$exp/lm_st" --last 2 --out "$exp/lm_st/checkpoint_avg.safetensors"
}

# --- the corpus, with a held-out voice, prepared; its default extra MT text (corpus-only) ---
step corpus "$SPEECHMT" data synth mustc --size "$size" --out "$corpus" --seed "$seed" --jobs "$jobs" \
    --hold-out-voice "$hold_out_voice"
held_split=$(cd "$corpus/en-de/data" && ls -d tst-* | grep -vx 'tst-COMMON\|tst-HE')  # the held-out voice's
step prepare "$SPEECHMT" data prepare mustc --root "$corpus" --tgt-lang de --out "$data" --jobs "$jobs" \
    --splits train dev tst-COMMON "$held_split"
step corpus-mt-text "$SPEECHMT" data synth-mt mustc --root "$corpus" --out "$data/mt-text"

# --- corpus-only: (a), (b), (c) ---
train_lm_st corpus-only "$data"

# --- all-data's sources ---
step src-mt-text-all "$SPEECHMT" data synth-mt mustc --root "$corpus" --out "$sources/mt-text-all" --sources all
step src-backtranslate "$SPEECHMT" data backtranslate --input "$sources/mt-text-all/train.jsonl" --field tgt_text \
    --out "$sources/backtranslated" --src-lang en --tgt-lang de --lm "$lm" --limit "$bt_limit"
step src-distill "$SPEECHMT" data distill --input "$data/train.jsonl" --field src_text --out "$sources/distilled" \
    --src-lang en --tgt-lang de --model "$work/corpus-only/lm_mt/checkpoint_avg.safetensors" --task mt \
    --limit "$distill_limit"
step src-voiced "$SPEECHMT" data synth-tts --root "$corpus" --text "$sources/mt-text-all/train.jsonl" \
    --split train-tts-all --sentences --min-words 4 --limit "$tts_limit" --seed "$seed" --jobs "$jobs"
step src-voiced-prepare "$SPEECHMT" data prepare mustc --root "$corpus" --tgt-lang de --out "$sources/voiced" \
    --jobs "$jobs" --splits train-tts-all

# --- all-data's folder: the corpus' dev and test splits as they are; training = corpus + voiced text; extra MT
#     text = every parallel source + back-translated + distilled ---
assemble() {
    mkdir -p "$all/mt-text"
    for f in "$data"/*.jsonl; do
        [ "$(basename "$f")" = train.jsonl ] || ln -sfn "$(realpath "$f")" "$all/$(basename "$f")"
    done
    cat "$data/train.jsonl" "$sources/voiced/train-tts-all.jsonl" > "$all/train.jsonl"
    cat "$sources/mt-text-all/train.jsonl" "$sources/backtranslated/train.jsonl" "$sources/distilled/train.jsonl" \
        > "$all/mt-text/train.jsonl"
    wc -l "$all/train.jsonl" "$all/mt-text/train.jsonl" "$data/train.jsonl" "$data/mt-text/train.jsonl" \
        > "$all/line_counts.txt"
}
once all-data-assemble assemble

# --- all-data: (a), (b), (c) ---
train_lm_st all-data "$all"

# --- the report: both data sets' ST and MT on tst-COMMON and on the held-out voice's split ---
systems=()
for set in corpus-only all-data; do
    systems+=(--model "$work/$set/lm_st/checkpoint_avg.safetensors" --name "$set lm-st" --task st
              --model "$work/$set/lm_mt/checkpoint_avg.safetensors" --name "$set lm-mt" --task mt)
done
step benchmark-tst-COMMON "$SPEECHMT" research benchmark --data "$data" --split tst-COMMON "${systems[@]}" --beam "$beam" \
    ${limit:+--limit "$limit"} --out "$report"
step "benchmark-$held_split" "$SPEECHMT" research benchmark --data "$data" --split "$held_split" "${systems[@]}" \
    --beam "$beam" ${limit:+--limit "$limit"} --out "$report/$held_split"
by_voice() {
    : > "$report/by_voice.md"
    for set in corpus-only all-data; do
        "$PYTHON" ../../benchmarks/bleu_by_voice.py --corpus "$corpus" --benchmark "$report" \
            --benchmark "$report/$held_split" --system "$set lm-st" --out "$report/by_voice.$set.json" \
            >> "$report/by_voice.md"
        echo >> "$report/by_voice.md"
    done
}
once by-voice by_voice

# CPU seconds per step (summed over attempts), and per system: training (a)+(b)+(c), and the data it needed.
cpu_table() {
    awk -F'\t' 'NR > 1 { cpu[$1] += $2 + $3; wall[$1] += $4; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
        END {
            data["corpus-only"] = "corpus prepare corpus-mt-text"
            data["all-data"] = data["corpus-only"] " src-mt-text-all src-backtranslate src-distill src-voiced " \
                               "src-voiced-prepare"
            print "| system | training CPU s: (a) MT + (b) CTC + (c) ST | (a) | (b) | (c) | data CPU s | training wall s |"
            print "|---|---:|---:|---:|---:|---:|---:|"
            split("corpus-only all-data", sets, " ")
            for (i = 1; i <= 2; i++) {
                s = sets[i]; a = cpu[s "-lm_mt"]; b = cpu[s "-lm_ctc"]; c = cpu[s "-lm_st"]
                k = split(data[s], steps, " "); d = 0
                for (j = 1; j <= k; j++) d += cpu[steps[j]]
                printf "| %s lm-st | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", s, a + b + c, a, b, c, d,
                       wall[s "-lm_mt"] + wall[s "-lm_ctc"] + wall[s "-lm_st"]
            }
            print ""; print "Every step (CPU s = user + system, summed over attempts):"; print ""
            print "| step | CPU s | wall s |"; print "|---|---:|---:|"
            for (i = 1; i <= n; i++) printf "| %s | %.1f | %.1f |\n", order[i], cpu[order[i]], wall[order[i]]
        }' "$cpu_log"
}
cpu_table | tee "$report/cpu_time.md"
cp "$cpu_log" "$report/cpu_time.tsv"
log "done: $report (benchmark.md, $held_split/benchmark.md, by_voice.md, cpu_time.md)"
