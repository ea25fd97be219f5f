#!/usr/bin/env bash
# idx_speed.sh — the indexer's selection from the scan's histogram (HIST=1) and its scan, on the
# H200 in one bounded run (~90 s; every part under a timeout: at most 100 s).
#  1. tests/gpu/indexer.sh on a fresh seed (the default config, HIST=0: ragged batches with
#     L_b = TOPK and L_b = 1, CTX < TOPK, all-equal and tied logits, odd top-k, clusters of 2
#     and 8, random configs; then HIST=1 on the same kinds of cases, one CTA and clusters of 4
#     and 8, the e4m3 path in one; CHAINS=2): kt verify on fresh seeded inputs, outputs poisoned
#     first, logits against float64, index lists exact, the timing graph's runs checked too;
#     and (last, if time is left) a planted bug (the histogram not zeroed again) that verify must
#     catch;
#  2. speed: HIST=1's selection at B = 1 and 16, 8K / 32K / 128K, one CTA and a cluster of 8
#     (kt verify prints the pair's time; the scan is the same in all), then `kt bench` of the
#     issue's cases served by
#     default_for (HIST=1 up to B = 16; kt_scan_us / kt_select_us: the default config's HIST=0
#     scan and one-CTA selection alone), the scan with CHAINS=2 (two accumulators a head tile)
#     at 524K and 2M tokens, kt profile --ncu of the served 8K x 1, then the planted bug.
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
run indexer_sh 36 env KT_SEED="$SEED" bash tests/gpu/indexer.sh "$KT"
# the selection's candidates (the pair's time; the same f16 scan in all)
E=DIST=equal,VALUES=grid
sel() { # NAME SECONDS CONFIG SHAPES...
    local name=$1 secs=$2 config=$3
    shift 3
    run "sel_$name" "$secs" "${V[@]}" "$@" --m 1,16 --config "$config"
}
sel h1_c1 7 HIST=1,SEL_CLUSTER=1 --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E
sel h1_c8 6 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8 --shape TOPK=2048,CTX=131072,$E
grep -h "^ok" "$LOG"/sel_*.log
SHAPES=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E --m 1,16,64)
# bench serves from a DB: a copy of one without mla_indexer rows, so default_for serves it
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
run bench_served 22 $KT bench --family mla_indexer "${SHAPES[@]}" --db "$DB" --json "$LOG/bench_served.json"
grep -v "^kt:" "$LOG/bench_served.log"
# the scan's dependent mma chains halved (CHAINS=2) at 524K and 2M tokens (8K x 64, 32K x 64):
# the pair's time by verify, the same one-CTA HIST=0 selection in both
if [ "$SECONDS" -lt 80 ]; then
    for c in CHAINS=1 CHAINS=2; do
        run "chains_${c//=/_}" 7 "${V[@]}" --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --m 64 --config "$c"
    done
    grep -h "^ok" "$LOG"/chains_*.log
else
    echo "SKIP chains: ${SECONDS} s used"
fi
# ncu of the served 8K x 1 (HIST=1): the scan's and the selection's own durations
if [ "$SECONDS" -lt 84 ]; then
    run ncu_served_8k_1 12 $KT profile --ncu --iters 5 --family mla_indexer --db "$DB" --shape \
        TOPK=2048,CTX=8192,$E --m 1
    grep -A8 "^ncu: " "$LOG/ncu_served_8k_1.log"
else
    echo "ncu skipped: ${SECONDS} s used"
fi
# where the served 8K x 1 selection's warps stall, per SASS instruction (ncu's source page with
# its warp-state samples; the CSV is read offline)
if [ "$SECONDS" -lt 86 ]; then
    timeout 12 ${KT_NCU:-ncu} --clock-control none --section SourceCounters --page source --print-source sass --csv \
        -k regex:mla_indexer_select -c 1 $KT profile --family mla_indexer --db "$DB" --shape TOPK=2048,CTX=8192,$E \
        --m 1 --iters 1 >"$LOG/ncu_select_source.csv" 2>"$LOG/ncu_select_source.err"
    echo "ncu source page: rc $?, $(wc -l <"$LOG/ncu_select_source.csv") lines (not a check)"
else
    echo "ncu source page skipped: ${SECONDS} s used"
fi
# a planted bug: the selection leaves the scan's counts in the histogram (zero_histogram not
# called); verify must fail on it (its timing graph's runs are checked, and stale counts choose
# a wrong bin). The planted kt: $KT_PLANTED, bin/kt_planted, or built here from this tree.
KP=${KT_PLANTED:-bin/kt_planted}
if [ ! -x "$KP" ] && [ "$SECONDS" -lt 72 ]; then
    PD=$(mktemp -d)
    tar --exclude=./build --exclude=./bin --exclude=./lib --exclude=./.git -cf - . | tar -xf - -C "$PD" &&
        sed -i 's/if (d == 3) zero_histogram(hb, nonzero, chosen\[4\], rank);/if (d == 3) {}/' "$PD/kernels/mla_indexer.cu" &&
        grep -q 'if (d == 3) {}' "$PD/kernels/mla_indexer.cu" &&
        timeout 20 make -C "$PD" -j16 bin/kt >"$LOG/planted_build.log" 2>&1 && KP=$PD/bin/kt
fi
if [ -x "$KP" ] && [ "$SECONDS" -lt 88 ]; then
    timeout 10 "$KP" verify --family mla_indexer --seed "$SEED" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid \
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
    echo "SKIP planted_fails: no planted kt (${SECONDS} s used; $LOG/planted_build.log)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
