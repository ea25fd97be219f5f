#!/usr/bin/env bash
# moe.sh — GPU tests of moe_gemm (kt verify: fresh seeded inputs, outputs poisoned, the float64
# model of the same quantised pipeline, rel err < 1e-2, every output written):
#   1. the default config at M in {1, 4, 16, 64, 256}, both weight formats, both stages, all
#      three routing distributions (E 32, top-6: gate+up N 512 K 2048, down N 1024 K 512);
#   2. configs that cover every path (split-K 2-8, gate+up tiles under 128 columns and the
#      one-CTA gate+up epilogue, token tiles 8-64, warp groups along K, rings of 1, 2 and 4) at M 1 and
#      64 (uniform) and 256 (hot expert);
#   3. the V4-Flash TP4 shapes (E 256) at M 1 and 256.
# Logs in $LOGS (default /tmp/kt-moe); ends with "N passed, N failed".
#   usage: tests/gpu/moe.sh [path/to/kt]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOGS=${LOGS:-/tmp/kt-moe}
mkdir -p "$LOGS"
passed=0 failed=0

# verify NAME ARGS...: one kt verify run; counts its verified/failed lines.
verify() {
    local name=$1; shift
    local t0=$SECONDS
    "$KT" verify --family moe_gemm "$@" >"$LOGS/$name.log" 2>&1
    local line ok bad
    line=$(grep -E '^[0-9]+ verified, [0-9]+ failed$' "$LOGS/$name.log" | tail -n 1)
    if [ -z "$line" ]; then
        failed=$((failed + 1)); echo "FAIL $name: no summary"; tail -n 5 "$LOGS/$name.log"; return
    fi
    ok=$(echo "$line" | cut -d' ' -f1); bad=$(echo "$line" | cut -d' ' -f3)
    passed=$((passed + ok)); failed=$((failed + bad))
    echo "$name: $line ($((SECONDS - t0))s)"
    grep '^FAIL' "$LOGS/$name.log" | head -n 5
}

GU="E=32,N=512,K=2048,TOPK=6"
DN="E=32,N=1024,K=512,TOPK=6"
for fmt in fp8 mxfp4; do
    for dist in uniform zipf hot; do
        verify "default_f${fmt}_d${dist}" --m 1,4,16,64,256 \
            --shape "FORMAT=$fmt,STAGE=gateup,$GU,DIST=$dist" --shape "FORMAT=$fmt,STAGE=down,$DN,DIST=$dist"
    done
done

GU_CONFIGS="TM=16,TN=32,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=2
TM=32,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1
TM=16,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=1
TM=8,TN=256,WARPS_N=8,WARPS_K=2,STAGES=1,SPLIT=4
TM=64,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=8"
DN_CONFIGS="TM=16,TN=32,WARPS_N=1,WARPS_K=2,STAGES=1,SPLIT=2
TM=32,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1
TM=64,TN=16,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=1
TM=8,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=4"
i=0
for fmt in fp8 mxfp4; do
    while read -r c; do
        i=$((i + 1))
        verify "gu_c${i}_f${fmt}" --config "$c" --m 1,64 --shape "FORMAT=$fmt,STAGE=gateup,$GU,DIST=uniform"
        verify "gu_c${i}_f${fmt}_hot" --config "$c" --m 256 --shape "FORMAT=$fmt,STAGE=gateup,$GU,DIST=hot"
    done <<<"$GU_CONFIGS"
    while read -r c; do
        i=$((i + 1))
        verify "dn_c${i}_f${fmt}" --config "$c" --m 1,64 --shape "FORMAT=$fmt,STAGE=down,$DN,DIST=uniform"
        verify "dn_c${i}_f${fmt}_hot" --config "$c" --m 256 --shape "FORMAT=$fmt,STAGE=down,$DN,DIST=hot"
    done <<<"$DN_CONFIGS"
done

for fmt in fp8 mxfp4; do
    verify "v4_f${fmt}" --m 1,256 --shape "FORMAT=$fmt,STAGE=gateup,E=256,N=1024,K=4096,TOPK=6,DIST=uniform" \
        --shape "FORMAT=$fmt,STAGE=down,E=256,N=4096,K=512,TOPK=6,DIST=uniform"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
