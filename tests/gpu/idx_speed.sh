#!/usr/bin/env bash
# idx_speed.sh — the indexer's correctness, its B = 1 selection chain and its scan, on the H200
# in one bounded run (~90 s; every part under a timeout, later parts skipped past their start
# budget: < 100 s). The extra builds come from tests/gpu/idx_builds.sh (run before the call):
#  1. tests/gpu/indexer.sh on a fresh seed (ragged batches with L_b = TOPK and L_b = 1, CTX <
#     TOPK, all-equal and tied logits, odd top-k, clusters, random configs, HIST=1, CHAINS=2, NT
#     1 and 4): kt verify on fresh seeded inputs, outputs poisoned first, logits against float64,
#     index lists exact, the timing graph's runs checked too;
#  2. a planted bug in the scan's pair epilogue (bin/kt_planted2: tile j's scale for both tiles
#     of a pair) that verify must catch;
#  3. the selection's phases: bin/kt_trace (tests/gpu/idx_trace.patch) prints, each launch,
#     when the scan's last warp ends and when the selection's CTA 0 reaches each phase; the
#     medians per problem (ns from the scan's first CTA; clk: the CTA's cycles from its entry,
#     the figures to read inside the CTA: ptxas moves the globaltimer reads) are printed
#     (trace_*.txt); the verify times of a traced build are not timings (its printf costs
#     ~75 us a launch);
#  4. the A/B in one run: the pair's time by kt verify (HIST=0) at 8K x 64 and 32K x 64 for
#     this tree (bin/kt) and main (bin/kt_main);
#  5. `kt bench` of the issue's cases served by default_for (kt_scan_us / kt_select_us: the
#     default config's HIST=0 scan and one-CTA selection alone).
# Logs under $OUT/idx/; an ok/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx_speed.sh [KT binary]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOGS=${OUT:-/tmp}/idx LOG=${OUT:-/tmp}/idx
source tests/gpu/step.sh # step NAME CMD...
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
# later [ "$SECONDS" -lt S ] || skip NAME: a part starts only while S seconds are not yet used
skip() { echo "SKIP $1: ${SECONDS} s used"; }
E=DIST=equal,VALUES=grid
# NVRTC compiles of the variants the later parts (and indexer.sh) run, in the background on the
# host's cores (the JIT cache then serves them); ended with the script
warm() {
    local k=$1
    shift
    for c in "$@"; do timeout 60 "$k" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 & done
}
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
T1=HIST=1,SEL_THREADS=1024,SEL_CLUSTER=1 T0=HIST=0,SEL_THREADS=1024,SEL_CLUSTER=1 T5=HIST=1,SEL_THREADS=512,SEL_CLUSTER=1
T4=HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 T8=HIST=1,SEL_THREADS=512,SEL_CLUSTER=8
warm bin/kt_trace $T1 $T0 $T5 $T4 $T8
warm bin/kt_main HIST=0
warm bin/kt_planted2 HIST=0
warm "$KT" SEL_THREADS=512,SEL_CLUSTER=8 SEL_THREADS=512,SEL_CLUSTER=2 HIST=1 NT=1 NT=4,STAGES=2 CHAINS=2 \
    HIST=1,SEL_THREADS=512,SEL_CLUSTER=4,CHAINS=2,WARPS=8,CTAS_PER_SM=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8,MATH=0,CHAINS=2 \
    HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 HIST=0,SEL_THREADS=512,SEL_CLUSTER=2
step indexer_sh timeout 50 env KT_SEED="$SEED" bash tests/gpu/indexer.sh "$KT"
# 2. the planted pair epilogue: verify must fail (wrong logits for the second tile of a pair)
KP=bin/kt_planted2
if [ -x "$KP" ]; then
    timeout 8 "$KP" verify --family mla_indexer --seed "$SEED" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid \
        --m 3 --config HIST=0 >"$LOG/planted2_fails.log" 2>&1
    if grep -q "^FAIL" "$LOG/planted2_fails.log"; then
        passed=$((passed + 1))
        echo "PASS planted2_fails (the pair's scale from the wrong lane fails verify)"
    else
        failed=$((failed + 1))
        echo "FAIL planted2_fails: verify did not catch the planted pair epilogue ($LOG/planted2_fails.log)"
    fi
    grep -h "^FAIL\|^ok" "$LOG/planted2_fails.log" | cut -c1-240
else
    echo "SKIP planted2_fails: no $KP"
fi
source tests/gpu/idx_trace.sh # 3. the selection's phases: trace NAME CONFIG SHAPES...
# (the parts in order of what they answer first; each starts only within its budget)
S1=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=3000,DIST=equal,VALUES=equal --shape TOPK=2048,CTX=1000,$E)
[ -x bin/kt_trace ] && [ "$SECONDS" -lt 60 ] && trace trace_hist1 $T1 "${S1[@]}" --m 1,16 || skip trace_hist1
# the served 32K x 1 (a cluster of 4) and 128K x 1 (of 8): their selections cost 16 and 40 us
[ -x bin/kt_trace ] && [ "$SECONDS" -lt 64 ] && TT=10 trace trace_hist1_c4 $T4 --shape TOPK=2048,CTX=32768,$E --m 1 ||
    skip trace_hist1_c4
[ -x bin/kt_trace ] && [ "$SECONDS" -lt 66 ] && TT=10 trace trace_hist1_c8 $T8 --shape TOPK=2048,CTX=131072,$E --m 1 ||
    skip trace_hist1_c8
# 4. the scan: this tree against main in the same run (the pair's time, HIST=0: the selection's
# code is the same in both; since 047995d it is not: the selection's changes are in that A/B)
for k in kt kt_main; do
    if [ -x "bin/$k" ] && [ "$SECONDS" -lt 80 ]; then
        step "scan_$k" timeout 12 "bin/$k" verify --family mla_indexer --seed "$SEED" --shape TOPK=2048,CTX=8192,$E \
            --shape TOPK=2048,CTX=32768,$E --m 64 --config HIST=0
        grep -h "^ok\|^FAIL" "$LOG/scan_$k.log" | cut -c1-200
    else skip "scan_$k"; fi
done
# 5. served (a copy of a DB without mla_indexer rows, so default_for serves)
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
if [ "$SECONDS" -lt 82 ]; then
    step bench_served timeout 13 $KT bench --family mla_indexer --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E \
        --m 1,16,64 --db "$DB" --json "$LOG/bench_served.json"
    grep -v "^kt:" "$LOG/bench_served.log" | grep "^TOPK\|^shape"
else skip bench_served; fi
# 3c. more traces: HIST=0, HIST=1 at 512 threads
[ -x bin/kt_trace ] && [ "$SECONDS" -lt 86 ] && TT=10 trace trace_hist0 $T0 --shape TOPK=2048,CTX=8192,$E --m 1,16 ||
    skip trace_hist0
[ -x bin/kt_trace ] && [ "$SECONDS" -lt 88 ] && TT=10 trace trace_hist1_512 $T5 --shape TOPK=2048,CTX=8192,$E --m 1 ||
    skip trace_hist1_512
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
