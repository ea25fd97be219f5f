#!/usr/bin/env bash
# tpot25.sh — the twenty-fifth session's TPOT recordings beside tests/gpu/speed.sh (which runs 8K with FP8 experts):
# V4-Flash synthetic --tp-shapes 4 (the LM head vocab-parallel, the floor's routed experts counted from the step's
# own routing), 43 layers, family defaults: context 32K at B 1, 16, 64, and MXFP4 experts at 8K, B 1 and 64.
# Each run's --json under $OUT/tpot (bench/recordings takes them); one line a run; ~70 s on an H200.
#   usage: OUT=dir bash tests/gpu/tpot25.sh
set -u
cd "$(dirname "$0")/../.."
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache}
L=${OUT:-/tmp}/tpot
mkdir -p "$L"
F=${KT_RT_MODELS:-/tmp/kt-rt-models}/flash
[ -f "$F/config.json" ] || timeout 60 python3 tests/gpu/runtime_ref.py flash "$F" >/dev/null 2>&1
run() { # NAME ARGS...: one kt run, its TPOT line
    local n=$1
    shift
    timeout 60 ./bin/kt run --model "$F" --synthetic --tp-shapes 4 --steps 1 --json "$L/$n.json" "$@" >"$L/$n.log" 2>&1
    echo "=== $n rc=$? $(grep -h 'TPOT' "$L/$n.log" | head -1)"
}
for b in 1 16 64; do run v4flash_tp4_b${b}_c32768 --batch $b --context 32768; done
for b in 1 64; do run v4flash_tp4_mxfp4_b${b}_c8192 --batch $b --context 8192 --experts mxfp4; done
