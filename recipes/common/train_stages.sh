# Sourced by the recipes: stage 2 (vocabularies) and stages 3-8 (ASR pretraining, averaging + WER, ST from
# the ASR encoder, averaging + BLEU, and with an MT config the text MT model and the ASR -> MT cascade;
# RESULTS.md rows), with a Whisper config stage 9 (ST fine-tuned from Whisper), with an XSTNet config stage
# 10 (extra MT text, then progressive MT -> ST+ASR+MT; scored as ST, ASR, MT and its own cascade), with a
# LUT config stage 11 and with a Chimera config stage 12 (the same extra text, MT -> ST+MT+contrastive; scored
# as ST and MT), with FAT configs stage 13 (FAT-MLM pretraining on the triples and the extra text, then FAT-ST
# from it; scored as ST), with a voiced-text config stage 14 (MuST-C layout only: the extra MT text's whole
# sentences voiced into the corpus' split train-tts-sent and prepared, then ST on the corpus and it), with LM
# configs stage 15 (a pretrained language model as the decoder: text MT into it, then ST from its adapters).
# Several directions (use_directions): stages 2-9 and 11 train one model on all of them (data.directions) and
# score each direction's own test splits; stages 10 and 12-15 read one pair's extras (synth-mt's extra MT text, a
# voiced split) and are skipped with one line (exit 2 when run alone).
# Reads: stage stop_stage corpus root src_lang tgt_lang data exp asr_vocab st_vocab asr_spm st_spm asr_conf
# st_conf mt_conf whisper_conf xstnet_conf lut_conf chimera_conf fat_conf fat_st_conf tts_conf lm_mt_conf lm_st_conf
# lm_ctc_conf
# jobs avg beam
# test_sets name; train_directions direction_names direction_srcs direction_tgts st_tags asr_tags (use_directions).

