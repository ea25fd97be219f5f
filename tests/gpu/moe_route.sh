#!/usr/bin/env bash
# moe_route.sh — the moe_route family on the GPU: kt verify of the default config and 2 seeded
# random ones on fresh inputs (a new seed each run) at M = 1, 4, 16, 64, 256, the three routers
# (V4 top-6, V3 top-8 of 256, V4's hash router top-6), every routing distribution, the records
# for moe_gemm's tiles (TM = 8, NTM = 4: tiles 8, 16, 32, 64) and one record for TM = 16; then the
# route + align time per M of both paths (kt bench, one fused block / two kernels). Logs in
# $LOGS (default /tmp/kt-moe-route). Ends with "N passed, N failed".
#   usage: tests/gpu/moe_route.sh            (KT: the kt binary, default ./bin/kt)
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${LOGS:-/tmp/kt-moe-route}

source tests/gpu/step.sh # step NAME CMD...

# shapes ROUTER TOPK: the --shape options of every distribution and tile for that router.
shapes() {
    local d tm
    for d in uniform zipf hot; do for tm in TM=8,NTM=4 TM=16,NTM=1; do
        printf -- '--shape ROUTER=%s,E=256,TOPK=%s,%s,DIST=%s ' "$1" "$2" $tm $d
    done; done
}
MS=1,4,16,64,256
# shellcheck disable=SC2046
step verify_v4 $KT verify --family moe_route $(shapes V4 6) --m $MS --sample 2 --seed $RANDOM
# shellcheck disable=SC2046
step verify_v3 $KT verify --family moe_route $(shapes V3 8) --m $MS --sample 2 --seed $RANDOM
# shellcheck disable=SC2046
step verify_hash $KT verify --family moe_route $(shapes HASH 6) --m $MS --sample 2 --seed $RANDOM
TARGETS="--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf
    --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=zipf"
# shellcheck disable=SC2086
step bench_fused $KT bench --family moe_route $TARGETS --m 1,4,8 --config WARPS=8,FUSED=1,BLOCKS=16 \
    --json "$LOGS/bench_fused.json"
# shellcheck disable=SC2086
step bench_split $KT bench --family moe_route $TARGETS --m 1,16,64,256,1024 --config WARPS=8,FUSED=0,BLOCKS=16 \
    --json "$LOGS/bench_split.json"
cat "$LOGS/bench_fused.log" "$LOGS/bench_split.log" | grep -E '^ROUTER|shape'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
