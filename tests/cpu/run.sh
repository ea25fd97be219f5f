#!/usr/bin/env bash
# run.sh — the CPU suite (what CI runs): the C unit tests, the CLI's bad-input tests, whole
# sweeps through the CLI on the fake GPU, kt report rendered by headless Chromium, the
# profiling recipes with stand-ins, and the fuzz targets (when clang's libFuzzer is
# installed; .ci/run installs it). Each suite's result is printed as it finishes (its FAIL
# lines, then "suite NAME: N passed, N failed (S s)"), and the last line is the combined
# "N passed, N failed". The suites get a scratch JIT cache and a scratch HOME, never the
# user's ~/.cache/kt; that nothing was written under HOME is checked at the end.
# --fast (make test): the unit tests but the sweeps and the slow NVRTC builds (KT_TEST_SLOW),
# the CLI, the layout and format tests; without it (make test-all, CI) every suite.
# KT_SUITES="cli layout" runs only the suites it names. Without --fast the unit suite runs in the
# background beside the script suites and its line comes after theirs.
set -u
fast=0
[ "${1:-}" = --fast ] && fast=1
cd "$(dirname "$0")/../.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export KT_CACHE_DIR="$scratch/cache" HOME="$scratch/home"
mkdir -p "$HOME"
total_passed=0 total_failed=0
wanted() { case " ${KT_SUITES:-$1} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
run() {
    local name=$1 start=$SECONDS
    shift
    wanted "$name" || return 0
    "$@" >"$scratch/$name.log" 2>&1
    local rc=$?
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$scratch/$name.log" | tail -n 1)
    grep -E '^FAIL' "$scratch/$name.log"
    if [ -z "$line" ] || { [ $rc -ne 0 ] && [ "$(echo "$line" | cut -d' ' -f3)" -eq 0 ]; }; then
        tail -n 20 "$scratch/$name.log"
        echo "suite $name: crashed or printed no summary (exit $rc)"
        total_failed=$((total_failed + 1))
        return
    fi
    echo "suite $name: $line ($((SECONDS - start)) s)"
    total_passed=$((total_passed + $(echo "$line" | cut -d' ' -f1)))
    total_failed=$((total_failed + $(echo "$line" | cut -d' ' -f3)))
}
# run_bg NAME CMD...: run in the background (its own JIT cache: no suite sees another's
# entries), its lines and totals collected by `collect NAME` (on 2 cores the unit suite's NVRTC
# builds and the script suites overlap: CI's wall time is their larger part, not their sum)
run_bg() {
    local name=$1
    (
        export KT_CACHE_DIR="$scratch/cache-$name"
        total_passed=0 total_failed=0
        run "$@" >"$scratch/$name.out"
        echo "$total_passed $total_failed" >"$scratch/$name.totals"
    ) &
    eval "bg_$name=$!"
}
collect() {
    local name=$1 pid
    eval "pid=\${bg_$name:-}"
    [ -n "$pid" ] || return 0
    wait "$pid"
    cat "$scratch/$name.out"
    local p f
    read -r p f <"$scratch/$name.totals" || { p=0 f=1; echo "suite $name: no totals"; }
    total_passed=$((total_passed + p)) total_failed=$((total_failed + f))
}
if [ $fast -eq 1 ]; then
    run unit ./build/test_cpu --fast -sweep
else
    run_bg unit ./build/test_cpu
fi
run cli bash tests/cpu/cli.sh ./bin/kt
run layout bash tests/cpu/layout.sh
run format bash tests/cpu/format.sh
if [ $fast -eq 0 ]; then
    run sweep bash tests/cpu/sweep.sh ./bin/kt
    run report bash tests/cpu/report.sh ./bin/kt ./build/tools/png_ink
    run profiles bash tests/cpu/profiles.sh ./bin/kt
    run moe_sass bash tests/cpu/moe_sass.sh ./bin/kt
    run step_plan bash tests/cpu/step_plan.sh ./bin/kt
fi
collect unit
if [ $fast -eq 1 ]; then
    echo "suite sweep, report, profiles, moe_sass, step_plan, fuzz: skipped (make test-all runs them)"
elif ! wanted fuzz; then
    echo "suite fuzz: skipped (not in KT_SUITES)"
elif command -v clang >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    if make -s fuzz-targets >"$scratch/fuzz-build.log" 2>&1; then
        run fuzz bash tests/fuzz/run.sh
    else
        tail -n 20 "$scratch/fuzz-build.log"
        echo "suite fuzz: the targets did not build"
        total_failed=$((total_failed + 1))
    fi
else
    echo "suite fuzz: skipped (no clang with libFuzzer: apt-get install clang libclang-rt-dev)"
fi
# anything at all under the scratch HOME (not only ~/.cache/kt: ~/.config, dot files)
if [ -n "$(find "$HOME" -mindepth 1 -print -quit)" ]; then
    echo "FAIL: a suite wrote under HOME ($(find "$HOME" -mindepth 1 -maxdepth 3 | head -n 3 | tr '\n' ' ')) instead of KT_CACHE_DIR or its own folder"
    total_failed=$((total_failed + 1))
else
    total_passed=$((total_passed + 1))
fi
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
