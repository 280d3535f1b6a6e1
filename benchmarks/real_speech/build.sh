#!/usr/bin/env bash
# Builds tst-REAL and tst-REAL2 (real recorded English speech with German references) in the MuST-C layout:
#   OUT/en-de/data/tst-REAL/{wav/*.wav, txt/tst-REAL.{yaml,en,de}, sources.tsv}, and the same for tst-REAL2
# The audio comes from Debian packages (see README.md); it is never committed. Missing packages are installed
# with apt-get when root (as scripts/install_system_deps.sh does), otherwise downloaded with `apt-get download`
# and unpacked under OUT/.debs (no root needed, nothing installed); UNPACK=1 unpacks all of them that way,
# installed or not, even as root. speech-dispatcher (a daemon; only its recorded message is read) is never
# installed: when missing it is always unpacked.
# Usage: bash benchmarks/real_speech/build.sh OUT        (PYTHON=... picks the interpreter; default .venv)
set -euo pipefail
OUT=${1:?usage: build.sh OUT}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
if ! "$PYTHON" -c "import numpy, soundfile, soxr" 2>/dev/null; then
    echo "real_speech/build: $PYTHON lacks numpy/soundfile/soxr (run \`make setup\` or set PYTHON)" >&2
    exit 1
fi
pkgs=$("$PYTHON" "$HERE/build.py" --out "$OUT" --packages)   # the packages segments.tsv names
read -r -a PKGS <<< "$pkgs"
roots=(--search-root /)

NO_INSTALL=" speech-dispatcher "   # packages unpacked rather than installed even as root
missing=()
if [ "${UNPACK:-0}" = 1 ]; then
    missing=("${PKGS[@]}")
elif command -v dpkg-query >/dev/null 2>&1; then
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
else
    echo "real_speech/build: not a Debian system; the files of ${PKGS[*]} must be where segments.tsv says" >&2
fi

install=() unpack=()
for p in "${missing[@]}"; do
    if [ "$(id -u)" = 0 ] && [ "${UNPACK:-0}" != 1 ] && [[ "$NO_INSTALL" != *" $p "* ]]; then
        install+=("$p")
    else
        unpack+=("$p")
    fi
done
if [ ${#install[@]} -gt 0 ]; then
    echo "real_speech/build: installing ${install[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${install[@]}" >/dev/null
fi
if [ ${#unpack[@]} -gt 0 ]; then
    echo "real_speech/build: unpacking ${unpack[*]} under $OUT/.debs (not installed)" >&2
    mkdir -p "$OUT/.debs/root"
    debs=$(cd "$OUT/.debs" && pwd)
    (cd "$debs" && apt-get download "${unpack[@]}") || {
        echo "real_speech/build: apt-get download failed; install ${unpack[*]} as root" >&2; exit 1; }
    for p in "${unpack[@]}"; do
        dpkg -x "$(ls -t "$debs/${p}_"*.deb | head -1)" "$debs/root"
    done
    roots=(--search-root "$debs/root" "${roots[@]}")
fi

"$PYTHON" "$HERE/build.py" --out "$OUT" "${roots[@]}"
