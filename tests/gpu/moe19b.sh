#!/usr/bin/env bash
# moe19b.sh — moe_gemm down's CLUSTER=n (the grid's n tiles one thread-block cluster, the token's
# slots combined from each other's shared memory: no partials, fence, counter or atomics) on the
# GPU, under 100 s, parts in priority order:
#   1. kt verify of CLUSTER=6 on fresh seeded inputs (outputs poisoned, the float64 model, rel err
#      < 1e-2, every output written) at E 32 (down N 1024 K 512): top-6 M = 1 (6 tiles), FP8 and
#      MXFP4, all three distributions; CLUSTER=8 at top-8 M = 1 and top-4 M = 2 (hot: two tokens'
#      slots in one tile, tiles past n_tiles in the cluster); main's config (CLUSTER=0, the same
#      kernel's partials path) at M 1/4/16/64/256, both formats, three distributions;
#   2. the planted build (.gpu/moe19b/kt_plant: every slot's sums read from rank 0) must fail verify;
#   3. down alone at V4-Flash TP4 M = 1 (E 256, N 4096, K 512, uniform): main's config (CLUSTER=0)
#      beside CLUSTER=6 in the same build, FP8 and MXFP4;
#   4. moe_step at V4 M = 1, FP8 and MXFP4, on this build's defaults (down CLUSTER=6) and on main's
#      kt (.gpu/moe19b/kt_main, de75229) in the same call;
#   5. moe_step verified at V4 M = 1 (FP8 uniform and hot, MXFP4 zipf: CLUSTER=6 in the pipeline);
#      main's config (the partials path) verified at M 1-256; down alone at V4 M = 1 in 192 and 768
#      CTAs (clusters of 6, verified first at E 32); ncu of down FP8 at V4 M = 1, both paths.
# Needs bin/ lib/ and .gpu/moe19b/ (kt_main, kt_plant, jit.tar.xz: git-ignored, carried). Logs in
# $OUT/moe19b (or $LOGS); an "ok"/"FAIL" line a check; ends with "N passed, N failed".
#   usage: OUT=$OUT bash tests/gpu/moe19b.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt} MAIN=${MAIN:-.gpu/moe19b/kt_main} PLANT=${PLANT:-.gpu/moe19b/kt_plant}
# the two builds in .gpu/ find lib/libcjson.so.1 through this (their rpath is $ORIGIN/../lib)
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODE=${MODE:-checkpoint}
LOGS=${LOGS:-${OUT:-/tmp}/moe19b}
END=${KT_MOE19B_END_S:-96}
source tests/gpu/step.sh # step, within
use_jit_cache .gpu/moe19b/jit.tar.xz /tmp/moe19b_jit # this build's sm_90 cubins of the configs below

DN="E=32,N=1024,K=512"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
BASE="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,EARLY=1" # main's V4 M = 1 down
C6="$BASE,CLUSTER=6"
C8="$BASE,CLUSTER=8"
# fewer, wider CTAs (192: TN 128 as 4 x 1 warps, each warp all 4 k-blocks in its ring) and more,
# narrower (768 of 64 threads: TN 32 as 1 x 2 warps, 6 an SM), both clusters of 6
C6W="TM=8,TN=128,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=1,WIDE=1,EARLY=1,CLUSTER=6"
C6N="TM=8,TN=32,WARPS_N=1,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,EARLY=1,CLUSTER=6"
for c in "$C6" "$BASE" "$C8" "$C6W" "$C6N"; do
    timeout 60 "$KT" compile --family moe_gemm --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 60 "$PLANT" compile --family moe_gemm --arch sm_90 --config "$C6" >/dev/null 2>&1 &
timeout 60 "$MAIN" compile --family moe_gemm --arch sm_90 --config "$BASE" >/dev/null 2>&1 &

