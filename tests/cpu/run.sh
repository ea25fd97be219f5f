#!/usr/bin/env bash
# run.sh — the CPU suite (what CI runs): the C unit tests, the CLI's bad-input tests, and
# whole sweeps through the CLI on the fake GPU, with one combined "N passed, N failed"
# line at the end.
set -u
cd "$(dirname "$0")/../.."
total_passed=0 total_failed=0
run() {
    local log
    log=$("$@" 2>&1)
    local rc=$?
    echo "$log"
    local line
    line=$(echo "$log" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite '$*' crashed or printed no summary (exit $rc)"
        total_failed=$((total_failed + 1))
        return
    fi
    total_passed=$((total_passed + $(echo "$line" | cut -d' ' -f1)))
    total_failed=$((total_failed + $(echo "$line" | cut -d' ' -f3)))
}
run ./build/test_cpu
run bash tests/cpu/cli.sh ./bin/kt
run bash tests/cpu/sweep.sh ./bin/kt
run bash tests/cpu/moe_sass.sh ./bin/kt
echo "TOTAL: $total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
