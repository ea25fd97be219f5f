#!/usr/bin/env bash
# run.sh — runs each libFuzzer target of tests/fuzz/targets.c (built by `make fuzz-targets`)
# for KT_FUZZ_S seconds (default 20; five targets) from its corpus in tests/fuzz/corpus/NAME
# (read only: new inputs go to a scratch folder). A crash, leak or failed property fails the
# target, its input saved under build/fuzz/crashes/. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
seconds=${KT_FUZZ_S:-20}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p build/fuzz/crashes
passed=0 failed=0
for name in shape config where int_list db_header; do
    mkdir -p "$scratch/$name"
    build/fuzz/fuzz_$name "$scratch/$name" "tests/fuzz/corpus/$name" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix=build/fuzz/crashes/$name- >"$scratch/$name.log" 2>&1
    rc=$?
    runs=$(grep -Eo '^Done [0-9]+ runs' "$scratch/$name.log" | grep -Eo '[0-9]+')
    if [ $rc -eq 0 ] && [ -n "$runs" ]; then
        passed=$((passed + 1))
        echo "fuzz $name: $runs runs in ${seconds}s, no failure"
    else
        failed=$((failed + 1))
        echo "FAIL fuzz $name (exit $rc):"
        grep -E 'ERROR|SUMMARY|Test unit written|abort' "$scratch/$name.log" | head -n 8
    fi
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
