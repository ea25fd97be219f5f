#!/usr/bin/env bash
# idx_builds.sh — the extra kt builds tests/gpu/idx_speed.sh runs beside bin/kt, made on the
# CPU machine before a GPU call (each in a temporary copy, then into bin/, whose rpath
# $ORIGIN/../lib finds the lib/ that `make` left there):
#   bin/kt_planted2: this tree with the scan's pair scale shuffle reading lane 4 tl (tile j's
#                    scale for both tiles of a pair: verify must fail);
#   bin/kt_trace:    this tree with tests/gpu/idx_trace.patch (the scan's and the selection's
#                    phase timestamps, printed once a launch);
#   bin/kt_main:     commit BASE (default main's 41740f0), the before of an A/B in the same run.
#   usage: tests/gpu/idx_builds.sh [BASE [NAME...]]  (NAMEs: only those builds; default kt_planted2 kt_trace kt_main, what idx_speed.sh runs)
set -eu
cd "$(dirname "$0")/../.."
BASE=${1:-41740f0}
[ $# -gt 1 ] && shift && NAMES=" $* " || NAMES=" kt_planted2 kt_trace kt_main "
want() { [[ $NAMES == *" $1 "* ]]; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# build NAME: make bin/kt in $TMP/NAME (already laid out and changed) and copy it to bin/NAME
build() {
    make -C "$TMP/$1" -j2 bin/kt >"$TMP/$1.log" 2>&1 || { tail -20 "$TMP/$1.log"; exit 1; }
    cp "$TMP/$1/bin/kt" "bin/$1"
    echo "bin/$1 built"
}
# tree NAME: a copy of this work tree (tracked and untracked files, not ignored ones)
tree() {
    mkdir -p "$TMP/$1"
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$TMP/$1"
}
mkdir -p bin
if want kt_planted2; then
    tree kt_planted2
    F=$TMP/kt_planted2/kernels/mla_indexer.cu
    sed -i 's/gd.scale\[j\], 4 \* tl + second);/gd.scale[j], 4 * tl);/' "$F"
    grep -q 'gd.scale\[j\], 4 \* tl);' "$F" || { echo "idx_builds: the pair's scale shuffle was not found"; exit 1; }
    build kt_planted2
fi
for t in kt_trace:idx_trace; do
    want "${t%%:*}" || continue
    tree "${t%%:*}"
    patch -s -d "$TMP/${t%%:*}" -p1 <"tests/gpu/${t#*:}.patch"
    build "${t%%:*}"
done
if want kt_main; then
    mkdir -p "$TMP/kt_main"
    git archive "$BASE" | tar -xf - -C "$TMP/kt_main"
    build kt_main
fi
