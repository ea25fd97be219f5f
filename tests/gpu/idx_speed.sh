#!/usr/bin/env bash
# idx_speed.sh — the indexer served, its B = 1 latency chain, on the H200 in one bounded
# run (~75 s; every part under a timeout, later parts skipped past their start budget: < 100 s).
#  1. tests/gpu/indexer.sh on a fresh seed (the default config, HIST=0: ragged batches with
#     L_b = TOPK and L_b = 1, CTX < TOPK, all-equal and tied logits, odd top-k, clusters of 2
#     and 8, random configs; HIST=1 on the same kinds of cases; CHAINS=2): kt verify on fresh seeded inputs,
#     outputs poisoned first, logits against float64, index lists exact, the timing graph's runs
#     checked too;
#  2. the B = 1 chain: `kt bench` at CTX=64 (one group: the scan's launch and dependent round
#     trips with no bandwidth in it) and CTX=4096, and `kt bench launch` (a graph launch's floor);
#  3. `kt bench` of the issue's cases served by default_for (kt_scan_us / kt_select_us: the
#     default config's HIST=0 scan and one-CTA selection alone);
#  4. a planted bug (the histogram not zeroed again; bin/kt_planted) that verify must catch.
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
# later [ "$SECONDS" -lt S ] || skip NAME: a part starts only while S seconds are not yet used
skip() { echo "SKIP $1: ${SECONDS} s used"; }
run indexer_sh 46 env KT_SEED="$SEED" bash tests/gpu/indexer.sh "$KT"
E=DIST=equal,VALUES=grid
# bench serves from a DB: a copy of one without mla_indexer rows, so default_for serves it
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
# the B = 1 chain: one group of 16 tokens (CTX=64) and CTX=4096 (the selection just past TOPK),
# then a graph launch's cost alone
run bench_chain 8 $KT bench --family mla_indexer --shape TOPK=2048,CTX=64,$E --shape TOPK=2048,CTX=4096,$E \
    --m 1 --db "$DB" --json "$LOG/bench_chain.json"
grep -v "^kt:" "$LOG/bench_chain.log" | tail -3
run bench_launch 5 $KT bench launch --kernels 256 --json "$LOG/bench_launch.json"
tail -6 "$LOG/bench_launch.log"
SHAPES=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E --m 1,16,64)
if [ "$SECONDS" -lt 72 ]; then
    run bench_served 22 $KT bench --family mla_indexer "${SHAPES[@]}" --db "$DB" --json "$LOG/bench_served.json"
    grep -v "^kt:" "$LOG/bench_served.log"
else skip bench_served; fi
# a planted bug: the selection leaves the scan's counts in the histogram (zero_histogram not
# called); verify must fail on it (its timing graph's runs are checked, and stale counts choose
# a wrong bin). The planted kt: $KT_PLANTED or bin/kt_planted (built from this tree with the one
# line changed; its rpath is $ORIGIN/../lib, so it sits in bin/).
KP=${KT_PLANTED:-bin/kt_planted}
if [ -x "$KP" ] && [ "$SECONDS" -lt 90 ]; then
    timeout 8 "$KP" verify --family mla_indexer --seed "$SEED" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid \
        --m 3 --config HIST=1 >"$LOG/planted_fails.log" 2>&1
    if grep -q "^FAIL.*HIST=1" "$LOG/planted_fails.log"; then
        passed=$((passed + 1))
        echo "PASS planted_fails (the histogram left unzeroed fails verify)"
    else
        failed=$((failed + 1))
        echo "FAIL planted_fails: verify did not catch the unzeroed histogram ($LOG/planted_fails.log)"
    fi
    grep -h "^FAIL\|^ok" "$LOG/planted_fails.log"
else
    echo "SKIP planted_fails: no planted kt at $KP or ${SECONDS} s used"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
