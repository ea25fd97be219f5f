#!/usr/bin/env bash
# idx22_builds.sh — the two builds tests/gpu/idx22.sh runs beside bin/kt, made on the CPU machine
# before the GPU call (each in a temporary copy of this work tree, then into bin/, whose rpath
# $ORIGIN/../lib finds the lib/ that `make` left there):
#   bin/kt_plant: two planted bugs, each live only under a value of the scan's STAGES (which the
#                 selection never reads), so that one binary shows each failing on its own:
#                 STAGES=2: the staging stores only the first 2 of each thread's batch of 4 vectors
#                 (at 8K keys and 1024 threads 256 keys never staged); STAGES=3: resolve_masks never
#                 adds a candidate > T to the taken keys (the fused pass loses them).
#   bin/kt_stage: this tree with the fused gather off (mask_and_gather never taken): the A/B of
#                 that lever alone in the same call.
#   usage: bash tests/gpu/idx22_builds.sh
set -eu
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p bin
tree() { # tree NAME: a copy of this work tree (tracked and untracked files, not ignored ones)
    mkdir -p "$TMP/$1"
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$TMP/$1"
}
build() { # build NAME: make bin/kt in $TMP/NAME and copy it to bin/NAME
    make -C "$TMP/$1" -j2 bin/kt >"$TMP/$1.log" 2>&1 || { tail -20 "$TMP/$1.log"; exit 1; }
    cp "$TMP/$1/bin/kt" "bin/$1"
    echo "bin/$1 built"
}
once() { # once FILE PATTERN: exactly one line of FILE matches
    [ "$(grep -c -- "$2" "$1")" = 1 ] || { echo "idx22_builds: '$2' not found once"; exit 1; }
}
tree kt_plant
F=$TMP/kt_plant/kernels/mla_indexer.cu
sed -i 's/for (int u = 0; u < BATCH; u++)\(\s*\)$/for (int u = 0; u < (KT_STAGES == 2 ? 2 : BATCH); u++)\1/' "$F"
once "$F" 'u < (KT_STAGES == 2 ? 2 : BATCH)'
sed -i 's/above |= (unsigned)(key > T) << j;/above |= (unsigned)(key > T \&\& KT_STAGES != 3) << j;/' "$F"
once "$F" 'key > T && KT_STAGES != 3'
build kt_plant
tree kt_stage
F=$TMP/kt_stage/kernels/mla_indexer.cu
sed -i 's/const bool fused = CLUSTER == 1 && gathered && sl.staged && sl.hi - sl.lo <= TILE;/const bool fused = false;/' "$F"
once "$F" 'const bool fused = false;'
build kt_stage
