#!/usr/bin/env bash
# CoVoST 2 <src_lang>-><tgt_lang> recipe, staged: run.sh --stage N --stop-stage M.
# With --src-langs "de es fr" (or --tgt-langs "de ca" from --src-lang en) the run is one model for several
# directions: stage 1 prepares every direction into one folder ($data default data/de+es+fr-en: train holds them
# all, dev_de-en, test_es-en, ... each direction's own splits, dev their union; docs/data.md), stage 2 puts every
# language's tag in the target vocabulary (<de> <es> <fr> <en>) and every source's in the ASR one, every training
# stage trains one model on all directions (data.directions=[de-en,es-en,fr-en], each target started by its
# direction's tag; the ASR model transcribes every source, or English alone with --asr-src-lang en), and each test
# set is scored per direction (test -> test_de-en test_es-en ...; the cascade's MT writes each split's direction).
# Stages 10 and 12-15 read one pair's extras and are skipped with a line (exit 2 when run alone: --stage N
# --stop-stage N).
#   0  build CoVoST-mini (synthetic, same layout; de->en and es->en) at $root when --mini is given
#   1  prepare train (train + train_covost), dev, test: manifests, fbank80, global CMVN, summary; with
#      --asr-src-lang en also CoVoST 2's English clips (the en-><asr_tgt_lang> splits) into $asr_data; with
#      --src-langs / --tgt-langs every direction into one folder
#   2  SentencePiece vocabularies ($vocab_type: unigram, or char as fairseq's CoVoST 2 recipe): $st_vocab on the
#      target side (ST), $asr_vocab on the ASR transcripts
#   3  ASR pretraining ($asr_conf) on $asr_data: the source language, or English with --asr-src-lang en (fairseq's
#      X->En recipe: one English ASR model starts every X->En encoder)
#   4  average the last $avg ASR checkpoints (epoch checkpoints when the run wrote them); WER on $test_sets
#   5  ST training, encoder initialised from the averaged ASR model ($st_conf)
#   6  average the last $avg ST checkpoints (epoch checkpoints when the run wrote them); BLEU on $test_sets; a row
#      per result in RESULTS.md
#   7  with --mt-conf: MT on the same pairs (transcript -> translation), averaged, BLEU on $test_sets
#   8  with --mt-conf: the cascade, averaged ASR -> averaged MT, BLEU on $test_sets
#   9  with --whisper-conf: ST fine-tuned from Whisper base (set-up converts it), averaged, BLEU on $test_sets
#  10  with --xstnet-conf: XSTNet (conf/st_xstnet_whisper_base.yaml): extra MT text, MT -> ST+ASR+MT, scored
#      as ST, MT and its own ASR -> MT cascade
#  11  with --lut-conf: LUT (conf/st_lut_whisper_base.yaml), averaged, BLEU on $test_sets
#  12  with --chimera-conf: Chimera (conf/st_chimera_whisper_base.yaml): extra MT text, MT -> ST+MT+contrastive,
#      scored as ST and MT
#  13  with --fat-conf and --fat-st-conf: FAT-MLM pretraining (conf/fat_mlm_mini.yaml on the conv encoder, or
#      conf/fat_mlm_whisper_base.yaml on Whisper's) on the ST triples and the extra MT text, then FAT-ST
#      (conf/st_fat_mini.yaml, conf/st_fat_whisper_base.yaml) initialised from it, averaged, BLEU on $test_sets;
#      in $exp/<config name>
#  15  with --lm-st-conf (conf/st_lm_gemma.yaml): Gemma 3 270M as the decoder: text MT ($lm_mt_conf) -> $exp/lm_mt,
#      then ST from its LoRA adapters (bridge with the LM frozen, then ST + MT) -> $exp/lm_st; BLEU as MT and ST
#      (X -> English: the LM's strong direction); conf/st_lm_gemma_whisper_asr.yaml: Whisper's own search of the
#      source language (model.encoder.asr_language = --src-lang) as the bridge, the best on MuST-C-mini
# Stages run unchanged on the released corpus (Common Voice 4 clips + CoVoST 2 TSVs) and on the mini one. fairseq's
# published X->En setting (../PUBLISHED.md): --asr-src-lang en --vocab-type char with the default configs.
set -euo pipefail
cd "$(dirname "$0")"
source ../common/env.sh
source ../common/train_stages.sh

