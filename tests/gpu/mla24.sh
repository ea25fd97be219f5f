#!/usr/bin/env bash
# mla24.sh — the twenty-fourth session's mla_decode check (mla24; bench/NOTES.md), on the H200 in
# <= 120 s, every part under its own timeout and later parts skipped past their start budget. The
# lever: the tunable PART (0: f32 partial sums, main's code, the default; 1: bf16 partial sums, the
# (m, l) pairs f32), off by default:
#  1. kt verify on a fresh seed of PART=1 (side by side): the B = 1 served config (20 splits) with FUSE
#     0 / 1 / 2 over V4 HQ 16 SQ 1 / 2, V4 HQ 64, V3.2 HQ 16 SQ 2 at B 1, 3, 8; V3.2 HQ 128's (WPM 16)
#     SQ 1 / 2 at B 1, 3 (SQ 1 at 8 too), FUSE 0 / 1 / 2; B = 64's (SPLIT 160; V3.2: SPLIT 512 STAGES 3; V3.2 HQ 128:
#     SPLIT 1024 HPC 32 MPW 2) FUSE 0 / 1; PATH 0 (FUSE 1) and PATH 3 (FUSE 2) over V4 HQ 64 and V3.2 HQ 16
#     SQ 2 at B 1, 3; a sample of the PART=1 space; the served defaults (PART 0)
#     at B 1, 64; (there is no CLUSTER in this family);
#  2. bin/kt_plant (tests/gpu/mla24_builds.sh: PART=1 STAGES=3 head group 1's bf16 sums stored as
#     zeros) must fail on a result at V4 HQ 64, and pass with STAGES=2 (the plant inert);
#  3. kt bench of V4 HQ 16 B 1, V4 HQ 64 B 1, V3.2 HQ 128 B 1, V4 HQ 16 B 64: main's kt ($KT_MAIN) in
#     the served config, this tree's in the same, and this tree's with PART=1 pinned; two rounds; then,
#     where time is left, PART=1 with FUSE 2 and 1 at V4 HQ 16 B = 1.
# Logs under $OUT/mla24; an ok/FAIL line per check; "N passed, N failed" last.
#   usage: OUT=DIR [KT_MAIN=main/bin/kt] bash tests/gpu/mla24.sh   (bin/kt_plant, bin/mla24_cache.tar.xz:
#          tests/gpu/mla24_builds.sh, used where present)
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
KP=${KT_PLANT:-bin/kt_plant}
KM=${KT_MAIN:-}
LOGS=${OUT:-/tmp/kt-gpu}/mla24
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-116}
source tests/gpu/step.sh # step NAME CMD...; within CAP CMD...
use_jit_cache bin/mla24_cache.tar.xz /tmp/mla24_kt_cache.$$
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/mla24_kt_cache.$$}
echo "mla24.sh: seed $SEED, $KT, main ${KT_MAIN:-none}"
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_16S2=LAYOUT=V4,HQ=16,TOPK=512,SQ=2 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_16S2=LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1
V32_128S2=LAYOUT=V32,HQ=128,TOPK=2048,SQ=2
# the served configs (default_for on 132 SMs, FUSE 0; tests/cpu/test_mla.c) and the B = 64 ones with partials
S1=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1        # V4 HQ 16 / 64 B = 1: 20 splits
S128=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,MPW=1    # V3.2 HQ 128 B = 1: 16 splits, 512 threads
S64=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1      # V4 HQ 16 B = 64: 4 splits
S32B64=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1   # V3.2 HQ 16 B = 64's: 4 splits
S128B64=HPC=32,CHUNK=32,SPLIT=1024,STAGES=2,PATH=2,WPM=8,MPW=2 # V3.2 HQ 128 B = 64 with 2 splits
P0=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=0,WPM=4,MPW=1,FUSE=1     # PATH 0's stores (store2), FUSE 1
P3=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=3,WPM=4,MPW=1,FUSE=2     # PATH 3, FUSE 2
PLANT=HPC=16,CHUNK=32,SPLIT=96,STAGES=3,PATH=2,WPM=8,MPW=1,PART=1 # the plant's (7 splits at V4)
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
# main's variants of section 3, NVRTC-compiled in the background meanwhile (a miss of the JIT cache)
for c in $S1 $S128 $S64; do
    [ -n "$KM" ] && timeout 45 "$KM" compile --family mla_decode --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
# 1. correctness: the verifies side by side (nothing is timed here), then counted
VT=45
VFAMILY=mla_decode
for f in 0 1 2; do
    vstep verify_b1_f$f "$KT" --config "$S1,FUSE=$f,PART=1" --shape $V4_16 --shape $V4_16S2 --shape $V4_64 \
        --shape $V32_16S2 --m 1,3,8
    # (SQ 2 at B = 8: 16 splits are more than its partials hold)
    vstep verify_v32h128_f$f "$KT" --config "$S128,FUSE=$f,PART=1" --shape $V32_128 --shape $V32_128S2 --m 1,3
