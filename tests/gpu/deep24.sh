#!/usr/bin/env bash
# deep24.sh — the twenty-fourth session's sixth call (~210 s on an H200): a --budget 32 fast search of the FP8
# MoE GEMMs at M 16 / 64 against the defaults; FP8 down at M = 1 on a GATHER=1 tile pinned inside moe_step; V4-Flash
# TP4 TPOT at 32K context, B 1 / 16 / 64. Logs packed into $OUT/deep.tgz (bench/NOTES.md has the results).
#   usage: OUT=dir bash tests/gpu/deep24.sh
set -u
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/lib KT_CACHE_DIR=/tmp/kt-deep24
K=./bin/kt KA=$PWD/bin/kt L=$OUT/deep; mkdir -p $L
V4="E=256,TOPK=6,DIST=uniform"
G=(--shape "FORMAT=fp8,STAGE=gateup,N=1024,K=4096,$V4" --shape "FORMAT=fp8,STAGE=down,N=4096,K=512,$V4")
timeout 120 $K tune --family moe_gemm "${G[@]}" --m 16,64 --budget 32 --db $L/moe.db --quiet > $L/tune.log 2>&1; echo "=== tune rc=$? $(tail -n 1 $L/tune.log)"
timeout 20 $K bench --family moe_gemm "${G[@]}" --m 16,64 --json $L/default.json > $L/b_default.log 2>&1; echo "=== default rc=$?"
timeout 20 $K bench --family moe_gemm "${G[@]}" --m 16,64 --db $L/moe.db --json $L/tuned.json > $L/b_tuned.log 2>&1; echo "=== tuned rc=$?"
grep -hE "^FORMAT=" $L/b_default.log $L/b_tuned.log | cut -c1-240
# FP8 down at M = 1 on MXFP4's new M = 1 tile (GATHER=1, 32 columns a CTA) in moe_step, pinned through a DB
G1="TM=8,TN=32,WARPS_N=2,WARPS_K=4,STAGES=6,SPLIT=1,NATIVE=0,WIDE=1,BF16=0,GATHER=1,EARLY=1,CLUSTER=0"
timeout 40 $K tune --family moe_gemm --strategy exhaustive --where "$G1" --shape "FORMAT=fp8,STAGE=down,N=4096,K=512,$V4" --m 1 --db $L/pin.db > $L/pin.log 2>&1; echo "=== pin rc=$? $(tail -n 1 $L/pin.log)"
ST=(--family moe_step --shape "ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=uniform" --m 1)
for r in 1 2; do
  timeout 15 $K bench "${ST[@]}" > $L/s_def_$r.log 2>&1; timeout 15 $K bench "${ST[@]}" --db $L/pin.db > $L/s_pin_$r.log 2>&1
done
timeout 25 $K verify "${ST[@]}" --db $L/pin.db --seed $RANDOM > $L/s_pin_verify.log 2>&1; echo "=== pinned step verify rc=$? $(tail -n 1 $L/s_pin_verify.log)"
grep -hE "^ROUTER=" $L/s_def_*.log $L/s_pin_*.log | cut -c1-120
# V4-Flash TP4 at 32K context (issue 23's second context), B = 1, 16, 64
F=/tmp/kt-rt-models/flash; timeout 60 python3 tests/gpu/runtime_ref.py flash $F > /dev/null 2>&1
for b in 1 16 64; do
  timeout 60 $K run --model $F --synthetic --tp-shapes 4 --batch $b --context 32768 --steps 1 --json $L/run_b${b}_c32768.json > $L/run_b$b.log 2>&1; echo "=== run B=$b 32K rc=$? $(grep -h TPOT $L/run_b$b.log | head -1)"
done
cd $OUT && tar czf deep.tgz deep && rm -rf deep