stage=1
stop_stage=15
corpus=covost2
root=corpora/covost2        # holds <src_lang>/clips, <src_lang>/validated.tsv, <src_lang>/covost_v2.*.tsv
src_lang=de
tgt_lang=en
src_langs=""                # several sources ("de es fr"): one folder and one model for every direction
tgt_langs=""                # several targets ("de ca", from --src-lang en): the same
mini=""                     # tiny, small or full: build CoVoST-mini at $root in stage 0
seed=0
jobs=2
gpus=1                      # training ranks on this machine (torchrun when > 1)
data=""                     # default: data/$src_lang-$tgt_lang
st_vocab=8000
asr_vocab=5000
vocab_type=unigram          # unigram or char (fairseq's CoVoST 2 vocabularies: every character of the texts)
asr_src_lang=""             # the ASR pretraining's speech: default the source language; en: CoVoST 2's English clips
asr_tgt_lang=de             # with --asr-src-lang en: the En->X translation TSV whose splits list them (fairseq's: de)
asr_data=""                 # default: $data, or data/<asr_src_lang>-<asr_tgt_lang> for another language
asr_conf=conf/asr_s2t_s.yaml
st_conf=conf/st_s2t_s.yaml
mt_conf=""                  # an MT config (e.g. conf/mt_default.yaml): stages 7-8, MT and cascade
whisper_conf=""             # a Whisper ST config (conf/st_whisper_base.yaml): stage 9
xstnet_conf=""              # an XSTNet config (conf/st_xstnet_whisper_base.yaml): stage 10
lut_conf=""                 # a LUT config (conf/st_lut_whisper_base.yaml): stage 11
chimera_conf=""             # a Chimera config (conf/st_chimera_whisper_base.yaml): stage 12
fat_conf=""                 # a FAT-MLM config (conf/fat_mlm_{mini,whisper_base}.yaml): stage 13, with fat_st_conf
fat_st_conf=""              # a FAT-ST config (conf/st_fat_{mini,whisper_base}.yaml): stage 13, from FAT-MLM
lm_mt_conf=conf/mt_lm_gemma.yaml  # text MT into a pretrained LM (Gemma 3 270M): stage 15, with lm_st_conf
lm_ctc_conf=""              # the CTC bridge into that LM (conf/ctc_lm_gemma.yaml): stage 15, with
                            # lm_st_conf conf/st_lm_gemma_ctc.yaml, which starts from it and the MT run
lm_st_conf=""               # ST into that LM from the MT adapters (conf/st_lm_gemma.yaml): stage 15
exp=""                      # default: exp/$src_lang-$tgt_lang
avg=10                      # checkpoints averaged: the last epochs' (train.save_interval_epochs), else updates'
beam=5
test_sets=test
name=""                     # label of the results rows, default: the corpus root and configs

