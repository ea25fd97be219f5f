#!/usr/bin/env bash
# idx22_builds.sh — the planted build tests/gpu/idx22.sh runs beside bin/kt, made on the CPU machine
# before the GPU call (each in a temporary copy of this work tree, then into bin/, whose rpath
# $ORIGIN/../lib finds the lib/ that `make` left there):
#   bin/kt_plant: two planted bugs, each live only under a value of the scan's STAGES (which the
#                 selection never reads), so that one binary shows each failing on its own (with
#                 SEL_FAST=2): STAGES=2: the staging stores only the first 2 of each thread's batch
#                 of 4 vectors (at 8K keys and 1024 threads 256 keys never staged); STAGES=3:
#                 resolve_masks never adds a candidate > T to the taken keys (the fused pass loses them).
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
tree kt_plant
F=$TMP/kt_plant/kernels/mla_indexer.cu
python3 - "$F" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
plants = [("for (int u = 0; u < BATCH; u++)\n            if (i0 + u * n < vecs) {",
           "for (int u = 0; u < (KT_STAGES == 2 ? 2 : BATCH); u++)\n            if (i0 + u * n < vecs) {"),
          ("above |= (unsigned)(key > T) << j;", "above |= (unsigned)(key > T && KT_STAGES != 3) << j;")]
for old, new in plants:
    if s.count(old) != 1:
        sys.exit("idx22_builds: %r not found once" % old)
    s = s.replace(old, new)
open(p, "w").write(s)
PY
build kt_plant
