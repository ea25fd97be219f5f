#!/usr/bin/env bash
# mla21.sh — the twenty-first session's mla_decode check (mla21; bench/NOTES.md), on the GPU in <= 60 s
# with bin/kt only (built in the tree it runs from; the extra builds of the checkpoints, the trace's
# bin/kt_trace and the planted bin/kt_plant_rope, come from tests/gpu/mla21_builds.sh and are used
# where present):
# (a) kt verify on a fresh seed of WPM 16 (16 warps a CTA of 16 heads, the new default of V3.2 HQ 128
#     B = 1): SPLIT 128 over V3.2 HQ 128 SQ 1 / 2 and V4 HQ 128 SQ 2 at B 1, 3 (the default's config),
#     SPLIT 32 over V4 HQ 16 SQ 2, V4 HQ 64 and V3.2 HQ 16 SQ 2 at B 1, 3, 8, the direct write at B 64,
#     128 (-1 slots, empty rows, a query with no slot, sinks); the planted build must fail (if present);
# (b) kt bench at B = 1 against main's kt ($KT_MAIN) in the same call: V3.2 HQ 128 (main's default WPM 8
#     against WPM 16) and V4 HQ 16 (the same config: unchanged);
# (c) the phase trace of both B = 1 defaults where bin/kt_trace is present.
# Logs under $OUT/mla21; a PASS/FAIL line per check; "N passed, N failed" last.
#   usage: OUT=DIR KT_MAIN=main/bin/kt tests/gpu/mla21.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
KT_MAIN=${KT_MAIN:-}
LOGS=${OUT:-/tmp/kt-gpu}/mla21
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-58}
source tests/gpu/step.sh # step NAME CMD...
use_jit_cache bin/mla21_cache.tar.xz /tmp/mla21_kt_cache.$$ # (a miss where the tree's sources differ)
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/mla21_kt_cache.$$}
echo "mla21.sh: seed $SEED, $KT, main ${KT_MAIN:-none}"
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1 V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1
V4_16S2=LAYOUT=V4,HQ=16,TOPK=512,SQ=2 V32_16S2=LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 V4_128S2=LAYOUT=V4,HQ=128,TOPK=512,SQ=2
V32_128S2=LAYOUT=V32,HQ=128,TOPK=2048,SQ=2
B1_MAIN=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # the V4 B = 1 default: 20 splits
V32_MAIN=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0  # main's V3.2 HQ 128 B = 1 default
W16_V32=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0  # this branch's (WPM 16)
W16=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=16,MPW=1,FUSE=0       # WPM 16 at one chunk a CTA
W16_DIRECT=HPC=16,CHUNK=32,SPLIT=2048,STAGES=3,PATH=2,WPM=16,MPW=1,FUSE=1 # one split a query: the direct write
# (a) correctness
ver() { within "$1" "$KT" verify --family mla_decode --seed "$SEED" "${@:2}"; }
step verify_v32_w16 ver 20 --config $W16_V32 --shape $V32_128 --shape $V32_128S2 --shape $V4_128S2 --m 1,3
step verify_w16 ver 20 --config $W16 --shape $V4_16S2 --shape $V4_64 --shape $V32_16S2 --m 1,3,8
step verify_w16_direct ver 20 --config $W16_DIRECT --shape $V4_64 --shape $V32_16S2 --m 64,128
# the planted build (WPM 16's second rope segment reading the first's dims) fails on a result
planted() {
    ! within 10 ./bin/kt_plant_rope verify --family mla_decode --seed "$SEED" --config $W16 --shape $V4_16 --m 1,3 \
        >"$LOGS/planted_rope.out" 2>&1
    local rc=$?
    grep -v '^ok ' "$LOGS/planted_rope.out" | tail -n 3
    [ "$rc" -eq 0 ] && grep -q 'verified, [1-9][0-9]* failed' "$LOGS/planted_rope.out"
}
[ -x bin/kt_plant_rope ] && step planted_rope_fails planted
# (b) speed against main
bench() { within 12 "$1" bench --family mla_decode --config "$3" --shape "$4" --m 1 --json "$LOGS/$2.json"; }
[ -n "$KT_MAIN" ] && step bench_main_v32h128 bench "$KT_MAIN" main_v32h128 $V32_MAIN $V32_128
step bench_new_v32h128 bench "$KT" new_v32h128 $W16_V32 $V32_128
[ -n "$KT_MAIN" ] && step bench_main_v4h16 bench "$KT_MAIN" main_v4h16 $B1_MAIN $V4_16
step bench_new_v4h16 bench "$KT" new_v4h16 $B1_MAIN $V4_16
# (c) the traces (diagnostics: only with bin/kt_trace and 14 s left)
trace() {
    within 12 ./bin/kt_trace bench --family mla_decode --config "$2" --shape "$3" --m 1 >"$LOGS/$1.raw" 2>&1 &&
        python3 tests/gpu/mla_trace.py "$LOGS/$1.raw" "$1 $3 $2"
}
for t in "trace_v32h128 $W16_V32 $V32_128" "trace_v4h16 $B1_MAIN $V4_16"; do
    set -- $t
    [ -x bin/kt_trace ] && [ $((END - SECONDS)) -ge 14 ] && step "$1" trace "$@"
done
python3 - "$LOGS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"bench {os.path.basename(f)[:-5]:14s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} [{r['config']}]")
PY
[ "$KT_CACHE_DIR" = /tmp/mla21_kt_cache.$$ ] && rm -rf "$KT_CACHE_DIR"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