usage() {
    echo "usage: $0 [--stage N] [--stop-stage M] [--root DIR] [--src-lang de | --src-langs \"de es fr\"]"
    echo "          [--tgt-lang en | --tgt-langs \"de ca\"]"
    echo "          [--mini tiny|small|full] [--data DIR] [--jobs 2] [--gpus 1] [--st-vocab 8000] [--asr-vocab 5000]"
    echo "          [--vocab-type unigram|char] [--asr-src-lang en [--asr-tgt-lang de] [--asr-data DIR]]"
    echo "          [--asr-conf conf/asr_s2t_s.yaml] [--st-conf conf/st_s2t_s.yaml] [--mt-conf CONF] [--exp DIR]"
    echo "          [--whisper-conf conf/st_whisper_base.yaml] [--xstnet-conf CONF] [--lut-conf CONF]"
    echo "          [--chimera-conf CONF] [--fat-conf CONF --fat-st-conf CONF]"
    echo "          [--lm-st-conf conf/st_lm_gemma.yaml [--lm-mt-conf conf/mt_lm_gemma.yaml]]"
    echo "          [--lm-ctc-conf conf/ctc_lm_gemma.yaml --lm-st-conf conf/st_lm_gemma_ctc.yaml]"
    echo "          [--avg 10] [--beam 5] [--test-sets test] [--name LABEL]"
    echo "--src-langs \"de es fr\": one model for every direction (data.directions=[de-en,es-en,fr-en]), each test"
    echo "set scored per direction (test_de-en ...); stages 10 and 12-15 need one direction"
}
parse_options "$@"
src_langs=${src_langs//,/ } tgt_langs=${tgt_langs//,/ }     # "de es fr" or "de,es,fr"
read -r -a sources <<< "${src_langs:-$src_lang}"
read -r -a targets <<< "${tgt_langs:-$tgt_lang}"
if [ "${#sources[@]}" -eq 1 ]; then src_lang=${sources[0]}; fi
if [ "${#targets[@]}" -eq 1 ]; then tgt_lang=${targets[0]}; fi
several=$(( ${#sources[@]} * ${#targets[@]} > 1 ))
pairs=$(IFS=+; echo "${sources[*]}")-$(IFS=+; echo "${targets[*]}")    # de+es+fr-en
data=${data:-data/$pairs}
exp=${exp:-exp/$pairs}
train_directions=""         # several directions: de-en,es-en,fr-en (use_directions), else one pair
asr_test_sets=$test_sets    # the ASR data's own test sets (one direction's names) when it is another folder
if [ "$several" = 1 ]; then
    use_directions "${sources[*]}" "${targets[*]}"
    name=${name:-$(basename "$root") $pairs $(basename "$asr_conf" .yaml)+$(basename "$st_conf" .yaml)}
fi
name=${name:-$(basename "$root") $src_lang-$tgt_lang $(basename "$asr_conf" .yaml)+$(basename "$st_conf" .yaml)}
asr_src_lang=${asr_src_lang:-$src_lang}
if [ "$asr_src_lang" = "$src_lang" ]; then
    asr_data=${asr_data:-$data}
else
    asr_data=${asr_data:-data/$asr_src_lang-$asr_tgt_lang}
fi
vocab_tail=$([ "$vocab_type" = char ] && echo char || echo "")
asr_spm=$asr_data/spm_asr_${vocab_tail:-$asr_vocab}.model
st_spm=$data/spm_st_${vocab_tail:-$st_vocab}.model

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ] && [ -n "$mini" ]; then
    log "stage 0: CoVoST-mini ($mini) at $root"
    "$SPEECHMT" data synth covost2 --size "$mini" --out "$root" --seed "$seed" --jobs "$jobs" \
        $([ -n "$src_langs" ] && echo --src-langs "${sources[@]}")
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
    log "stage 1: prepare $root (${sources[*]} -> ${targets[*]}) -> $data"
    "$SPEECHMT" data prepare covost2 --root "$root" --src-langs "${sources[@]}" --tgt-langs "${targets[@]}" \
        --out "$data" --jobs "$jobs"
    if [ "$asr_data" != "$data" ]; then
        log "stage 1: prepare $root ($asr_src_lang -> $asr_tgt_lang: the ASR pretraining's speech) -> $asr_data"
        "$SPEECHMT" data prepare covost2 --root "$root" --src-lang "$asr_src_lang" --tgt-lang "$asr_tgt_lang" \
            --out "$asr_data" --jobs "$jobs"
    fi
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
    log "stage 2: vocabularies ($vocab_type) -> $st_spm, $asr_spm"
    st_lang_tags=("<$src_lang>" "<$tgt_lang>") asr_lang_tags=("<$asr_src_lang>")
    if [ "$several" = 1 ]; then  # every language's tag; the ASR model of this folder transcribes every source
        st_lang_tags=("${st_tags[@]}")
        if [ "$asr_data" = "$data" ]; then asr_lang_tags=("${asr_tags[@]}"); fi
    fi
    "$SPEECHMT" data vocab "$data/train.jsonl" --field tgt --model-type "$vocab_type" --vocab-size "$st_vocab" \
        --lang-tags "${st_lang_tags[@]}" --out "$st_spm"
    "$SPEECHMT" data vocab "$asr_data/train.jsonl" --field src --model-type "$vocab_type" --vocab-size "$asr_vocab" \
        --lang-tags "${asr_lang_tags[@]}" --out "$asr_spm"
fi

if [ "$asr_data" != "$data" ]; then
    # stages 3-4 on the ASR pretraining's data (one direction, its own test set names), the others on this pair's
    # or these directions' (train_stages reads data, src_lang and tgt_lang: each set in a subshell)
    (data=$asr_data; src_lang=$asr_src_lang; tgt_lang=$asr_tgt_lang; name="$name (ASR on $asr_src_lang)"
     train_directions=""; test_sets=$asr_test_sets
     stop_stage=$((stop_stage < 4 ? stop_stage : 4)); train_stages)
    (stage=$((stage > 5 ? stage : 5)); train_stages)
else
    train_stages
fi
log "done (stages $stage..$stop_stage)"
