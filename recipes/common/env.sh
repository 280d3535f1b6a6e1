# Sourced by the recipes: finds the speechmt command and parses --name value options into variables
# (--stop-stage 2 sets stop_stage=2). Only options whose variable the recipe defines are accepted.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${SPEECHMT:-}" ]; then
    if [ -x "$repo_root/.venv/bin/speechmt" ]; then SPEECHMT="$repo_root/.venv/bin/speechmt"; else SPEECHMT=speechmt; fi
fi

parse_options() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --help|-h) usage; exit 0 ;;
            --*) local opt=${1#--}; opt=${opt//-/_}  # not `name`: --name sets the global of that name
                 if [ -z "${!opt+x}" ]; then echo "$0: unknown option $1" >&2; usage >&2; exit 2; fi
                 if [ $# -lt 2 ]; then echo "$0: option $1 needs a value" >&2; exit 2; fi
                 printf -v "$opt" '%s' "$2"; shift 2 ;;
            *) echo "$0: unexpected argument $1" >&2; usage >&2; exit 2 ;;
        esac
    done
}

# `speechmt train` on this machine's GPUs: under torchrun with $gpus ranks when a recipe sets gpus > 1 (the global
# batch stays the config's: train.update_freq_world_size), else the plain command. When a recipe sets
# train_directions (en-de,en-es,en-fr: a run of several directions, train_stages.sh's use_directions), the override
# data.directions=[en-de,en-es,en-fr] comes last: one model learns them all.
speechmt_train() {
    if [ "${gpus:-1}" -gt 1 ]; then
        "$(dirname "$(command -v "$SPEECHMT")")/torchrun" --standalone --nproc-per-node "$gpus" \
            --module speechmt train "$@" ${train_directions:+"data.directions=[$train_directions]"}
    else
        "$SPEECHMT" train "$@" ${train_directions:+"data.directions=[$train_directions]"}
    fi
}

log() { echo "$(date "+%F %T") [$(basename "$PWD")] $*"; }
