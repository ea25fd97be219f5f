#!/usr/bin/env bash
# mla_fuse_prep.sh — builds, on the build machine (no GPU), what tests/gpu/mla_fuse.sh takes:
#   bin/kt_plant_NAME  bin/kt with one line of kernels/mla_decode.cu changed (a planted bug the
#                      GPU call's kt verify must fail on); the tree's file is restored after each;
#   .gpu/cache.tar.xz  the JIT cache (sm_90 cubins) of every config the GPU call compiles, for this
#                      build, the planted ones and .gpu/kt_main where present (a hit on the GPU
#                      where its NVRTC is the same; else they compile, slower).
# Run after `make`, from the repository root:  bash tests/gpu/mla_fuse_prep.sh
set -eu
cd "$(dirname "$0")/../.."
SRC=kernels/mla_decode.cu
rm -f bin/kt_plant_*
cp "$SRC" /tmp/mla_fuse_prep.cu
trap 'cp /tmp/mla_fuse_prep.cu "$SRC"; make -j2 bin/kt >/dev/null' EXIT
# plant NAME 'text as it is' 'text planted'
plant() {
    python3 - "$SRC" "$2" "$3" <<'EOF'
import sys
p, a, b = sys.argv[1:]
s = open(p).read()
assert s.count(a) == 1, "the text to plant is not in the source once: " + a
open(p, "w").write(s.replace(a, b))
EOF
    make -j2 bin/kt >/dev/null && cp bin/kt "bin/kt_plant_$1" && strip "bin/kt_plant_$1"
    cp /tmp/mla_fuse_prep.cu "$SRC"
    echo "planted $1"
}
plant stale "if (i != i0 || k0 != 0) b.load(" "if (k0 != 0) b.load("
plant norearm "if (threadIdx.x == 0) cnt[0] = 0;" "if (threadIdx.x == 0) (void)cnt[0];"
make -j2 bin/kt >/dev/null
# the cache: every --config of mla_fuse.sh with each binary that runs it
mkdir -p .gpu && rm -rf .gpu/cache && export KT_CACHE_DIR=$PWD/.gpu/cache
vars=$(grep -E '^[A-Z0-9_]+=HPC=' tests/gpu/mla_fuse.sh | sed 's/ *#.*//')
eval "$vars"
configs=$(grep -oE -- '(--config|cfg [a-z0-9_]+) [^ ]+' tests/gpu/mla_fuse.sh | awk '{print $NF}' | grep -v '^"' | sort -u)
for c in $configs; do
    c=$(eval echo "$c")
    ./bin/kt compile --family mla_decode --arch sm_90 --config "$c" | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
done
for b in bin/kt_plant_stale bin/kt_plant_norearm; do
    "$b" compile --family mla_decode --arch sm_90 --config "$B64_V4,FUSE=1" >/dev/null
done
[ -x .gpu/kt_main ] && .gpu/kt_main compile --family mla_decode --arch sm_90 --config "$B64_V4,FUSE=1" >/dev/null
echo "cache: $(find .gpu/cache -type f | wc -l) files"
tar -cJf .gpu/cache.tar.xz -C .gpu cache && rm -rf .gpu/cache
