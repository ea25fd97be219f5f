#!/usr/bin/env bash
# run.sh — the GPU suite, one call on a GPU machine: builds if needed, verifies every family
# on fresh random inputs, runs a sweep end to end into a fresh DB, checks dispatch serves its
# winners, and prints the bench table. Logs go to $LOGS (default /tmp/kt-gpu) and, packed
# as logs.tar.gz with the bench JSON, to $OUT when set (the device tool's folder). Ends with
# "N passed, N failed".
#   usage: tests/gpu/run.sh [quick]     (quick: fewer shapes and M values)
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/kt-gpu}
rm -rf "$LOGS" && mkdir -p "$LOGS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-gpu-cache-$$}
KT=./bin/kt
MODE=${1:-full}
passed=0 failed=0

[ -x "$KT" ] || make -j"$(nproc)" bin/kt >"$LOGS/build.log" 2>&1 || { echo "build failed: see $LOGS/build.log"; exit 1; }

# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log; counts it.
step() {
    local name=$1; shift
    local t0=$SECONDS
    if "$@" >"$LOGS/$name.log" 2>&1; then
        passed=$((passed + 1)); echo "ok   $name ($((SECONDS - t0))s)"
    else
        failed=$((failed + 1)); echo "FAIL $name ($((SECONDS - t0))s): see $name.log"; tail -n 15 "$LOGS/$name.log"
    fi
}

step devices $KT devices
cat "$LOGS/devices.log"

if [ "$MODE" = quick ]; then MS=1,16,256; SAMPLE=2; else MS=1,2,16,64,256,4096; SAMPLE=4; fi
# The five target shapes plus DeepSeek-V3 shapes and an odd small one.
step verify_fp8_gemm $KT verify --family fp8_gemm --shape targets --shape N=7168,K=2048 --shape N=2304,K=7168 \
    --shape N=128,K=128 --m $MS --sample $SAMPLE --seed $RANDOM
step verify_act_quant $KT verify --family act_quant --shape targets --shape K=7168 --m $MS --sample $SAMPLE --seed $RANDOM

# A sweep end to end into a fresh DB; then every measured row must be ok (a wrong result is a bug).
rm -f "$LOGS/sweep.db"*
step sweep $KT tune --family fp8_gemm --shape N=1024,K=4096 --shape N=4096,K=512 --m 1,16 \
    --strategy random --budget 24 --db "$LOGS/sweep.db"
sweep_check() {
    $KT db export --format csv --db "$LOGS/sweep.db" >"$LOGS/sweep.csv" || return 1
    local rows bad
    rows=$(($(wc -l <"$LOGS/sweep.csv") - 1))
    bad=$(grep -c -E ',(wrong-result|launch-error|compile-error),' "$LOGS/sweep.csv")
    echo "$rows measurements, $bad not ok"
    [ "$rows" -ge 40 ] && [ "$bad" -eq 0 ]
}
step sweep_rows sweep_check
step sweep_show $KT db show --db "$LOGS/sweep.db"

# Dispatch: exact hit, nearest M bucket, nearest shape, default, each logged.
dispatch_check() {
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d1" || return 1
    grep -q '(exact)' "$LOGS/d1" || return 1
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 3 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d2" || return 1
    grep -q '(nearest-m)' "$LOGS/d2" || return 1
    $KT bench --family fp8_gemm --shape N=2048,K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d3" || return 1
    grep -q '(nearest-shape)' "$LOGS/d3" || return 1
    $KT bench --family act_quant --shape K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d4" || return 1
    grep -q '(default)' "$LOGS/d4"
}
step dispatch dispatch_check

# The bench table at the five target shapes from a sweep of them.
rm -f "$LOGS/targets.db"*
step tune_targets $KT tune --family fp8_gemm --shape targets --m 1,16,64,256 --strategy random --budget 48 \
    --db "$LOGS/targets.db"
step bench $KT bench --family fp8_gemm --shape targets --m 1,16,64,256 --db "$LOGS/targets.db" --json "$LOGS/bench.json"
cat "$LOGS/bench.log"

if [ -n "${OUT:-}" ]; then
    cp "$LOGS/bench.json" "$OUT/" 2>/dev/null
    tar -C "$LOGS" -czf "$OUT/logs.tar.gz" --exclude='*.db-*' .
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
