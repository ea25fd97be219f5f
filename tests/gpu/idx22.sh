#!/usr/bin/env bash
# idx22.sh — the twenty-second session's indexer run on the H200 (< 90 s, every part under a
# timeout, later parts skipped past their start budget):
#  1. kt verify of this tree (fresh seed; logits against float64, index lists exact as sets and in
#     order) over the cases the two levers touch: the staging (HIST=0 and 1, 1024 and 512 threads,
#     slices of 16K keys: a second batch; ragged lengths: every skew of the 16-byte head and odd
#     keys; clusters of 2 and 4), the fused gather (HIST=1, one CTA: ties at T, all-equal logits,
#     L_b < k, L_b = k, more than 32 candidates: the fallback), B 1 to 64;
#  2. bin/kt_plant (tests/gpu/idx22_builds.sh) must fail verify under each of its two bugs
#     (STAGES=2: staging; STAGES=3: the fused masks);
#  3. `kt bench` of CTX {8K, 32K, 128K} x B {1, 8, 64} served by default_for, main's kt ($KT_MAIN)
#     then this tree's, same call; the 8K x 1 / 8 rows of bin/kt_stage (the staging lever alone);
#  4. `kt bench stream` at the scan's bytes of each of the 9 cells (the roof's bytes, in KiB);
#  5. the 8K x 1 / 8 rows again, main then this tree then kt_stage (the noise of the B = 1 figures);
#  6. a scan lever at B = 8 as a config: NT=4 with a ring of 2 (kt bench --config), 8K / 32K / 128K.
# Without $KT_MAIN (the final call on merged main, <= 60 s) parts 1, 2 (if bin/kt_plant exists), 3 of
# bin/kt and 4 where it fits run. Logs under $OUT/idx22/; an ok/FAIL line per check; ends with "N passed, N failed".
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
PLANT=bin/kt_plant STAGE=bin/kt_stage
[ -x "$PLANT" ] || PLANT=
[ -x "$STAGE" ] || STAGE=
# the variants below (and default_for's), NVRTC-compiled in the background at once
SERVED="HIST=0 HIST=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8 HIST=0,NT=4,STAGES=2"
for k in "$KT" ${KM:+"$KM"} ${STAGE:+"$STAGE"}; do
    for c in $SERVED; do timeout 40 "$k" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 & done
done
NT4="HIST=1,NT=4,STAGES=2 HIST=1,NT=4,STAGES=2,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,NT=4,STAGES=2,SEL_THREADS=512,SEL_CLUSTER=8"
for c in HIST=1,SEL_THREADS=512 SEL_THREADS=512,SEL_CLUSTER=2 HIST=1,SEL_THREADS=512,SEL_CLUSTER=2 $NT4 \
    STAGES=2 STAGES=3 NT=1 MATH=0,STAGES=3; do
    timeout 40 "$KT" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
if [ -n "$PLANT" ]; then
    for c in HIST=1,STAGES=2 HIST=1,STAGES=3; do
        timeout 40 "$PLANT" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
    done
fi
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
# 1. correctness: the verify runs side by side (correctness only: nothing is timed here), then counted
vnames=() vpids=()
VT=$([ -n "$KM" ] && echo 45 || echo 30) # each verify's limit (the final call: <= 60 s in all)
vstep() { # vstep NAME KT ARGS...: kt verify ARGS in the background, its log and status kept
    local name=$1 k=$2
    shift 2
    vnames+=("$name")
    (timeout "$VT" "$k" verify --family mla_indexer --seed "$SEED" "$@" >"$LOG/$name.run" 2>&1
        echo $? >"$LOG/$name.rc") &
    vpids+=($!)
}
vstep verify_default "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal \
    --shape TOPK=1152,CTX=5000,$R,VALUES=tied --shape TOPK=2048,CTX=1000,$E --shape TOPK=512,CTX=8192,$E \
    --m 1,3,8,64
