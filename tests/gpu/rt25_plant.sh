#!/usr/bin/env bash
# rt25_plant.sh — makes the planted build tests/gpu/rt25.sh's part plantgram runs, on this (CPU) machine: this
# tree's kt with one bug in runtime/model.cu, which part plantgram must see the tiny-V4 B = 1 tolerance check fail
# on (KT_STEP_HC_GRAM=1, one stream):
#   bin/kt_plant_gram  rt_hc_gram_q's collapse sum of squares from the Gram matrices without their off-diagonal
#                      entries' factor 2 (a wrong rms scale of h at every HC module).
# From a copy of the tree (its build/ kept, so only model.cu's embedding rebuilds) under a temporary folder.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
old='(k == j ? 1.f : 2.f) \* pre\[j\]'
rm -rf "$T/tree" && cp -a . "$T/tree"
[ "$(grep -c "$old" "$T/tree/runtime/model.cu")" = 1 ] || { echo "rt25_plant.sh: '$old' is not in model.cu once" >&2; exit 1; }
sed -i "s/$old/1.f * pre[j]/" "$T/tree/runtime/model.cu"
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_gram
echo "bin/kt_plant_gram: the Gram matrices' off-diagonal entries counted once (rt_hc_gram_q)"
