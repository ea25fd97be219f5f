#!/usr/bin/env bash
# mla19.sh — the nineteenth session's question for a B = 1 cluster merge of more than 8 splits
# (mla19; bench/NOTES.md): what one chunk of 64 slots a CTA costs against one of 32, i.e. whether a
# V4 query cut into 10 splits of one chunk (a cluster of 10, non-portable) could keep main's chain.
# mla_decode's existing configs only (FUSE 0: the split + combine kernels), on the GPU under 45 s:
# (a) kt verify on a fresh seed of CHUNK 64 SPLIT 64 (10 splits of one chunk) over V4 HQ 16 SQ 1/2 and
#     V4 HQ 64, B 1 and 3;
# (b) kt bench in the same run at B = 1: main's default (CHUNK 32 SPLIT 32: 20 splits of one chunk),
#     CHUNK 64 SPLIT 64 (10 of one chunk of 64), CHUNK 32 SPLIT 64 STAGES 3 (10 of two chunks of 32).
# Logs under $OUT/mla19; a PASS/FAIL line per check ("ok"/"FAIL"); "N passed, N failed" last.
#   usage: OUT=DIR tests/gpu/mla19.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${OUT:-/tmp/kt-gpu}/mla19
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-45}
source tests/gpu/step.sh # step NAME CMD...
echo "mla19.sh: seed $SEED, $KT"
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
B1_MAIN=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0 # main's B = 1 default: 20 splits
C64=HPC=16,CHUNK=64,SPLIT=64,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0     # 10 splits of one chunk of 64
S64=HPC=16,CHUNK=32,SPLIT=64,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0     # 10 splits of two chunks of 32
step verify_c64 within 20 "$KT" verify --family mla_decode --seed "$SEED" --config $C64 \
    --shape $V4_16 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --shape $V4_64 --m 1,3
cfg() { within 10 "$KT" bench --family mla_decode --config "$2" --shape "$3" --m 1 --json "$LOGS/$1.json"; }
step bench_v4_main cfg v4_main $B1_MAIN $V4_16
step bench_v4_c64 cfg v4_c64 $C64 $V4_16
step bench_v4_s64 cfg v4_s64 $S64 $V4_16
step bench_v4h64_main cfg v4h64_main $B1_MAIN $V4_64
step bench_v4h64_c64 cfg v4h64_c64 $C64 $V4_64
python3 - "$LOGS" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            print(f"{os.path.basename(f)[:-5]:12s} {r['shape']:34s} B {r['M']:4d} kt_us {r['kt_us']:8.2f} [{r['config']}]")
PY
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
