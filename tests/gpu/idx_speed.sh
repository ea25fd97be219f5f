#!/usr/bin/env bash
# idx_speed.sh — the indexer scan's math paths and its ring on the H200, in one bounded run
# (~110 s; every part under a timeout: at most 150 s): correctness first, then speed, the old
# path beside the new.
#  1. tests/gpu/indexer.sh (the family's GPU cases: the default config is MATH=0, e4m3, now
#     through the cp.async ring) on a fresh seed;
#  2. the same cases with MATH=1 (f16 mma, q held as f16): kt verify on fresh seeded inputs,
#     outputs poisoned first, logits against float64, index lists exact; ragged batches with
#     L_b = TOPK and L_b = 1, CTX < TOPK, all-equal and tied logits, odd top-k, clusters
#     of 8 and random ones, rings of 2, 3 and 4 slots and NT 1, 2, 4 (random MATH=1 configs);
#  3. speed: five scan configs at 128K x 16 and 8K x 16 (kt verify prints each one's time, the
#     selection the same one-CTA one in all), then `kt bench` of the issue's cases with the
#     served default (sm_90: MATH=1, NT=2, 2 CTAs, STAGES=4, the selection's cluster by B; its
#     kt_scan_us column is the default config's MATH=0 scan alone, kt_select_us the one-CTA
#     selection alone) and with --config of that f16 scan and the one-CTA selection, so that
#     its kt_us less kt_select_us is the f16 scan (old: bench/NOTES.md's 2026-12-01 table).
# Then, if time is left, kt profile --ncu of the served config at 32K x 64 and 8K x 1.
# Logs under $OUT/idx/; a PASS/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx_speed.sh [KT binary]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOG=${OUT:-/tmp}/idx
mkdir -p "$LOG"
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
passed=0 failed=0
# run NAME SECONDS COMMAND...: one check, its output in $LOG/NAME.log
run() {
    local name=$1 secs=$2
    shift 2
    timeout "$secs" "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "PASS $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name (rc $rc; $LOG/$name.log):"
        tail -5 "$LOG/$name.log"
    fi
}
V=($KT verify --family mla_indexer --seed "$SEED")
G=DIST=ragged,VALUES=grid
run indexer_sh 28 env KT_SEED="$SEED" bash tests/gpu/indexer.sh "$KT"
run f16_ragged 10 "${V[@]}" --shape TOPK=2048,CTX=8192,$G --shape TOPK=512,CTX=8192,DIST=equal,VALUES=grid \
    --m 1,3,8,64 --config MATH=1
run f16_short_equal_tied 10 "${V[@]}" --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid --shape \
    TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --shape \
    TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 3,8,64 --config MATH=1
run f16_served_cluster8 10 "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=tied --shape \
    TOPK=512,CTX=4096,DIST=ragged,VALUES=equal --m 1,3,16 \
    --config WARPS=4,NT=2,CTAS_PER_SM=2,MATH=1,STAGES=4,SEL_THREADS=512,SEL_CLUSTER=8
run f16_random 9 "${V[@]}" --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --m 8,64 --where MATH=1 --sample 4
# the scan's candidates, each timed by verify with the same (one-CTA) selection: the e4m3
# default, e4m3 with a ring of 2 (one group in flight, as the loads before the ring), f16 at
# 12 warps an SM, f16 served on sm_90, f16 with fewer tokens a group
for c in WARPS=4,NT=1,CTAS_PER_SM=3,MATH=0,STAGES=3 WARPS=4,NT=1,CTAS_PER_SM=3,MATH=0,STAGES=2 \
    WARPS=4,NT=1,CTAS_PER_SM=3,MATH=1,STAGES=3 WARPS=4,NT=2,CTAS_PER_SM=2,MATH=1,STAGES=4 \
    WARPS=4,NT=1,CTAS_PER_SM=2,MATH=1,STAGES=4; do
    run "scan_${c//[=,]/_}" 8 "${V[@]}" --shape TOPK=2048,CTX=131072,DIST=equal,VALUES=grid --shape \
        TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 16 --config "$c,SEL_THREADS=1024,SEL_CLUSTER=1"
done
SHAPES=(--shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --shape TOPK=2048,CTX=32768,DIST=equal,VALUES=grid
    --shape TOPK=2048,CTX=131072,DIST=equal,VALUES=grid --m 1,16,64)
# bench serves from a DB: a copy of one without mla_indexer rows, so default_for serves it
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
run bench_served 25 $KT bench --family mla_indexer "${SHAPES[@]}" --db "$DB" --json "$LOG/bench_served.json"
run bench_f16_one_cta_select 18 $KT bench --family mla_indexer "${SHAPES[@]}" \
    --config WARPS=4,NT=2,CTAS_PER_SM=2,MATH=1,STAGES=4 --json "$LOG/bench_f16.json"
grep -h "^ok" "$LOG"/scan_*.log
# ncu of the served f16 scan and the selection at 2M tokens, if the run is still short of 125 s
if [ "$SECONDS" -lt 100 ]; then
    run ncu_served_32k_64 25 $KT profile --ncu --iters 5 --family mla_indexer --db "$DB" --shape \
        TOPK=2048,CTX=32768,DIST=equal,VALUES=grid --m 64
    tail -n 30 "$LOG/ncu_served_32k_64.log"
else
    echo "ncu skipped: ${SECONDS} s used"
fi
# and of the selection's fixed cost (8K x 1, the served cluster of 8) if still short of 125 s
if [ "$SECONDS" -lt 100 ]; then
    run ncu_served_8k_1 25 $KT profile --ncu --iters 5 --family mla_indexer --db "$DB" --shape \
        TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 1
    tail -n 30 "$LOG/ncu_served_8k_1.log"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
