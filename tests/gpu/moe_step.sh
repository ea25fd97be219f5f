#!/usr/bin/env bash
# moe_step.sh — the MoE step pipeline on the GPU (moe_route -> moe_gemm gate+up -> moe_gemm
# down + shared, each stage its dispatched winner or default, in one CUDA graph): kt verify on
# fresh seeded inputs against the float64 model of the same quantised pipeline, FP8 and MXFP4
# experts, uniform and Zipf routing, at V4-Flash's per-rank shapes (E 256, top-6, hidden 4096,
# intermediate 512); then kt bench of the whole step against its floor (the touched experts'
# bytes + activations). The reference runs on the CPU (seconds at M = 64), hence the few M.
# Logs in $LOGS (default /tmp/kt-moe-step). Ends with "N passed, N failed".
#   usage: tests/gpu/moe_step.sh            (KT: the kt binary, default ./bin/kt)
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${LOGS:-/tmp/kt-moe-step}

source tests/gpu/step.sh # step NAME CMD...

V4="E=256,HIDDEN=4096,INTER=512"
step verify_fp8 $KT verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4,DIST=uniform" --m 1,16,64 --seed $RANDOM
step verify_fp8_zipf $KT verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4,DIST=zipf" --m 16 --seed $RANDOM
step verify_mxfp4 $KT verify --family moe_step --shape "ROUTER=V4,FORMAT=mxfp4,$V4,DIST=uniform" --m 1,16 --seed $RANDOM
# bench reads a DB: one with a single moe_route row, so every stage runs its untuned default
rm -f "$LOGS/step.db"*
step db $KT tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 --budget 1 \
    --db "$LOGS/step.db"
step bench_fp8 $KT bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4,DIST=uniform" --m 1,16,64 \
    --db "$LOGS/step.db" --json "$LOGS/bench_step_fp8.json"
step bench_zipf $KT bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4,DIST=zipf" \
    --shape "ROUTER=V4,FORMAT=mxfp4,$V4,DIST=uniform" --m 16,64 --db "$LOGS/step.db" --json "$LOGS/bench_step_zipf.json"
grep -h -E '^ROUTER|shape' "$LOGS/bench_fp8.log" "$LOGS/bench_zipf.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
