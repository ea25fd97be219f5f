#!/usr/bin/env bash
# idx19_prep.sh — builds, on the build machine (no GPU), what tests/gpu/idx19.sh takes beside
# bin/kt (carry bin, lib and .gpu to the GPU):
#   bin/kt_idx19_planted  this tree with HIST=2's fine histogram dropping each thread's last run
#                         of keys (fine_histogram's final add): verify must fail;
#   bin/kt_main           commit BASE (default main's 518d1ef), the before of the A/B;
#   .gpu/idx19_cache.tar.xz  the JIT cache (sm_90) of every indexer config idx19.sh runs, for
#                         the three binaries (a hit where the GPU host's NVRTC is the same).
#   usage (from the repository root, after make): bash tests/gpu/idx19_prep.sh [BASE]
set -eu
cd "$(dirname "$0")/../.."
BASE=${1:-518d1ef}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
build() { # NAME: make bin/kt in $TMP/NAME (laid out and changed) and copy it to bin/NAME
    make -C "$TMP/$1" -j2 bin/kt >"$TMP/$1.log" 2>&1 || { tail -20 "$TMP/$1.log"; exit 1; }
    cp "$TMP/$1/bin/kt" "bin/$1"
    echo "bin/$1 built"
}
mkdir -p bin .gpu "$TMP/kt_idx19_planted" "$TMP/kt_main"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$TMP/kt_idx19_planted"
F=$TMP/kt_idx19_planted/kernels/mla_indexer.cu
sed -i 's/^    if (run) atomicAdd(&hist\[bin\], run);$/    (void)run;/' "$F"
grep -q '^    (void)run;$' "$F" || { echo "idx19_prep: fine_histogram's last add was not found"; exit 1; }
build kt_idx19_planted
git archive "$BASE" | tar -xf - -C "$TMP/kt_main"
build kt_main
export KT_CACHE_DIR=$TMP/cache
eval "$(grep -m1 '^C2=' tests/gpu/idx19.sh)" # the script's HIST=2 configs, C2 and C25
configs="$C2 $C25"
for k in bin/kt bin/kt_idx19_planted bin/kt_main; do
    for c in $configs HIST=0 HIST=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8 \
        HIST=0,SEL_THREADS=512,SEL_CLUSTER=2 HIST=0,SEL_THREADS=512,SEL_CLUSTER=4 HIST=0,SEL_THREADS=512,SEL_CLUSTER=8; do
        [ "$k" = bin/kt_main ] && echo "$c" | grep -q HIST=2 && continue # (main has no HIST=2)
        "$k" compile --family mla_indexer --arch sm_90 --config "$c" 2>&1 | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
    done
done
echo "cache: $(find "$KT_CACHE_DIR" -type f | wc -l) files"
tar -cJf .gpu/idx19_cache.tar.xz -C "$TMP" cache
echo ".gpu/idx19_cache.tar.xz: $(du -sh .gpu/idx19_cache.tar.xz | cut -f1)"
