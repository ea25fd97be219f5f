#!/usr/bin/env bash
# lt25_plant.sh — makes the planted build tests/gpu/lt25.sh's check 4 runs, on this (CPU) machine: bin/kt_plant_lt,
# this tree's kt with the cuBLASLt GEMV's K 128 short in its W and x layouts (runtime/lt_gemv.c: rows K - 128, the
# leading dimension still K), so every lever GEMV drops its last 128 products (V4-Flash: 3968 of 4096, ~18% of an
# output's norm); check 1's tolerance (0.15 a row) must fail on it. Built from a copy of the tree (its build/ kept,
# so only lt_gemv.c rebuilds) under a temporary folder.   usage: bash tests/gpu/lt25_plant.sh (after make)
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
f=runtime/lt_gemv.c
for m in p-\>w p-\>x; do
    n=$(grep -c "lt.cublasLtMatrixLayoutCreate(&$m, CUDA_R_32F, (uint64_t)p->k, " $f || true)
    [ "$n" = 1 ] || { echo "lt25_plant.sh: the layout of $m is not in $f once ($n), where the plant goes" >&2; exit 1; }
done
cp -a . "$T/tree"
sed -i 's/lt.cublasLtMatrixLayoutCreate(&p->\([wx]\), CUDA_R_32F, (uint64_t)p->k, /lt.cublasLtMatrixLayoutCreate(\&p->\1, CUDA_R_32F, (uint64_t)(p->k - 128), /' \
    "$T/tree/$f"
[ "$(grep -c '(uint64_t)(p->k - 128)' "$T/tree/$f")" = 2 ] || { echo "lt25_plant.sh: the plant did not take" >&2; exit 1; }
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_lt
echo "bin/kt_plant_lt: the cuBLASLt GEMV's K 128 short in its W and x layouts ($(diff "$f" "$T/tree/$f" | grep -c '^>') lines changed)"
