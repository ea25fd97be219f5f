#!/usr/bin/env bash
# mla21_builds.sh — the extra kt builds tests/gpu/mla21.sh runs beside bin/kt, made on the CPU
# machine before a GPU call (each in a temporary copy of this tree, then into bin/, whose rpath
# $ORIGIN/../lib finds the lib/ that `make` left there):
#   bin/kt_trace: this tree with kernels/mla_decode.cu's KT_MLA_TRACE 1 (the split and combine
#                 kernels' phase stamps, printed as `mla_tr` lines; tests/gpu/mla_trace.py reduces them).
#   bin/kt_plant_rope: this tree with WPM 16's rope p . v segments both reading the first's dims (the
#                 offset rope_at 0 in pv_regs: kt verify of WPM 16 over V4 must fail);
#   bin/mla21_cache.tar.xz: the sm_90 JIT cache of every config tests/gpu/mla21.sh runs with each of
#                 these builds (a hit on the GPU where its NVRTC is this one; else they compile).
#   usage: tests/gpu/mla21_builds.sh  (after make)
set -eu
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p bin
# variant NAME FROM TO: bin/NAME from a copy of this tree with FROM (once in kernels/mla_decode.{cu,c}) as TO
variant() {
    mkdir -p "$TMP/$1"
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$TMP/$1"
    python3 - "$TMP/$1/kernels" "$2" "$3" <<'PY'
import sys
d, a, b = sys.argv[1:]
hits = [p for p in (d + "/mla_decode.cu", d + "/mla_decode.c") if open(p).read().count(a) == 1]
assert len(hits) == 1, "mla21_builds: the text to change is not in one source once: " + a
s = open(hits[0]).read()
open(hits[0], "w").write(s.replace(a, b))
PY
    make -C "$TMP/$1" -j4 bin/kt >"$TMP/$1.log" 2>&1 || { tail -20 "$TMP/$1.log"; exit 1; }
    cp "$TMP/$1/bin/kt" "bin/$1"
    echo "bin/$1 built"
}
variant kt_trace "#define KT_MLA_TRACE 0" "#define KT_MLA_TRACE 1"
variant kt_plant_rope "const int rope_at = DPW < 64 ? (d - T::NOPE) * 2 : 0;" "const int rope_at = 0;"
# the JIT cache: every --config of mla21.sh (and the family default, verify's reference module)
export KT_CACHE_DIR=$TMP/cache
eval "$(grep -E '^[A-Z0-9_]+=HPC=' tests/gpu/mla21.sh | sed 's/ *#.*//')"
for c in $B1_MAIN $V32_MAIN $W16 $W16_V32 $W16_DIRECT HPC=16,CHUNK=32,SPLIT=256,STAGES=2,PATH=2,WPM=4,FUSE=0,MPW=1; do
    for b in bin/kt bin/kt_trace bin/kt_plant_rope; do
        "$b" compile --family mla_decode --arch sm_90 --config "$c" | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
    done
done
echo "cache: $(find "$KT_CACHE_DIR" -type f | wc -l) files"
tar -cJf bin/mla21_cache.tar.xz -C "$TMP" cache
