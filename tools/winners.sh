#!/usr/bin/env bash
# winners.sh — a kt database's winners, one "FAMILY SHAPE M CONFIG" line each, read from `kt db
# show` (fields counted from the row's end: the device's name may be several words). For
# tools/ab.sh and the GPU suite's sanitize mode.
#   usage: tools/winners.sh DB     (KT, the kt to run, default ./bin/kt)
set -o pipefail
[ $# -eq 1 ] || { echo "usage: $0 DB" >&2; exit 2; }
"${KT:-./bin/kt}" db show --db "$1" | awk '/^winners/ {w = 1; row = 0; next} w && /^$/ {w = 0}
    w && ++row > 2 { print $(NF - 7), $(NF - 6), $(NF - 5), $(NF - 4) }'
