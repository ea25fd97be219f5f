#!/usr/bin/env bash
# idx22.sh — the twenty-second session's indexer run on the H200 (<= 90 s with $KT_MAIN, <= 60 s
# without; every part under a timeout, later parts skipped past their start budget). The session's
# two selection levers are the tunable SEL_FAST (1: the staging's loads together; 2: and HIST=1's
# gather fused with the ordered pass's read), off by default (no GPU was lent to measure them;
# SEL_FAST=0 is main's SASS to the instruction):
#  1. kt verify of this tree (fresh seed; logits against float64, index lists exact as sets and in
#     order): the default (SEL_FAST=0) and SEL_FAST=1 / 2 over the cases the levers touch (HIST=0
#     and 1, 1024 and 512 threads, slices of 16K keys: a second batch; ragged lengths: every skew of
#     the 16-byte head and odd keys; clusters of 2 and 4; ties at T, all-equal logits (more than 32
#     candidates: the fallback), L_b < k, L_b = k, B 1 to 64) and the scan's cases (idx21's);
#  2. bin/kt_plant (tests/gpu/idx22_builds.sh) must fail verify under each of its two bugs
#     (SEL_FAST=2 with STAGES=2: staging; STAGES=3: the fused masks);
#  3. `kt bench` of CTX {8K, 32K, 128K} x B {1, 8, 64} served by default_for (SEL_FAST=0), main's kt
#     ($KT_MAIN) then this tree's, same call; then this tree with SEL_FAST=1 and 2 pinned (--config)
#     in the served configs of the cells they touch (8K x 1 / 8 / 64, 32K x 1 / 8, 128K x 1 / 8);
#  4. `kt bench stream` at the scan's bytes of each of the 9 cells (the roof's bytes, in KiB);
#  5. the 8K x 1 / 8 rows again (served, SEL_FAST=1, 2: the noise of the B = 1 figures);
#  6. a scan lever at B = 8 as a config: NT=4 with a ring of 2 (kt bench --config), 8K / 32K / 128K.
# Without $KT_MAIN (the final call on merged main) parts 1, 2 (if bin/kt_plant exists), 3 of bin/kt
# (the 8K rows of SEL_FAST only) and 4 where they fit run. Logs under $OUT/idx22/; an ok/FAIL line
# per check; ends with "N passed, N failed".
#   usage: OUT=dir [KT_MAIN=main/bin/kt] bash tests/gpu/idx22.sh
set -u
cd "$(dirname "$0")/../.."
KT=./bin/kt
KM=${KT_MAIN:-}
LOGS=${OUT:-/tmp}/idx22 LOG=${OUT:-/tmp}/idx22
source tests/gpu/step.sh # step NAME CMD...
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/idx22_kt_cache}
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
skip() { echo "SKIP $1: ${SECONDS} s used"; }
E=DIST=equal,VALUES=grid R=DIST=ragged
PLANT=bin/kt_plant
[ -x "$PLANT" ] || PLANT=
# the variants below (and default_for's), NVRTC-compiled in the background at once
SERVED="HIST=0 HIST=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8 HIST=0,NT=4,STAGES=2"
for k in "$KT" ${KM:+"$KM"}; do
    for c in $SERVED; do timeout 40 "$k" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 & done
done
# the served configs with SEL_FAST pinned (section 3), per cell
F8=HIST=1 F64=HIST=0,NT=4,STAGES=2 F32=HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 F128=HIST=1,SEL_THREADS=512,SEL_CLUSTER=8
FAST="$F8,SEL_FAST=1 $F8,SEL_FAST=2 $F64,SEL_FAST=1 $F32,SEL_FAST=1 $F128,SEL_FAST=1"
NT4="HIST=1,NT=4,STAGES=2 HIST=1,NT=4,STAGES=2,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,NT=4,STAGES=2,SEL_THREADS=512,SEL_CLUSTER=8"
for c in HIST=1,SEL_THREADS=512 SEL_THREADS=512,SEL_CLUSTER=2 HIST=1,SEL_THREADS=512,SEL_CLUSTER=2 $NT4 \
    STAGES=2 STAGES=3 NT=1 MATH=0,STAGES=3 $FAST HIST=0,SEL_FAST=1 HIST=1,SEL_THREADS=512,SEL_FAST=2; do
    timeout 40 "$KT" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
if [ -n "$PLANT" ]; then
    for c in HIST=1,STAGES=2,SEL_FAST=2 HIST=1,STAGES=3,SEL_FAST=2; do
        timeout 40 "$PLANT" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
    done
fi
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
# 1. correctness: the verify runs side by side (correctness only: nothing is timed here), then counted
VFAMILY=mla_indexer
VT=$([ -n "$KM" ] && echo 45 || echo 30) # each verify's limit (the final call: <= 60 s in all)
vstep verify_default "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal \
    --shape TOPK=1152,CTX=5000,$R,VALUES=tied --shape TOPK=2048,CTX=1000,$E --shape TOPK=512,CTX=8192,$E \
    --m 1,3,8,64
