#!/usr/bin/env bash
# moe21.sh — issue 21's M = 1 levers of the twenty-first session on the GPU, under 90 s, parts in
# priority order:
#   lever 1, moe_gemm down GATHER=2: CTAs own TN output columns across all of the token's experts
#     (TN rows of each expert's weights, the whole of K, copied into shared memory by cp.async
#     before the PDL wait; the weighted combine in the CTA);
#   lever 2, moe_gemm gate+up EARLY=1 (M = 1, V4's router): each CTA routes the token itself from
#     the logits (moe_route's route_token) and streams its expert's weights before its wait on the
#     router (moe_route now waits on its producer before it lets a dependent launch).
#   1. kt verify on fresh seeded inputs: GATHER=2 at E 32 down (N 1024, K 512, top-6), M 1/4/16/64/
#      256, FP8 and MXFP4 (e4m3 and bf16 paths), 3 distributions; gate+up EARLY=1 at E 32 (N 512,
#      K 2048), M = 1, both formats; moe_route (V4, V3, HASH) at M 1/16;
#   2. the planted builds must fail verify: bin/kt_plant (GATHER's last slot's routing weight
#      dropped), bin/kt_plant2 (gate+up EARLY's tile y takes slot y, not its expert's slot);
#   3. down alone at V4-Flash TP4 M = 1: main's config beside GATHER=2 in this build, main's
#      default in $KT_MAIN; gate+up alone: CLUSTER (main's) beside CLUSTER + EARLY;
#   4. moe_step at V4 M = 1 (FP8, MXFP4) on this build's defaults (both levers) and on $KT_MAIN's in
#      the same call, on DBs pinning gate+up to main's config (lever 1 alone) or down to main's
#      (lever 2 alone); moe_step verified at V4 M = 1 (and M = 4) on the defaults and the pins;
#   5. extras: other GATHER configs, MXFP4 down, ncu of down.
# Needs bin/kt, bin/kt_plant, bin/kt_plant2, lib/ (built on the CPU). Logs in $OUT/moe21; an
# "ok"/"FAIL" line a check, the bench lines at the end; ends with "N passed, N failed".
#   usage: OUT=$OUT KT_MAIN=... bash tests/gpu/moe21.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt} PLANT=${PLANT:-./bin/kt_plant} PLANT2=${PLANT2:-./bin/kt_plant2} MAIN=${KT_MAIN:-}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe21-cache}
MODE=${MODE:-checkpoint}
LOGS=${LOGS:-${OUT:-/tmp}/moe21}
END=${KT_MOE21_END_S:-86}
source tests/gpu/step.sh # step, within

DN="E=32,N=1024,K=512,TOPK=6"
GU="E=32,N=512,K=2048,TOPK=6"
V4GU="E=256,N=1024,K=4096,TOPK=6,DIST=uniform"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
ALL="NATIVE=0,BF16=0,CLUSTER=0"
MAINC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,GATHER=0,EARLY=1,$ALL" # main's V4 M = 1 down
G2="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL" # this build's default
G2B="${G2/BF16=0/BF16=1}"
G2K2="TM=8,TN=16,WARPS_N=1,WARPS_K=2,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL"
G2T32="TM=8,TN=32,WARPS_N=2,WARPS_K=4,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL"
G1="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=6,SPLIT=1,WIDE=1,GATHER=1,EARLY=1,$ALL" # the register ring
GUC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,NATIVE=0,WIDE=1,BF16=0,GATHER=0,EARLY=0,CLUSTER=1" # main's
GUE="${GUC/EARLY=0/EARLY=1}" # this build's V4 M = 1 gate+up (FP8)
GUEB="${GUE/BF16=0/BF16=1}"  # and MXFP4's
for c in "$G2" "$G2B" "$G2K2" "$G2T32" "$G1" "$MAINC" "$GUC" "$GUE" "$GUEB"; do
    timeout 60 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 60 "$PLANT" compile --family moe_gemm --arch sm_90 --config "$G2" >/dev/null 2>&1 &
timeout 60 "$PLANT2" compile --family moe_gemm --arch sm_90 --config "$GUE" >/dev/null 2>&1 &
timeout 60 "$KT" compile --family moe_route --arch sm_90 --sample 2 >/dev/null 2>&1 &
wait

