#!/usr/bin/env bash
# moe24.sh — the twenty-fourth session's moe_gemm defaults (from the fast search, kernels/moe_gemm.c's
# default_for) checked on the H200 (<= 175 s; the verifies ~90 s of it): kt verify of both formats' GEMMs at V4-Flash TP4
# (E 256, top-6) under all three distributions at M 1-256 and of moe_step at M 1, 16, 64; then kt
# bench of the defaults (GEMMs at M 1, 16, 64; moe_step at M 1, 16), both formats.
# Logs under $OUT/moe24; an ok/FAIL line a step; ends with "N passed, N failed".
#   usage: OUT=dir bash tests/gpu/moe24.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe24-cache}
LOGS=${LOGS:-${OUT:-/tmp}/moe24}
END=${KT_MOE24_END_S:-170}
source tests/gpu/step.sh # step, within
gemms() { # FORMAT [DISTS]: --shape args of both GEMMs
    local d
    for d in ${2:-uniform zipf hot}; do
        echo "--shape FORMAT=$1,STAGE=gateup,N=1024,K=4096,E=256,TOPK=6,DIST=$d"
        echo "--shape FORMAT=$1,STAGE=down,N=4096,K=512,E=256,TOPK=6,DIST=$d"
    done
}
S="E=256,HIDDEN=4096,INTER=512"
for f in mxfp4 fp8; do
    # shellcheck disable=SC2046
    step verify_$f within 40 "$KT" verify --family moe_gemm $(gemms $f) --m 1,16,64,256 --seed $RANDOM
    step verify_step_$f within 60 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=$f,$S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=$f,$S,DIST=zipf" --m 1,16,64 --seed $RANDOM
done
for f in mxfp4 fp8; do
    # shellcheck disable=SC2046
    step bench_$f within 15 "$KT" bench --family moe_gemm $(gemms $f uniform) --m 1,16,64 --json "$LOGS/bench_$f.json"
    step bench_step_$f within 10 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=$f,$S,DIST=uniform" --m 1,16 \
        --json "$LOGS/bench_step_$f.json"
done
grep -hE '^(FORMAT|ROUTER)=' "$LOGS"/bench_*.log | cut -c1-150
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
