#!/usr/bin/env bash
# final24.sh — the twenty-fourth session's final call on merged main (~195 s on an H200): verify of mla_decode's
# targets and SQ 2 / top-k 100 cases and of MXFP4 moe_step; a fast search of mla_decode's targets against its
# defaults; moe_step benched; tests/gpu/speed.sh. Logs packed into $OUT/final.tgz (bench/NOTES.md has the results).
#   usage: OUT=dir bash tests/gpu/final24.sh
set -u
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/lib KT_CACHE_DIR=/tmp/kt-final24
K=./bin/kt L=$OUT/final; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
S="E=256,HIDDEN=4096,INTER=512"
t0=$SECONDS
# 1. verifies side by side (nothing timed meanwhile)
timeout 100 $K verify --family mla_decode --shape targets --m 1,8,64 --seed $RANDOM > $L/v_mla.log 2>&1 & p1=$!
timeout 100 $K verify --family mla_decode --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 1,3,128 --seed $RANDOM > $L/v_mla2.log 2>&1 & p2=$!
timeout 100 $K verify --family moe_step --shape "ROUTER=V4,FORMAT=mxfp4,$S,DIST=uniform" --shape "ROUTER=V4,FORMAT=mxfp4,$S,DIST=zipf" --shape "ROUTER=V4,FORMAT=mxfp4,$S,DIST=hot" --m 1,16,64 --seed $RANDOM > $L/v_step.log 2>&1 & p3=$!
wait $p1; echo "=== verify mla targets rc=$? $(tail -n 1 $L/v_mla.log)"
wait $p2; echo "=== verify mla sq2/-1/v32 rc=$? $(tail -n 1 $L/v_mla2.log)"
wait $p3; echo "=== verify moe_step mxfp4 rc=$? $(tail -n 1 $L/v_step.log)"
echo "verifies: $((SECONDS - t0)) s"
# 2. the fast search on mla_decode's targets, then defaults against winners
timeout 120 $K tune --family mla_decode --shape targets --m 1,64 --budget 12 --db $L/mla.db --quiet > $L/tune_mla.log 2>&1; echo "=== tune mla rc=$? $(tail -n 1 $L/tune_mla.log)"
timeout 30 $K bench --family mla_decode --shape targets --m 1,64 --json $L/mla_default.json > $L/b_mla_default.log 2>&1; echo "=== bench mla default rc=$?"
timeout 30 $K bench --family mla_decode --shape targets --m 1,64 --db $L/mla.db --json $L/mla_tuned.json > $L/b_mla_tuned.log 2>&1; echo "=== bench mla tuned rc=$?"
grep -hE "^LAYOUT=" $L/b_mla_default.log $L/b_mla_tuned.log | cut -c1-220
# 3. moe_step on the defaults
timeout 20 $K bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$S,DIST=uniform" --shape "ROUTER=V4,FORMAT=mxfp4,$S,DIST=uniform" --m 1,16 --json $L/moe_step.json > $L/b_step.log 2>&1; echo "=== bench moe_step rc=$?"
grep -hE "^ROUTER=" $L/b_step.log | cut -c1-160
echo "before speed: $((SECONDS - t0)) s"
# 4. the runtime
OUT=$L timeout 150 bash tests/gpu/speed.sh > $L/speed.log 2>&1; echo "=== speed rc=$?"; grep -E "PASS|FAIL|TPOT|passed" $L/speed.log
echo "total: $((SECONDS - t0)) s"
cd $OUT && tar czf final.tgz final && rm -rf final
