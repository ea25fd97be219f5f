#!/usr/bin/env bash
# idx_speed.sh — the indexer scan's math paths and its ring, and the selection at small B, on
# the H200 in one bounded run (~80 s; every part under a timeout: at most 110 s).
#  1. tests/gpu/indexer.sh on a fresh seed (the default config: f16 mma, NT=2, 2 CTAs, a ring
#     of 4; its cases: ragged batches with L_b = TOPK and L_b = 1, CTX < TOPK, all-equal and
#     tied logits, odd top-k, clusters of 2 and 8, random configs), then the same kinds of
#     cases with MATH=0 (e4m3) and random configs: kt verify on fresh seeded inputs, outputs
#     poisoned first, logits against float64, index lists exact;
#  2. speed: four scan configs at 128K x 16 and three selection configs at 8K and 32K x 1 and 16
#     (kt verify prints each one's time), then `kt bench` of the issue's cases served by
#     default_for (kt_scan_us: the default config's scan alone; kt_select_us: its one-CTA
#     selection alone), then, if time is left, kt profile --ncu of the served 32K x 64.
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
run indexer_sh 22 env KT_SEED="$SEED" bash tests/gpu/indexer.sh "$KT"
# the e4m3 path (the default config is f16): the same kinds of cases
run e4m3_cases 8 "${V[@]}" --shape TOPK=2048,CTX=8192,$G --shape TOPK=512,CTX=8192,DIST=equal,VALUES=grid \
    --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied \
    --m 1,3,64 --config MATH=0
run e4m3_equal_12warps 6 "${V[@]}" --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --shape \
    TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 8,64 --config MATH=0,NT=1,CTAS_PER_SM=3,STAGES=3
run random 8 "${V[@]}" --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --m 8,64 --sample 4
# the scan's candidates at 2M tokens, each timed by verify with the same one-CTA selection
for c in MATH=0 MATH=1 NT=4,STAGES=2 NT=1,CTAS_PER_SM=3,STAGES=3; do
    run "scan_${c//[=,]/_}" 7 "${V[@]}" --shape TOPK=2048,CTX=131072,DIST=equal,VALUES=grid --m 16 --config "$c"
done
grep -h "^ok" "$LOG"/scan_*.log
# the selection's candidates at small B (the scan the same): one CTA of 1024 or 512, clusters
for c in SEL_THREADS=1024,SEL_CLUSTER=1 SEL_THREADS=512,SEL_CLUSTER=1 SEL_THREADS=512,SEL_CLUSTER=4; do
    run "select_${c//[=,]/_}" 6 "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --shape \
        TOPK=2048,CTX=32768,DIST=equal,VALUES=grid --m 1,16 --config "$c"
done
grep -h "^ok" "$LOG"/select_*.log
SHAPES=(--shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --shape TOPK=2048,CTX=32768,DIST=equal,VALUES=grid
    --shape TOPK=2048,CTX=131072,DIST=equal,VALUES=grid --m 1,16,64)
# bench serves from a DB: a copy of one without mla_indexer rows, so default_for serves it
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
run bench_served 20 $KT bench --family mla_indexer "${SHAPES[@]}" --db "$DB" --json "$LOG/bench_served.json"
grep -v "^kt:" "$LOG/bench_served.log"
# ncu of the served scan and selection at 2M tokens, if the run is still short of 105 s
if [ "$SECONDS" -lt 85 ]; then
    run ncu_served_32k_64 20 $KT profile --ncu --iters 5 --family mla_indexer --db "$DB" --shape \
        TOPK=2048,CTX=32768,DIST=equal,VALUES=grid --m 64
    grep -A8 "^ncu: " "$LOG/ncu_served_32k_64.log"
else
    echo "ncu skipped: ${SECONDS} s used"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
