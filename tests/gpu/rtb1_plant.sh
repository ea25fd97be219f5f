#!/usr/bin/env bash
# rtb1_plant.sh — makes bin/kt_plant_gate on this (CPU) machine: this tree's kt with one planted bug in
# runtime/model.cu's rt_gate_comb (the gate's logits without the last HC stream's term), for
# tests/gpu/rtb1.sh's part plant, which must see its tiny-V4 B = 1 tolerance check fail on it. A copy
# of the tree (its build/ kept, so only the embedded sources rebuild) under a temporary folder.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant-gate.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp -a . "$T/tree"
grep -q '            if (k < H) t += p\[k\] \* v\[k\];' "$T/tree/runtime/model.cu" ||
    { echo "rtb1_plant.sh: rt_gate_comb's sum is not where this script plants" >&2; exit 1; }
sed -i 's/            if (k < H) t += p\[k\] \* v\[k\];/            if (k < H - 1) t += p[k] * v[k];/' "$T/tree/runtime/model.cu"
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_gate
echo "bin/kt_plant_gate: rt_gate_comb planted (k < H - 1)"
