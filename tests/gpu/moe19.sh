#!/usr/bin/env bash
# moe19.sh — moe_gemm's CLUSTER=1 (gate+up: the SwiGLU group's CTAs and split-K ranges one
# thread-block cluster, their sums read through distributed shared memory) on the GPU, under
# 100 s, parts in priority order:
#   1. kt verify of CLUSTER=1 on fresh seeded inputs (outputs poisoned, the float64 model, rel
#      err < 1e-2, every output written) at E 32 (gate+up N 512 K 2048, top-6), M 1/4/16/64/256,
#      FP8 and MXFP4 (e4m3 and bf16 paths), all three distributions; clusters of 8 (TN 64 x
#      split 2, TN 128 x split 4, TN 32: the last two in 5) and 4 (TN 64, in 5);
#   2. the planted bug (.gpu/moe19/kt_plant: every lane reads x-rank 0's sums) must fail verify;
#   3. gate+up alone at V4-Flash TP4 M = 1 (E 256, N 1024, K 4096, uniform): main's config
#      (CLUSTER=0) beside CLUSTER=1 in the same build, FP8 (MXFP4's bf16 path in 6);
#   4. moe_step at V4 M = 1, FP8 and MXFP4, on this build's defaults and on main's kt
#      (.gpu/moe19/kt_main, 518d1ef) in the same call;
#   5. moe_step verified at V4 M = 1 (FP8 uniform, MXFP4 zipf: CLUSTER=1 in the pipeline); ncu of
#      gate+up FP8 at V4 M = 1 on both paths; the defaults verified at E 32 (M 1-256) and V4 (M 1/2);
#   6. extras: MXFP4 gate+up alone, FP8 at M = 16 with clusters of 4, TN 128 x split 4 and TN 32
#      at M = 1, the step on this build again.
# Needs bin/ lib/ and .gpu/moe19/ (kt_main, kt_plant: git-ignored, carried). Logs in $OUT/moe19
# (or $LOGS); an "ok"/"FAIL" line a check; ends with "N passed, N failed".
#   usage: OUT=$OUT bash tests/gpu/moe19.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt} MAIN=${MAIN:-.gpu/moe19/kt_main} PLANT=${PLANT:-.gpu/moe19/kt_plant}
# the two builds in .gpu/ find lib/libcjson.so.1 through this (their rpath is $ORIGIN/../lib; the
# checkpoint call lost both to it)
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODE=${MODE:-checkpoint}
LOGS=${LOGS:-${OUT:-/tmp}/moe19}
END=${KT_MOE19_END_S:-96}
source tests/gpu/step.sh # step, within

GU="E=32,N=512,K=2048,TOPK=6"
V4GU="E=256,N=1024,K=4096,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
BASE="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1" # main's V4 M = 1 gate+up (FP8)
C8="$BASE,CLUSTER=1"
C8B="$BASE,BF16=1,CLUSTER=1"
C8W="TM=8,TN=128,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=4,WIDE=1,CLUSTER=1"
C8N="TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,WIDE=1,CLUSTER=1"
C4="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,WIDE=1,CLUSTER=1"
C384A="TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1" # 384 CTAs at V4 M = 1, 2-3 an SM
C384B="TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=4,WIDE=1"
# every config's sm_90 build in the background while the first checks run (the JIT cache's
# writes are atomic)
for c in "$C8" "$C8B" "$C8W" "$C8N" "$C4" "$BASE" "$BASE,BF16=1" "${C4%,CLUSTER=1}" "$C384A" "$C384B"; do
    timeout 60 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 60 "$PLANT" compile --family moe_gemm --arch sm_90 --config "$C8" >/dev/null 2>&1 &
timeout 60 "$MAIN" compile --family moe_gemm --arch sm_90 --sample 1 >/dev/null 2>&1 &

