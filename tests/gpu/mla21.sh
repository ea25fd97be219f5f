#!/usr/bin/env bash
# mla21.sh — the twenty-first session's mla_decode call (mla21; bench/NOTES.md), on the GPU in <= 90 s,
# building nothing (bin/kt, bin/kt_trace and bin/kt_plant_rope from tests/gpu/mla21_builds.sh, and
# bin/mla21_cache.tar.xz, their JIT cache, are carried):
# (a) the phase trace (bin/kt_trace: KT_MLA_TRACE 1) of B = 1 launches under `kt bench`'s graph
#     replays: V4 HQ 16 and V3.2 HQ 128 at main's defaults, V4 HQ 16 with FUSE 2, and WPM 16 (the
#     lever: 16 warps a CTA of 16 heads) at both; tests/gpu/mla_trace.py's medians per phase;
# (b) kt verify on a fresh seed of WPM 16 over V4 / V3.2, HQ 16 / 64 / 128, SQ 1 / 2, B 1 - 128 (the
#     split + combine, the fused merge and the direct write; -1 slots, empty rows, sinks); the planted
#     build (WPM 16's second rope segment reading the first's dims) must fail;
# (c) kt bench at B = 1 (and V4 HQ 16 B = 8) of WPM 16 against main's kt ($KT_MAIN) at main's defaults,
#     in the same call.
# Logs under $OUT/mla21; a PASS/FAIL line per check; "N passed, N failed" last.
#   usage: OUT=DIR KT_MAIN=main/bin/kt tests/gpu/mla21.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
KT_MAIN=${KT_MAIN:-}
LOGS=${OUT:-/tmp/kt-gpu}/mla21
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-88}
source tests/gpu/step.sh # step NAME CMD...
export KT_CACHE_DIR=/tmp/mla21_kt_cache.$$
use_jit_cache bin/mla21_cache.tar.xz "$KT_CACHE_DIR"
echo "mla21.sh: seed $SEED, $KT, main ${KT_MAIN:-none}"
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1 V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1
V4_16S2=LAYOUT=V4,HQ=16,TOPK=512,SQ=2 V32_16S2=LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 V4_128S2=LAYOUT=V4,HQ=128,TOPK=512,SQ=2
B1_MAIN=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # main's V4 B = 1 default: 20 splits
V32_MAIN=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0  # main's V3.2 HQ 128 B = 1 default
B1_FUSE2=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=2   # the fused merge, every CTA a share
W16=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0       # the lever at V4 B = 1
W16_V32=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0  # the lever at V3.2 HQ 128 B = 1
B8_MAIN=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # main's V4 HQ 16 B = 8 default
W16_B8=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0
W16_FUSE2=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=2
W16_DIRECT=HPC=16,CHUNK=32,SPLIT=2048,STAGES=3,PATH=2,WPM=16,MPW=1,FUSE=1 # one split a query: the direct write
# (a) the traces: kt_trace's bench, its mla_tr lines reduced
trace() {
    within 12 ./bin/kt_trace bench --family mla_decode --config "$2" --shape "$3" --m 1 >"$LOGS/$1.raw" 2>&1 &&
        python3 tests/gpu/mla_trace.py "$LOGS/$1.raw" "$1 $3 $2"
}
step trace_v4h16_main trace trace_v4h16_main $B1_MAIN $V4_16
step trace_v4h16_w16 trace trace_v4h16_w16 $W16 $V4_16
step trace_v4h16_fuse2 trace trace_v4h16_fuse2 $B1_FUSE2 $V4_16
step trace_v32h128_main trace trace_v32h128_main $V32_MAIN $V32_128
step trace_v32h128_w16 trace trace_v32h128_w16 $W16_V32 $V32_128
# (b) correctness of WPM 16
ver() { within "$1" "$KT" verify --family mla_decode --seed "$SEED" "${@:2}"; }
step verify_w16 ver 14 --config $W16 --shape $V4_16 --shape $V4_16S2 --shape $V4_64 --shape $V32_16S2 --m 1,3,8
step verify_w16_v32 ver 12 --config $W16_V32 --shape $V32_128 --shape $V4_128S2 --m 1,3
step verify_w16_fuse2 ver 8 --config $W16_FUSE2 --shape $V4_16S2 --shape $V4_64 --m 1,3
step verify_w16_direct ver 16 --config $W16_DIRECT --shape $V4_16S2 --shape $V4_64 --shape $V32_16S2 --shape $V32_128 --m 64,128
# the planted build must fail on a result ("N verified, M failed", M > 0), not on anything else
planted() {
    ! within 10 ./bin/kt_plant_rope verify --family mla_decode --seed "$SEED" --config $W16 --shape $V4_16 --m 1,3 \
        >"$LOGS/planted_rope.out" 2>&1
    local rc=$?
    grep -v '^ok ' "$LOGS/planted_rope.out" | tail -n 3
    [ "$rc" -eq 0 ] && grep -q 'verified, [1-9][0-9]* failed' "$LOGS/planted_rope.out"
}
step planted_rope_fails planted
# (c) B = 1 against main
bench() { within 10 "$1" bench --family mla_decode --config "$3" --shape "$4" --m "${5:-1}" --json "$LOGS/$2.json"; }
[ -n "$KT_MAIN" ] && step bench_main_v4h16 bench "$KT_MAIN" main_v4h16 $B1_MAIN $V4_16
step bench_w16_v4h16 bench "$KT" w16_v4h16 $W16 $V4_16
step bench_w16f2_v4h16 bench "$KT" w16f2_v4h16 $W16_FUSE2 $V4_16
[ -n "$KT_MAIN" ] && step bench_main_v4h64 bench "$KT_MAIN" main_v4h64 $B1_MAIN $V4_64
step bench_w16_v4h64 bench "$KT" w16_v4h64 $W16 $V4_64
[ -n "$KT_MAIN" ] && step bench_main_v32h128 bench "$KT_MAIN" main_v32h128 $V32_MAIN $V32_128
step bench_w16_v32h128 bench "$KT" w16_v32h128 $W16_V32 $V32_128
# where else the one-CTA-an-SM default rule reaches: V3.2 HQ 16 B = 1 (64 CTAs), V4 HQ 16 B = 8 (SPLIT 64: 80)
[ -n "$KT_MAIN" ] && step bench_main_v32h16 bench "$KT_MAIN" main_v32h16 $B1_MAIN LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
step bench_w16_v32h16 bench "$KT" w16_v32h16 $W16 LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
[ -n "$KT_MAIN" ] && step bench_main_v4h16_b8 bench "$KT_MAIN" main_v4h16_b8 $B8_MAIN $V4_16 8
step bench_w16_v4h16_b8 bench "$KT" w16_v4h16_b8 $W16_B8 $V4_16 8
python3 - "$LOGS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"bench {os.path.basename(f)[:-5]:14s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} [{r['config']}]")
PY
rm -rf "$KT_CACHE_DIR"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
