#!/usr/bin/env bash
# rtb1_plant.sh — makes the planted builds tests/gpu/rtb1.sh's parts plant and plantkv run, on this (CPU)
# machine: this tree's kt with one bug in runtime/step.c each, which the part must see its tiny-V4 B = 1
# tolerance check fail on (on one stream, where the bug's order is certain):
#   bin/kt_plant_pc  postcomb single-buffered (hc_pre: each HC module writes its post | comb into the buffer
#                    its post step reads, so rt_gate_comb may read the MoE module's own in place of the
#                    attention block's);
#   bin/kt_plant_kv  csa_split's KV compressor (side chain 6) enqueued after mla_decode, without its join:
#                    the order a lost join before mla_decode allows (the closing window's entry read unwritten).
# Each from a copy of the tree (its build/ kept, so only step.c rebuilds) under a temporary folder.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
# plant NAME WHAT SED-EXPRESSION PATTERN...: bin/kt_plant_NAME, each PATTERN checked present first
plant() {
    local name=$1 what=$2 expr=$3 p
    shift 3
    rm -rf "$T/tree" && cp -a . "$T/tree"
    for p in "$@"; do
        grep -q "$p" "$T/tree/runtime/step.c" || { echo "rtb1_plant.sh: '$p' is not in step.c, where $name plants" >&2; exit 1; }
    done
    sed -i "$expr" "$T/tree/runtime/step.c"
    make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
    cp "$T/tree/bin/kt" "bin/kt_plant_$name"
    echo "bin/kt_plant_$name: $what"
}
old='dptr out = s->postcomb == s->pcbuf\[0\] ? s->pcbuf\[1\] : s->pcbuf\[0\]'
plant pc "postcomb single-buffered (hc_pre)" "s/$old/dptr out = s->postcomb ? s->postcomb : s->pcbuf[0]/" "$old"
kv='    if (split \&\& csa_kv_side(s, L)) return -1;'
at='attend(s, L, mode, inv))'
plant kv "the KV compressor after mla_decode, unjoined (csa_split)" \
    "/^$kv/d; s/$at/attend(s, L, mode, inv) || (split \&\& csa_kv_side(s, L)))/" "^$kv" "$at"