# HIST=1 one CTA (the fused gather): ties at T, all-equal ragged (more than 32 candidates: the
# fallback), L = k all-equal, L < k, 16K keys staged (a second batch of vectors), odd top-k
vstep verify_hist1 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E \
    --shape TOPK=777,CTX=3000,$R,VALUES=equal --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal \
    --shape TOPK=1152,CTX=5000,$R,VALUES=tied --shape TOPK=2048,CTX=16384,$E --m 1,2,3,16 --config HIST=1
# 512 threads: TILE 8K (a 16K slice is not fused: two tiles), 480 stagers
vstep verify_hist1_512 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=tied --shape TOPK=2048,CTX=16384,$E \
    --shape TOPK=777,CTX=3000,$R,VALUES=equal --m 1,3 --config HIST=1,SEL_THREADS=512
vstep verify_hist0 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied \
    --shape TOPK=2048,CTX=16384,$E --m 1,3,17 --config HIST=0
vstep verify_cluster2 "$KT" --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 16 --config SEL_THREADS=512,SEL_CLUSTER=2
vstep verify_cluster2h "$KT" --shape TOPK=2048,CTX=16384,$R,VALUES=tied --m 3 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=2
vstep verify_cluster4 "$KT" --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 1,4 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=4
# one CTA over 32K+ keys: the slice is not staged (keys from memory on every pass, never fused)
vstep verify_unstaged "$KT" --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 3 --config HIST=1
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
        --config HIST=1,STAGES=2
    vstep planted_fused "$PLANT" --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 1,3 \
        --config HIST=1,STAGES=3
fi
wait "${vpids[@]}"
for n in "${vnames[@]}"; do
    case $n in
        planted_*) step "$n" sh -c 'cat "$1"; rc=$(cat "$2" 2>/dev/null || echo 0); [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "wrong-result" "$1"' _ \
            "$LOG/$n.run" "$LOG/$n.rc" ;;
        *) step "$n" sh -c 'cat "$1"; exit "$(cat "$2" 2>/dev/null || echo 99)"' _ "$LOG/$n.run" "$LOG/$n.rc" ;;
    esac
done
echo "(verify done at ${SECONDS} s)"
# 3. the table: main's kt, then this tree's, served by default_for
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
SHAPES=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E)
BT=$([ -n "$KM" ] && echo 30 || echo 18) # each bench's limit
bench() { # bench NAME KT ARGS...
    local name=$1 k=$2
    shift 2
    step "$name" timeout "$BT" "$k" bench --family mla_indexer "$@" --db "$DB" --json "$LOG/$name.json"
    grep -v "^kt:" "$LOG/$name.log" | grep "^TOPK\|^shape" | cut -c1-200
}
if [ -z "$KM" ]; then
    echo "SKIP bench_main: no \$KT_MAIN (the final call on merged main: bin/kt only)"
elif [ "$SECONDS" -lt 38 ]; then bench bench_main "$KM" "${SHAPES[@]}" --m 1,8,64; else skip bench_main; fi
if [ "$SECONDS" -lt $([ -n "$KM" ] && echo 52 || echo 40) ]; then bench bench_this "$KT" "${SHAPES[@]}" --m 1,8,64; else skip bench_this; fi
if [ -n "$STAGE" ] && [ "$SECONDS" -lt 60 ]; then bench bench_stage "$STAGE" --shape TOPK=2048,CTX=8192,$E --m 1,8; fi
# 4. the least time a kernel that only reads the scan's bytes takes (the roof's bytes of each cell, KiB)
KIB=1073,8583,68657,4243,33939,271505,16921,135363,1082897
# (the final call, no $KT_MAIN: <= 60 s in all, so the probe only where it fits)
if { [ -n "$KM" ] && [ "$SECONDS" -lt 64 ]; } || [ "$SECONDS" -lt 44 ]; then
    step stream timeout $([ -n "$KM" ] && echo 18 || echo 12) "$KT" bench stream --kb "$KIB" --json "$LOG/stream.json"
    grep "^ " "$LOG/stream.log"