# the levers' cases, each under SEL_FAST 1 and 2 (2 = 1 where HIST=0 or the slice is not fused)
for f in 1 2; do
    # HIST=1 one CTA (the fused gather): ties at T, all-equal ragged (more than 32 candidates: the
    # fallback), L = k all-equal, L < k, 16K keys staged (a second batch of vectors), odd top-k
    vstep verify_hist1_f$f "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E \
        --shape TOPK=777,CTX=3000,$R,VALUES=equal --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal \
        --shape TOPK=1152,CTX=5000,$R,VALUES=tied --shape TOPK=2048,CTX=16384,$E --m 1,2,3,16 --config HIST=1,SEL_FAST=$f
    # 512 threads: TILE 8K (a 16K slice is not fused: two tiles), 480 stagers
    vstep verify_hist1_512_f$f "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=tied --shape TOPK=2048,CTX=16384,$E \
        --shape TOPK=777,CTX=3000,$R,VALUES=equal --m 1,3 --config HIST=1,SEL_THREADS=512,SEL_FAST=$f
    vstep verify_cluster4_f$f "$KT" --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 1,4 \
        --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=4,SEL_FAST=$f
done
vstep verify_hist0_f1 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied \
    --shape TOPK=2048,CTX=16384,$E --m 1,3,17 --config HIST=0,SEL_FAST=1
vstep verify_cluster2_f1 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 16 --config SEL_THREADS=512,SEL_CLUSTER=2,SEL_FAST=1
vstep verify_cluster2h_f2 "$KT" --shape TOPK=2048,CTX=16384,$R,VALUES=tied --m 3 \
    --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=2,SEL_FAST=2
# one CTA over 32K+ keys: the slice is not staged (keys from memory on every pass, never fused)
vstep verify_unstaged_f2 "$KT" --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 3 --config HIST=1,SEL_FAST=2
vstep verify_default_f "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E --m 64 \
    --config HIST=0,NT=4,STAGES=2,SEL_FAST=2
# the scan's cases (idx21's; its script is folded into this one): its split on both sides of its
# switch (8448 x 2 = 1056 groups of 16 = the H200's 1056 scan warps, one each; 8464 x 2 = 1058),
# its prologue with STAGES 2, 3 and 4, NT 1 and 4 (default_for's past B = 16 on sm_90), MATH=0,
# the 128K cluster of 8
vstep verify_split "$KT" --shape TOPK=2048,CTX=8448,$E --shape TOPK=2048,CTX=8464,DIST=equal,VALUES=tied \
    --shape TOPK=512,CTX=64,$E --m 1,2
vstep verify_stages "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=777,CTX=3000,$R,VALUES=equal --m 3,64 \
    --config STAGES=2
vstep verify_stages3 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E --m 8,64 --config STAGES=3
vstep verify_nt "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied --m 3,17,64 \
    --config NT=4,STAGES=2
vstep verify_nt1 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied --m 3 --config NT=1
vstep verify_e4m3 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 3 --config MATH=0,STAGES=3
vstep verify_cluster8 "$KT" --shape TOPK=2048,CTX=131072,$E --m 1 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=8
# 2. the planted builds: each bug alone must fail
if [ -n "$PLANT" ]; then
    vstep planted_staging "$PLANT" --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 1,3 \
        --config HIST=1,STAGES=2,SEL_FAST=2
    vstep planted_fused "$PLANT" --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 1,3 \
        --config HIST=1,STAGES=3,SEL_FAST=2
fi
vcount
echo "(verify done at ${SECONDS} s)"
# 3. the table: main's kt, then this tree's, served by default_for (SEL_FAST=0); then SEL_FAST pinned
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
SHAPES=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E)
S8=(--shape TOPK=2048,CTX=8192,$E)
BT=$([ -n "$KM" ] && echo 30 || echo 18) # each bench's limit
bench() { # bench NAME KT ARGS...
    local name=$1 k=$2
    shift 2
    step "$name" timeout "$BT" "$k" bench --family mla_indexer "$@" --db "$DB" --json "$LOG/$name.json"
    grep -v "^kt:" "$LOG/$name.log" | grep "^TOPK\|^shape" | cut -c1-200
}
if [ -z "$KM" ]; then
    echo "SKIP bench_main: no \$KT_MAIN (the final call on merged main: bin/kt only)"
elif [ "$SECONDS" -lt 36 ]; then bench bench_main "$KM" "${SHAPES[@]}" --m 1,8,64; else skip bench_main; fi
if [ "$SECONDS" -lt $([ -n "$KM" ] && echo 48 || echo 38) ]; then bench bench_this "$KT" "${SHAPES[@]}" --m 1,8,64; else skip bench_this; fi
# SEL_FAST pinned in each touched cell's served config (the final call: the 8K x 1 / 8 rows only)
fast() { # fast NAME BUDGET KT-BENCH-ARGS...: one pinned bench if SECONDS < BUDGET
    local name=$1 budget=$2
    shift 2
    if [ "$SECONDS" -lt "$budget" ]; then bench "$name" "$KT" "$@"; else skip "$name"; fi
}
if [ -n "$KM" ]; then
    fast fast1_8k 56 "${S8[@]}" --m 1,8 --config "$F8,SEL_FAST=1"
    fast fast2_8k 60 "${S8[@]}" --m 1,8 --config "$F8,SEL_FAST=2"
    fast fast1_8k64 63 "${S8[@]}" --m 64 --config "$F64,SEL_FAST=1"
    fast fast1_32k 66 --shape TOPK=2048,CTX=32768,$E --m 1,8 --config "$F32,SEL_FAST=1"
    fast fast1_128k 69 --shape TOPK=2048,CTX=131072,$E --m 1,8 --config "$F128,SEL_FAST=1"
