#!/usr/bin/env bash
# route64.sh — moe_route at the step's batch sizes (bench/NOTES.md, twenty-eighth session): the B = 64 step's ncu shows
# moe_align 12-14 us a call beside moe_route_tokens 4-7 (FUSED=0, 16 aligning blocks: the default above M = 8). Sweeps
# every config (kt tune --strategy exhaustive: each verified against the CPU reference before it is timed) at M 16 and
# 64 for V4's router and the hash-routed layers, into $LOGS/route.db, then kt bench's default against the winners.
# One H200, <= 100 s; from the tree's root with bin/kt built. Logs under $OUT/route64. Ends "N passed, N failed".
#   usage: OUT=dir bash tests/gpu/route64.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache}
LOGS=${LOGS:-${OUT:-/tmp}/route64}
END=${KT_ROUTE64_END_S:-100}
source tests/gpu/step.sh # step, within
SHAPES=(--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform)
rm -f "$LOGS/route.db"*
step tune within 70 "$KT" tune --family moe_route "${SHAPES[@]}" --m 16,64 --strategy exhaustive --db "$LOGS/route.db" \
    --seed $RANDOM --quiet
step bench_default within 15 "$KT" bench --family moe_route "${SHAPES[@]}" --m 1,16,64 --json "$LOGS/default.json"
step bench_tuned within 15 "$KT" bench --family moe_route "${SHAPES[@]}" --m 16,64 --db "$LOGS/route.db" \
    --json "$LOGS/tuned.json"
grep -hE '^(ROUTER)=' "$LOGS"/bench_*.log 2>/dev/null | cut -c1-220
"$KT" db show --db "$LOGS/route.db" 2>/dev/null | head -n 20
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
