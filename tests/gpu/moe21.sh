#!/usr/bin/env bash
# moe21.sh — issue 21's down at M = 1 (moe_gemm GATHER=2: CTAs own TN output columns across all of
# the token's experts, TN rows of each expert's weights, the whole of K, copied into shared memory
# by cp.async before the PDL wait; the weighted combine in the CTA) on the GPU, under 90 s. The
# first checkpoint (commit dbba9c0) found it faster alone (5.56 against 7.57 us) and slower in
# moe_step (24.84 against 24.02); this second one asks why, in priority order:
#   1. kt verify of GATHER=2 (FP8 and MXFP4 bf16, E 32, M 1-256, 3 distributions); the planted
#      build (bin/kt_plant: GATHER's last slot's routing weight dropped) must fail verify;
#   2. moe_step at V4 M = 1 (FP8, MXFP4) on this build's defaults (main's configs again) and on
#      $KT_MAIN's, and on DBs that pin down to GATHER=2 (EARLY 1 and 0) or GATHER=1 at TN 16 with
#      a register ring of 6 (4 KB of shared memory: no carveout to share), in the same call;
#   3. the same with KT_SMEM_CARVEOUT=100 (every kernel prefers the whole unified L1 as shared
#      memory: do down's 53 KB CTAs then fit beside gate+up's?); down alone at both carveouts;
#   4. moe_step verified at V4 M = 1 with down pinned to GATHER=2 and to GATHER=1.
# Needs bin/kt, bin/kt_plant, lib/ (built on the CPU). Logs in $OUT/moe21; an "ok"/"FAIL" line a
# check, the bench lines at the end; ends with "N passed, N failed".
#   usage: OUT=$OUT KT_MAIN=... bash tests/gpu/moe21.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt} PLANT=${PLANT:-./bin/kt_plant} MAIN=${KT_MAIN:-}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe21-cache}
LOGS=${LOGS:-${OUT:-/tmp}/moe21}
END=${KT_MOE21_END_S:-86}
source tests/gpu/step.sh # step, within

DN="E=32,N=1024,K=512,TOPK=6"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
ALL="NATIVE=0,BF16=0,CLUSTER=0"
MAINC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,GATHER=0,EARLY=1,$ALL" # main's V4 M = 1 down
G2="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=1,WIDE=1,GATHER=2,EARLY=1,$ALL" # the lever (FP8; MXFP4 G2B)
G2B="${G2/BF16=0/BF16=1}"
G1="TM=8,TN=16,WARPS_N=1,WARPS_K=4,STAGES=6,SPLIT=1,WIDE=1,GATHER=1,EARLY=1,$ALL" # the register ring
G1B="${G1/BF16=0/BF16=1}"
for c in "$G2" "$G2B" "${G2/EARLY=1/EARLY=0}" "${G2B/EARLY=1/EARLY=0}" "$G1" "$G1B" "$MAINC"; do
    timeout 60 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 60 "$PLANT" compile --family moe_gemm --arch sm_90 --config "$G2" >/dev/null 2>&1 &
timeout 60 "$KT" compile --family moe_route --arch sm_90 --sample 2 >/dev/null 2>&1 &
wait

export KT PLANT DN G2 G2B G1
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
    step "$1" within 12 env ${CARVE:+KT_SMEM_CARVEOUT=$CARVE} "$2" bench --family moe_gemm \
        --shape "FORMAT=$3,STAGE=down,$V4DN" --m 1 "${cfg[@]}" \
        --json "$LOGS/$1.json"
}
stepbench() { # NAME KT [DB]: moe_step at V4 M = 1, FP8 and MXFP4
    local db=()
    [ $# -ge 3 ] && db=(--db "$3")
    step "$1" within 16 env ${CARVE:+KT_SMEM_CARVEOUT=$CARVE} "$2" bench --family moe_step \
        --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1 "${db[@]}" --json "$LOGS/$1.json"
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
pin2() { # NAME FP8-CONFIG MXFP4-CONFIG: a DB whose only moe_gemm winners are down at V4 M = 1
    rm -f "$LOGS/$1.db"*
    step "$1" within 15 bash -c "\"\$KT\" tune --family moe_gemm --strategy exhaustive --where '$2' \
        --shape FORMAT=fp8,STAGE=down,$V4DN --m 1 --db '$LOGS/$1.db' && \"\$KT\" tune --family moe_gemm \
        --strategy exhaustive --where '$3' --shape FORMAT=mxfp4,STAGE=down,$V4DN --m 1 --db '$LOGS/$1.db'"
}
step v_g2 within 15 bash -c 'vconf fp8 "$G2" && vconf mxfp4 "$G2B"'
step plant_caught within 10 bash -c plant
stepbench step_new "$KT"
[ -n "$MAIN" ] && stepbench step_main "$MAIN"
pin2 pin_g2 "$G2" "$G2B"
stepbench step_pin_g2 "$KT" "$LOGS/pin_g2.db"
pin2 pin_g1 "$G1" "$G1B"
stepbench step_pin_g1 "$KT" "$LOGS/pin_g1.db"
CARVE=100 stepbench step_new_c100 "$KT"
CARVE=100 stepbench step_pin_g2_c100 "$KT" "$LOGS/pin_g2.db"
pin2 pin_g2l "${G2/EARLY=1/EARLY=0}" "${G2B/EARLY=1/EARLY=0}"
stepbench step_pin_g2l "$KT" "$LOGS/pin_g2l.db"
vstep v_step_g2 "$LOGS/pin_g2.db"
vstep v_step_g1 "$LOGS/pin_g1.db"
dn dn_fp8_mainc "$KT" fp8 "$MAINC"
dn dn_fp8_g2 "$KT" fp8 "$G2"
CARVE=100 dn dn_fp8_mainc_c100 "$KT" fp8 "$MAINC"
CARVE=100 dn dn_fp8_g2_c100 "$KT" fp8 "$G2"
have 12 dn_mx_g1b && dn dn_mx_g1b "$KT" mxfp4 "$G1B"
have 12 step_pin_g1_c100 && CARVE=100 stepbench step_pin_g1_c100 "$KT" "$LOGS/pin_g1.db"
have 12 step_new2 && stepbench step_new2 "$KT"
[ -n "$MAIN" ] && have 12 step_main2 && stepbench step_main2 "$MAIN"
grep -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/step_*.log 2>/dev/null
grep -H -E 'FAIL|verified' "$LOGS/plant_caught.log" | head -n 4
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