else
    fast fast2_8k 46 "${S8[@]}" --m 1,8 --config "$F8,SEL_FAST=2"
fi
# 4. the least time a kernel that only reads the scan's bytes takes (the roof's bytes of each cell, KiB)
KIB=1073,8583,68657,4243,33939,271505,16921,135363,1082897
# (the final call, no $KT_MAIN: <= 60 s in all, so the probe only where it fits)
if { [ -n "$KM" ] && [ "$SECONDS" -lt 72 ]; } || [ "$SECONDS" -lt 44 ]; then
    step stream timeout $([ -n "$KM" ] && echo 14 || echo 12) "$KT" bench stream --kb "$KIB" --json "$LOG/stream.json"
    grep "^ " "$LOG/stream.log"
else skip stream; fi
python3 - "$LOG" <<'EOF' || echo "(no table: a bench is missing)"
import json, os, sys
log = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(log, name + ".json")))
    except Exception:
        return None
rows, stream = {}, {}
for tag, names in (("main", ["bench_main"]), ("this", ["bench_this"]),
                   ("f1", ["fast1_8k", "fast1_8k64", "fast1_32k", "fast1_128k"]), ("f2", ["fast2_8k"])):
    for name in names:
        for r in load(name) or []:
            ctx = int(r["shape"].split("CTX=")[1].split(",")[0])
            rows.setdefault((ctx, r["M"]), {})[tag] = r
s = load("stream")
CELLS = [(c, b) for c in (8192, 32768, 131072) for b in (1, 8, 64)]
for cell, row in zip(CELLS, (s or {}).get("rows", [])):
    stream[cell] = row
def f(x):
    return "-" if x is None else "%.2f" % x
print("table: the scan alone (kt_scan_us, default config) against its roof and the stream probe at its bytes (pdl_wait:")
print("a kernel that waits on its predecessor before its loads, as the scan must for the cache); pairs served (main, this:")
print("SEL_FAST=0) and with SEL_FAST=1 / 2 pinned in the served config; us")
print("| CTX x B | roof | bytes/BW | stream pdl_wait | stream / roof | scan main / this | scan this / roof | scan / stream | select main / this | pair main / this / f1 / f2 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for cell in sorted(rows):
    ctx, b = cell
    r = rows[cell]
    m, t = r.get("main", {}), r.get("this", {})
    roof = (m or t or r.get("f1") or r.get("f2") or {}).get("roof_us")
    st = t.get("kt_scan_us")
    pw = stream.get(cell, {}).get("pdl_wait_us")
    print("| %dK x %d | %s | %s | %s | %s | %s / %s | %s | %s | %s / %s | %s / %s / %s / %s |" % (
        ctx // 1024, b, f(roof), f(stream.get(cell, {}).get("floor_us")), f(pw), f(pw / roof if pw and roof else None),
        f(m.get("kt_scan_us")), f(st), f(st / roof if st and roof else None), f(st / pw if st and pw else None),
        f(m.get("kt_select_us")), f(t.get("kt_select_us")), f(m.get("kt_us")), f(t.get("kt_us")),
        f(r.get("f1", {}).get("kt_us")), f(r.get("f2", {}).get("kt_us"))))
EOF
# 5. the small cells again (their noise): main, this tree served, SEL_FAST=1, 2
if [ -n "$KM" ] && [ "$SECONDS" -lt 78 ]; then
    bench bench_main_small "$KM" "${S8[@]}" --m 1,8
    bench bench_this_small "$KT" "${S8[@]}" --m 1,8
    fast fast1_8k_again 84 "${S8[@]}" --m 1,8 --config "$F8,SEL_FAST=1"
    fast fast2_8k_again 86 "${S8[@]}" --m 1,8 --config "$F8,SEL_FAST=2"
else skip bench_small; fi
# 6. a scan lever at B = 8 (a config, no code): NT=4 with a ring of 2 (idx21: -5% of the pair at B = 64
#    8K / 32K) against the served NT=2 ring 4, this tree, the selection as served (one CTA, clusters 4, 8)
if [ -n "$KM" ] && [ "$SECONDS" -lt 84 ]; then
    set -- $NT4
    i=0
    for ctx in 8192 32768 131072; do
        [ "$SECONDS" -lt 87 ] || break
        i=$((i + 1))
        bench "bench_nt4_$ctx" "$KT" --shape TOPK=2048,CTX=$ctx,$E --m 8 --config "${!i}"
    done
else skip bench_nt4; fi
echo "$passed passed, $failed failed (${SECONDS} s)"
[ "$failed" -eq 0 ]
