#!/usr/bin/env bash
# mla25.sh — the twenty-fourth session's second mla_decode check (mla25; bench/NOTES.md), on the H200 in
# <= 120 s, every part under its own timeout and later parts skipped past their start budget. The
# lever: the tunable MERGE (0: the fused merge's merge_batch loads, main's code, the default; 1:
# wide_batch, a batch's loads all in flight; 2: 1 with the arrival released by one thread's
# fence.acq_rel, not every thread's fence.sc), off by default; it acts only in FUSE 1 / 2:
#  1. kt verify on a fresh seed of MERGE=1 and 2 (side by side): the B = 1 split (20 splits) with FUSE 1 / 2
#     over V4 HQ 16 SQ 1 / 2, V4 HQ 64, V3.2 HQ 16 SQ 2 at B 1, 3, 8 (FUSE 2 is FUSE_ALL where the
#     grid fits the SMs, else FUSE_LAST); V3.2 HQ 128's (WPM 16, 16 splits) SQ 1 / 2 at B 1, 3 and SQ 1
#     at 8, each with MERGE 1 and 2; MERGE 2 at B = 64's (SPLIT 160; V3.2: SPLIT 512 STAGES 3; V3.2 HQ
#     128: SPLIT 1024 HPC 32 MPW 2) FUSE 1; PART 0 (f32 sums: wide_batch's 16-byte loads) with FUSE 2 at
#     B 1, 3 (MERGE 2) and FUSE 1 at B 64 (MERGE 1); PATH 0 (FUSE 1, MERGE 2) and PATH 3 (FUSE 2, MERGE
#     1); a sample of the MERGE=2 space; the served defaults at B 1, 64;
#  2. bin/kt_plant (tests/gpu/mla25_builds.sh: MERGE=1 with STAGES=3 weights each batch's first split by
#     the second's weight) must fail on a result at V4 HQ 64, and pass with STAGES=2 (the plant inert);
#  3. kt bench of V4 HQ 16 B 1, V4 HQ 64 B 1, V3.2 HQ 128 B 1: main's kt ($KT_MAIN) in the served
#     config (FUSE 0, PART 1), this tree's with FUSE 2 MERGE 2, FUSE 2 MERGE 1 and FUSE 1 MERGE 2
#     pinned; two rounds; then, where time is left, at V4 HQ 16 B = 1 this tree's served config (must
#     equal main's) and FUSE 2 / 1 with MERGE 0 (main's merge: MERGE's own A/B), and FUSE 1 MERGE 2
#     at V4 HQ 16 B = 64 (4 splits) against main's served.
# Logs under $OUT/mla25; an ok/FAIL line per check; "N passed, N failed" last.
#   usage: OUT=DIR [KT_MAIN=main/bin/kt] bash tests/gpu/mla25.sh   (bin/kt_plant, bin/mla25_cache.tar.xz:
#          tests/gpu/mla25_builds.sh, used where present)
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
KP=${KT_PLANT:-bin/kt_plant}
KM=${KT_MAIN:-}
LOGS=${OUT:-/tmp/kt-gpu}/mla25
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-116}
source tests/gpu/step.sh # step NAME CMD...; within CAP CMD...; vstep / vcount
use_jit_cache bin/mla25_cache.tar.xz /tmp/mla25_kt_cache.$$
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/mla25_kt_cache.$$}
echo "mla25.sh: seed $SEED, $KT, main ${KT_MAIN:-none}"
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_16S2=LAYOUT=V4,HQ=16,TOPK=512,SQ=2 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_16S2=LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1
V32_128S2=LAYOUT=V32,HQ=128,TOPK=2048,SQ=2
# the served splits (default_for on 132 SMs; tests/cpu/test_mla.c) and the B = 64 ones with partials
S1=HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,MPW=1        # V4 HQ 16 / 64 B = 1: 20 splits
S128=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,MPW=1    # V3.2 HQ 128 B = 1: 16 splits, 512 threads
S64=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1      # V4 HQ 16 B = 64: 4 splits
S32B64=HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1   # V3.2 HQ 16 B = 64's: 4 splits
S128B64=HPC=32,CHUNK=32,SPLIT=1024,STAGES=2,PATH=2,WPM=8,MPW=2 # V3.2 HQ 128 B = 64 with 2 splits
P0=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=0,WPM=4,MPW=1,FUSE=1 # PATH 0's stores (store2), FUSE 1
P3=HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=3,WPM=4,MPW=1,FUSE=2 # PATH 3, FUSE 2
PLANT=HPC=16,CHUNK=32,SPLIT=96,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=2,PART=1,MERGE=1 # the plant's (7 splits at V4)
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
# main's variants of section 3, NVRTC-compiled in the background meanwhile (a miss of the JIT cache)
for c in $S1 $S128; do
    [ -n "$KM" ] && timeout 45 "$KM" compile --family mla_decode --arch sm_90 --config "$c,FUSE=0,PART=1" >/dev/null 2>&1 &
done
# 1. correctness: the verifies side by side (nothing is timed here), then counted
VT=55
VFAMILY=mla_decode
for m in 1 2; do
    for f in 1 2; do
        vstep verify_b1_f${f}_m$m "$KT" --config "$S1,FUSE=$f,PART=1,MERGE=$m" --shape $V4_16 --shape $V4_16S2 \
            --shape $V4_64 --shape $V32_16S2 --m 1,3,8
        vstep verify_v32h128_f${f}_m$m "$KT" --config "$S128,FUSE=$f,PART=1,MERGE=$m" --shape $V32_128 \
            --shape $V32_128S2 --m 1,3
    done
    vstep verify_v32h128_b8_m$m "$KT" --config "$S128,FUSE=1,PART=1,MERGE=$m" --shape $V32_128 --m 8
