#!/usr/bin/env bash
# mla19_prep.sh — builds, on the build machine (no GPU), what tests/gpu/mla19.sh takes:
#   bin/kt_plant_skip        bin/kt with the cluster merge skipping peer 0 (kernels/mla_decode.cu's
#                            cluster_merge, one line changed; the tree's file is restored after);
#   .gpu/mla19_cache.tar.xz  the JIT cache (sm_90 cubins) of every config mla19.sh compiles, this
#                            build's and the planted one's (a hit on the GPU where its NVRTC is the same).
# Run after `make`, from the repository root:  bash tests/gpu/mla19_prep.sh
set -eu
cd "$(dirname "$0")/../.."
SRC=kernels/mla_decode.cu SRC_COPY=/tmp/mla19_prep.cu
source tests/gpu/mla_prep_lib.sh # plant, cache_configs
rm -f bin/kt_plant_skip
cp "$SRC" "$SRC_COPY"
trap 'cp "$SRC_COPY" "$SRC"; make -j2 bin/kt >/dev/null' EXIT
plant skip "const float w = ml[r][k].y > 0.f ?" "const float w = k == 0 ? 0.f : ml[r][k].y > 0.f ?"
make -j2 bin/kt >/dev/null
mkdir -p .gpu && rm -rf .gpu/mla19_cache && export KT_CACHE_DIR=$PWD/.gpu/mla19_cache
cache_configs tests/gpu/mla19.sh
bin/kt_plant_skip compile --family mla_decode --arch sm_90 --config "$S96,CLUSTER=8" >/dev/null
echo "cache: $(find .gpu/mla19_cache -type f | wc -l) files"
tar -cJf .gpu/mla19_cache.tar.xz -C .gpu mla19_cache && rm -rf .gpu/mla19_cache
