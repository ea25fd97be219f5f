#!/usr/bin/env bash
# mla19b_prep.sh — builds, on the build machine (no GPU), what tests/gpu/mla19b.sh takes:
#   bin/kt_plant_ws          bin/kt with WS's softmax dropping one score column of each warp's 8
#                            tokens (column 7): the planted bug the GPU call's verify must fail on;
#   .gpu/mla19b_cache.tar.xz the JIT cache (sm_90 cubins) of every config mla19b.sh runs, for bin/kt
#                            and the planted build (a hit on the GPU where NVRTC is the same).
# Run after `make`, from the repository root:  bash tests/gpu/mla19b_prep.sh
set -eu
cd "$(dirname "$0")/../.."
SRC=kernels/mla_decode.cu
cp "$SRC" /tmp/mla19b_prep.cu
trap 'cp /tmp/mla19b_prep.cu "$SRC"; make -j2 bin/kt >/dev/null' EXIT
python3 - "$SRC" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
a = "u1 = ids[col + 1] >= 0;"
assert s.count(a) == 1, "the text to plant is not in the source once: " + a
open(p, "w").write(s.replace(a, "u1 = ids[col + 1] >= 0 && t != 3;"))
PY
make -j2 bin/kt >/dev/null && cp bin/kt bin/kt_plant_ws && strip bin/kt_plant_ws
cp /tmp/mla19b_prep.cu "$SRC"
make -j2 bin/kt >/dev/null
mkdir -p .gpu && rm -rf .gpu/mla19b_cache && export KT_CACHE_DIR=$PWD/.gpu/mla19b_cache
vars=$(grep -E '^[A-Z0-9_]+=' tests/gpu/mla19b.sh | grep -E 'HPC=|^P=|^M8=' | sed 's/ *#.*//')
eval "$vars"
configs=$(grep -oE -- '(--config|cfg [a-z0-9_]+) [^ ]+' tests/gpu/mla19b.sh | awk '{print $NF}' | grep -v '^"' | sort -u)
for c in $configs HPC=16; do
    c=$(eval echo "$c")
    ./bin/kt compile --family mla_decode --arch sm_90 --config "$c" | awk '$2 ~ /^[0-9]+$/ {print ($3 != 0 ? "SPILLS: " : "") $0}'
done
./bin/kt_plant_ws compile --family mla_decode --arch sm_90 --config "$WS_S128" >/dev/null
./bin/kt_plant_ws compile --family mla_decode --arch sm_90 --config HPC=16 >/dev/null
echo "cache: $(find .gpu/mla19b_cache -type f | wc -l) files"
tar -cJf .gpu/mla19b_cache.tar.xz -C .gpu mla19b_cache && rm -rf .gpu/mla19b_cache
