#!/usr/bin/env bash
# tune24.sh — the tuner on issue 21's FP8 targets where the defaults miss most (V4-Flash TP4: E 256,
# top-6, uniform; gate+up N 1024 K 4096 at 1.20x its floor at M = 16, down N 4096 K 512 at 1.57x),
# and the indexer's scan lever at B = 8 measured a second time (<= 300 s on the H200; ~150 s measured):
#  0. kt verify of the family defaults of both GEMMs (M 1, 16, 64) and of moe_step (M 1, 16);
#  1. kt tune (fast search, --budget 16) of both FP8 GEMMs at M 1, 16, 64 into $LOGS/moe.db;
#  2. kt bench of both at M 1, 16, 64: the family defaults (no DB), then the DB's winners;
#  3. kt bench of moe_step (V4, FP8, uniform) at M 1, 16: defaults, then the DB's winners;
#  4. mla_indexer at B = 8, 32K and 128K: the served config against NT=4, STAGES=2 (twice each).
# TUNE24_FORMAT=mxfp4 runs 1-3 on the MXFP4 experts instead (and TUNE24_IDX=0 skips 4).
# Logs under $OUT/tune24; an ok/FAIL line a step; ends with "N passed, N failed".
#   usage: OUT=dir [TUNE24_FORMAT=fp8|mxfp4] [TUNE24_IDX=0|1] bash tests/gpu/tune24.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-tune24-cache}
LOGS=${LOGS:-${OUT:-/tmp}/tune24}
END=${KT_TUNE24_END_S:-290}
source tests/gpu/step.sh # step, within
V4="E=256,TOPK=6,DIST=uniform" F=${TUNE24_FORMAT:-fp8}
GEMMS=(--shape "FORMAT=$F,STAGE=gateup,N=1024,K=4096,$V4" --shape "FORMAT=$F,STAGE=down,N=4096,K=512,$V4")
STEP=(--shape "ROUTER=V4,FORMAT=$F,E=256,HIDDEN=4096,INTER=512,DIST=uniform")
rm -f "$LOGS/moe.db"*
step verify within 60 "$KT" verify --family moe_gemm "${GEMMS[@]}" --m 1,16,64 --seed $RANDOM
step verify_step within 40 "$KT" verify --family moe_step "${STEP[@]}" --m 1,16 --seed $RANDOM
step tune within 170 "$KT" tune --family moe_gemm "${GEMMS[@]}" --m 1,16,64 --budget 16 --db "$LOGS/moe.db" --quiet
step gemm_default within 20 "$KT" bench --family moe_gemm "${GEMMS[@]}" --m 1,16,64 --json "$LOGS/gemm_default.json"
step gemm_tuned within 20 "$KT" bench --family moe_gemm "${GEMMS[@]}" --m 1,16,64 --db "$LOGS/moe.db" \
    --json "$LOGS/gemm_tuned.json"
step step_default within 20 "$KT" bench --family moe_step "${STEP[@]}" --m 1,16 --json "$LOGS/step_default.json"
step step_tuned within 20 "$KT" bench --family moe_step "${STEP[@]}" --m 1,16 --db "$LOGS/moe.db" \
    --json "$LOGS/step_tuned.json"
CTXS=(32768 131072)
IDX="WARPS=4,CTAS_PER_SM=2,SEL_THREADS=512,MATH=1,HIST=1,CHAINS=1,SEL_FAST=2"
[ "${TUNE24_IDX:-1}" = 1 ] || CTXS=()
for ctx in "${CTXS[@]}"; do
    cl=4
    [ $ctx = 131072 ] && cl=8
    for r in 1 2; do
        step idx_served_${ctx}_$r within 10 "$KT" bench --family mla_indexer \
            --shape TOPK=2048,CTX=$ctx,DIST=equal,VALUES=grid --m 8
        step idx_nt4_${ctx}_$r within 10 "$KT" bench --family mla_indexer \
            --shape TOPK=2048,CTX=$ctx,DIST=equal,VALUES=grid --m 8 --config "$IDX,SEL_CLUSTER=$cl,NT=4,STAGES=2"
    done
done
grep -hE '^(FORMAT|ROUTER|TOPK)=' "$LOGS"/gemm_*.log "$LOGS"/step_*.log "$LOGS"/idx_*.log 2>/dev/null | cut -c1-200
grep -h "config\|winner" "$LOGS/tune.log" | tail -n 12
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
