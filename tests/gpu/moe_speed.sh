#!/usr/bin/env bash
# moe_speed.sh — moe_gemm's 16-byte lanes (WIDE=1) and MXFP4's bf16 path (BF16=1) on the GPU.
# MODE=full (the first H200 run, ~340 s):
#   1. kt verify on fresh seeded inputs (outputs poisoned, the float64 model of the same
#      quantised pipeline, rel err < 1e-2, every output written): WIDE=1 in both formats and
#      stages, BF16=1 on MXFP4's, at M 1/16/64/256 and all three routing distributions (E 32,
#      top-6: gate+up N 512 K 2048, down N 1024 K 512); configs that cover split-K 2-8, tiles of
#      16-256 columns, TM 8-64, 1-4 warp groups along K (odd and even k-blocks per CTA); the
#      V4-Flash TP4 shapes (E 256) at M 1 and 64;
#   2. kt bench at V4-Flash TP4 (E 256, top-6, uniform; gate+up N 1024 K 4096, down N 4096 K
#      512), M 1/16/64, the old lanes (WIDE=0) beside WIDE=1 and BF16=1 in the same run; then a
#      short random tune of WIDE=1 / BF16=1 at M 16 and the MoE step (moe_step) on its defaults.
# MODE=s16 (the sixteenth session, under 100 s): moe_route verified (every router, M 1-256) and
#   benched at M 1-64; down's GATHER=1 verified (E 32, 3 distributions, M 1-256 FP8, 1-64 MXFP4)
#   and benched at V4 M 1/16 beside the default; moe_step FP8 benched at M 1/16 (its rel_err
#   checked by bench); MXFP4 gate+up at M 16 with the bf16 issue-rate probe (bench/ceiling.cu);
#   12 random configs at M 1 of GATHER down and FP8 gate+up; MXFP4 4 warps x 1 fragment, ring 2.
# MODE=s16b (the sixteenth session's second run, under 100 s): moe_route verified (3 routers x 3
#   distributions, M 1-256) and moe_step (FP8 uniform, MXFP4 Zipf; M 1/16) after the router's
#   branch-free scores; moe_route and moe_step benched; moe_route M = 1 by record count, router and
#   aligning blocks; ncu of the fused kernel at M = 1.
# MODE=s17 (the seventeenth session, under 100 s): moe_route's SMALL=1 (one warp aligns up to 32
#   slots; the records' places passed by the host) and SPREAD=1 (a lone V4 token's scores over the
#   block's warps) verified exactly (3 routers x 3 distributions,
#   M 1-256, both kernels' paths, the 30- and 32-slot edges) and benched beside SMALL=0; moe_step
#   verified (FP8 uniform, MXFP4 Zipf; M 1/16) and benched; MXFP4 gate+up's new M >= 16 default
#   (256 rows, 8 x 1 warps, ring 2) verified at E 32 (V4 M 16 in moe_step's) and benched beside the old one;
#   ncu of the fused router at M = 1.
# MODE=s17b (the seventeenth session's final call, under 45 s): s17's moe_route verifies (M 1-64)
#   after SMALL's padding rows by expert, then moe_route benched at M 1/4 (default and the old
#   path) and moe_step FP8 at M 1.
# (MODEs s18 / s18b, the eighteenth session's EARLY and PF runs: removed with PF; git history.)
# MODE=quick (the second run, under 120 s: one budget caps every part's timeout): BF16=1
#   verified as in 1 on four configs (its tokens made bf16 once per CTA), then kt bench of the
#   configs dispatch serves untuned (the new defaults) at V4-Flash TP4 (gate+up), moe_step at M
#   1/16, and MXFP4 gate+up with 4 warps of one fragment.
# Logs in $OUT/moe (or $LOGS); a PASS/FAIL line a check; ends with "N passed, N failed".
#   usage: OUT=$OUT [MODE=full] bash tests/gpu/moe_speed.sh [path/to/kt]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOGS=${LOGS:-${OUT:-/tmp}/moe}
mkdir -p "$LOGS"
passed=0 failed=0

