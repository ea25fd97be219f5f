#!/usr/bin/env bash
# mla19b.sh — mla_decode's WS tunable (whole q . k scores a warp, kept in registers: bench/NOTES.md,
# nineteenth session, second wave) on the GPU, one call under 100 s:
# (a) kt verify of WS=1 on fresh seeds: SQ 1 and 2, HQ 16 / 64 / 128, both layouts, -1 slots, empty
#     requests, a query with no slot (B >= 8 at SQ 2), sinks; HPC 32 (two m-fragments), WPM 8
#     (CHUNK 64), the one-split direct write (FUSE 1);
# (b) a planted bug (bin/kt_plant_ws: one score column of each warp's 8 tokens dropped) must FAIL
#     verify;
# (c) kt bench A/B in this run: main's default config of each case (WS 0: its SASS is main's) against
#     WS 1 at the same grid, V4 HQ 16 B 1 / 64, V4 HQ 64 B 1 / 64, V3.2 HQ 16 B 64, V3.2 HQ 128 B 1.
# Every part under a timeout that ends it before $KT_MLA_END_S (92) seconds. Logs under $OUT/mla19b;
# a PASS/FAIL line per check; "N passed, N failed" last. Build ahead: bash tests/gpu/mla19b_prep.sh
#   usage: OUT=DIR tests/gpu/mla19b.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${OUT:-/tmp/kt-gpu}/mla19b
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-92}
source tests/gpu/step.sh # step NAME CMD...
echo "mla19b.sh: seed $SEED, $KT"
use_jit_cache .gpu/mla19b_cache.tar.xz /tmp/kt-mla19b-cache # the cubins, built ahead
v() { within 20 "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
P=STAGES=2,PATH=2,MPW=1
WS_S128=HPC=16,CHUNK=32,SPLIT=128,$P,WPM=4,FUSE=0,WS=1
WS_S512=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,MPW=1,WPM=4,FUSE=0,WS=1
WS_H32=HPC=32,CHUNK=32,SPLIT=128,$P,WPM=4,FUSE=0,WS=1
WS_W8=HPC=16,CHUNK=64,SPLIT=1024,$P,WPM=8,FUSE=1,WS=1
# (a)
step verify_ws_v4 v --config $WS_S128 --shape $V4_16 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 3,8,64
step verify_ws_v32 v --config $WS_S512 --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --shape $V32_128 --m 1,3,8
step verify_ws_hpc32 v --config $WS_H32 --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=2 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 8
step verify_ws_w8_direct v --config $WS_W8 --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=2 --m 3,64 --shape $V4_16
# (b) the planted build must fail
planted() { # a wrong result, not any failure
    if KT=./bin/kt_plant_ws v --config $WS_S128 --shape $V4_16 --m 3,8 >"$LOGS/plant_verify.log" 2>&1; then
        cat "$LOGS/plant_verify.log" && echo "the planted bug passed verify" && return 1
    fi
    cat "$LOGS/plant_verify.log"
    grep -q "wrong-result" "$LOGS/plant_verify.log" && echo "the planted bug failed verify on a wrong result, as it must"
}
step plant_ws_fails planted
# (c) A/B: main's default (WS 0) then WS 1, the same grid (the issue's B = 64 cases first)
cfg() { within 12 "$KT" bench --family mla_decode --config "$2" --json "$LOGS/$1.json" "${@:3}"; }
M8=$P,WPM=8,FUSE=0,WS=0 M4=$P,WPM=4,FUSE=0,WS=1
step v4h16_b64_main cfg v4h16_b64_main HPC=16,CHUNK=32,SPLIT=160,$M8 --shape $V4_16 --m 64
step v4h16_b64_ws cfg v4h16_b64_ws HPC=16,CHUNK=32,SPLIT=160,$M4 --shape $V4_16 --m 64
step b1_main cfg b1_main HPC=16,CHUNK=32,SPLIT=32,$M8 --shape $V4_16 --shape $V4_64 --m 1
step b1_ws cfg b1_ws HPC=16,CHUNK=32,SPLIT=32,$M4 --shape $V4_16 --shape $V4_64 --m 1
step v32h16_b64_main cfg v32h16_b64_main HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,MPW=1,WPM=8,FUSE=0,WS=0 --shape $V32_16 --m 64
step v32h16_b64_ws cfg v32h16_b64_ws $WS_S512 --shape $V32_16 --m 64
step v4h64_b64_main cfg v4h64_b64_main HPC=16,CHUNK=64,SPLIT=1024,$P,WPM=8,FUSE=1,WS=0 --shape $V4_64 --m 64
step v4h64_b64_ws cfg v4h64_b64_ws $WS_W8 --shape $V4_64 --m 64
step v32h128_b1_main cfg v32h128_b1_main HPC=16,CHUNK=32,SPLIT=128,$M8 --shape $V32_128 --m 1
step v32h128_b1_ws cfg v32h128_b1_ws HPC=16,CHUNK=32,SPLIT=128,$M4 --shape $V32_128 --m 1
step v4h16_b64_ws128 cfg v4h16_b64_ws128 $WS_S128 --shape $V4_16 --m 64
# The table: per case, main's default and WS 1 in this run, us (x roof)
table() {
    python3 - "$LOGS" <<'PY'
import glob, json, os, sys
runs = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            runs.setdefault((r["shape"], r["M"]), []).append((os.path.basename(f)[:-5], r))
print("| case | B | roof | run: kt_us (x roof) [config] |")
for (shape, m), rs in sorted(runs.items()):
    roof = rs[0][1].get("roof_us") or rs[0][1]["floor_us"]
    cells = "; ".join(f"{n}: {r['kt_us']:.2f} ({r['kt_us'] / roof:.2f}) [{r['config']}]" for n, r in rs)
    print(f"| {shape} | {m} | {roof:.2f} | {cells} |")
PY
}
step table table
cat "$LOGS/table.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
