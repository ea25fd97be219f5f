#!/usr/bin/env bash
# mla21.sh — the twenty-first session's mla_decode call (mla21; bench/NOTES.md), on the GPU in <= 90 s,
# building nothing (bin/kt and the variants of tests/gpu/mla21_builds.sh, with bin/mla21_cache.tar.xz,
# their JIT cache, are carried):
# (a) kt verify on a fresh seed of this build's B = 1 defaults (the list's L2 prefetch before the PDL
#     wait, the combine's 4 CTAs a row, WPM 16 at V3.2 HQ 128) and of its B = 64 / 128 ones, over V4 /
#     V3.2, HQ 16 / 64 / 128, SQ 1 / 2, B 1 - 128 (-1 slots, empty rows, a query with no slot, sinks);
#     the planted builds (WPM 16's second rope segment reading the first's dims; the combine's 4 CTAs
#     of a row all merging its first 128 dims) must fail on a result;
# (b) kt bench against main's kt ($KT_MAIN) at main's defaults in the same call: B = 1 (V4 HQ 16 / 64,
#     V3.2 HQ 128) and B = 64 (V4 HQ 16); each lever's A/B (bin/kt_noprefetch, bin/kt_z1), and the bf16
#     partials' build (bin/kt_pbf16, verified on its own);
# (c) the phase trace (bin/kt_trace, KT_MLA_TRACE 1) of this build's B = 1 V4 HQ 16 and V3.2 HQ 128
#     launches under kt bench's graph replays (tests/gpu/mla_trace.py's medians per phase).
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
V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1 V32_64S2=LAYOUT=V32,HQ=64,TOPK=100,SQ=2
B1_MAIN=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # the V4 B = 1 default: 20 splits
V32_MAIN=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0  # main's V3.2 HQ 128 B = 1 default
W16_V32=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0  # this build's (WPM 16)
W16=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0       # WPM 16 at V4 (the planted check)
B1_FUSE2=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=2   # the fused merge (the prefetch there too)
B64_V4=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # V4 HQ 16 B = 64's default
B64_V32=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0   # V3.2 HQ 16 B = 64's default
DIRECT=HPC=16,CHUNK=64,SPLIT=1024,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=1   # V4 HQ 64 B = 64's: the direct write
MPW2=HPC=32,CHUNK=32,SPLIT=2048,STAGES=3,PATH=2,WPM=8,MPW=2,FUSE=1     # 32 heads a warp (V3.2 HQ 128 B = 64)
# (a) correctness
ver() { within "$1" "$KT" verify --family mla_decode --seed "$SEED" "${@:2}"; }
step verify_b1 ver 14 --config $B1_MAIN --shape $V4_16 --shape $V4_16S2 --shape $V4_64 --shape $V32_16S2 --m 1,3,8
step verify_v32_w16 ver 10 --config $W16_V32 --shape $V32_128 --shape $V4_128S2 --m 1,3
step verify_fuse2 ver 6 --config $B1_FUSE2 --shape $V4_16S2 --m 1,3
step verify_b64 ver 12 --config $B64_V4 --shape $V4_16 --shape $V4_16S2 --shape $V32_64S2 --m 64,128
step verify_direct ver 12 --config $DIRECT --shape $V4_64 --shape $V4_16S2 --m 64,128
step verify_mpw2 ver 8 --config $MPW2 --shape $V32_128 --m 64
# planted NAME BUILD ARGS...: the build must fail verify on a result ("N verified, M failed", M > 0)
planted() {
    ! within 10 "./bin/$2" verify --family mla_decode --seed "$SEED" "${@:3}" >"$LOGS/$1.out" 2>&1
    local rc=$?
    grep -v '^ok ' "$LOGS/$1.out" | tail -n 3
    [ "$rc" -eq 0 ] && grep -q 'verified, [1-9][0-9]* failed' "$LOGS/$1.out"
}
step planted_rope_fails planted planted_rope kt_plant_rope --config $W16 --shape $V4_16 --m 1,3
step planted_z_fails planted planted_z kt_plant_z --config $B1_MAIN --shape $V4_16 --m 1,3
# the bf16 partials' build (not bin/kt's): its error over the split + combine and the fused merge
step verify_pbf16 within 10 ./bin/kt_pbf16 verify --family mla_decode --seed "$SEED" --config $B1_MAIN --shape $V4_16S2 --shape $V32_16S2 --m 1,3
# (b) speed against main, and each lever's A/B
bench() { within 10 "$1" bench --family mla_decode --config "$3" --shape "$4" --m "${5:-1}" --json "$LOGS/$2.json"; }
main_bench() { [ -z "$KT_MAIN" ] || step "bench_$1" bench "$KT_MAIN" "$@"; }
main_bench main_v4h16 $B1_MAIN $V4_16
step bench_new_v4h16 bench "$KT" new_v4h16 $B1_MAIN $V4_16
main_bench main_v32h128 $V32_MAIN $V32_128
step bench_new_v32h128 bench "$KT" new_v32h128 $W16_V32 $V32_128
main_bench main_v4h64 $B1_MAIN $V4_64
step bench_new_v4h64 bench "$KT" new_v4h64 $B1_MAIN $V4_64
step bench_nopf_v4h16 bench ./bin/kt_noprefetch nopf_v4h16 $B1_MAIN $V4_16
step bench_z1_v4h16 bench ./bin/kt_z1 z1_v4h16 $B1_MAIN $V4_16
step bench_nopf_v32h128 bench ./bin/kt_noprefetch nopf_v32h128 $W16_V32 $V32_128
step bench_pbf16_v4h16 bench ./bin/kt_pbf16 pbf16_v4h16 $B1_MAIN $V4_16
step bench_pbf16_v32h128 bench ./bin/kt_pbf16 pbf16_v32h128 $W16_V32 $V32_128
main_bench main_v4h16_b64 $B64_V4 $V4_16 64
step bench_new_v4h16_b64 bench "$KT" new_v4h16_b64 $B64_V4 $V4_16 64
step bench_pbf16_v4h16_b64 bench ./bin/kt_pbf16 pbf16_v4h16_b64 $B64_V4 $V4_16 64
# (c) the traces: kt_trace's bench, its mla_tr lines reduced
trace() {
    within 12 ./bin/kt_trace bench --family mla_decode --config "$2" --shape "$3" --m 1 >"$LOGS/$1.raw" 2>&1 &&
        python3 tests/gpu/mla_trace.py "$LOGS/$1.raw" "$1 $3 $2"
}
# (traces are diagnostics: where under 14 s are left, skipped and not counted)
late() { [ $((END - SECONDS)) -lt 14 ] && echo "skip $1 (${SECONDS}s of $END)"; }
late trace_v4h16 || step trace_v4h16 trace trace_v4h16 $B1_MAIN $V4_16
late trace_v32h128 || step trace_v32h128 trace trace_v32h128 $W16_V32 $V32_128
python3 - "$LOGS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"bench {os.path.basename(f)[:-5]:16s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} [{r['config']}]")
PY
rm -rf "$KT_CACHE_DIR"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
