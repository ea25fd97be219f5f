#!/usr/bin/env bash
# moe25.sh — the twenty-fifth session's moe_step A/B (bench/NOTES.md, twenty-fifth session): FP8 down at M = 16 pinned
# to TM 8 TN 128 WARPS_N 4 (50.2 us alone against the default's 54.9 in tune24's search) through the pipeline
# --config (';;CONFIG': route and gate+up their DB winners, the down stage pinned), which this also runs on a GPU
# for the first time: kt verify of the pinned step at M 1, 16, 64 (uniform, zipf), then kt bench of the default
# and the pinned step at M = 16, interleaved, two rounds, the pinned one also with GATHER and EARLY off one by one
# (the first call: the searched config lost in the step, 193.4-195.1 us against 166.9-167.5). Logs under
# $OUT/moe25; ok/FAIL a step; the table last.
#   usage: OUT=dir bash tests/gpu/moe25.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe25-cache}
LOGS=${LOGS:-${OUT:-/tmp}/moe25}
END=${KT_MOE25_END_S:-110}
source tests/gpu/step.sh # step, within
S="ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512"
DOWN="TM=8,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1,NATIVE=0,WIDE=1,BF16=0"
# the down configs pinned (name:GATHER,EARLY): the searched one, then each of its two switches off, then both
VARIANTS=${MOE25_VARIANTS:-"g1e1:GATHER=1,EARLY=1 g0e1:GATHER=0,EARLY=1 g1e0:GATHER=1,EARLY=0 g0e0:GATHER=0,EARLY=0"}
step verify_pinned within 70 "$KT" verify --family moe_step --shape "$S,DIST=uniform" --shape "$S,DIST=zipf" \
    --m 1,16,64 --seed $RANDOM --config ";;$DOWN,GATHER=1,EARLY=1,CLUSTER=0"
for r in 1 2; do
    step bench_default_r$r within 12 "$KT" bench --family moe_step --shape "$S,DIST=uniform" --m 16 \
        --json "$LOGS/default_r$r.json"
    for v in $VARIANTS; do
        step bench_${v%%:*}_r$r within 12 "$KT" bench --family moe_step --shape "$S,DIST=uniform" --m 16 \
            --config ";;$DOWN,${v#*:},CLUSTER=0" --json "$LOGS/${v%%:*}_r$r.json"
    done
done
python3 - "$LOGS" default $(for v in $VARIANTS; do echo "${v%%:*}"; done) <<'PY' || echo "(no table)"
import glob, json, os, sys
for who in sys.argv[2:]:
    us = [r["kt_us"] for f in sorted(glob.glob(os.path.join(sys.argv[1], who + "_r*.json")))
          for r in json.load(open(f)) if r.get("status") == "ok"]
    print("%-8s moe_step FP8 M=16 kt_us: %s (min %.2f)" % (who, " / ".join("%.2f" % u for u in us), min(us) if us else 0))
PY
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