else skip stream; fi
python3 - "$LOG/bench_main.json" "$LOG/bench_this.json" "$LOG/bench_stage.json" "$LOG/stream.json" <<'EOF' || echo "(no table: a bench is missing)"
import json, sys
rows, stage, stream = {}, {}, {}
def load(path):
    try:
        return json.load(open(path))
    except Exception:
        return None
for tag, path in (("main", sys.argv[1]), ("this", sys.argv[2]), ("stage", sys.argv[3])):
    for r in load(path) or []:
        ctx = int(r["shape"].split("CTX=")[1].split(",")[0])
        rows.setdefault((ctx, r["M"]), {})[tag] = r
s = load(sys.argv[4])
KIB = [1073, 8583, 68657, 4243, 33939, 271505, 16921, 135363, 1082897]
CELLS = [(c, b) for c in (8192, 32768, 131072) for b in (1, 8, 64)]
if s:
    for cell, row in zip(CELLS, s["rows"]):
        stream[cell] = row
def f(x):
    return "-" if x is None else "%.2f" % x
print("table: the scan alone (kt_scan_us, default config) against its roof and the stream probe at its bytes (pdl_wait:")
print("a kernel that waits on its predecessor before its loads, as the scan must for the cache); us")
print("| CTX x B | roof | bytes/BW | stream pdl_wait | stream / roof | scan main / this | scan this / roof | scan / stream | select main / this | pair main / this / stage |")
print("|---|---|---|---|---|---|---|---|---|---|")
for cell in sorted(rows):
    ctx, b = cell
    m, t, g = rows[cell].get("main", {}), rows[cell].get("this", {}), rows[cell].get("stage", {})
    roof = (m or t).get("roof_us")
    st = t.get("kt_scan_us")
    sr = stream.get(cell, {})
    pw = sr.get("pdl_wait_us")
    print("| %dK x %d | %s | %s | %s | %s | %s / %s | %s | %s | %s / %s | %s / %s / %s |" % (
        ctx // 1024, b, f(roof), f(sr.get("floor_us")), f(pw), f(pw / roof if pw and roof else None),
        f(m.get("kt_scan_us")), f(st), f(st / roof if st and roof else None), f(st / pw if st and pw else None),
        f(m.get("kt_select_us")), f(t.get("kt_select_us")), f(m.get("kt_us")), f(t.get("kt_us")), f(g.get("kt_us"))))
EOF
# 5. the small cells again (their noise), main then this tree then the staging lever alone
if [ -n "$KM" ] && [ "$SECONDS" -lt 80 ]; then
    bench bench_main_small "$KM" --shape TOPK=2048,CTX=8192,$E --m 1,8
    bench bench_this_small "$KT" --shape TOPK=2048,CTX=8192,$E --m 1,8
    [ -n "$STAGE" ] && [ "$SECONDS" -lt 86 ] && bench bench_stage_small "$STAGE" --shape TOPK=2048,CTX=8192,$E --m 1,8
else skip bench_small; fi
# 6. a scan lever at B = 8 (a config, no code): NT=4 with a ring of 2 (idx21: -5% of the pair at B = 64
#    8K / 32K) against the served NT=2 ring 4, this tree, the selection as served (one CTA, clusters 4, 8)
if [ -n "$KM" ] && [ "$SECONDS" -lt 82 ]; then
    set -- $NT4
    i=0
    for ctx in 8192 32768 131072; do
        [ "$SECONDS" -lt 86 ] || break
        i=$((i + 1))
        bench "bench_nt4_$ctx" "$KT" --shape TOPK=2048,CTX=$ctx,$E --m 8 --config "${!i}"
    done
else skip bench_nt4; fi
echo "$passed passed, $failed failed (${SECONDS} s)"
[ "$failed" -eq 0 ]
