#!/usr/bin/env bash
# idx19_trace.sh — where the B = 1 selection's time goes, phase by phase, for main's HIST=1 (after
# the eighteenth session's rework, never traced) and for HIST=2 (idx19's lever, measured slower on
# the H200 and not on main: 8K x 1 14.2 us against 12.1, and 1.3 us dearer at 1024 threads than at
# 512), in one bounded run (< 60 s). The builds come from tests/gpu/idx_builds.sh BASE kt_trace
# kt_trace2 (run before the call, ~3 min on the CPU): bin/kt_trace (tests/gpu/idx_trace.patch) and
# bin/kt_trace2 (tests/gpu/idx19_hist2_trace.patch). Their verify times are not timings (a printf a
# launch); the stamps are: clk = the selection's CTA 0 cycles from its entry at each mark, ns = from
# the scan's first CTA. HIST=1's marks: prologue, waited, hist (warp 0's two histogram reads), staged,
# gathered, (d3, d4: -1 where choose_in_warp serves), pre_write, end. HIST=2's, in the same fields:
# hist = warp 0's coarse read and choice, staged = the first barrier (the keys in registers),
# gathered = digit 5 counted and chosen, d3 = the candidates gathered, d4 = T chosen, pre_write, end.
# Logs under $OUT/idx19t/; a PASS/FAIL line per trace; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx19_trace.sh
set -u
cd "$(dirname "$0")/../.."
LOGS=${OUT:-/tmp}/idx19t LOG=${OUT:-/tmp}/idx19t
source tests/gpu/step.sh     # counts
source tests/gpu/idx_trace.sh # trace NAME CONFIG SHAPES...
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
T1=HIST=1,SEL_THREADS=1024,SEL_CLUSTER=1 T2=HIST=2,SEL_THREADS=1024,SEL_CLUSTER=1 T25=HIST=2,SEL_THREADS=512,SEL_CLUSTER=1
for k in "bin/kt_trace $T1" "bin/kt_trace2 $T2" "bin/kt_trace2 $T25"; do # compiled at once, on the host's cores
    set -- $k
    timeout 40 "$1" compile --family mla_indexer --arch sm_90 --config "$2" >/dev/null 2>&1 &
done
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
wait
S=(--shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 1,16)
for k in kt_trace kt_trace2; do [ -x "bin/$k" ] || { echo "FAIL no bin/$k (tests/gpu/idx_builds.sh)"; failed=$((failed + 1)); }; done
[ -x bin/kt_trace ] && KTT=bin/kt_trace trace trace_hist1 $T1 "${S[@]}"
[ -x bin/kt_trace2 ] && KTT=bin/kt_trace2 trace trace_hist2 $T2 "${S[@]}"
[ -x bin/kt_trace2 ] && KTT=bin/kt_trace2 trace trace_hist2_512 $T25 "${S[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
