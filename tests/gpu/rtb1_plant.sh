#!/usr/bin/env bash
# rtb1_plant.sh — makes bin/kt_plant_rope on this (CPU) machine: this tree's kt with one planted bug in
# kernels/common/fp8_gemm.cuh's rope_back (quant_fp8_gemm_rope rotates the o_a GEMM's activations
# forward instead of back), for tests/gpu/rtb1.sh's part plant, which must see its tiny-V4 B = 1
# check fail on it. A copy of the tree (its build/ kept, so only the embedded sources rebuild) under a
# temporary folder.
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant-rope.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp -a . "$T/tree"
S='cs = cosf(f), sn = -1.0f \* sinf(f);'
grep -q "$S" "$T/tree/kernels/common/fp8_gemm.cuh" ||
    { echo "rtb1_plant.sh: rope_back's rotation is not where this script plants" >&2; exit 1; }
sed -i "s/$S/cs = cosf(f), sn = 1.0f * sinf(f);/" "$T/tree/kernels/common/fp8_gemm.cuh"
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_rope
echo "bin/kt_plant_rope: rope_back planted (rotates forward)"
