#!/usr/bin/env bash
# mla25_builds.sh — what tests/gpu/mla25.sh runs beside bin/kt, made on the CPU machine before the
# GPU call (in a temporary copy of this work tree, then into bin/, whose rpath $ORIGIN/../lib finds
# the lib/ that `make` left there):
#   bin/kt_plant: this tree with a planted bug live only under MERGE=1 / 2 and STAGES=3 (a value none
#                 of mla25.sh's B = 1 MERGE configs takes with it): wide_batch's adds weight each
#                 batch's first split by the second's weight (kt verify must fail on a result);
#   bin/mla25_cache.tar.xz: the sm_90 JIT cache of every --config mla25.sh runs, by bin/kt and
#                 bin/kt_plant, and by $KT_MAIN where set (a hit on the GPU where its NVRTC is this one
#                 and the sources are these; else they compile there).
#   usage: [KT_MAIN=main/bin/kt] bash tests/gpu/mla25_builds.sh  (after make)
set -eu
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p bin
mkdir -p "$TMP/kt_plant"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$TMP/kt_plant"
python3 - "$TMP/kt_plant/kernels/mla_decode.cu" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = "const float wk = w[min(k0 + j, n - 1)];"
new = "const float wk = w[min(k0 + j + (KT_STAGES == 3 && j == 0), n - 1)];"
if s.count(old) != 1:
    sys.exit("mla25_builds: wide_batch's weight load not found once")
open(p, "w").write(s.replace(old, new))
PY
make -C "$TMP/kt_plant" -j2 bin/kt >"$TMP/kt_plant.log" 2>&1 || { tail -20 "$TMP/kt_plant.log"; exit 1; }
cp "$TMP/kt_plant/bin/kt" bin/kt_plant
echo "bin/kt_plant built"
# the JIT cache: every config of mla25.sh (its config lines) and the family default (verify's reference)
export KT_CACHE_DIR=$TMP/cache
eval "$(grep -E '^(S1|S128|S64|S128B64|S32B64|P0|P3|PLANT)=' tests/gpu/mla25.sh | sed 's/ *#.*//')"
DEF=HPC=16,CHUNK=32,SPLIT=256,STAGES=2,PATH=2,WPM=4,FUSE=0,MPW=1
spills() { awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'; }
for c in "$S1,FUSE=0,PART=1" "$S128,FUSE=0,PART=1" "$S64,FUSE=0,PART=1" $DEF; do # main's served configs too (it takes no MERGE)
    for k in bin/kt ${KT_MAIN:+"$KT_MAIN"}; do
        "$k" compile --family mla_decode --arch sm_90 --config "$c" | spills
    done
done
for c in $S1 $S128; do
    for f in 1 2; do
        for m in 0 1 2; do bin/kt compile --family mla_decode --arch sm_90 --config "$c,FUSE=$f,PART=1,MERGE=$m" | spills; done
    done
done
for c in "$S1,FUSE=2,PART=0,MERGE=2" "$S64,FUSE=1,PART=1,MERGE=2" "$S32B64,FUSE=1,PART=1,MERGE=2" \
    "$S128B64,FUSE=1,PART=1,MERGE=2" "$S64,FUSE=1,PART=0,MERGE=1" "$P0,PART=1,MERGE=2" "$P3,PART=0,MERGE=1"; do
    bin/kt compile --family mla_decode --arch sm_90 --config "$c" | spills
done
for c in "$PLANT" "${PLANT/STAGES=3/STAGES=2}" $DEF; do
    bin/kt_plant compile --family mla_decode --arch sm_90 --config "$c" | spills
done
tar -cJf bin/mla25_cache.tar.xz -C "$TMP" cache
echo "bin/mla25_cache.tar.xz: $(find "$TMP/cache" -type f | wc -l) files"
