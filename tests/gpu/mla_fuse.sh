#!/usr/bin/env bash
# mla_fuse.sh — issue 20's combine folded into mla_decode's split kernel (FUSE 1/2), its merge
# rewritten to keep a batch of loads in flight (the eighteenth session's second wave, mla18b;
# bench/NOTES.md), on the GPU in one call under 90 s:
# (a) kt verify on fresh seeds of FUSE 1 (the group's last CTA merges: 4 splits at B >= 3, 16-20
#     at B = 8 / HPC 32) and FUSE 2 (every CTA a share, B = 1-3) over the issue's cases (-1 slots,
#     empty requests, a query with no slot, SQ 2, sinks, the direct write at top-k 100);
# (b) two planted bugs (bin/kt_plant_*, from tests/gpu/mla_fuse_prep.sh) kt verify must fail on:
#     `stale` (FUSE 1's second batch of items merges the first's loads), `norearm` (the last CTA
#     leaves its group's counter armed: the next launch's tickets are off);
# (c) kt bench A/B of FUSE 0 (split + combine kernel, main's default) against FUSE 1 (B = 64) and
#     FUSE 2 (B = 1) on the defaults' configs, and main's FUSE 1 (the old merge loop) at B = 64.
# Every part runs under a timeout that ends it before $KT_MLA_END_S (86) seconds. Logs under
# $OUT/mla18b; a PASS/FAIL line per check ("ok"/"FAIL"); "N passed, N failed" last.
#   usage: OUT=DIR tests/gpu/mla_fuse.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
KT_MAIN=${KT_MAIN:-.gpu/kt_main}
LOGS=${OUT:-/tmp/kt-gpu}/mla18b
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-86}
source tests/gpu/step.sh # step NAME CMD...
echo "mla_fuse.sh: seed $SEED, $KT, main $KT_MAIN"
use_jit_cache .gpu/cache.tar.xz /tmp/kt-mla-cache # this script's cubins, built ahead
v() { within 25 "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
# the defaults' configs (kernels/mla_decode.c default_for, 132 SMs) with FUSE n appended
B64_V4=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1     # V4 HQ 16 B = 64: 4 splits
B64_V32=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1    # V3.2 HQ 16 B = 64: 4 splits
B1_16=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1       # B = 1 at HPC 16: 20 / 64 splits
B1_V32_128=HPC=32,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=8,MPW=2 # V3.2 HQ 128 B = 1: 16 splits
# (a) correctness
step verify_fuse1_v4 v --config $B64_V4,FUSE=1 --shape $V4_16 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 3,64,128
step verify_fuse1_v32 v --config $B64_V32,FUSE=1 --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 \
    --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --shape LAYOUT=V4,HQ=64,TOPK=1152,SQ=1 --m 3,64
step verify_fuse2 v --config $B1_16,FUSE=2 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --shape $V4_64 --shape $V32_16 --m 1,3,8
step verify_fuse2_h128 v --config $B1_V32_128,FUSE=2 --shape $V32_128 --shape LAYOUT=V4,HQ=128,TOPK=512,SQ=2 --m 1,3
# (b) planted bugs: verify must fail (and on a result, not a launch error)
planted() { # NAME CONFIG SHAPE M: passes where verify fails with a mismatch
    local b=bin/kt_plant_$1
    [ -x "$b" ] || { echo "missing $b (tests/gpu/mla_fuse_prep.sh builds it)"; return 1; }
    if KT=$b within 20 "$b" verify --family mla_decode --seed "$SEED" --config "$2" --shape "$3" --m "$4"; then
        echo "planted bug $1 NOT caught"
        return 1
    fi
    echo "planted bug $1 caught"
}
step plant_stale planted stale $B64_V4,FUSE=1 $V4_16 3
step plant_norearm planted norearm $B64_V4,FUSE=1 $V4_16 3
# (c) speed: FUSE 0 against FUSE 1 / 2 on the same config
cfg() { within 15 "${5:-$KT}" bench --family mla_decode --config "$2" --shape "$3" --m "$4" --json "$LOGS/$1.json"; }
step bench_v4_b64_f0 cfg v4_b64_f0 $B64_V4,FUSE=0 $V4_16 64
step bench_v4_b64_f1 cfg v4_b64_f1 $B64_V4,FUSE=1 $V4_16 64
step bench_v4_b1_f0 cfg v4_b1_f0 $B1_16,FUSE=0 $V4_16 1
step bench_v4_b1_f2 cfg v4_b1_f2 $B1_16,FUSE=2 $V4_16 1
step bench_v32_b64_f0 cfg v32_b64_f0 $B64_V32,FUSE=0 $V32_16 64
step bench_v32_b64_f1 cfg v32_b64_f1 $B64_V32,FUSE=1 $V32_16 64
step bench_v4h64_b1_f0 cfg v4h64_b1_f0 $B1_16,FUSE=0 $V4_64 1
step bench_v4h64_b1_f2 cfg v4h64_b1_f2 $B1_16,FUSE=2 $V4_64 1
step bench_v32h128_b1_f0 cfg v32h128_b1_f0 $B1_V32_128,FUSE=0 $V32_128 1
step bench_v32h128_b1_f2 cfg v32h128_b1_f2 $B1_V32_128,FUSE=2 $V32_128 1
if [ -x "$KT_MAIN" ]; then # main's merge loop (one round trip a split), the before of FUSE 1
    step bench_v4_b64_f1_main cfg v4_b64_f1_main $B64_V4,FUSE=1 $V4_16 64 "$KT_MAIN"
fi
python3 - "$LOGS" <<'EOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"{os.path.basename(f)[:-5]:22s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} "
                  f"(min {r.get('kt_us_min', float('nan')):.2f}) [{r['config']}]")
EOF
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
