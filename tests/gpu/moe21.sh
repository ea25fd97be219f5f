#!/usr/bin/env bash
# moe21.sh — what the twenty-first session kept of issue 21's M = 1 work, on the GPU, under 60 s:
# MXFP4 down at M = 1 defaults to a CTA per 16 output columns of the token across all its experts
# (moe_gemm GATHER=1, TN 16, 1 x 4 warps, a register ring of 6, the bf16 mma; the combine in the
# CTA). The levers that lost in moe_step (down GATHER=2: the weights in shared memory, commit
# a660d17; gate+up routing the token itself, commit c3559be) are gone; bench/NOTES.md has both.
#   1. kt verify on fresh seeded inputs of that config (E 32 down, N 1024, K 512, top-6, M 1/4/16/
#      64/256, 3 distributions, MXFP4 and FP8), and of the defaults at M 1-256 (explicit configs:
#      kt verify without --config runs the static default);
#   2. moe_step verified at V4-Flash TP4 M = 1 on the defaults (MXFP4 uniform and zipf, FP8);
#   3. moe_step at V4 M = 1 on the defaults, and with down pinned to main's config (a DB), in the
#      same call; MXFP4 down alone, the new default against main's config;
#   4. if bin/kt_plant exists (tree's build with GATHER's last slot's routing weight dropped), it
#      must fail verify (checkpoints 1 and 2 showed it; the final call on merged main skips it).
# Logs in $OUT/moe21 (or $LOGS); an "ok"/"FAIL" line a check, the bench lines at the end; ends
# with "N passed, N failed".
#   usage: OUT=$OUT bash tests/gpu/moe21.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
KT=${KT:-./bin/kt} PLANT=${PLANT:-./bin/kt_plant}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe21-cache}
LOGS=${LOGS:-${OUT:-/tmp}/moe21}
END=${KT_MOE21_END_S:-58}
source tests/gpu/step.sh # step, within

DN="E=32,N=1024,K=512,TOPK=6"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
MAINC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,NATIVE=0,WIDE=1,BF16=0,GATHER=0,EARLY=1,CLUSTER=0" # main's
G1B="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=6,SPLIT=1,NATIVE=0,WIDE=1,BF16=1,GATHER=1,EARLY=1,CLUSTER=0" # MXFP4's
G1="${G1B/BF16=1/BF16=0}"
for c in "$G1B" "$G1" "$MAINC"; do
    timeout 50 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
wait

export KT PLANT DN G1B G1 MAINC
shapes() { # FORMAT -> down --shape args at E 32, all three distributions
    local d
    for d in uniform zipf hot; do echo "--shape FORMAT=$1,STAGE=down,$DN,DIST=$d"; done
}
vconf() { # FORMAT CONFIG: kt verify at M 1-256
    # shellcheck disable=SC2046
    "$KT" verify --family moe_gemm --seed $RANDOM --config "$2" $(shapes "$1") --m 1,4,16,64,256
}
plant() { # the planted build's verify must run and report failed problems
    local out rc
    # shellcheck disable=SC2046
    out=$("$PLANT" verify --family moe_gemm --seed $RANDOM --config "$G1B" $(shapes mxfp4) --m 1,16 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
export -f shapes vconf plant
stepbench() { # NAME [DB]: moe_step at V4 M = 1, FP8 and MXFP4
    local db=()
    [ $# -ge 2 ] && db=(--db "$2")
    step "$1" within 16 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1 "${db[@]}" --json "$LOGS/$1.json"
}
dn() { # NAME CONFIG: MXFP4 down alone at V4-Flash TP4 M = 1
    step "$1" within 10 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=down,$V4DN" --m 1 --config "$2" \
        --json "$LOGS/$1.json"
}

step v_g1 within 15 bash -c 'vconf mxfp4 "$G1B" && vconf fp8 "$G1"'
step v_step within 20 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" \
    --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" --m 1 \
    --seed $RANDOM
if [ -x "$PLANT" ]; then step plant_caught within 8 bash -c plant; else echo "skip plant_caught: no $PLANT"; fi
stepbench step_new
rm -f "$LOGS/pin_main.db"*
step pin_main within 8 "$KT" tune --family moe_gemm --strategy exhaustive --where "$MAINC" \
    --shape "FORMAT=mxfp4,STAGE=down,$V4DN" --m 1 --db "$LOGS/pin_main.db"
stepbench step_pin_main "$LOGS/pin_main.db" # MXFP4 down on main's config
dn dn_mx_g1b "$G1B"
dn dn_mx_mainc "$MAINC"
grep -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/step_*.log 2>/dev/null
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