MODE=${MODE:-quick}
BUDGET=${BUDGET:-$(case $MODE in quick) echo 112 ;; s16 | s16b | s17) echo 96 ;; s17b) echo 40 ;; *) echo 1000 ;; esac)} # seconds for every part together

# check NAME SECONDS CMD...: runs CMD under timeout (at most what is left of BUDGET) into
# $LOGS/NAME.log; PASS or FAIL (and the tail).
check() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 0 ]; then
        failed=$((failed + 1)); echo "FAIL $name: not run, the budget of ${BUDGET}s is spent"; return
    fi
    local t0=$SECONDS
    echo "\$ $*" >"$LOGS/$name.log"
    if timeout "$limit" "$@" >>"$LOGS/$name.log" 2>&1; then
        passed=$((passed + 1))
        echo "PASS $name ($((SECONDS - t0))s): $(grep -E '^[0-9]+ verified' "$LOGS/$name.log" | tail -n 1)"
    else
        failed=$((failed + 1))
        echo "FAIL $name ($((SECONDS - t0))s, exit $?): see $name.log"
        grep -E '^FAIL|error|fail' "$LOGS/$name.log" | head -n 8
        tail -n 4 "$LOGS/$name.log"
    fi
}
verify() { local name=$1; shift; check "$name" 60 "$KT" verify --family moe_gemm --seed $RANDOM "$@"; }

