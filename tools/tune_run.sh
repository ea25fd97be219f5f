#!/usr/bin/env bash
# tune_run.sh — tunes every family problem a `kt run` decode step dispatches, into DB: runs
# the step once per batch size (its start-up logs each dispatch as "kt: FAMILY SHAPE M=m ->
# CONFIG (level)"), then one `kt tune` per family over its shapes at the batch sizes seen.
# `kt run --db DB` then serves the winners and prints the tuned-versus-default figure.
#   usage: tools/tune_run.sh DB BATCHES [KT_TUNE_ARGS...] -- KT_RUN_ARGS...
#     e.g. tools/tune_run.sh rt.db 1,64 --budget 12 -- --model flash --synthetic --tp-shapes 4 --context 8192
# (KT, the kt to run, default ./bin/kt). Needs a GPU.
set -u
[ $# -ge 3 ] || { echo "usage: $0 DB BATCHES [KT_TUNE_ARGS...] -- KT_RUN_ARGS..." >&2; exit 2; }
db=$1 batches=$2
shift 2
tune_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do tune_args+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "$0: expected -- before kt run's arguments" >&2; exit 2; }
shift
KT=${KT:-./bin/kt}
list=$(mktemp)
trap 'rm -f "$list"' EXIT
for b in ${batches//,/ }; do
    case $b in '' | *[!0-9]*) echo "$0: batch '$b' is not a number" >&2; exit 2 ;; esac
    out=$("$KT" run "$@" --batch "$b" --steps 1 2>&1 >/dev/null) ||
        { echo "$0: kt run --batch $b failed: $(echo "$out" | tail -n 1)" >&2; exit 1; }
    echo "$out" | awk '$1 == "kt:" && $4 ~ /^M=[0-9]+$/ && $5 == "->" { print $2, $3, substr($4, 3) }' >>"$list"
done
[ -s "$list" ] || { echo "$0: kt run logged no dispatch" >&2; exit 1; }
# one tune per family: its shapes, and the batch sizes its problems were dispatched at
for family in $(awk '{print $1}' "$list" | sort -u); do
    shapes=$(awk -v f="$family" '$1 == f {print "--shape " $2}' "$list" | sort -u)
    ms=$(awk -v f="$family" '$1 == f {print $3}' "$list" | sort -un | paste -sd, -)
    echo "tune_run: $family at M $ms: $(echo "$shapes" | wc -l) shapes"
    # shellcheck disable=SC2086 # one --shape word pair per line
    "$KT" tune --family "$family" $shapes --m "$ms" --db "$db" "${tune_args[@]}" || exit 1
done