done
for f in 0 1; do
    vstep verify_b64_f$f "$KT" --config "$S64,FUSE=$f,PART=1" --shape $V4_16 --shape $V4_16S2 --shape $V4_64 --m 64
    vstep verify_b64_v32_f$f "$KT" --config "$S32B64,FUSE=$f,PART=1" --shape $V32_16S2 --m 64
    vstep verify_b64_v32h128_f$f "$KT" --config "$S128B64,FUSE=$f,PART=1" --shape $V32_128 --m 64
done
vstep verify_v32h128_b8 "$KT" --config "$S128,PART=1" --shape $V32_128 --m 8
vstep verify_path0 "$KT" --config "$P0,PART=1" --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_path3 "$KT" --config "$P3,PART=1" --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_sample "$KT" --where PART=1 --sample 4 --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_served "$KT" --shape $V4_16 --shape $V4_64 --shape $V32_128 --m 1,64
# 2. the planted build: the bug live (STAGES=3) must fail on a result; inert (STAGES=2) must pass
if [ -x "$KP" ]; then
    vstep planted_fails "$KP" --config "$PLANT" --shape $V4_64 --m 1,3
    vstep planted_inert "$KP" --config "${PLANT/STAGES=3/STAGES=2}" --shape $V4_64 --m 1,3
fi
vcount
relerr() { # relerr WHAT LOG...: the rel_err range of the logs' checks
    local what=$1
    shift
    cat "$@" | awk '{for (i = 1; i < NF; i++) if ($i == "rel_err") {sub(",", "", $(i + 1)); print $(i + 1)}}' | sort -g |
        awk -v w="$what" '{v[NR] = $1} END {if (NR) printf "%s rel_err over %d checks: min %s median %s max %s\n", w, NR, v[1], v[int((NR + 1) / 2)], v[NR]}'
}
relerr PART=1 $(ls "$LOGS"/verify_*.run | grep -v verify_served)
relerr "served (PART 0)" "$LOGS/verify_served.run"
echo "(verify done at ${SECONDS} s)"
# 3. speed: main served, this tree served, this tree PART=1; two rounds (the noise)
bench() { # bench NAME KT CONFIG SHAPE M
    within 14 "$2" bench --family mla_decode --config "$3" --shape "$4" --m "$5" --json "$LOGS/$1.json"
}
CASES=("v4h16_b1 $S1 $V4_16 1" "v4h64_b1 $S1 $V4_64 1" "v32h128_b1 $S128 $V32_128 1" "v4h16_b64 $S64 $V4_16 64")
for round in 1 2; do
    for c in "${CASES[@]}"; do
        set -- $c
        [ $((END - SECONDS)) -ge 10 ] || { echo "SKIP round $round $1: ${SECONDS} s used"; continue; }
        [ -n "$KM" ] && step "bench_main_$1_r$round" bench "main_$1_r$round" "$KM" "$2" "$3" "$4"
        step "bench_new_$1_r$round" bench "new_$1_r$round" "$KT" "$2" "$3" "$4"
        step "bench_part1_$1_r$round" bench "part1_$1_r$round" "$KT" "$2,PART=1" "$3" "$4"
    done
done
# where time is left: PART=1 with the fused merges at V4 HQ 16 B = 1 (FUSE 1 / 2 lost there on the merge's
# loads, which PART=1 halves; bench/NOTES.md, mla18b and mla21)
for f in 2 1; do
    [ $((END - SECONDS)) -ge 8 ] || { echo "SKIP fuse$f: ${SECONDS} s used"; continue; }
    step "bench_part1_fuse${f}_v4h16_b1" bench "part1fuse${f}_v4h16_b1_r1" "$KT" "$S1,FUSE=$f,PART=1" $V4_16 1
done
python3 - "$LOGS" <<'PY' || echo "(no table)"
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_r[12].json"))):
    who, rest = os.path.basename(f)[:-5].split("_", 1)
    case = rest.rsplit("_", 1)[0]
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            rows.setdefault(case, {}).setdefault(who, []).append(r["kt_us"])
print("kt_us (round 1 / round 2); the last column: the min of PART=1's rounds less the min of main's")
print("| case | main (served) | this (served, PART 0) | this PART=1 | PART=1 FUSE 2 / FUSE 1 | PART=1 - main |")
print("|---|---|---|---|---|---|")
for case, r in rows.items():
    f = lambda k: " / ".join("%.2f" % x for x in r.get(k, [])) or "-"
    d = min(r["part1"]) - min(r["main"]) if r.get("part1") and r.get("main") else None
    print("| %s | %s | %s | %s | %s / %s | %s |" % (case, f("main"), f("new"), f("part1"), f("part1fuse2"),
                                                   f("part1fuse1"), "-" if d is None else "%+.2f" % d))
PY
[ "$KT_CACHE_DIR" = /tmp/mla24_kt_cache.$$ ] && rm -rf "$KT_CACHE_DIR"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
