#!/usr/bin/env bash
# moe21.sh — moe_gemm down at M = 1 with CTAs that own TN output columns across all of the
# token's experts (GATHER=2: TN rows of each of the 6 experts' weights, the whole of K, copied
# into shared memory by cp.async before the PDL wait; the weighted combine in the CTA) on the GPU,
# under 90 s, parts in priority order:
#   1. kt verify of GATHER=2 (and GATHER=1 at TN 16, ring 6) on fresh seeded inputs at E 32 down
#      (N 1024, K 512, top-6), M 1/4/16/64/256, FP8 and MXFP4 (e4m3 and bf16 paths), 3 distributions;
#   2. the planted build (bin/kt_plant: the last slot's routing weight dropped) must fail verify;
#   3. down alone at V4-Flash TP4 M = 1 (E 256, N 4096, K 512): main's config and the GATHER
#      configs in this build, main's default in $KT_MAIN, FP8 and MXFP4;
#   4. moe_step at V4 M = 1 (FP8, MXFP4) on this build's defaults (down GATHER=2) and on $KT_MAIN's,
#      in the same call, and on DBs that pin down to other configs;
#   5. moe_step verified at V4 M = 1 and 4 (the defaults: GATHER=2 in the pipeline).
# Needs bin/kt, bin/kt_plant, lib/ (built on the CPU). Logs in $OUT/moe21; an "ok"/"FAIL" line a
# check, the bench lines at the end; ends with "N passed, N failed".
#   usage: OUT=$OUT KT_MAIN=... bash tests/gpu/moe21.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt} PLANT=${PLANT:-./bin/kt_plant} MAIN=${KT_MAIN:-}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe21-cache}
MODE=${MODE:-checkpoint}
LOGS=${LOGS:-${OUT:-/tmp}/moe21}
END=${KT_MOE21_END_S:-88}
source tests/gpu/step.sh # step, within

DN="E=32,N=1024,K=512,TOPK=6"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
ALL="NATIVE=0,BF16=0,CLUSTER=0"
MAINC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,GATHER=0,EARLY=1,$ALL" # main's V4 M = 1 down
G2="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL" # this build's default
G2B="${G2/BF16=0/BF16=1}"
G2K2="TM=8,TN=16,WARPS_N=1,WARPS_K=2,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL"
G2T32="TM=8,TN=32,WARPS_N=2,WARPS_K=4,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL"
G1="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=6,SPLIT=1,WIDE=1,GATHER=1,EARLY=1,$ALL" # the register ring
for c in "$G2" "$G2B" "$G2K2" "$G2T32" "$G1" "$MAINC"; do
    timeout 60 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 60 "$PLANT" compile --family moe_gemm --arch sm_90 --config "$G2" >/dev/null 2>&1 &
wait

export KT PLANT DN G2 G2B G1
shapes() { # FORMAT -> down --shape args, all three distributions
    local d
    for d in uniform zipf hot; do echo "--shape FORMAT=$1,STAGE=down,$DN,DIST=$d"; done
}
vconf() { # FORMAT CONFIG: kt verify at M 1-256
    # shellcheck disable=SC2046
    "$KT" verify --family moe_gemm --seed $RANDOM --config "$2" $(shapes "$1") --m 1,4,16,64,256
}
plant() { # the planted build's verify must run and report failed problems
    local out rc
    out=$("$PLANT" verify --family moe_gemm --seed $RANDOM --config "$G2" $(shapes fp8) --m 1,16 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
export -f shapes vconf plant
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
pin() { # NAME FORMAT CONFIG: a DB whose only moe_gemm winner is down at V4 M = 1 on CONFIG
    rm -f "$LOGS/$1.db"*
    step "$1" within 15 "$KT" tune --family moe_gemm --strategy exhaustive --where "$3" \
        --shape "FORMAT=$2,STAGE=down,$V4DN" --m 1 --db "$LOGS/$1.db"
}

step v_g2_fp8 within 15 bash -c 'vconf fp8 "$G2"'
step v_g2_mxfp4 within 15 bash -c 'vconf mxfp4 "$G2" && vconf mxfp4 "$G2B"'
step plant_caught within 10 bash -c plant
dn dn_fp8_mainc "$KT" fp8 "$MAINC"
dn dn_fp8_g2 "$KT" fp8 "$G2"
[ -n "$MAIN" ] && dn dn_fp8_main "$MAIN" fp8 -
stepbench step_new "$KT"
[ -n "$MAIN" ] && stepbench step_main "$MAIN"
step v_step within 20 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
    --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=hot" --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1,4 --seed $RANDOM
dn dn_fp8_g2k2 "$KT" fp8 "$G2K2"
dn dn_fp8_g2t32 "$KT" fp8 "$G2T32"
dn dn_fp8_g1 "$KT" fp8 "$G1"
dn dn_mx_mainc "$KT" mxfp4 "$MAINC"
dn dn_mx_g2 "$KT" mxfp4 "$G2"
dn dn_mx_g2b "$KT" mxfp4 "$G2B"
step v_g1_fp8 within 10 bash -c 'vconf fp8 "$G1"'
pin pin_g1 fp8 "$G1"
stepbench step_pin_g1 "$KT" "$LOGS/pin_g1.db"
pin pin_g2k2 fp8 "$G2K2"
stepbench step_pin_g2k2 "$KT" "$LOGS/pin_g2k2.db"
stepbench step_new2 "$KT"
# why: down FP8 at V4 M = 1 under Nsight Compute, main's config and GATHER=2
for c in mainc g2; do
    cfg=$MAINC
    [ $c = g2 ] && cfg=$G2
    step ncu_$c within 20 "$KT" profile --ncu --iters 5 --family moe_gemm --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1 \
        --config "$cfg"
done
grep -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/step_*.log 2>/dev/null
grep -h -E 'FAIL|verified' "$LOGS/plant_caught.log" | head -n 4
for c in mainc g2; do grep -A14 "^ncu" "$LOGS/ncu_$c.log" 2>/dev/null | head -n 28; done
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
