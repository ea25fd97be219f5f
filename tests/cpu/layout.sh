#!/usr/bin/env bash
# layout.sh — the library split holds: a program linked against lib/libkt.a alone (no cuBLAS,
# no libktdev) builds and runs; libkt has no cuBLAS reference and no tuner or bench symbol;
# nothing below the CLI includes the CLI's headers, and nothing in the runtime library
# (runtime/, kernels/, the DB read side) includes the tuner's, bench's or the DB writer's.
set -u
cd "$(dirname "$0")/../.."
CUDA=${CUDA:-/usr/local/cuda}
passed=0 failed=0
check() { # check NAME COMMAND...: the command must succeed
    local name=$1
    shift
    if "$@"; then passed=$((passed + 1)); else echo "FAIL: $name"; failed=$((failed + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

link_alone() {
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -Iruntime -o "$tmp/runtime_only" tests/cpu/link/runtime_only.c lib/libkt.a \
        -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" -lnvrtc -lsqlite3 -ldl -lm -pthread
}
check "a program links against libkt.a alone" link_alone
check "the libkt-only program runs" "$tmp/runtime_only" "$tmp/rt.db"
check "the libkt-only program needs no cuBLAS" bash -c "ldd '$tmp/runtime_only' >/dev/null && ! ldd '$tmp/runtime_only' | grep -i cublas"

check "libkt.a references no cuBLAS symbol" bash -c "! nm -u lib/libkt.a | grep -E ' U (cublas|cuda[A-Z])'"
check "libkt.a references no tuner or bench symbol" bash -c "! nm -u lib/libkt.a | grep -E ' U kt_(tune|sweep|bench|space|worker|compile_pool|db_add|db_update|db_merge)'"

# runtime/model.cu's kernels launch as programmatic dependents (step.c's rt_as): each must wait
# for the kernels before it first thing, or one that returned early would let a later kernel
# overtake its predecessors (model.cu's rt_begin). A kernel's first statement is rt_begin() or a
# call of an rt_*_begin function, which loads only weights (the step never writes them: their
# latency hides under the PDL wait) and then calls rt_begin() itself, before any return.
pdl_first() {
    awk '/extern "C" __global__/ { k++; want = 1 }
         want && /\{/ { sub(/.*\{/, ""); open = 1 }
         want && open { gsub(/^[ \t]+|[ \t]+$/, ""); if ($0 == "") next
                        if ($0 != "rt_begin();" && $0 !~ /[ =]?rt_[a-z0-9_]*_begin(<[^>]*>)?\(/) {
                            print "kernel " k " does not start with rt_begin(): " $0; bad++ }
                        want = open = 0 }
         /^__device__.* rt_[a-z0-9_]*_begin\(/ { f++; inb = 1; has = 0 }
         inb && /return/ && !has { print "an rt_*_begin function returns before rt_begin()"; bad++ }
         inb && /^    rt_begin\(\);$/ { has = 1 }
         inb && /^}/ { if (!has) { print "an rt_*_begin function without rt_begin()"; bad++ }; inb = 0 }
         END { exit !(k > 20 && f >= 2 && !bad) }' "${1:-runtime/model.cu}"
}
check "every runtime/model.cu kernel starts with rt_begin() or an rt_*_begin that calls it (PDL)" pdl_first
# planted: a kernel's rt_begin() gone, and an rt_*_begin's
awk '/extern "C" __global__/ { k = 1 } k && !done && $0 == "    rt_begin();" { done = 1; next } { print }' \
    runtime/model.cu >"$tmp/model_planted.cu"
pdl_planted() { ! pdl_first "$tmp/model_planted.cu" >/dev/null; }
check "the PDL check fails on a kernel without rt_begin() first" pdl_planted
awk '/^__device__.* rt_[a-z0-9_]*_begin\(/ { b = 1 } b && !done && $0 == "    rt_begin();" { done = 1; next } { print }' \
    runtime/model.cu >"$tmp/model_planted2.cu"
pdl_planted2() { ! pdl_first "$tmp/model_planted2.cu" >/dev/null; }
check "the PDL check fails on an rt_*_begin without rt_begin()" pdl_planted2

below_cli=$(ls runtime/*.[ch] db/*.[ch] kernels/*.[ch] kernels/common/*.h tuner/*.[ch] bench/*.[ch] 2>/dev/null)
check "nothing below the CLI includes the CLI's headers" bash -c "! grep -lE '^#include \"[^\"]*cli/' $(echo $below_cli)"
runtime=$(ls runtime/*.[ch] db/db.c db/db_internal.h kernels/*.[ch] kernels/common/*.h 2>/dev/null)
check "the runtime library includes no tuner, bench or DB-writer header" \
    bash -c "! grep -nE '^#include \"[^\"]*(tuner/|bench/|cli/|tuner\\.h|search\\.h|bench\\.h|kt_db_write\\.h)' $(echo $runtime)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
