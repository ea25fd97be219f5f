#!/usr/bin/env bash
# cli.sh — the CLI's answers to bad input on a machine without a GPU: one clear line on
# stderr and a non-zero exit, never a crash. Ends with "N passed, N failed".
set -u
KT=${1:?usage: cli.sh path/to/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# expect_fail "what" "stderr pattern" kt-args...: exit status 1..125 (not a crash) and the pattern on stderr.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ge 1 ] && [ $rc -lt 126 ] && grep -q -- "$pattern" "$tmp/err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what (exit $rc): $(head -c 300 "$tmp/err")"
    fi
}

expect_ok() {
    local what=$1 pattern=$2; shift 2
    if "$KT" "$@" >"$tmp/out" 2>"$tmp/err" && grep -q -- "$pattern" "$tmp/out"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what: $(head -c 300 "$tmp/err")"
    fi
}

expect_fail "unknown command" "unknown command 'frobnicate'" frobnicate
expect_fail "unknown family" "unknown family 'nope'" compile --family nope --arch sm_120
expect_fail "unknown option" "unknown or incomplete option" compile --family fp8_gemm --bogus
expect_fail "unknown arch" "unknown --arch 'sm_42'" compile --family fp8_gemm --arch sm_42
expect_fail "malformed shape" "bad shape" bench --family fp8_gemm --shape N=12x --m 1 --config TILE_N=64
expect_fail "shape missing a dim" "K missing" tune --family fp8_gemm --shape N=1024 --m 1
expect_fail "shape not a multiple of 128" "multiples of 128" tune --family fp8_gemm --shape N=1000,K=4096 --m 1
expect_fail "bad M list" "bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,x
expect_fail "M out of range" "M=0\|bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 0
expect_fail "bad strategy" "--strategy must be" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --strategy magic
expect_fail "bad config name" "unknown name 'TILES'" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --config TILES=3
expect_fail "config rejected by constraints" "config rejected" compile --family fp8_gemm --arch sm_120 --config TILE_N=128,TILE_M=128,TILE_K=256,STAGES=6,WARPS=8
expect_fail "missing db" "cannot read database" db show --db "$tmp/none.db"
printf 'this is not a database, just text that is long enough to look like a header......' >"$tmp/junk.db"
expect_fail "corrupt db" "not a database\|not a kt database" db show --db "$tmp/junk.db"
expect_fail "export without format" "needs --format" db export --db "$tmp/junk.db"
expect_fail "bench needs a db or config" "cannot read database" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/none.db"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "tune without a GPU" "needs an NVIDIA GPU" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/x.db"
    expect_fail "devices without a GPU" "needs an NVIDIA GPU" devices
fi
# A random sweep measures --budget configs per (shape, M) after pruning (fake GPU: real
# compiles, made-up times).
KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/cache" "$KT" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,64 \
    --strategy random --budget 5 --db "$tmp/random.db" >"$tmp/out" 2>"$tmp/err"
rows=$("$KT" db export --format csv --db "$tmp/random.db" 2>/dev/null | tail -n +2 | wc -l)
if [ "$rows" -eq 10 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL cli: random budget: $rows rows, expected 10: $(tail -c 300 "$tmp/err")"; fi

# The probe family (the contract's test family) end to end on the fake GPU: an exhaustive
# sweep over shapes with a categorical key, its own batch ladder (B 10 -> bucket 16), then
# the DB's show and export.
expect_fail "bad category" "LAYOUT is one of V3,V4, not 'V9'" tune --family probe --shape LAYOUT=V9,N=64 --m 1
KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/cache" "$KT" tune --family probe --shape LAYOUT=V4,N=4096 --shape LAYOUT=V3,N=512 \
    --m 1,10 --strategy exhaustive --db "$tmp/probe.db" >"$tmp/out" 2>"$tmp/err"
rows=$("$KT" db export --format csv --db "$tmp/probe.db" 2>/dev/null | grep -c 'LAYOUT=V[34],N=')
if [ "$rows" -eq 24 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL cli: probe sweep: $rows rows, expected 24: $(tail -c 300 "$tmp/err")"; fi
expect_ok "probe winners in its own buckets" "probe.*LAYOUT=V4,N=4096.* 16 " db show --db "$tmp/probe.db"
expect_ok "probe export names the category" '"shape": "LAYOUT=V3,N=512"' db export --format json --db "$tmp/probe.db"
expect_ok "list probe shows the key kinds" "LAYOUT={V3|V4} N  (batch: B)" list probe

expect_ok "help" "usage: kt COMMAND" --help
expect_ok "list" "fp8_gemm" list
expect_ok "list family" "TILE_N" list fp8_gemm
expect_ok "list family: untuned problems get a default of their own" "untuned problem gets one chosen for its M" list quant_fp8_gemm
expect_ok "compile one config" "1 compiled, 0 failed" compile --family act_quant --arch sm_90 --config VEC=8

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