# One model for several directions (run.sh --tgt-langs "de es fr" or --src-langs "de es fr"): `use_directions
# "SOURCES" "TARGETS"` makes every source into every other target a direction of the run and sets
#   train_directions  en-de,en-es,en-fr: env.sh's speechmt_train appends data.directions=[en-de,en-es,en-fr]
#   direction_names, direction_srcs, direction_tgts  (arrays) each direction, its source and its target
#   src_lang, tgt_lang  the first direction's (data.src_lang, data.tgt_lang: the run's first direction)
#   st_tags, asr_tags  (arrays) stage 2's language tags: every language ("<en>" "<de>" "<es>" ...), every source
#   test_sets  each name as every direction's split (tst-COMMON -> tst-COMMON_en-de tst-COMMON_en-es ...: the
#              folder's names, docs/data.md); a name that already ends in a direction (tst-HE_en-fr) stays
# A run of one pair never calls it: its commands are those of one pair.
use_directions() {
    local s t d name out=""
    local -a srcs tgts
    read -r -a srcs <<< "$1"
    read -r -a tgts <<< "$2"
    direction_names=() direction_srcs=() direction_tgts=() st_tags=() asr_tags=()
    for s in "${srcs[@]}"; do
        for t in "${tgts[@]}"; do
            if [ "$s" != "$t" ]; then direction_names+=("$s-$t") direction_srcs+=("$s") direction_tgts+=("$t"); fi
        done
        asr_tags+=("<$s>")
    done
    for s in "${srcs[@]}" "${tgts[@]}"; do
        if [[ " ${st_tags[*]} " != *" <$s> "* ]]; then st_tags+=("<$s>"); fi
    done
    train_directions=$(IFS=,; echo "${direction_names[*]}")
    src_lang=${direction_srcs[0]} tgt_lang=${direction_tgts[0]}
    for name in $test_sets; do
        for d in "${direction_names[@]}"; do
            if [[ "$name" == *"_$d" ]]; then out+=" $name"; continue 2; fi
        done
        for d in "${direction_names[@]}"; do out+=" ${name}_$d"; done
    done
    test_sets=${out# }
}

# Whether stage $1 ($2: what it reads) runs: always for one pair; with several directions it needs one pair, so a
# run of that stage alone (--stage N --stop-stage N) stops (exit 2) and a longer one skips it, one line each.
one_pair_stage() {
    if [ -z "${train_directions:-}" ]; then return 0; fi
    if [ "$stage" -eq "$1" ] && [ "$stop_stage" -eq "$1" ]; then
        echo "stage $1: $2 needs one pair, not several directions ($train_directions); run it with one" \
            "--tgt-lang / --src-lang" >&2
        exit 2
    fi
    log "stage $1: $2 needs one pair, not several directions ($train_directions); skipped"
    return 1
}

# `speechmt evaluate --cascade`'s --src-lang and --tgt-lang for split $1 of one of several directions
# (tst-COMMON_en-fr -> --src-lang en --tgt-lang fr: the MT model of several directions writes that one); nothing
# for one pair.
cascade_direction() {
    local i
    if [ -z "${train_directions:-}" ]; then return 0; fi
    for i in "${!direction_names[@]}"; do
        if [[ "$1" == *"_${direction_names[$i]}" ]]; then
            echo "--src-lang ${direction_srcs[$i]} --tgt-lang ${direction_tgts[$i]}"
            return 0
        fi
    done
}

vocab_stage() {
    if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
        log "stage 2: vocabularies in $data"
        local tags=("<$src_lang>" "<$tgt_lang>")
        if [ -n "${train_directions:-}" ]; then tags=("${st_tags[@]}"); fi  # every language's tag
        "$SPEECHMT" data vocab "$data/train.jsonl" --field tgt --vocab-size "$st_vocab" \
            --lang-tags "${tags[@]}" --out "$st_spm"
        "$SPEECHMT" data vocab "$data/train.jsonl" --field src --vocab-size "$asr_vocab" \
            --lang-tags "<$src_lang>" --out "$asr_spm"
    fi
}

# Averages the last $avg checkpoints of $exp/$1 and scores the average on each test set; rows in RESULTS.md
# are labelled "$2 $name".
average_and_score() {
    "$SPEECHMT" average "$exp/$1" --last "$avg" --out "$exp/$1/checkpoint_avg.safetensors"
    for split in $test_sets; do
        "$SPEECHMT" evaluate --model "$exp/$1/checkpoint_avg.safetensors" --data "$data" --split "$split" \
            --beam "$beam" --out "$exp/$1/eval_$split" --results RESULTS.md --name "$2 $name (avg $avg)"
    done
}

# The extra text-only MT pairs of `speechmt data synth-mt` in $data/mt-text (stages 10, 12, 13 and 14 read them);
# made once unless "always" is given (stage 10 rebuilds them).
extra_mt_text() {
    if [ "${1:-}" = always ] || [ ! -f "$data/mt-text/train.jsonl" ]; then
        "$SPEECHMT" data synth-mt "$corpus" --root "$root" --out "$data/mt-text" \
            $([ "$corpus" = covost2 ] && echo --lang "$src_lang")
    fi
}

train_stages() {
    if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
        log "stage 3: ASR pretraining -> $exp/asr"
        speechmt_train --config "$asr_conf" data.dir="$data" data.src_vocab="$asr_spm" data.src_lang="$src_lang" \
            data.tgt_lang="$tgt_lang" train.task=asr train.save_dir="$exp/asr"
    fi

    if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
        log "stage 4: average ASR checkpoints, WER on $test_sets"
        average_and_score asr ASR
    fi

    if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
        log "stage 5: ST training from the ASR encoder -> $exp/st"
        speechmt_train --config "$st_conf" data.dir="$data" data.tgt_vocab="$st_spm" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" \
            data.tgt_lang="$tgt_lang" train.task=st train.init_encoder_from="$exp/asr/checkpoint_avg.safetensors" \
            train.save_dir="$exp/st"
    fi

    if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
        log "stage 6: average ST checkpoints, BLEU on $test_sets"
        average_and_score st ST
    fi

    if [ -n "$mt_conf" ] && [ "$stage" -le 7 ] && [ "$stop_stage" -ge 7 ]; then
        log "stage 7: MT on the same pairs (transcript -> translation) -> $exp/mt; average, BLEU on $test_sets"
        speechmt_train --config "$mt_conf" data.dir="$data" data.tgt_vocab="$st_spm" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.task=mt train.save_dir="$exp/mt"
        average_and_score mt MT
    fi

    if [ -n "$mt_conf" ] && [ "$stage" -le 8 ] && [ "$stop_stage" -ge 8 ]; then
        log "stage 8: cascade (averaged ASR -> averaged MT), BLEU on $test_sets"
        for split in $test_sets; do
            # shellcheck disable=SC2046  # several directions: --src-lang X --tgt-lang Y, the split's direction
            "$SPEECHMT" evaluate --cascade "$exp/asr/checkpoint_avg.safetensors" "$exp/mt/checkpoint_avg.safetensors" \
                --data "$data" --split "$split" --beam "$beam" --out "$exp/cascade/eval_$split" --results RESULTS.md \
                --name "Cascade $name (avg $avg)" $(cascade_direction "$split")
        done
    fi

    if [ -n "$whisper_conf" ] && [ "$stage" -le 9 ] && [ "$stop_stage" -ge 9 ]; then
        log "stage 9: ST fine-tuned from Whisper ($whisper_conf) -> $exp/st_whisper; average, BLEU on $test_sets"
        speechmt_train --config "$whisper_conf" data.dir="$data" data.src_lang="$src_lang" \
            data.tgt_lang="$tgt_lang" train.task=st train.save_dir="$exp/st_whisper"
        average_and_score st_whisper "ST Whisper"
    fi

    if [ -n "$xstnet_conf" ] && [ "$stage" -le 10 ] && [ "$stop_stage" -ge 10 ] &&
        one_pair_stage 10 "XSTNet (synth-mt's extra MT text of one pair)"; then
        log "stage 10: XSTNet ($xstnet_conf): extra MT text -> $data/mt-text, training -> $exp/xstnet"
        # text-only pairs from the Ding dictionary, every corpus sentence excluded (the conf reads mt-text)
        extra_mt_text always
        speechmt_train --config "$xstnet_conf" data.dir="$data" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.save_dir="$exp/xstnet"
        average_and_score xstnet "XSTNet"
        for split in $test_sets; do  # one checkpoint: text MT and its own ASR -> MT cascade
            "$SPEECHMT" evaluate --model "$exp/xstnet/checkpoint_avg.safetensors" --task mt --data "$data" \
                --split "$split" --beam "$beam" --out "$exp/xstnet/eval_${split}_mt" --results RESULTS.md \
                --name "XSTNet as MT $name (avg $avg)"
            "$SPEECHMT" evaluate --cascade "$exp/xstnet/checkpoint_avg.safetensors" \
                "$exp/xstnet/checkpoint_avg.safetensors" --data "$data" --split "$split" --beam "$beam" \
                --out "$exp/xstnet/eval_${split}_cascade" --results RESULTS.md --name "XSTNet as cascade $name (avg $avg)"
        done
    fi

    if [ -n "$lut_conf" ] && [ "$stage" -le 11 ] && [ "$stop_stage" -ge 11 ]; then
        log "stage 11: LUT ($lut_conf) -> $exp/lut; average, BLEU on $test_sets"
        speechmt_train --config "$lut_conf" data.dir="$data" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.save_dir="$exp/lut"
        average_and_score lut "LUT"
    fi

    if [ -n "$chimera_conf" ] && [ "$stage" -le 12 ] && [ "$stop_stage" -ge 12 ] &&
        one_pair_stage 12 "Chimera (synth-mt's extra MT text of one pair)"; then
        log "stage 12: Chimera ($chimera_conf): extra MT text in $data/mt-text, training -> $exp/chimera"
        extra_mt_text
        speechmt_train --config "$chimera_conf" data.dir="$data" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.save_dir="$exp/chimera"
        average_and_score chimera "Chimera"
        for split in $test_sets; do  # one checkpoint: its text MT through the same memory
            "$SPEECHMT" evaluate --model "$exp/chimera/checkpoint_avg.safetensors" --task mt --data "$data" \
                --split "$split" --beam "$beam" --out "$exp/chimera/eval_${split}_mt" --results RESULTS.md \
                --name "Chimera as MT $name (avg $avg)"
        done
    fi

    if [ -n "$fat_conf" ] && [ -n "$fat_st_conf" ] && [ "$stage" -le 13 ] && [ "$stop_stage" -ge 13 ] &&
        one_pair_stage 13 "FAT-MLM/FAT-ST (synth-mt's extra MT text of one pair)"; then
        # folders named after the configs, so that the conv and the Whisper variants can share one $exp
        local mlm st
        mlm=$(basename "$fat_conf" .yaml) st=$(basename "$fat_st_conf" .yaml)
        log "stage 13: FAT-MLM ($fat_conf) -> $exp/$mlm, then FAT-ST ($fat_st_conf) from it -> $exp/$st"
        extra_mt_text
        speechmt_train --config "$fat_conf" data.dir="$data" data.tgt_vocab="$st_spm" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.save_dir="$exp/$mlm"
        speechmt_train --config "$fat_st_conf" data.dir="$data" data.tgt_vocab="$st_spm" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" train.save_dir="$exp/$st" \
            train.init_encoder_from="$exp/$mlm/checkpoint_best.safetensors"
        average_and_score "$st" "FAT-ST ($st)"
    fi

    if [ -n "${tts_conf:-}" ] && [ "$stage" -le 14 ] && [ "$stop_stage" -ge 14 ] &&
        one_pair_stage 14 "voiced text (one pair's extra MT text and corpus folder)"; then
        log "stage 14: the extra MT text's sentences voiced into $root's split train-tts-sent, prepared;" \
            "ST ($tts_conf) -> $exp/st_tts"
        if [ "$corpus" != mustc ]; then
            echo "stage 14: voicing text into a split needs the MuST-C layout (corpus $corpus)" >&2; exit 2
        fi
        extra_mt_text
        if [ ! -d "$root/en-$tgt_lang/data/train-tts-sent" ]; then  # whole sentences of 4+ words, no phrases
            "$SPEECHMT" data synth-tts --root "$root" --text "$data/mt-text/train.jsonl" --split train-tts-sent \
                --sentences --min-words 4 --jobs "$jobs"
        fi
        "$SPEECHMT" data prepare mustc --root "$root" --tgt-lang "$tgt_lang" --out "$data" --jobs "$jobs"  # the new split
        speechmt_train --config "$tts_conf" data.dir="$data" data.src_lang="$src_lang" data.tgt_lang="$tgt_lang" \
            train.save_dir="$exp/st_tts"
        average_and_score st_tts "ST + voiced text"
    fi

    if [ -n "${lm_st_conf:-}" ] && [ "$stage" -le 15 ] && [ "$stop_stage" -ge 15 ] &&
        one_pair_stage 15 "the LM decoder (synth-mt's extra MT text of one pair)"; then
        log "stage 15: a language model as the decoder: MT ($lm_mt_conf) -> $exp/lm_mt, then ST ($lm_st_conf)" \
            "from its adapters -> $exp/lm_st; scored as MT, ST and its own ASR -> MT cascade"
        extra_mt_text
        st_hear=()  # Whisper's own search (encoder whisper_asr) transcribes the source language
        if grep -q "kind: whisper_asr" "$lm_st_conf"; then st_hear=(model.encoder.asr_language="$src_lang"); fi
        if [ -n "$lm_ctc_conf" ]; then  # the CTC bridge trains beside the MT run (one thread each when jobs > 1)
            threads=$([ "$jobs" -gt 1 ] && echo 1 || echo 0)
            speechmt_train --config "$lm_mt_conf" data.dir="$data" data.src_lang="$src_lang" \
                data.tgt_lang="$tgt_lang" train.save_dir="$exp/lm_mt" train.threads="$threads" &
            mt_job=$!
            if [ "$jobs" -le 1 ]; then wait "$mt_job"; fi
            speechmt_train --config "$lm_ctc_conf" data.dir="$data" data.src_lang="$src_lang" \
                data.tgt_lang="$tgt_lang" train.save_dir="$exp/lm_ctc" train.threads="$threads"
            if [ "$jobs" -gt 1 ]; then wait "$mt_job"; fi
            "$SPEECHMT" average "$exp/lm_mt" --last 2 --out "$exp/lm_mt/checkpoint_avg.safetensors"
            speechmt_train --config "$lm_st_conf" data.dir="$data" data.src_lang="$src_lang" \
                data.tgt_lang="$tgt_lang" train.save_dir="$exp/lm_st" \
                train.init_from="[\"$exp/lm_mt/checkpoint_avg.safetensors:decoder.\", \"$exp/lm_ctc/checkpoint_last.safetensors:speech_encoder.,ctc_head.\"]"
        else
            speechmt_train --config "$lm_mt_conf" data.dir="$data" data.src_lang="$src_lang" \
                data.tgt_lang="$tgt_lang" train.save_dir="$exp/lm_mt"
            "$SPEECHMT" average "$exp/lm_mt" --last 2 --out "$exp/lm_mt/checkpoint_avg.safetensors"
            speechmt_train --config "$lm_st_conf" data.dir="$data" data.src_lang="$src_lang" \
                data.tgt_lang="$tgt_lang" train.save_dir="$exp/lm_st" "${st_hear[@]}" \
                train.init_encoder_from="$exp/lm_mt/checkpoint_avg.safetensors"
        fi
        "$SPEECHMT" average "$exp/lm_st" --last 2 --out "$exp/lm_st/checkpoint_avg.safetensors"
        for split in $test_sets; do
            "$SPEECHMT" evaluate --model "$exp/lm_mt/checkpoint_avg.safetensors" --task mt --data "$data" \
                --split "$split" --beam "$beam" --out "$exp/lm_mt/eval_${split}" --results RESULTS.md \
                --name "LM MT $name (avg 2)"
            "$SPEECHMT" evaluate --model "$exp/lm_st/checkpoint_avg.safetensors" --data "$data" --split "$split" \
                --beam "$beam" --out "$exp/lm_st/eval_${split}" --results RESULTS.md --name "LM ST $name (avg 2)"
        done
    fi
}