export KT PLANT PLANT2 DN GU G2 G2B G1 GUE GUEB
shapes() { # FORMAT [STAGE SHAPE] -> --shape args, all three distributions (default: down at E 32)
    local d
    for d in uniform zipf hot; do echo "--shape FORMAT=$1,STAGE=${2:-down},${3:-$DN},DIST=$d"; done
}
vconf() { # FORMAT CONFIG: kt verify at M 1-256
    # shellcheck disable=SC2046
    "$KT" verify --family moe_gemm --seed $RANDOM --config "$2" $(shapes "$1") --m 1,4,16,64,256
}
plant() { # the planted build's verify must run and report failed problems
    local out rc
    # shellcheck disable=SC2046
    out=$("$PLANT" verify --family moe_gemm --seed $RANDOM --config "$G2" $(shapes fp8) --m 1,16 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
plant2() { # the second planted build (gate+up EARLY: tile y's slot taken as y) must fail
    local out rc
    # shellcheck disable=SC2046
    out=$("$PLANT2" verify --family moe_gemm --seed $RANDOM --config "$GUE" $(shapes fp8 gateup "$GU") --m 1 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
vgu() { # gate+up EARLY=1 at M = 1: E 32, both formats, 3 distributions (V4: in the step)
    # shellcheck disable=SC2046
    "$KT" verify --family moe_gemm --seed $RANDOM --config "$GUE" $(shapes fp8 gateup "$GU") --m 1 &&
        "$KT" verify --family moe_gemm --seed $RANDOM --config "$GUEB" $(shapes mxfp4 gateup "$GU") --m 1
}
export -f shapes vconf plant plant2 vgu
dn() { # NAME KT FORMAT CONFIG|-: down alone at V4-Flash TP4 M = 1 (- : that kt's default)
    local cfg=()
    [ "$4" != - ] && cfg=(--config "$4")
    step "$1" within 12 "$2" bench --family moe_gemm --shape "FORMAT=$3,STAGE=down,$V4DN" --m 1 "${cfg[@]}" \
        --json "$LOGS/$1.json"
}
stepbench() { # NAME KT [DB]: moe_step at V4 M = 1, FP8 and MXFP4
    local db=()
    [ $# -ge 3 ] && db=(--db "$3")
    step "$1" within 16 "$2" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1 "${db[@]}" --json "$LOGS/$1.json"
}
pin() { # NAME SHAPE CONFIG: a DB whose only moe_gemm winner is SHAPE at M = 1 on CONFIG
    rm -f "$LOGS/$1.db"*
    step "$1" within 15 "$KT" tune --family moe_gemm --strategy exhaustive --where "$3" --shape "$2" --m 1 \
        --db "$LOGS/$1.db"
}
gu() { # NAME CONFIG: FP8 gate+up alone at V4 M = 1
    step "$1" within 12 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" --m 1 --config "$2" \
        --json "$LOGS/$1.json"
}
vstep() { # NAME [DB]: moe_step verified at V4 M = 1 (FP8 uniform and hot, MXFP4 zipf)
    local db=()
    [ $# -ge 2 ] && db=(--db "$2")
    step "$1" within 20 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=hot" --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1 \
        --seed $RANDOM "${db[@]}"
}

# have CAP: at least CAP seconds left before END, else the optional check after it is skipped
# (printed, not counted)
have() { [ $((END - SECONDS)) -ge "$1" ] || { echo "skip (time: ${SECONDS}s of $END): $2"; return 1; }; }
step v_g2_fp8 within 15 bash -c 'vconf fp8 "$G2"'
step v_g2_mxfp4 within 15 bash -c 'vconf mxfp4 "$G2" && vconf mxfp4 "$G2B"'
step v_gu_early within 20 bash -c vgu
step plant_caught within 10 bash -c plant
step plant2_caught within 10 bash -c plant2
step v_route within 12 "$KT" verify --family moe_route --seed $RANDOM --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf \
    --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=hot --m 1,16
dn dn_fp8_mainc "$KT" fp8 "$MAINC"
dn dn_fp8_g2 "$KT" fp8 "$G2"
stepbench step_new "$KT"
[ -n "$MAIN" ] && stepbench step_main "$MAIN"
vstep v_step
pin pin_gu0 "FORMAT=fp8,STAGE=gateup,$V4GU" "$GUC" # lever 1 alone in the step
stepbench step_pin_gu0 "$KT" "$LOGS/pin_gu0.db"
have 10 gu_cluster && gu gu_cluster "$GUC"
have 10 gu_early && gu gu_early "$GUE"
[ -n "$MAIN" ] && have 10 dn_fp8_main && dn dn_fp8_main "$MAIN" fp8 -
have 10 dn_mx_mainc && dn dn_mx_mainc "$KT" mxfp4 "$MAINC"
have 10 dn_mx_g2 && dn dn_mx_g2 "$KT" mxfp4 "$G2"
have 10 dn_fp8_g2k2 && dn dn_fp8_g2k2 "$KT" fp8 "$G2K2"
have 10 dn_fp8_g1 && dn dn_fp8_g1 "$KT" fp8 "$G1"
have 20 pin_dn0 && pin pin_dn0 "FORMAT=fp8,STAGE=down,$V4DN" "$MAINC" && # lever 2 alone in the step
    stepbench step_pin_dn0 "$KT" "$LOGS/pin_dn0.db"
have 10 dn_fp8_g2t32 && dn dn_fp8_g2t32 "$KT" fp8 "$G2T32"
have 10 dn_mx_g2b && dn dn_mx_g2b "$KT" mxfp4 "$G2B"
have 12 step_new2 && stepbench step_new2 "$KT"
have 15 v_step_m4 && step v_step_m4 within 15 "$KT" verify --family moe_step \
    --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" --m 4 --seed $RANDOM
# why: down FP8 at V4 M = 1 under Nsight Compute, main's config and GATHER=2
for c in mainc g2; do
    ncfg=$MAINC
    [ $c = g2 ] && ncfg=$G2
    have 15 ncu_$c && step ncu_$c within 20 "$KT" profile --ncu --iters 5 --family moe_gemm \
        --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1 --config "$ncfg"
done
grep -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/gu_*.log "$LOGS"/step_*.log 2>/dev/null
grep -H -E 'FAIL|verified' "$LOGS/plant_caught.log" "$LOGS/plant2_caught.log" | head -n 8
for c in mainc g2; do grep -A14 "^ncu" "$LOGS/ncu_$c.log" 2>/dev/null | head -n 28; done
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
