#!/usr/bin/env bash
# System packages for the synthetic corpora: text sources (Debian main; fortunes-de: German text for
# back-translation, `speechmt data synth-mono`), espeak-ng and flite, and the non-free
# voices (pico, mbrola), which are installed from Debian's non-free component without touching /etc/apt.
# GNOME's user help (gnome-user-docs, CC-BY-SA 3.0) depends on its browser and a web engine (60+ packages):
# its .deb is unpacked, English, German and Spanish pages only, under $SPEECHMT_HOME/debian/gnome-user-docs.
set -euo pipefail
MAIN_PKGS=(espeak-ng flite trans-de-en fortunes-de diatheke sword-text-web sword-text-sparv debian-reference-en debian-reference-de
           asterisk-core-sounds-fr asterisk-core-sounds-fr-wav asterisk-core-sounds-es asterisk-core-sounds-es-wav
           asterisk-core-sounds-it asterisk-core-sounds-it-wav  # these six: `speechmt data synth real`
           chromium chromium-driver)  # the served page's test in a headless browser (tests/serve/test_page.py)
NONFREE_PKGS=(libttspico-utils mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-de2 mbrola-de6)

missing() { for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done; }

if ! command -v dpkg >/dev/null 2>&1; then
    echo "install_system_deps: not a Debian system; install espeak-ng, pico2wave, mbrola voices and the" \
         "Debian text packages (${MAIN_PKGS[*]}) by hand to build the synthetic corpora" >&2
    exit 0
fi
need_main=$(missing "${MAIN_PKGS[@]}")
need_nonfree=$(missing "${NONFREE_PKGS[@]}")
help_dir="${SPEECHMT_HOME:-$HOME/.cache/speechmt}/debian/gnome-user-docs"
need_help=
[ -d /usr/share/help/C/gnome-help ] || [ -d "$help_dir/usr/share/help/C/gnome-help" ] || need_help=gnome-user-docs
if [ -n "$need_help" ] && command -v apt-get >/dev/null 2>&1; then  # no root needed: download and unpack
    tmp=$(mktemp -d)
    if (cd "$tmp" && apt-get download -qq gnome-user-docs >/dev/null 2>&1) && dpkg-deb -x "$tmp"/gnome-user-docs_*.deb "$tmp/x"; then
        mkdir -p "$help_dir/usr/share/help" "$help_dir/usr/share/doc"
        for l in C de es; do rm -rf "$help_dir/usr/share/help/$l"; cp -r "$tmp/x/usr/share/help/$l" "$help_dir/usr/share/help/"; done
        cp -r "$tmp/x/usr/share/doc/gnome-user-docs" "$help_dir/usr/share/doc/"
        need_help=
    else
        echo "install_system_deps: gnome-user-docs could not be downloaded; speechmt data synth-mt --sources gnome-help will say so" >&2
    fi
    rm -rf "$tmp"
fi
[ -z "$need_main$need_nonfree" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install_system_deps: not root; missing packages:" $need_main $need_nonfree >&2
    echo "install_system_deps: the synthetic-corpus tests will be skipped without them" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if [ -n "$need_main" ]; then
    apt-get update -qq
    apt-get install -y -qq $need_main >/dev/null
fi
if [ -n "$need_nonfree" ]; then
    tmp=$(mktemp -d); mkdir -p "$tmp/lists/partial"
    src=/etc/apt/sources.list.d/debian.sources
    if [ -f "$src" ]; then
        sed 's/^Components: main$/Components: main contrib non-free/' "$src" > "$tmp/nf.sources"
        opts=(-o "Dir::Etc::SourceList=$tmp/nf.sources" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$tmp/lists")
        apt-get "${opts[@]}" update -qq && apt-get "${opts[@]}" install -y -qq $need_nonfree >/dev/null \
            || echo "install_system_deps: non-free voices unavailable; synthesis falls back to espeak-ng" >&2
    else
        echo "install_system_deps: $src not found; skipping non-free voices" >&2
    fi
    rm -rf "$tmp"
fi
