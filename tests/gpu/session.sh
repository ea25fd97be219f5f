#!/usr/bin/env bash
# session.sh — everything a short device session must run, in one call under a time budget:
# every family verified on fresh seeded inputs, with the embedding test beside them (in
# parallel: correctness, not timing); then one at a time the runtime against transformers and
# its TPOT, kt profile --ncu on one variant of each new kernel family, moe_gemm's bench beside
# its cuBLAS grouped baseline, and the GEMM A/B of an older build (KT_OLD) on the report
# fixture's winners, and the all-reduce settings' round trip. Each part has its own timeout and is skipped when the budget left cannot
# hold it; logs under $OUT/session (or /tmp/session), packed as $OUT/session_logs.tar.gz. Ends with "N passed, N failed, N skipped".
#   usage: tests/gpu/session.sh [BUDGET_S]       (default 300; KT_OLD: an older kt for the A/B)
set -u
cd "$(dirname "$0")/../.."
BUDGET=${1:-300}
LOGS=${OUT:-/tmp}/session
rm -rf "$LOGS" && mkdir -p "$LOGS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-session-cache}
KT=./bin/kt
SEED=${KT_SEED:-$RANDOM}
passed=0 failed=0 skipped=0
echo "session.sh: seed $SEED, budget ${BUDGET}s"

# part NAME LIMIT_S CMD...: CMD under timeout LIMIT_S, output in $LOGS/NAME.log; skipped when
# less than LIMIT_S of the budget is left.
part() {
    local name=$1 limit=$2; shift 2
    if [ $((SECONDS + limit)) -gt "$BUDGET" ]; then
        skipped=$((skipped + 1)); echo "skip $name (needs ${limit}s, $((BUDGET - SECONDS))s left)"; return
    fi
    local t0=$SECONDS rc
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then passed=$((passed + 1)); echo "ok   $name ($((SECONDS - t0))s)"
    else
        failed=$((failed + 1)); echo "FAIL $name (rc $rc, $((SECONDS - t0))s)"; tail -n 12 "$LOGS/$name.log"
    fi
}

part devices 20 $KT devices
cat "$LOGS/devices.log"

# ---- correctness, in parallel (each verify prints its own "N verified, N failed")
# (mla_decode's two: verify_mla_v4 took ~80 s alone on a cold JIT cache, 2026-12-04: it completes; 60 s killed it)
v() { local name=$1 limit=60; shift; case $name in mla_*) limit=120 ;; esac
    part "verify_$name" $limit $KT verify --seed "$SEED" "$@"; }
M4="ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4"
{
    v fp8_gemm --family fp8_gemm --shape targets --shape N=128,K=128 --m 1,16,64,256 --sample 2 &
    v act_quant --family act_quant --shape targets --m 1,64,4096 --sample 2 &
    v quant_fp8_gemm --family quant_fp8_gemm --shape targets --m 1,64 --sample 2 &
    v act_quant_fp8_gemm --family act_quant_fp8_gemm --shape targets --m 1,64 &
    v probe --family probe --shape targets --shape LAYOUT=V4,N=1 --m 1,10,4096 --sample 4 &
    v mla_v4 --family mla_decode --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=1 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 \
        --m 1,3,64,128 --sample 1 &
    v mla_v32 --family mla_decode --shape LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 \
        --m 1,8,64 --sample 1 &
    v indexer --family mla_indexer --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid \
        --shape TOPK=512,CTX=8192,DIST=equal,VALUES=tied --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 1,8,64 &
    v moe_route --family moe_route --shape "$M4,DIST=uniform" --shape "$M4,DIST=hot" \
        --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=zipf --m 1,16,256 --sample 1 &
    v moe_gemm_fp8 --family moe_gemm --shape FORMAT=fp8,STAGE=gateup,E=32,N=512,K=2048,TOPK=6,DIST=hot \
        --shape FORMAT=fp8,STAGE=down,E=32,N=1024,K=512,TOPK=6,DIST=zipf --m 1,16,64,256 &
    v moe_gemm_mxfp4 --family moe_gemm --shape FORMAT=mxfp4,STAGE=gateup,E=32,N=512,K=2048,TOPK=6,DIST=uniform \
        --shape FORMAT=mxfp4,STAGE=down,E=32,N=1024,K=512,TOPK=6,DIST=hot --m 1,16,64 &
    v moe_step --family moe_step --shape ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=uniform --m 1,16 &
    part embed 60 python3 tests/gpu/embed_test.py &
    wait
} | tee "$LOGS/verify.txt"
passed=$((passed + $(grep -c '^ok ' "$LOGS/verify.txt"))) failed=$((failed + $(grep -c '^FAIL ' "$LOGS/verify.txt")))
grep -h -E '^[0-9]+ verified, [0-9]+ failed' "$LOGS"/verify_*.log | awk '{v += $1; f += $3} END {print v " verified, " f " failed (all verifies)"}'

