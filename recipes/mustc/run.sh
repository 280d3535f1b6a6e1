#!/usr/bin/env bash
# MuST-C en-<tgt_lang> recipe, staged as icefall/ESPnet recipes: run.sh --stage N --stop-stage M.
# With --tgt-langs "de es fr" the run is one model for several pairs: stage 1 prepares every pair into one folder
# ($data default data/en-de+es+fr: train holds them all, dev_en-de, tst-COMMON_en-fr, ... each pair's own splits,
# dev their union; docs/data.md), stage 2 puts every language's tag (<en> <de> <es> <fr>) in the target vocabulary,
# every training stage trains one model on all pairs (data.directions=[en-de,en-es,en-fr], each target started by
# its pair's tag), and each test set is scored per pair (tst-COMMON -> tst-COMMON_en-de tst-COMMON_en-es ...; the
# cascade's MT writes each split's pair). Stages 10 and 12-15 read one pair's extras and are skipped with a line
# (exit 2 when run alone: --stage N --stop-stage N). Stage 9 with --whisper-conf
# conf/st_whisper_base_multilingual.yaml is the multilingual Whisper model (pairs drawn by size, temperature 5).
#   0  build MuST-C-mini (synthetic, same layout) at $root when --mini tiny|small|full is given
#   1  prepare every split: manifests, fbank80 features, global CMVN, summary (skips counted with reasons); with
#      --tgt-langs every pair into one folder
#   2  SentencePiece vocabularies: unigram $st_vocab on the target side (ST), $asr_vocab on the source (ASR)
#   3  ASR pretraining ($asr_conf)
#   4  average the last $avg ASR checkpoints (epoch checkpoints when the run wrote them); WER on $test_sets
#   5  ST training, encoder initialised from the averaged ASR model ($st_conf)
#   6  average the last $avg ST checkpoints (epoch checkpoints when the run wrote them); BLEU on $test_sets; a row
#      per result in RESULTS.md
#   7  with --mt-conf: MT on the same pairs (transcript -> translation), averaged, BLEU on $test_sets
#   8  with --mt-conf: the cascade, averaged ASR -> averaged MT, BLEU on $test_sets
#   9  with --whisper-conf: ST fine-tuned from Whisper base (set-up converts it), averaged, BLEU on $test_sets;
#      with --tgt-langs, conf/st_whisper_base_multilingual.yaml is its multilingual setting
#  10  with --xstnet-conf: XSTNet (conf/st_xstnet_whisper_base.yaml): extra MT text, MT -> ST+ASR+MT, scored
#      as ST, MT and its own ASR -> MT cascade
#  11  with --lut-conf: LUT (conf/st_lut_whisper_base.yaml), averaged, BLEU on $test_sets
#  12  with --chimera-conf: Chimera (conf/st_chimera_whisper_base.yaml): extra MT text, MT -> ST+MT+contrastive,
#      scored as ST and MT
#  13  with --fat-conf and --fat-st-conf: FAT-MLM pretraining (conf/fat_mlm_whisper_base.yaml on Whisper's encoder,
#      or ../../research/mustc/conf/fat_mlm_mini.yaml on the conv encoder) on the ST triples and the extra MT text,
#      then FAT-ST (conf/st_fat_whisper_base.yaml, ../../research/mustc/conf/st_fat_mini.yaml) initialised from it,
#      averaged, BLEU on $test_sets; in $exp/<config name>
#  14  with --tts-conf (../../research/mustc/conf/st_whisper_base_enc_lora_tts_sent.yaml): the extra MT text's whole
#      sentences voiced into $root's split train-tts-sent (`speechmt data synth-tts`: synthetic speech for text-only
#      pairs) and prepared, then ST on the corpus and it -> $exp/st_tts, averaged, BLEU on $test_sets
#  15  with --lm-st-conf (conf/st_lm_gemma_whisper_asr.yaml): Gemma 3 270M as the decoder: text MT ($lm_mt_conf)
#      -> $exp/lm_mt, then ST from its LoRA adapters (bridge with the LM frozen, then ST + MT) -> $exp/lm_st; BLEU as
#      MT and ST
# Stages run unchanged on the released corpus and on the mini corpus. The defaults are fairseq's published S2T
# setting (../PUBLISHED.md): unigram 8000 / 5000, conf/asr_s2t_s.yaml, conf/st_s2t_s.yaml, the last 10 epochs, beam 5.
set -euo pipefail
cd "$(dirname "$0")"
source ../common/env.sh
source ../common/train_stages.sh

