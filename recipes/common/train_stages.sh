# Sourced by the recipes: stage 2 (vocabularies) and stages 3-6 (ASR pretraining, averaging + WER, ST from
# the ASR encoder, averaging + BLEU, RESULTS.md rows). Reads: stage stop_stage src_lang tgt_lang data exp
# asr_vocab st_vocab asr_spm st_spm asr_conf st_conf avg beam test_sets name.
vocab_stage() {
    if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
        log "stage 2: vocabularies in $data"
        "$SPEECHMT" vocab "$data/train.jsonl" --field tgt --vocab-size "$st_vocab" \
            --lang-tags "<$src_lang>" "<$tgt_lang>" --out "$st_spm"
        "$SPEECHMT" vocab "$data/train.jsonl" --field src --vocab-size "$asr_vocab" \
            --lang-tags "<$src_lang>" --out "$asr_spm"
    fi
}

train_stages() {
    if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
        log "stage 3: ASR pretraining -> $exp/asr"
        "$SPEECHMT" train --config "$asr_conf" data.dir="$data" data.src_vocab="$asr_spm" data.src_lang="$src_lang" \
            data.tgt_lang="$tgt_lang" train.task=asr train.save_dir="$exp/asr"
    fi

    if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
        log "stage 4: average ASR checkpoints, WER on $test_sets"
        "$SPEECHMT" average "$exp/asr" --last "$avg" --out "$exp/asr/checkpoint_avg.pt"
        for split in $test_sets; do
            "$SPEECHMT" evaluate --model "$exp/asr/checkpoint_avg.pt" --data "$data" --split "$split" \
                --beam "$beam" --out "$exp/asr/eval_$split" --results RESULTS.md --name "ASR $name (avg $avg)"
        done
    fi

    if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
        log "stage 5: ST training from the ASR encoder -> $exp/st"
        "$SPEECHMT" train --config "$st_conf" data.dir="$data" data.tgt_vocab="$st_spm" data.src_vocab="$asr_spm" \
            data.src_lang="$src_lang" \
            data.tgt_lang="$tgt_lang" train.task=st train.init_encoder_from="$exp/asr/checkpoint_avg.pt" \
            train.save_dir="$exp/st"
    fi

    if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
        log "stage 6: average ST checkpoints, BLEU on $test_sets"
        "$SPEECHMT" average "$exp/st" --last "$avg" --out "$exp/st/checkpoint_avg.pt"
        for split in $test_sets; do
            "$SPEECHMT" evaluate --model "$exp/st/checkpoint_avg.pt" --data "$data" --split "$split" \
                --beam "$beam" --out "$exp/st/eval_$split" --results RESULTS.md --name "ST $name (avg $avg)"
        done
    fi
}