# ---- the runtime: both paths against transformers, then TPOT (its own checks and logs)
part runtime 150 env LOGS="$LOGS/runtime" KT_RT_BUDGET=140 KT_RT_CONFIGS=routed bash tests/gpu/runtime.sh
grep -E '^(ok|FAIL)|TPOT|passed' "$LOGS/runtime.log" | tail -n 30

# ---- Nsight Compute on one variant of each kernel family (the default, as dispatch serves it;
# the pipelines moe_step and act_quant_fp8_gemm are their stages' kernels)
p() { local name=$1; shift; part "ncu_$name" 30 $KT profile --ncu --iters 5 "$@"; tail -n 14 "$LOGS/ncu_$name.log"; }
p mla_decode --family mla_decode --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=1 --m 64
p mla_indexer --family mla_indexer --shape TOPK=512,CTX=8192,DIST=equal,VALUES=grid --m 8
p moe_gemm --family moe_gemm --shape FORMAT=fp8,STAGE=gateup,E=256,N=1024,K=4096,TOPK=6,DIST=uniform --m 16
p moe_route --family moe_route --shape "$M4,DIST=uniform" --m 64

# ---- the GEMM A/B (an older build on the report fixture's winners), the embedding test's log
if [ -x "${KT_OLD:-}" ]; then # the fixture is schema 2: a migrated copy
    cp tests/fixtures/h200_small.db "$LOGS/ab.db" && $KT db migrate --db "$LOGS/ab.db" >/dev/null &&
        part ab_fp8_gemm 75 env FAMILY=fp8_gemm tools/ab.sh "$KT_OLD" "$KT" "$LOGS/ab.db" 1
    cat "$LOGS/ab_fp8_gemm.log" 2>/dev/null
fi
tail -n 5 "$LOGS/embed.log"

# ---- the bench of moe_gemm's default at the V4-Flash TP4 gate+up (its cuBLAS grouped baseline in the run)
b() { local name=$1; shift; part "bench_$name" 40 $KT bench --json "$LOGS/bench_$name.json" "$@"; grep -E '^[A-Z]|shape' "$LOGS/bench_$name.log" | head -n 20; }
b moe_gemm --family moe_gemm --shape FORMAT=fp8,STAGE=gateup,E=256,N=1024,K=4096,TOPK=6,DIST=uniform \
    --shape FORMAT=mxfp4,STAGE=gateup,E=256,N=1024,K=4096,TOPK=6,DIST=uniform --m 1,16,64 \
    --config TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,NATIVE=0

# ---- the all-reduce settings in the DB on one GPU (NCCL's protocols timed, stored, read by kt run --tp 1)
part allreduce_db 120 env OUT="$LOGS" bash tests/gpu/relb.sh
grep -E '^(PASS|FAIL)|passed' "$LOGS/allreduce_db.log" | tail -n 8

echo "$passed passed, $failed failed, $skipped skipped (${SECONDS}s)"
# the device tool brings back a limited number of files: one archive of the logs
if [ -n "${OUT:-}" ]; then tar czf "$OUT/session_logs.tar.gz" -C "$LOGS" --exclude='*.safetensors' --exclude='*.bin' . && rm -rf "$LOGS"; fi
[ "$failed" = 0 ]
