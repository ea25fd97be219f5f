#!/usr/bin/env bash
# plant.sh — builds a planted kt on this (CPU) machine: bin/NAME, this tree's kt with one line of FILE changed (the
# fixed string WANT, which must stand in FILE exactly once, becomes NEW), for a GPU test that must fail on it. Built
# from a copy of the tree (its build/ kept, so only what FILE feeds rebuilds) under a temporary folder.
#   usage: bash tests/gpu/plant.sh NAME FILE WANT NEW WHAT (after make; WHAT: one line for the log)
set -eu
cd "$(dirname "$0")/../.."
[ $# = 5 ] || { echo "usage: plant.sh NAME FILE WANT NEW WHAT" >&2; exit 2; }
name=$1 f=$2 want=$3 new=$4 what=$5
n=$(grep -cF -- "$want" "$f" || true)
[ "$n" = 1 ] || { echo "plant.sh: the line to plant is not in $f once ($n): $want" >&2; exit 1; }
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp -a . "$T/tree"
WANT=$want NEW=$new python3 -c 'import os, sys; p = sys.argv[1]; s = open(p).read()
open(p, "w").write(s.replace(os.environ["WANT"], os.environ["NEW"]))' "$T/tree/$f"
[ "$(grep -cF -- "$new" "$T/tree/$f")" -ge 1 ] && ! grep -qF -- "$want" "$T/tree/$f" ||
    { echo "plant.sh: the plant did not take" >&2; exit 1; }
make -C "$T/tree" -j4 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" "bin/$name"
echo "bin/$name: $what ($(diff "$f" "$T/tree/$f" | grep -c '^>') line changed)"
