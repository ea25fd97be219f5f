#!/usr/bin/env bash
# comp_plant.sh — makes the planted build that must fail tests/gpu/runtime.sh correct, on this (CPU) machine:
# bin/kt_plant_comp, this tree's kt with rt_comp_fold's slot-0 restart cut (runtime/model.cu: a window's running
# softmax carries on from the previous window's state, so every compressed entry after the first mixes in earlier
# windows' tokens). Built from a copy of the tree (its build/ kept, so only the embedded model.cu rebuilds) under a
# temporary folder.
#   usage: bash tests/gpu/comp_plant.sh (after make); then on the GPU: KT=./bin/kt_plant_comp bash tests/gpu/runtime.sh correct
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
f=runtime/model.cu
want='rt_comp_acc A = slot ? rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]} : none;'
n=$(grep -cF "$want" $f || true)
[ "$n" = 1 ] || { echo "comp_plant.sh: rt_comp_fold's restart is not in $f once ($n), where the plant goes" >&2; exit 1; }
cp -a . "$T/tree"
sed -i 's/rt_comp_acc A = slot ? rt_comp_acc{st\[a0\], st\[N + a0\], st\[2 \* N + a0\]} : none;/rt_comp_acc A = rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]};/' "$T/tree/$f"
[ "$(grep -cF 'rt_comp_acc A = rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]};' "$T/tree/$f")" = 1 ] ||
    { echo "comp_plant.sh: the plant did not take" >&2; exit 1; }
make -C "$T/tree" -j4 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_comp
echo "bin/kt_plant_comp: rt_comp_fold's slot-0 restart cut ($(diff "$f" "$T/tree/$f" | grep -c '^>') line changed)"