done
vstep verify_b64 "$KT" --config "$S64,FUSE=1,PART=1,MERGE=2" --shape $V4_16 --shape $V4_16S2 --shape $V4_64 --m 64
vstep verify_b64_v32 "$KT" --config "$S32B64,FUSE=1,PART=1,MERGE=2" --shape $V32_16S2 --m 64
vstep verify_b64_v32h128 "$KT" --config "$S128B64,FUSE=1,PART=1,MERGE=2" --shape $V32_128 --m 64
vstep verify_f32_b1 "$KT" --config "$S1,FUSE=2,PART=0,MERGE=2" --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_f32_b64 "$KT" --config "$S64,FUSE=1,PART=0,MERGE=1" --shape $V4_16 --m 64
vstep verify_path0 "$KT" --config "$P0,PART=1,MERGE=2" --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_path3 "$KT" --config "$P3,PART=0,MERGE=1" --shape $V4_64 --shape $V32_16S2 --m 1,3
vstep verify_sample "$KT" --where MERGE=2 --sample 2 --shape $V4_64 --shape $V32_16S2 --m 1,3
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
relerr "MERGE 1 / 2" $(ls "$LOGS"/verify_*.run | grep -v verify_served)
relerr served "$LOGS/verify_served.run"
echo "(verify done at ${SECONDS} s)"
# 3. speed: main served, this tree FUSE 2 MERGE 2 / 1 and FUSE 1 MERGE 2; two rounds (the noise)
bench() { # bench NAME KT CONFIG SHAPE M
    within 14 "$2" bench --family mla_decode --config "$3" --shape "$4" --m "$5" --json "$LOGS/$1.json"
}
CASES=("v4h16_b1 $S1 $V4_16 1" "v4h64_b1 $S1 $V4_64 1" "v32h128_b1 $S128 $V32_128 1")
for round in 1 2; do
    for c in "${CASES[@]}"; do
        set -- $c
        [ $((END - SECONDS)) -ge 9 ] || { echo "SKIP round $round $1: ${SECONDS} s used"; continue; }
        [ -n "$KM" ] && step "bench_main_$1_r$round" bench "main_$1_r$round" "$KM" "$2,FUSE=0,PART=1" "$3" "$4"
        step "bench_f2m2_$1_r$round" bench "f2m2_$1_r$round" "$KT" "$2,FUSE=2,PART=1,MERGE=2" "$3" "$4"
        step "bench_f2m1_$1_r$round" bench "f2m1_$1_r$round" "$KT" "$2,FUSE=2,PART=1,MERGE=1" "$3" "$4"
        step "bench_f1m2_$1_r$round" bench "f1m2_$1_r$round" "$KT" "$2,FUSE=1,PART=1,MERGE=2" "$3" "$4"
    done
done
# where time is left, at V4 HQ 16 B = 1: this tree's served config (= main's), MERGE 0 (main's merge);
# then B = 64's FUSE 1 MERGE 2 against main's served (FUSE 0)
for w in "new FUSE=0" "f2m0 FUSE=2,MERGE=0" "f1m0 FUSE=1,MERGE=0"; do
    set -- $w
    [ $((END - SECONDS)) -ge 6 ] || { echo "SKIP $1: ${SECONDS} s used"; continue; }
    step "bench_$1_v4h16_b1" bench "$1_v4h16_b1_r1" "$KT" "$S1,$2,PART=1" $V4_16 1
done
if [ $((END - SECONDS)) -ge 9 ]; then
    [ -n "$KM" ] && step bench_main_v4h16_b64 bench main_v4h16_b64_r1 "$KM" "$S64,FUSE=0,PART=1" $V4_16 64
    step bench_f1m2_v4h16_b64 bench f1m2_v4h16_b64_r1 "$KT" "$S64,FUSE=1,PART=1,MERGE=2" $V4_16 64
else
    echo "SKIP B = 64: ${SECONDS} s used"
fi
python3 - "$LOGS" <<'PY' || echo "(no table)"
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_r[12].json"))):
    who, rest = os.path.basename(f)[:-5].split("_", 1)
    case = rest.rsplit("_", 1)[0]
    for r in json.load(open(f)):
        if r.get("status") == "ok":
            rows.setdefault(case, {}).setdefault(who, []).append(r["kt_us"])
print("kt_us (round 1 / round 2); the last columns: the min of a lever's rounds less the min of main's")
print("| case | main (served: FUSE 0) | FUSE 2 MERGE 2 | FUSE 2 MERGE 1 | FUSE 1 MERGE 2 | this served / FUSE 2, 1 MERGE 0 "
      "| F2M2 - main | F2M1 - main | F1M2 - main |")
print("|---|---|---|---|---|---|---|---|---|")
for case, r in rows.items():
    f = lambda k: " / ".join("%.2f" % x for x in r.get(k, [])) or "-"
    d = lambda k: "%+.2f" % (min(r[k]) - min(r["main"])) if r.get(k) and r.get("main") else "-"
    print("| %s | %s | %s | %s | %s | %s / %s, %s | %s | %s | %s |" % (
        case, f("main"), f("f2m2"), f("f2m1"), f("f1m2"), f("new"), f("f2m0"), f("f1m0"), d("f2m2"), d("f2m1"), d("f1m2")))
PY
[ "$KT_CACHE_DIR" = /tmp/mla25_kt_cache.$$ ] && rm -rf "$KT_CACHE_DIR"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
