#!/usr/bin/env bash
# idx21.sh — the twenty-first session's indexer run on the H200 (< 90 s, every part under a
# timeout, later parts skipped past their start budget):
#  1. kt verify of this tree (fresh seed; outputs poisoned, logits against float64, index lists
#     exact, the timing graph's replays checked too) over the cases the change touches: the
#     scan's split on both sides of its switch (groups = warps, warps + 2), its prologue with
#     STAGES 2, 3 and 4, ragged lengths (L_b = TOPK and 1), L_b < k, L_b = k all-equal, ties,
#     HIST=1 and clusters of 2, 4 and 8 (the selection's new trigger), an unstaged slice (the
#     ordered pass's new write-out on every path), NT 1 and 4, MATH=0;
#  2. `kt bench` of CTX {8K, 32K, 128K} x B {1, 8, 64} served by default_for (a DB without
#     indexer rows) by main's kt ($KT_MAIN) then this tree's, in the same call; the table of the
#     scan alone (kt_scan_us) against its roof, the selection alone and the pair, both builds;
#  3. the 8K x 1 and 8K x 8 rows once more, main then this tree (the noise of the B = 1 figures);
#  4. this tree at B = 64 with the scan's former default (NT=2, STAGES=4; default_for now takes NT=4,
#     STAGES=2 there on sm_90), `kt bench --config`.
# Without $KT_MAIN (the final call on merged main) only parts 1 and 2 run, of bin/kt.
# Logs under $OUT/idx21/; an ok/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir [KT_MAIN=main/bin/kt] bash tests/gpu/idx21.sh
set -u
cd "$(dirname "$0")/../.."
KT=./bin/kt
KM=${KT_MAIN:-}
LOGS=${OUT:-/tmp}/idx21 LOG=${OUT:-/tmp}/idx21
source tests/gpu/step.sh # step NAME CMD...
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/idx21_kt_cache}
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
skip() { echo "SKIP $1: ${SECONDS} s used"; }
E=DIST=equal,VALUES=grid
# the variants below (and default_for's), NVRTC-compiled in the background at once
SERVED="HIST=0 HIST=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 HIST=1,SEL_THREADS=512,SEL_CLUSTER=8"
for k in "$KT" ${KM:+"$KM"}; do
    for c in $SERVED; do timeout 40 "$k" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 & done
done
for c in STAGES=2 STAGES=3 NT=1 NT=4,STAGES=2 MATH=0,STAGES=3 SEL_THREADS=512,SEL_CLUSTER=2; do
    timeout 40 "$KT" compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
V=($KT verify --family mla_indexer --seed "$SEED")
R=DIST=ragged
# 1. correctness: the verify runs side by side (correctness only: nothing is timed here), then counted
vnames=()
vstep() { # vstep NAME ARGS...: kt verify ARGS in the background, its log and status kept
    local name=$1
    shift
    vnames+=("$name")
    (timeout 45 "${V[@]}" "$@" >"$LOG/$name.run" 2>&1; echo $? >"$LOG/$name.rc") &
    vpids+=($!)
}
vpids=()
vstep verify_default --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal \
    --shape TOPK=1152,CTX=5000,$R,VALUES=tied --shape TOPK=2048,CTX=1000,$E --m 1,3,8,64
# 8448 x 2 = 1056 groups of 16 = the H200's 1056 scan warps (one each); 8464 x 2 = 1058 (the even split)
vstep verify_split --shape TOPK=2048,CTX=8448,$E --shape TOPK=2048,CTX=8464,DIST=equal,VALUES=tied --shape TOPK=512,CTX=64,$E --m 1,2
vstep verify_stages --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=777,CTX=3000,$R,VALUES=equal --m 3,64 \
    --config STAGES=2
vstep verify_hist1 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E \
    --shape TOPK=777,CTX=3000,$R,VALUES=equal --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --m 1,3,16 --config HIST=1