# 1. correctness of the new path (timeout runs programs: the functions run in bash -c)
export KT PLANT GU C8 C8B C8W C8N C4
shapes() { # FORMATS -> gate+up --shape args, all three distributions
    local f d
    for f in $1; do for d in uniform zipf hot; do echo "--shape FORMAT=$f,STAGE=gateup,$GU,DIST=$d"; done; done
}
verify_configs() { # FORMATS M CONFIG...: kt verify of each config
    local f=$1 m=$2 c
    shift 2
    for c in "$@"; do
        # shellcheck disable=SC2046
        "$KT" verify --family moe_gemm --seed $RANDOM --config "$c" $(shapes "$f") --m "$m" || return 1
    done
}
plant() { # the planted build's verify must run and report failed problems
    local out rc
    out=$("$PLANT" verify --family moe_gemm --seed $RANDOM --config "$C8" \
        --shape "FORMAT=fp8,STAGE=gateup,$GU,DIST=uniform" --m 1,16 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
export -f shapes verify_configs plant
gu() { # NAME FORMAT M CONFIG: gate+up alone at V4-Flash TP4
    step "$1" within 10 "$KT" bench --family moe_gemm --shape "FORMAT=$2,STAGE=gateup,$V4GU" --m "$3" --config "$4" \
        --json "$LOGS/$1.json"
}
stepbench() { # NAME KT: moe_step at V4 M = 1, FP8 and MXFP4, that kt's defaults
    step "$1" within 14 "$2" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1 --json "$LOGS/$1.json"
}
if [ "$MODE" = final ]; then # the final call (recorded for the next session): on the merged tree
    step plant_caught within 15 bash -c plant
    step v_step within 25 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=hot" --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1 --seed $RANDOM
    stepbench step_new "$KT"
    stepbench step_main "$MAIN"
    gu gu_fp8_main fp8 1 "$BASE"
    gu gu_fp8_cluster fp8 1 "$C8"
    # M = 2 (split-K 1, one wave: a cluster of 4; not a default), and 384 CTAs that spread 2-3 an
    # SM evenly (TN 32 x split-K 2 at 134 registers; TN 64 as 4 warps x split-K 4), against the
    # 192 of main's config, whose 60 two-CTA SMs carry twice the bytes of the other 72
    gu gu_m2_main fp8 2 "${C4%,CLUSTER=1}"
    gu gu_m2_c4 fp8 2 "$C4"
    gu gu_384a fp8 1 "$C384A"
    gu gu_384b fp8 1 "$C384B"
    wait
    grep -h -E '^FORMAT=|^ROUTER=' "$LOGS"/gu_*.log "$LOGS"/step_*.log 2>/dev/null
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
step v_c8 within 35 bash -c 'verify_configs "fp8 mxfp4" 1,4,16,64,256 "$C8" && verify_configs mxfp4 1,4,16,64,256 "$C8B"'
# 2. the planted bug must fail verify
step plant_caught within 20 bash -c plant
# 3. gate+up alone at V4 M = 1, main's config beside CLUSTER=1 (one build); 4. the step on this
# build's defaults against main's kt
gu gu_fp8_main fp8 1 "$BASE"
gu gu_fp8_cluster fp8 1 "$C8"
stepbench step_new "$KT"
stepbench step_main "$MAIN"
# 5. the defaults in the pipeline (CLUSTER=1 at M = 1), the other configs, the defaults at E 32
# (CLUSTER=1 where one wave: M 2-16 there, clusters of 8 and 4) and at V4
step v_step within 30 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
    --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1 --seed $RANDOM
# why 2.2x: gate+up FP8 at V4 M = 1 under Nsight Compute (DRAM / L2 throughput, stalls), both paths
for c in main cluster; do
    cfg=$BASE
    [ $c = cluster ] && cfg=$C8
    step ncu_$c within 20 "$KT" profile --ncu --iters 5 --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" --m 1 \
        --config "$cfg"
done
step v_defaults within 20 bash -c 'for f in fp8 mxfp4; do "$KT" verify --family moe_gemm --seed $RANDOM $(shapes $f) \
    --m 1,2,4,16,64,256 || exit 1; done'
step v_c8w_c8n_c4 within 20 bash -c 'verify_configs fp8 1,16 "$C8W" "$C8N" "$C4"'
step v_v4_defaults within 20 "$KT" verify --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" \
    --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 1,2 --seed $RANDOM
# 6. extras: MXFP4 alone, M = 16 with clusters of 4, other cluster shapes at M = 1, the step again
gu gu_mxfp4_main mxfp4 1 "$BASE,BF16=1"
gu gu_mxfp4_cluster mxfp4 1 "$C8B"
gu gu_m16_main fp8 16 "${C4%,CLUSTER=1}"
gu gu_m16_c4 fp8 16 "$C4"
gu gu_c8w fp8 1 "$C8W"
gu gu_c8n fp8 1 "$C8N"
stepbench step_new2 "$KT"
wait
grep -h -E '^FORMAT=|^ROUTER=' "$LOGS"/gu_*.log "$LOGS"/step_*.log 2>/dev/null
grep -h -E 'FAIL|verified' "$LOGS"/plant_caught.log | head -n 4
for c in main cluster; do grep -A14 "^ncu" "$LOGS/ncu_$c.log" 2>/dev/null | head -n 28; done
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
