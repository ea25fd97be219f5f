#!/usr/bin/env bash
# mla24_builds.sh — what tests/gpu/mla24.sh runs beside bin/kt, made on the CPU machine before the
# GPU call (in a temporary copy of this work tree, then into bin/, whose rpath $ORIGIN/../lib finds
# the lib/ that `make` left there):
#   bin/kt_plant: this tree with a planted bug live only under PART=1 and STAGES=3 (a value none of
#                 mla24.sh's other PART=1 configs takes with it): the split CTAs of head group 1 (heads
#                 16-31) store their bf16 partial sums as zeros (kt verify over HQ 64 must fail);
#   bin/mla24_cache.tar.xz: the sm_90 JIT cache of every --config mla24.sh runs, by bin/kt and
#                 bin/kt_plant, and by $KT_MAIN where set (a hit on the GPU where its NVRTC is this one
#                 and the sources are these; else they compile there).
#   usage: [KT_MAIN=main/bin/kt] bash tests/gpu/mla24_builds.sh  (after make)
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
old = """a.nsplit * KT_MLA_DV, wi, 1.f,
                              1.f);"""
new = """a.nsplit * KT_MLA_DV, wi,
                              KT_PART && KT_STAGES == 3 && blockIdx.y == 1 ? 0.f : 1.f,
                              KT_PART && KT_STAGES == 3 && blockIdx.y == 1 ? 0.f : 1.f);"""
if s.count(old) != 1:
    sys.exit("mla24_builds: the partial store's call not found once")
open(p, "w").write(s.replace(old, new))
PY
make -C "$TMP/kt_plant" -j2 bin/kt >"$TMP/kt_plant.log" 2>&1 || { tail -20 "$TMP/kt_plant.log"; exit 1; }
cp "$TMP/kt_plant/bin/kt" bin/kt_plant
echo "bin/kt_plant built"
# the JIT cache: every config of mla24.sh (its CONFIGS line) and the family default (verify's reference)
export KT_CACHE_DIR=$TMP/cache
eval "$(grep -E '^(S1|S128|S64|S128B64|S32B64|P0|P3|PLANT)=' tests/gpu/mla24.sh | sed 's/ *#.*//')"
DEF=HPC=16,CHUNK=32,SPLIT=256,STAGES=2,PATH=2,WPM=4,FUSE=0,MPW=1
for c in $S1 $S128 $S64 $DEF; do # main's too (it takes no PART)
    for k in bin/kt ${KT_MAIN:+"$KT_MAIN"}; do
        "$k" compile --family mla_decode --arch sm_90 --config "$c" | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
    done
done
for c in $S1 $S128 $S64 $S128B64 $S32B64; do
    for f in 0 1 2; do
        bin/kt compile --family mla_decode --arch sm_90 --config "$c,FUSE=$f,PART=1" |
            awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
    done
done
for c in $P0 $P3; do
    bin/kt compile --family mla_decode --arch sm_90 --config "$c,PART=1" | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
done
for c in "$PLANT" "${PLANT/STAGES=3/STAGES=2}" $DEF; do
    bin/kt_plant compile --family mla_decode --arch sm_90 --config "$c" | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
done
tar -cJf bin/mla24_cache.tar.xz -C "$TMP" cache
echo "bin/mla24_cache.tar.xz: $(find "$TMP/cache" -type f | wc -l) files"
