#!/usr/bin/env bash
# run.sh — the GPU suite, one call on a GPU machine: builds if needed, verifies every family
# on fresh random inputs, runs a sweep end to end into a fresh DB, checks dispatch serves its
# winners, and prints the bench table. Logs go to $OUT (default /tmp/kt-gpu). Ends with
# "N passed, N failed".
#   usage: tests/gpu/run.sh [quick]     (quick: fewer shapes and M values)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kt-gpu}
mkdir -p "$OUT"
export KT_CACHE_DIR=${KT_CACHE_DIR:-$OUT/cache-$$}
KT=./bin/kt
MODE=${1:-full}
passed=0 failed=0

[ -x "$KT" ] || make -j"$(nproc)" bin/kt >"$OUT/build.log" 2>&1 || { echo "build failed: see $OUT/build.log"; exit 1; }

# step NAME CMD...: runs CMD with its output in $OUT/NAME.log; counts it.
step() {
    local name=$1; shift
    local t0=$SECONDS
    if "$@" >"$OUT/$name.log" 2>&1; then
        passed=$((passed + 1)); echo "ok   $name ($((SECONDS - t0))s)"
    else
        failed=$((failed + 1)); echo "FAIL $name ($((SECONDS - t0))s): see $name.log"; tail -n 15 "$OUT/$name.log"
    fi
}

step devices $KT devices
cat "$OUT/devices.log"

if [ "$MODE" = quick ]; then MS=1,16,256; SAMPLE=2; else MS=1,2,16,64,256,4096; SAMPLE=4; fi
# The five target shapes plus DeepSeek-V3 shapes and an odd small one.
step verify_fp8_gemm $KT verify --family fp8_gemm --shape targets --shape N=7168,K=2048 --shape N=2304,K=7168 \
    --shape N=128,K=128 --m $MS --sample $SAMPLE --seed $RANDOM
step verify_act_quant $KT verify --family act_quant --shape targets --shape K=7168 --m $MS --sample $SAMPLE --seed $RANDOM

# A sweep end to end into a fresh DB; then every measured row must be ok (a wrong result is a bug).
rm -f "$OUT/sweep.db"*
step sweep $KT tune --family fp8_gemm --shape N=1024,K=4096 --shape N=4096,K=512 --m 1,16 \
    --strategy random --budget 24 --db "$OUT/sweep.db"
sweep_check() {
    $KT db export --format csv --db "$OUT/sweep.db" >"$OUT/sweep.csv" || return 1
    local rows bad
    rows=$(($(wc -l <"$OUT/sweep.csv") - 1))
    bad=$(grep -c -E ',(wrong-result|launch-error|compile-error),' "$OUT/sweep.csv")
    echo "$rows measurements, $bad not ok"
    [ "$rows" -ge 40 ] && [ "$bad" -eq 0 ]
}
step sweep_rows sweep_check
step sweep_show $KT db show --db "$OUT/sweep.db"

# Dispatch: exact hit, nearest M bucket, nearest shape, default, each logged.
dispatch_check() {
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 16 --db "$OUT/sweep.db" 2>&1 | tee "$OUT/d1" || return 1
    grep -q '(exact)' "$OUT/d1" || return 1
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 3 --db "$OUT/sweep.db" 2>&1 | tee "$OUT/d2" || return 1
    grep -q '(nearest-m)' "$OUT/d2" || return 1
    $KT bench --family fp8_gemm --shape N=2048,K=4096 --m 16 --db "$OUT/sweep.db" 2>&1 | tee "$OUT/d3" || return 1
    grep -q '(nearest-shape)' "$OUT/d3" || return 1
    $KT bench --family act_quant --shape K=4096 --m 16 --db "$OUT/sweep.db" 2>&1 | tee "$OUT/d4" || return 1
    grep -q '(default)' "$OUT/d4"
}
step dispatch dispatch_check

# The bench table at the five target shapes from a sweep of them.
rm -f "$OUT/targets.db"*
step tune_targets $KT tune --family fp8_gemm --shape targets --m 1,16,64,256 --strategy random --budget 48 \
    --db "$OUT/targets.db"
step bench $KT bench --family fp8_gemm --shape targets --m 1,16,64,256 --db "$OUT/targets.db" --json "$OUT/bench.json"
cat "$OUT/bench.log"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