# 1. correctness (timeout runs programs: the functions run in bash -c)
export KT PLANT DN BASE C6 C8 C6W C6N
shapes() { # FORMATS TOPK -> down --shape args, all three distributions
    local f d
    for f in $1; do for d in uniform zipf hot; do echo "--shape FORMAT=$f,STAGE=down,$DN,TOPK=$2,DIST=$d"; done; done
}
verify_cfg() { # FORMATS TOPK M CONFIG
    # shellcheck disable=SC2046
    "$KT" verify --family moe_gemm --seed $RANDOM --config "$4" $(shapes "$1" "$2") --m "$3"
}
plant() { # the planted build's verify must run and report failed problems
    local out rc
    out=$("$PLANT" verify --family moe_gemm --seed $RANDOM --config "$C6" \
        --shape "FORMAT=fp8,STAGE=down,$DN,TOPK=6,DIST=uniform" --m 1 2>&1)
    rc=$?
    echo "$out" | grep -E 'FAIL|verified' | head -n 4
    echo "planted build's verify: exit $rc"
    [ "$rc" -ne 0 ] && echo "$out" | grep -qE '^[0-9]+ verified, [1-9][0-9]* failed'
}
export -f shapes verify_cfg plant
dn() { # NAME FORMAT CONFIG: down alone at V4-Flash TP4 M = 1
    step "$1" within 10 "$KT" bench --family moe_gemm --shape "FORMAT=$2,STAGE=down,$V4DN" --m 1 --config "$3" \
        --json "$LOGS/$1.json"
}
stepbench() { # NAME KT: moe_step at V4 M = 1, FP8 and MXFP4, that kt's defaults
    step "$1" within 14 "$2" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1 --json "$LOGS/$1.json"
}
vstep() { # moe_step verified at V4 M = 1 on this build's defaults
    step v_step within 30 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=hot" --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1 --seed $RANDOM
}
if [ "$MODE" = final ]; then # the final call (recorded for the next session): on the merged tree
    step plant_caught within 15 bash -c plant
    vstep
    stepbench step_new "$KT"
    stepbench step_main "$MAIN"
    dn dn_fp8_main fp8 "$BASE"
    dn dn_fp8_c6 fp8 "$C6"
    wait
    grep -h -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/step_*.log 2>/dev/null
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
step v_c6 within 25 bash -c 'verify_cfg "fp8 mxfp4" 6 1 "$C6"'
step v_c8 within 15 bash -c 'verify_cfg "fp8 mxfp4" 8 1 "$C8" && verify_cfg "fp8 mxfp4" 4 2 "$C8"'
# 2. the planted bug must fail verify
step plant_caught within 15 bash -c plant
# 3. down alone at V4 M = 1, main's config beside CLUSTER=6 (one build); 4. the step on this
# build's defaults against main's kt
dn dn_fp8_main fp8 "$BASE"
dn dn_fp8_c6 fp8 "$C6"
stepbench step_new "$KT"
stepbench step_main "$MAIN"
dn dn_mxfp4_main mxfp4 "$BASE"
dn dn_mxfp4_c6 mxfp4 "$C6"
# 5. the new default in the pipeline, main's config (the partials path) over M 1-256, ncu, the
# step again
vstep
step v_base within 25 bash -c 'verify_cfg "fp8 mxfp4" 6 1,4,16,64,256 "$BASE"'
step v_c6wn within 15 bash -c 'verify_cfg fp8 6 1 "$C6W" && verify_cfg fp8 6 1 "$C6N"'
dn dn_fp8_c6w fp8 "$C6W"
dn dn_fp8_c6n fp8 "$C6N"
for c in main c6; do
    cfg=$BASE
    [ $c = c6 ] && cfg=$C6
    step ncu_$c within 15 "$KT" profile --ncu --iters 5 --family moe_gemm --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1 \
        --config "$cfg"
done
wait
grep -h -E '^FORMAT=|^ROUTER=' "$LOGS"/dn_*.log "$LOGS"/step_*.log 2>/dev/null
grep -h -E 'FAIL|verified' "$LOGS"/plant_caught.log | head -n 4
for c in main c6; do grep -A14 "^ncu" "$LOGS/ncu_$c.log" 2>/dev/null | head -n 28; done
echo "$passed passed, $failed failed ($SECONDS s)"
[ "$failed" -eq 0 ]
