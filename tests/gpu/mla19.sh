#!/usr/bin/env bash
# mla19.sh — issue 20's B = 1 lever of the nineteenth session (mla19; bench/NOTES.md): mla_decode's
# splits of a (query, head group) as one thread-block cluster that merges them through distributed
# shared memory (CLUSTER 2/4/8: no combine kernel), on the GPU in one call under 95 s:
# (a) kt verify on fresh seeds of CLUSTER 8/4/2 over V4 HQ 16/64 (SQ 1/2), V3.2 HQ 128/16/64 (top-k
#     2048 and 100, SQ 1/2), B 1-64: -1 slots, empty requests, a query with no valid slot, sinks, the
#     cluster's padding CTAs (7 splits in 8), 128 and 256 threads, HPC 32 (MPW 2), and a config whose
#     merge area is larger than its chunk's shared memory (CHUNK 16);
# (b) a planted bug (bin/kt_plant_skip, from tests/gpu/mla19_prep.sh) kt verify must fail on: the
#     merge skips peer 0;
# (c) kt bench A/B in the same run: main's default configs (the split + combine kernels) against
#     the same split with CLUSTER 0 and with the cluster merge, at B = 64 (4 splits: CLUSTER 4) and 1.
# Logs under $OUT/mla19; a PASS/FAIL line per check ("ok"/"FAIL"); "N passed, N failed" last.
#   usage: OUT=DIR tests/gpu/mla19.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${OUT:-/tmp/kt-gpu}/mla19
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-95}
source tests/gpu/step.sh # step NAME CMD...
echo "mla19.sh: seed $SEED, $KT"
use_jit_cache .gpu/mla19_cache.tar.xz /tmp/kt-mla19-cache # this script's cubins, built ahead
v() { within 20 "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
# main's defaults (kernels/mla_decode.c default_for, 132 SMs)
B1_MAIN=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0    # V4 B = 1: 20 splits of one chunk
B1_V32_MAIN=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0 # V3.2 HQ 128 B = 1: 16 splits
B64_MAIN=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0  # V4 HQ 16 B = 64: 4 splits
B64_V32_MAIN=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0 # V3.2 HQ 16 B = 64: 4 splits
# the splits a portable cluster holds (CLUSTER appended)
S96=HPC=16,CHUNK=32,SPLIT=96,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0      # V4: 7 splits of 3 chunks
C64=HPC=16,CHUNK=64,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0     # V4: 5 splits of 2 chunks of 64
S256=HPC=16,CHUNK=32,SPLIT=256,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0    # V3.2 2048: 8 splits of 8 chunks
# (a) correctness
step verify_s96_c8 v --config $S96,CLUSTER=8 --shape $V4_16 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --shape $V4_64 --m 1,3,8
step verify_s256_c8 v --config $S256,CLUSTER=8 --shape $V32_128 --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --m 1,8
step verify_c4_topk100 v --config HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0,CLUSTER=4 \
    --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 1,8
step verify_chunk16_c8 v --config HPC=16,CHUNK=16,SPLIT=96,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0,CLUSTER=8 \
    --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 1,8
step verify_mpw2_c8 v --config HPC=32,CHUNK=32,SPLIT=256,STAGES=2,PATH=2,WPM=8,MPW=2,FUSE=0,CLUSTER=8 \
    --shape $V32_128 --shape LAYOUT=V4,HQ=128,TOPK=1152,SQ=1 --m 1,3
step verify_c2_c4 v --config HPC=16,CHUNK=64,SPLIT=384,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0,CLUSTER=2 \
    --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 1,8
step verify_b64_c4 v --config $B64_MAIN,CLUSTER=4 --shape $V4_16 --m 64
step verify_b64_v32_c4 v --config $B64_V32_MAIN,CLUSTER=4 --shape $V32_16 --m 64
# (b) the planted bug: verify must fail (on a result, not a launch error)
planted() { # NAME CONFIG SHAPE M: passes where verify fails on a result (not a launch error)
    local b=bin/kt_plant_$1 log=$LOGS/plant_$1.out
    [ -x "$b" ] || { echo "missing $b (tests/gpu/mla19_prep.sh builds it)"; return 1; }
    if within 15 "$b" verify --family mla_decode --seed "$SEED" --config "$2" --shape "$3" --m "$4" >"$log" 2>&1; then
        cat "$log"
        echo "planted bug $1 NOT caught"
        return 1
    fi
    cat "$log"
    grep -qE 'relative error|is NaN|unwritten|expected' "$log" || { echo "planted bug $1: verify failed, not on a result"; return 1; }
    echo "planted bug $1 caught"
}
step plant_skip planted skip $S96,CLUSTER=8 $V4_16 1
# (c) speed: main's default, the cluster's split with the combine kernel (CLUSTER 0), with the cluster
cfg() { within 12 "$KT" bench --family mla_decode --config "$2" --shape "$3" --m "$4" --json "$LOGS/$1.json"; }
step bench_v4_b64_main cfg v4_b64_main $B64_MAIN $V4_16 64
step bench_v4_b64_c4 cfg v4_b64_c4 $B64_MAIN,CLUSTER=4 $V4_16 64
step bench_v32_b64_main cfg v32_b64_main $B64_V32_MAIN $V32_16 64
step bench_v32_b64_c4 cfg v32_b64_c4 $B64_V32_MAIN,CLUSTER=4 $V32_16 64
step bench_v4_b1_main cfg v4_b1_main $B1_MAIN $V4_16 1
step bench_v4_b1_s96_c0 cfg v4_b1_s96_c0 $S96,CLUSTER=0 $V4_16 1
step bench_v4_b1_s96_c8 cfg v4_b1_s96_c8 $S96,CLUSTER=8 $V4_16 1
step bench_v4_b1_c64_c0 cfg v4_b1_c64_c0 $C64,CLUSTER=0 $V4_16 1
step bench_v4_b1_c64_c8 cfg v4_b1_c64_c8 $C64,CLUSTER=8 $V4_16 1
step bench_v4h64_b1_main cfg v4h64_b1_main $B1_MAIN $V4_64 1
step bench_v4h64_b1_s96_c8 cfg v4h64_b1_s96_c8 $S96,CLUSTER=8 $V4_64 1
step bench_v32h128_b1_main cfg v32h128_b1_main $B1_V32_MAIN $V32_128 1
step bench_v32h128_b1_s256_c0 cfg v32h128_b1_s256_c0 $S256,CLUSTER=0 $V32_128 1
step bench_v32h128_b1_s256_c8 cfg v32h128_b1_s256_c8 $S256,CLUSTER=8 $V32_128 1
python3 - "$LOGS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"{os.path.basename(f)[:-5]:24s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} "
                  f"(min {r.get('kt_us_min', float('nan')):.2f}) [{r['config']}]")
PY
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