vstep verify_cluster2 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 16 --config SEL_THREADS=512,SEL_CLUSTER=2
vstep verify_cluster4 --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 1,4 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=4
vstep verify_cluster8 --shape TOPK=2048,CTX=131072,$E --m 1 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=8
# one CTA over 32K+ keys: the slice is not staged (keys and pages from memory on every pass)
vstep verify_unstaged --shape TOPK=2048,CTX=32768,$R,VALUES=tied --m 3
vstep verify_nt1 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied --m 3 --config NT=1
vstep verify_stages3 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=2048,CTX=1000,$E --m 8,64 --config STAGES=3
# NT=4 with a ring of 2: default_for's scan on sm_90 past B = 16
vstep verify_nt4 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --shape TOPK=1152,CTX=5000,$R,VALUES=tied --m 3,17,64 \
    --config NT=4,STAGES=2
vstep verify_e4m3 --shape TOPK=2048,CTX=8192,$R,VALUES=grid --m 3 --config MATH=0,STAGES=3
wait "${vpids[@]}"
# each counted by step (its output from the run's log, its status from the run's)
for n in "${vnames[@]}"; do step "$n" sh -c 'cat "$1"; exit "$(cat "$2" 2>/dev/null || echo 99)"' _ "$LOG/$n.run" "$LOG/$n.rc"; done
echo "(verify done at ${SECONDS} s)"
# 2. the table: main's kt, then this tree's, served by default_for
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
SHAPES=(--shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E)
bench() { # bench NAME KT ARGS...
    local name=$1 k=$2
    shift 2
    step "$name" timeout 30 "$k" bench --family mla_indexer "$@" --db "$DB" --json "$LOG/$name.json"
    grep -v "^kt:" "$LOG/$name.log" | grep "^TOPK\|^shape" | cut -c1-200
}
if [ -z "$KM" ]; then
    echo "SKIP bench_main: no \$KT_MAIN (the final call on merged main: bin/kt only)"
elif [ "$SECONDS" -lt 45 ]; then bench bench_main "$KM" "${SHAPES[@]}" --m 1,8,64; else skip bench_main; fi
if [ "$SECONDS" -lt 66 ]; then bench bench_this "$KT" "${SHAPES[@]}" --m 1,8,64; else skip bench_this; fi
python3 - "$LOG/bench_main.json" "$LOG/bench_this.json" <<'EOF' || echo "(no table: a bench is missing)"
import json, sys
rows = {}
for tag, path in (("main", sys.argv[1]), ("this", sys.argv[2])):
    try:
        data = json.load(open(path))
    except Exception:
        continue
    for r in data:
        ctx = int(r["shape"].split("CTX=")[1].split(",")[0])
        rows.setdefault((ctx, r["M"]), {})[tag] = r
def f(x):
    return "-" if x is None else "%.2f" % x
print("table: the scan alone (kt_scan_us, default config HIST=0) against its roof; us")
print("| CTX x B | tokens | roof | scan main | /roof | scan this | /roof | select main / this | pair main / this |")
print("|---|---|---|---|---|---|---|---|---|")
for (ctx, b) in sorted(rows):
    m, t = rows[(ctx, b)].get("main", {}), rows[(ctx, b)].get("this", {})
    roof = (m or t).get("roof_us")
    sm, st = m.get("kt_scan_us"), t.get("kt_scan_us")
    print("| %dK x %d | %dK | %s | %s | %s | %s | %s | %s / %s | %s / %s |" % (
        ctx // 1024, b, ctx * b // 1024, f(roof), f(sm), f(sm / roof if sm else None), f(st),
        f(st / roof if st else None), f(m.get("kt_select_us")), f(t.get("kt_select_us")),
        f(m.get("kt_us")), f(t.get("kt_us"))))
EOF
# 3. the small cells again (their noise), main then this tree
if [ -n "$KM" ] && [ "$SECONDS" -lt 76 ]; then
    bench bench_main_small "$KM" --shape TOPK=2048,CTX=8192,$E --m 1,8
    bench bench_this_small "$KT" --shape TOPK=2048,CTX=8192,$E --m 1,8
else skip bench_small; fi
# 4. this tree at B = 64 with the scan's former default (NT=2, a ring of 4): the levers without NT=4
if [ -n "$KM" ] && [ "$SECONDS" -lt 82 ]; then
    bench bench_nt2 "$KT" "${SHAPES[@]}" --m 64 --config NT=2,STAGES=4
else skip bench_nt2; fi
echo "$passed passed, $failed failed (${SECONDS} s)"
[ "$failed" -eq 0 ]