stage=1
stop_stage=15
corpus=mustc
root=corpora/mustc          # holds en-<tgt_lang>/data/{train,dev,tst-COMMON,...}
tgt_lang=de
tgt_langs=""                # several targets ("de es fr"): one folder and one model for every pair
mini=""                     # tiny, small or full: build MuST-C-mini at $root in stage 0
seed=0
jobs=2
gpus=1                      # training ranks on this machine (torchrun when > 1)
data=""                     # default: data/en-$tgt_lang
st_vocab=8000
asr_vocab=5000
asr_conf=conf/asr_s2t_s.yaml
st_conf=conf/st_s2t_s.yaml
mt_conf=""                  # an MT config (e.g. conf/mt_default.yaml): stages 7-8, MT and cascade
whisper_conf=""             # a Whisper ST config (conf/st_whisper_base.yaml): stage 9
xstnet_conf=""              # an XSTNet config (conf/st_xstnet_whisper_base.yaml): stage 10
lut_conf=""                 # a LUT config (conf/st_lut_whisper_base.yaml): stage 11
chimera_conf=""             # a Chimera config (conf/st_chimera_whisper_base.yaml): stage 12
fat_conf=""                 # a FAT-MLM config (conf/fat_mlm_whisper_base.yaml): stage 13, with fat_st_conf
fat_st_conf=""              # a FAT-ST config (conf/st_fat_whisper_base.yaml): stage 13, from FAT-MLM
tts_conf=""                 # ST on the corpus + the voiced extra text: stage 14
                            # (../../research/mustc/conf/st_whisper_base_enc_lora_tts_sent.yaml)
lm_mt_conf=conf/mt_lm_gemma.yaml  # text MT into a pretrained LM (Gemma 3 270M): stage 15, with lm_st_conf
lm_ctc_conf=""              # the CTC bridge into that LM (conf/ctc_lm_gemma.yaml): stage 15, with
                            # lm_st_conf conf/st_lm_gemma_ctc.yaml, which starts from it and the MT run
lm_st_conf=""               # ST into that LM from the MT adapters (conf/st_lm_gemma_whisper_asr.yaml): stage 15
exp=""                      # default: exp/en-$tgt_lang
avg=10                      # checkpoints averaged: the last epochs' (train.save_interval_epochs), else updates'
beam=5
test_sets=tst-COMMON
name=""                     # label of the results rows, default: the corpus root and configs

usage() {
    echo "usage: $0 [--stage N] [--stop-stage M] [--root DIR] [--tgt-lang de | --tgt-langs \"de es fr\"]"
    echo "          [--mini tiny|small|full]"
    echo "          [--data DIR] [--jobs 2] [--gpus 1] [--st-vocab 8000] [--asr-vocab 5000] [--seed 0]"
    echo "          [--asr-conf conf/asr_s2t_s.yaml] [--st-conf conf/st_s2t_s.yaml] [--mt-conf CONF] [--exp DIR]"
    echo "          [--whisper-conf conf/st_whisper_base.yaml] [--xstnet-conf CONF] [--lut-conf CONF]"
    echo "          [--chimera-conf CONF] [--fat-conf CONF --fat-st-conf CONF] [--tts-conf CONF]"
    echo "          [--lm-st-conf ../../research/mustc/conf/st_lm_gemma.yaml [--lm-mt-conf conf/mt_lm_gemma.yaml]]"
    echo "          [--lm-ctc-conf conf/ctc_lm_gemma.yaml --lm-st-conf conf/st_lm_gemma_ctc.yaml]"
    echo "          [--lm-st-conf conf/st_lm_gemma_whisper_asr.yaml]   # Whisper's own search as the bridge"
    echo "          [--avg 10] [--beam 5] [--test-sets tst-COMMON] [--name LABEL]"
    echo "--tgt-langs \"de es fr\": one model for every pair (data.directions=[en-de,en-es,en-fr]), each test set"
    echo "scored per pair (tst-COMMON_en-de ...); stages 10 and 12-15 need one pair; the multilingual Whisper model:"
    echo "stage 9 with --whisper-conf conf/st_whisper_base_multilingual.yaml"
}
parse_options "$@"
tgt_langs=${tgt_langs//,/ }     # "de es fr" or "de,es,fr"
read -r -a targets <<< "${tgt_langs:-$tgt_lang}"
if [ "${#targets[@]}" -eq 1 ]; then tgt_lang=${targets[0]}; fi
pairs=$(IFS=+; echo "${targets[*]}")    # de+es+fr
data=${data:-data/en-$pairs}
exp=${exp:-exp/en-$pairs}
if [ "${#targets[@]}" -gt 1 ]; then
    name=${name:-$(basename "$root") en-$pairs $(basename "$asr_conf" .yaml)+$(basename "$st_conf" .yaml)}
else
    name=${name:-$(basename "$root") $(basename "$asr_conf" .yaml)+$(basename "$st_conf" .yaml)}
fi
src_lang=en
train_directions=""         # several targets: en-de,en-es,en-fr (use_directions), else one pair
if [ "${#targets[@]}" -gt 1 ]; then use_directions en "${targets[*]}"; fi
asr_spm=$data/spm_asr_$asr_vocab.model
st_spm=$data/spm_st_$st_vocab.model

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ] && [ -n "$mini" ]; then
    log "stage 0: MuST-C-mini ($mini) at $root"
    "$SPEECHMT" data synth mustc --size "$mini" --out "$root" --seed "$seed" --jobs "$jobs" \
        --tgt-langs "${targets[@]}"
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
    log "stage 1: prepare $root (en -> ${targets[*]}) -> $data"
    "$SPEECHMT" data prepare mustc --root "$root" --tgt-langs "${targets[@]}" --out "$data" --jobs "$jobs"
fi

vocab_stage
train_stages
log "done (stages $stage..$stop_stage)"
