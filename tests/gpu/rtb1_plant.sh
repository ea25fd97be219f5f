#!/usr/bin/env bash
# rtb1_plant.sh — makes bin/kt_plant_pc on this (CPU) machine: this tree's kt with one planted bug in
# runtime/step.c's hc_pre (postcomb single-buffered: each HC module writes its post | comb into the
# buffer its post step reads, so rt_gate_comb may read the MoE module's own in place of the attention
# block's), for tests/gpu/rtb1.sh's part plant, which must see its tiny-V4 B = 1 tolerance check fail
# on it. A copy of the tree (its build/ kept, so only step.c rebuilds) under a temporary folder.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant-pc.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp -a . "$T/tree"
old='dptr out = s->postcomb == s->pcbuf\[0\] ? s->pcbuf\[1\] : s->pcbuf\[0\]'
grep -q "$old" "$T/tree/runtime/step.c" || { echo "rtb1_plant.sh: hc_pre's buffer choice is not where this script plants" >&2; exit 1; }
sed -i "s/$old/dptr out = s->postcomb ? s->postcomb : s->pcbuf[0]/" "$T/tree/runtime/step.c"
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_pc
echo "bin/kt_plant_pc: postcomb single-buffered (hc_pre)"