GU="E=32,N=512,K=2048,TOPK=6"
DN="E=32,N=1024,K=512,TOPK=6"
shapes() { # FORMATS -> --shape args for both stages and all three distributions
    local f d
    for f in $1; do for d in uniform zipf hot; do
        echo "--shape FORMAT=$f,STAGE=gateup,$GU,DIST=$d --shape FORMAT=$f,STAGE=down,$DN,DIST=$d"
    done; done
}
V4GU="E=256,N=1024,K=4096,TOPK=6,DIST=uniform"
V4DN="E=256,N=4096,K=512,TOPK=6,DIST=uniform"
V4S="E=256,HIDDEN=4096,INTER=512"
if [ "$MODE" = s17 ] || [ "$MODE" = s17b ]; then # the seventeenth session's runs (parts in priority order)
    rs=()
    for r in "V4 6" "V3 8" "HASH 6"; do
        # shellcheck disable=SC2086
        set -- $r
        for d in uniform zipf hot; do rs+=(--shape "ROUTER=$1,E=256,TOPK=$2,TM=8,NTM=4,DIST=$d"); done
    done
    # the default (SMALL=1, SPREAD=1) and one sampled config at M 1-256; then SMALL=1 on both
    # kernels' paths and a single aligning block, SPREAD=1 at 4 and 16 warps (2 and 0-1 chains a
    # lane), at M 1-5 (V4/HASH 6-30 slots, V3 8-40: 32 the edge, 40 the grid path)
    ms=1,2,4,5,16,64,256
    [ "$MODE" = s17b ] && ms=1,2,4,5,16,64
    check route_verify 20 "$KT" verify --family moe_route "${rs[@]}" --m $ms --sample 1 --seed $RANDOM
    i=0
    for c in "WARPS=8,FUSED=0,BLOCKS=16,SMALL=1" "WARPS=4,FUSED=1,BLOCKS=1,SMALL=1,SPREAD=1" \
        "WARPS=16,FUSED=1,BLOCKS=4,SMALL=0,SPREAD=1"; do
        i=$((i + 1))
        check "route_small$i" 10 "$KT" verify --family moe_route "${rs[@]}" --m 1,2,4,5 --config "$c" --seed $RANDOM
    done
    if [ "$MODE" = s17b ]; then
        rm -f "$LOGS/step.db"*
        check step_db 8 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 \
            --budget 1 --db "$LOGS/step.db"
        R3="--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform"
        R3="$R3 --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform"
        # shellcheck disable=SC2086
        check route_bench 6 "$KT" bench --family moe_route $R3 --m 1,4 --db "$LOGS/step.db" --json "$LOGS/route.json"
        # shellcheck disable=SC2086
        check route_00 5 "$KT" bench --family moe_route $R3 --m 1,4 --config WARPS=8,FUSED=1,BLOCKS=16,SMALL=0,SPREAD=0 \
            --json "$LOGS/route_00.json"
        check step_bench 8 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" --m 1 \
            --db "$LOGS/step.db" --json "$LOGS/step.json"
        grep -h -E '^ROUTER=' "$LOGS"/route_bench.log "$LOGS"/route_00.log "$LOGS"/step_bench.log 2>/dev/null
        echo "$passed passed, $failed failed ($SECONDS s)"
        [ "$failed" -eq 0 ]
        exit
    fi
    check step_verify 40 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1,16 --seed $RANDOM
    # MXFP4 gate+up's one-CTA SwiGLU tile (the new default at M >= 16 on V4; step_verify runs it at
    # V4 M = 16): E 32, 3 distributions
    T256="TM=8,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=1,WIDE=1,BF16=1"
    gm=()
    for d in uniform zipf hot; do gm+=(--shape "FORMAT=mxfp4,STAGE=gateup,$GU,DIST=$d"); done
    check gu256_verify 15 "$KT" verify --family moe_gemm --seed $RANDOM --config "$T256" --m 1,16,64,256 "${gm[@]}"
    rm -f "$LOGS/step.db"*
    check step_db 8 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 \
        --budget 1 --db "$LOGS/step.db"
    R3="--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform"
    R3="$R3 --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform"
    # shellcheck disable=SC2086
    check route_bench 12 "$KT" bench --family moe_route $R3 --m 1,4,16,64 --db "$LOGS/step.db" --json "$LOGS/route.json"
    # the old path (SMALL=0, SPREAD=0), then SMALL alone
    for c in "SMALL=0,SPREAD=0" "SMALL=1,SPREAD=0"; do
        # shellcheck disable=SC2086
        check "route_${c:6:1}${c:15:1}" 6 "$KT" bench --family moe_route $R3 --m 1,4 \
            --config "WARPS=8,FUSED=1,BLOCKS=16,$c" --json "$LOGS/route_${c:6:1}${c:15:1}.json"
    done
    check step_bench 14 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1,16 --db "$LOGS/step.db" --json "$LOGS/step.json"
    check gu_bench 12 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16,64 \
        --db "$LOGS/step.db" --json "$LOGS/gu_bench.json"
    check gu_old 10 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16,64 \
        --config "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,WIDE=1,BF16=1" --json "$LOGS/gu_old.json"
    check route_ncu 20 "$KT" profile --ncu --iters 5 --family moe_route \
        --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --m 1 --config WARPS=8,FUSED=1,BLOCKS=16,SMALL=1,SPREAD=1
    grep -A12 "^ncu" "$LOGS/route_ncu.log" 2>/dev/null | head -24
    grep -h -E '^FORMAT=|^ROUTER=|MXFP4 on the bf16|^kt: ' "$LOGS"/route_bench.log "$LOGS"/route_[01]*.log \
        "$LOGS"/step_bench.log "$LOGS"/gu_bench.log "$LOGS"/gu_old.log 2>/dev/null
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
if [ "$MODE" = s16b ]; then # the sixteenth session's second run (under 100 s; parts in priority order)
    # moe_route's router scores as branch-free chains (moe_router.h's division and sqrt): every
    # router and distribution, both paths (default + 1 sampled config), M 1-256, ids exact
    rs=()
    for r in "V4 6" "V3 8" "HASH 6"; do
        set -- $r
        for d in uniform zipf hot; do rs+=(--shape "ROUTER=$1,E=256,TOPK=$2,TM=8,NTM=4,DIST=$d"); done
    done
    check route_verify 25 "$KT" verify --family moe_route "${rs[@]}" --m 1,4,16,64,256 --sample 1 --seed $RANDOM
    check step_verify 20 "$KT" verify --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=zipf" --m 1,16 --seed $RANDOM
    rm -f "$LOGS/step.db"*
    check step_db 8 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 \
        --budget 1 --db "$LOGS/step.db"
    check route_bench 12 "$KT" bench --family moe_route --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform \
        --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform --m 1,4,16,64 --db "$LOGS/step.db" \
        --json "$LOGS/route.json"
    check step_bench 18 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1,16 --db "$LOGS/step.db" --json "$LOGS/step.json"
    # where moe_route's M = 1 time goes: one record instead of four (TM 8 only), the hash router
    # (no scores), 1 / 4 aligning blocks; then ncu of the fused kernel at M = 1
    R1="--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=1,DIST=uniform"
    R1="$R1 --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform"
    for b in 16 4 1; do
        # shellcheck disable=SC2086
        check "route_b$b" 6 "$KT" bench --family moe_route $R1 --m 1 --config "WARPS=8,FUSED=1,BLOCKS=$b" \
            --json "$LOGS/route_b$b.json"
    done
    # MXFP4 gate+up at M = 16 with more weights a CTA for the same token prologue: 128 rows as 4 x 2
    # warps (one CTA of 8 warps an SM), and the one-CTA SwiGLU tile of 256 rows (no partials)
    for c in "TN=128,WARPS_N=4,WARPS_K=2,STAGES=4" "TN=256,WARPS_N=8,WARPS_K=1,STAGES=2"; do
        n=$(echo "${c%%,*}" | tr -d '=' | tr 'A-Z' 'a-z')
        check "gu_$n" 10 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16 \
            --config "TM=8,$c,SPLIT=1,WIDE=1,BF16=1" --json "$LOGS/gu_$n.json"
    done
    check route_ncu 25 "$KT" profile --ncu --iters 5 --family moe_route \
        --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --m 1 --config WARPS=8,FUSED=1,BLOCKS=16
    grep -A12 "^ncu" "$LOGS/route_ncu.log" 2>/dev/null | head -24
    grep -h -E '^FORMAT=|^ROUTER=|^kt: ' "$LOGS"/route_bench.log "$LOGS"/step_bench.log "$LOGS"/route_b*.log \
        "$LOGS"/gu_tn*.log 2>/dev/null
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
if [ "$MODE" = s16 ]; then # the sixteenth session's run (under 100 s; parts in priority order)
    # moe_route's records with their geometry computed once a block: every router, both paths
    # (default + 1 sampled config), the records for tiles 8-64, M 1-256
    rs=()
    for r in "V4 6" "V3 8" "HASH 6"; do
        set -- $r
        for d in uniform hot; do rs+=(--shape "ROUTER=$1,E=256,TOPK=$2,TM=8,NTM=4,DIST=$d"); done
    done
    check route_verify 25 "$KT" verify --family moe_route "${rs[@]}" --m 1,4,16,64,256 --sample 1 --seed $RANDOM
    # GATHER=1 (down, a CTA per token): E 32 in all three distributions at M 1-256 (V4: its bench's rel_err)
    G32="TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,GATHER=1"
    gs=()
    for d in uniform zipf hot; do gs+=(--shape "FORMAT=fp8,STAGE=down,$DN,DIST=$d"); done
    check gather_fp8 20 "$KT" verify --family moe_gemm --seed $RANDOM --config "$G32,WIDE=1" --m 1,4,16,64,256 \
        "${gs[@]}"
    gm=()
    for d in uniform zipf hot; do gm+=(--shape "FORMAT=mxfp4,STAGE=down,$DN,DIST=$d"); done
    check gather_mxfp4 15 "$KT" verify --family moe_gemm --seed $RANDOM --config "$G32,WIDE=1" --m 1,16,64 "${gm[@]}"
    rm -f "$LOGS/step.db"*
    check step_db 8 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 \
        --budget 1 --db "$LOGS/step.db"
    check route_bench 12 "$KT" bench --family moe_route --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform \
        --m 1,4,16,64 --db "$LOGS/step.db" --json "$LOGS/route.json"
    check step_bench 18 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" --m 1,16 \
        --db "$LOGS/step.db" --json "$LOGS/step.json"
    # down: the defaults (M = 1: GATHER=1, 32 rows a CTA, 128 CTAs; M = 16: 128 rows a CTA), the old
    # M = 1 default (64 rows, partials; now with the L2 prefetch, which alone should cost nothing)
    # and GATHER at M = 16
    check down_bench 12 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1,16 \
        --db "$LOGS/step.db" --json "$LOGS/down_bench.json"
    check old_down_bench 10 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1 \
        --config "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1" --json "$LOGS/old_down_bench.json"
    check gather_bench 10 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 16 \
        --config "$G32,WIDE=1" --json "$LOGS/gather_bench.json"
    check gather_mx_bench 10 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=down,$V4DN" --m 1 \
        --config "$G32,WIDE=1" --json "$LOGS/gather_mx_bench.json"
    # the MXFP4 issue-rate probe (printed by any moe_gemm bench) beside the default at M 16
    check gu_probe 12 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16 \
        --db "$LOGS/step.db" --json "$LOGS/gu_probe.json"
    # M = 1's configs, 12 random of each space (rings of 6 and 8 now in it): GATHER down, FP8 gate+up
    tune_csv() { # NAME ARGS...: tune into $LOGS/NAME.db, then every measurement as csv
        local name=$1
        shift
        rm -f "$LOGS/$name.db"*
        "$KT" tune --family moe_gemm --strategy random --budget 12 --seed 16 --db "$LOGS/$name.db" "$@" &&
            "$KT" db export --format csv --db "$LOGS/$name.db" >"$LOGS/$name.csv"
    }
    export -f tune_csv
    export KT LOGS
    check tune_dn1 25 bash -c 'tune_csv "$@"' _ tune_dn1 --shape "FORMAT=fp8,STAGE=down,$V4DN" --m 1 \
        --where GATHER=1,WIDE=1,TM=8,SPLIT=1
    check tune_gu1 25 bash -c 'tune_csv "$@"' _ tune_gu1 --shape "FORMAT=fp8,STAGE=gateup,$V4GU" --m 1 --where WIDE=1
    # MXFP4 gate+up with 4 warps x 1 fragment at a ring of 2 (117 registers: 4 CTAs an SM)
    check gu_wn4s2 12 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16 \
        --config "TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=2,SPLIT=1,WIDE=1,BF16=1" --json "$LOGS/gu_wn4s2.json"
    grep -h -E '^FORMAT=|^ROUTER=|MXFP4 on the bf16|^kt: ' "$LOGS"/*_bench.log "$LOGS"/gu_*.log 2>/dev/null
    for t in tune_dn1 tune_gu1; do [ -f "$LOGS/$t.csv" ] && { echo "--- $t"; cat "$LOGS/$t.csv"; }; done
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
if [ "$MODE" = quick ]; then
    B16="WIDE=1,BF16=1"
    # shellcheck disable=SC2046
    verify bf16_all --config "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,$B16" --m 1,16,64,256 $(shapes mxfp4)
    verify bf16_tm16 --config "TM=16,TN=32,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=2,$B16" --m 1,64 \
        --shape "FORMAT=mxfp4,STAGE=gateup,$GU,DIST=uniform" --shape "FORMAT=mxfp4,STAGE=gateup,$GU,DIST=hot"
    verify bf16_tm64 --config "TM=64,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=8,$B16" --m 64,256 \
        --shape "FORMAT=mxfp4,STAGE=gateup,$GU,DIST=hot"
    verify bf16_down --config "TM=16,TN=32,WARPS_N=1,WARPS_K=2,STAGES=1,SPLIT=2,$B16" --m 1,64 \
        --shape "FORMAT=mxfp4,STAGE=down,$DN,DIST=uniform" --shape "FORMAT=mxfp4,STAGE=down,$DN,DIST=hot"
    verify v4_bf16 --config "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,$B16" --m 1,64 \
        --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU"
    # the untuned defaults: a DB with one unrelated moe_route row (as moe_step.sh)
    rm -f "$LOGS/step.db"*
    check step_db 20 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 \
        --budget 1 --db "$LOGS/step.db"
    check bench_gu 45 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" \
        --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 1,16,64 --db "$LOGS/step.db" --json "$LOGS/bench_gu.json"
    check step_bench 30 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
        --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1,16 --db "$LOGS/step.db" --json "$LOGS/step.json"
    # the defaults' down configs ran in the first run as they are; instead MXFP4 gate+up's 4 warps
    # x 1 fragment beside the default's 2 x 2 (1.5-6% faster there with per-warp token conversion)
    check bench_wn4 20 "$KT" bench --family moe_gemm --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16,64 \
        --config "TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=1,$B16" --json "$LOGS/bench_wn4.json"
    grep -h -E '^FORMAT=|^ROUTER=|^kt: moe_gemm' "$LOGS"/bench_gu.log "$LOGS"/step_bench.log "$LOGS"/bench_wn4.log
    echo "$passed passed, $failed failed ($SECONDS s)"
    [ "$failed" -eq 0 ]
    exit
fi
BASE="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1"
# shellcheck disable=SC2046
verify wide_all --config "$BASE,WIDE=1" --m 1,16,64,256 $(shapes "fp8 mxfp4")
# shellcheck disable=SC2046
verify bf16_all --config "$BASE,WIDE=1,BF16=1" --m 1,16,64,256 $(shapes mxfp4)
# configs a stage's shapes fit (kt verify runs what it is given): split-K 2-8, tiles of 16-256
# rows, TM 8-64, 1-4 warp groups along K, rings of 1-4, 1-8 k-blocks a CTA
i=0
while read -r c stages; do
    i=$((i + 1))
    for w in "WIDE=1" "WIDE=1,BF16=1"; do
        f="fp8 mxfp4"
        [ "$w" = "WIDE=1" ] || f=mxfp4
        s=()
        for fmt in $f; do
            for st in $stages; do
                [ "$st" = gateup ] && s+=(--shape "FORMAT=$fmt,STAGE=gateup,$GU,DIST=uniform" \
                    --shape "FORMAT=$fmt,STAGE=gateup,$GU,DIST=hot")
                [ "$st" = down ] && s+=(--shape "FORMAT=$fmt,STAGE=down,$DN,DIST=uniform")
            done
        done
        verify "cfg${i}_${w//[=,]/}" --config "$c,$w" --m 1,64 "${s[@]}"
    done
done <<'EOF'
TM=16,TN=32,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=2 gateup
TM=32,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1 gateup down
TM=8,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=4 gateup down
TM=16,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=1 gateup
TM=64,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=8 gateup
TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=3,SPLIT=2 gateup down
TM=16,TN=32,WARPS_N=1,WARPS_K=2,STAGES=1,SPLIT=2 down
TM=64,TN=16,WARPS_N=1,WARPS_K=4,STAGES=1,SPLIT=1 down
EOF
verify v4_wide --config "$BASE,WIDE=1" --m 1,64 --shape "FORMAT=fp8,STAGE=gateup,$V4GU" \
    --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --shape "FORMAT=fp8,STAGE=down,$V4DN" --shape "FORMAT=mxfp4,STAGE=down,$V4DN"
verify v4_bf16 --config "$BASE,WIDE=1,BF16=1" --m 1,64 --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" \
    --shape "FORMAT=mxfp4,STAGE=down,$V4DN"

# Bench: the configs default_for gives these problems (gate+up: split-K 4 at M = 1, 1 above;
# down: a ring of 2), as they are (WIDE=0) and with the new lanes.
bench() { # NAME CONFIG M SHAPES...
    local name=$1 cfg=$2 m=$3
    shift 3
    local args=() s
    for s in "$@"; do args+=(--shape "$s"); done
    check "bench_$name" 40 "$KT" bench --family moe_gemm "${args[@]}" --m "$m" --config "$cfg" \
        --json "$LOGS/bench_$name.json"
}
GU1="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=4"
GU16="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1"
DNC="TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1"
for w in 0 1 2; do
    case $w in
        0) x="WIDE=0" f="fp8 mxfp4" ;;
        1) x="WIDE=1" f="fp8 mxfp4" ;;
        2) x="WIDE=1,BF16=1" f="mxfp4" ;;
    esac
    gu=() dn=()
    for fmt in $f; do gu+=("FORMAT=$fmt,STAGE=gateup,$V4GU"); dn+=("FORMAT=$fmt,STAGE=down,$V4DN"); done
    bench "gu1_w$w" "$GU1,$x" 1 "${gu[@]}"
    bench "gu_w$w" "$GU16,$x" 16,64 "${gu[@]}"
    bench "dn_w$w" "$DNC,$x" 1,16,64 "${dn[@]}"
done
# M = 1's wave: split-K 4 makes 384 four-warp CTAs for 264 slots (2 an SM), split-K 2 one wave of
# 192; down's 384 CTAs of 64 rows the same, 128 rows a CTA 192.
bench gu1_s2 "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1" 1 "FORMAT=fp8,STAGE=gateup,$V4GU" \
    "FORMAT=mxfp4,STAGE=gateup,$V4GU"
bench gu1_s2_bf16 "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1,BF16=1" 1 "FORMAT=mxfp4,STAGE=gateup,$V4GU"
bench dn_tn128 "TM=8,TN=128,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=1,WIDE=1" 1,16 "FORMAT=fp8,STAGE=down,$V4DN" \
    "FORMAT=mxfp4,STAGE=down,$V4DN"
# one weight fragment a warp (4 warps along N): ~115 registers, 4 CTAs an SM instead of 2, the
# same bytes in flight a warp
bench gu_wn4 "TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=1,WIDE=1" 16,64 "FORMAT=fp8,STAGE=gateup,$V4GU" \
    "FORMAT=mxfp4,STAGE=gateup,$V4GU"
bench gu_wn4_bf16 "TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT=1,WIDE=1,BF16=1" 16,64 "FORMAT=mxfp4,STAGE=gateup,$V4GU"
echo "--- moe_gemm V4-Flash TP4, uniform (kt_us, floor_us, kt/floor; the config last)"
grep -h -E '^FORMAT=' "$LOGS"/bench_*.log | awk '{printf "%-8s %-7s M=%-3s kt %8s floor %7s x%5s  %s\n", \
    substr($1, 8, index($1, ",") - 8), ($1 ~ /gateup/ ? "gateup" : "down"), $2, $3, $4, $5, $NF}' | sort -k1,1 -k2,2 -k3,3

# A short random sweep of the new lanes at M 16 (gate+up FP8 and MXFP4), then the MoE step on
# its defaults (WIDE=0 until this run says otherwise).
rm -f "$LOGS/tune.db"*
check tune_wide 45 "$KT" tune --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" \
    --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16 --strategy random --budget 12 --seed 7 --where WIDE=1 \
    --db "$LOGS/tune.db"
check tune_bench 30 "$KT" bench --family moe_gemm --shape "FORMAT=fp8,STAGE=gateup,$V4GU" \
    --shape "FORMAT=mxfp4,STAGE=gateup,$V4GU" --m 16 --db "$LOGS/tune.db" --json "$LOGS/tune_bench.json"
grep -h -E '^FORMAT=' "$LOGS/tune_bench.log"
# the step on the stages' untuned defaults (a DB with one unrelated moe_route row, as moe_step.sh),
# then at M 16 with the tuned WIDE gate+up winners of tune.db
rm -f "$LOGS/step.db"*
check step_db 20 "$KT" tune --family moe_route --shape ROUTER=V3,E=256,TOPK=8,TM=16,NTM=1,DIST=hot --m 1 --budget 1 \
    --db "$LOGS/step.db"
check step_bench 40 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
    --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 1,16,64 --db "$LOGS/step.db" --json "$LOGS/step.json"
check step_bench_tuned 30 "$KT" bench --family moe_step --shape "ROUTER=V4,FORMAT=fp8,$V4S,DIST=uniform" \
    --shape "ROUTER=V4,FORMAT=mxfp4,$V4S,DIST=uniform" --m 16 --db "$LOGS/tune.db" --json "$LOGS/step_tuned.json"
grep -h -E '^ROUTER|^kt: moe_gemm' "$LOGS/step_bench.log" "$LOGS/step_bench_tuned.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
