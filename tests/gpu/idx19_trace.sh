#!/usr/bin/env bash
# idx19_trace.sh — the B = 1 selection on the H200 after idx19's checkpoint, in one bounded run
# (< 95 s; every part under step.sh's within, the script's cap END). HIST=2 (the selection from the
# scan's coarse counters with the keys in registers; not on main) measured slower at the checkpoint
# (8K x 1 14.2 us against main's 12.1); its SASS showed why: ptxas issued each thread's four 16-byte
# key loads one after another's conversion and warp 0's coarse read after them, 2-4 dependent L2
# round trips where the design has one. bin/kt_hist2b (tests/gpu/idx19_hist2b.patch) issues them
# together (the bits loaded before the first barrier, made keys after it). This script:
#  1. kt verify of bin/kt_hist2b's HIST=2 (1024 and 512 threads) on fresh seeded inputs: ragged 8K
#     grid (L_b to 16K, = TOPK, = 1), 8K tied, 3000 all-equal top-k 777, CTX 1000 (L < k), CTX 2048
#     all-equal (L = k), 32K ragged tied (past the tile), B 1/3/16: exact or FAIL;
#  2. the A/B: `kt bench` at 8K x 1/16 of bin/kt (main's served config there: HIST=1, 1024
#     threads) and bin/kt_hist2b --config HIST=2 (1024, 512), twice, interleaved;
#  3. the phases (bin/kt_trace: main + idx_trace.patch; bin/kt_trace2: kt_hist2b + the stamps): the
#     selection CTA's clock64 at each mark (clk fields; ns = from the scan's first CTA). HIST=1's
#     marks: prologue, waited, hist (warp 0's two histogram reads), staged, gathered, (d3, d4: -1 where
#     choose_in_warp serves), pre_write, end; HIST=2's in the same fields: hist = warp 0's coarse read
#     and choice, staged = the first barrier (keys in registers), gathered = digit 5 counted and
#     chosen, d3 = candidates gathered, d4 = T chosen, pre_write, end. A traced build's verify times
#     are not timings (a printf a launch).
# Builds first, on the CPU: `bash tests/gpu/idx_builds.sh 518d1ef kt_hist2b kt_trace kt_trace2` (~5 min).
# Logs under $OUT/idx19t/; an ok/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx19_trace.sh
set -u
cd "$(dirname "$0")/../.."
LOGS=${OUT:-/tmp}/idx19t LOG=${OUT:-/tmp}/idx19t END=92
source tests/gpu/step.sh      # step, within
source tests/gpu/idx_trace.sh # trace NAME CONFIG SHAPES...
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
T1=HIST=1,SEL_THREADS=1024,SEL_CLUSTER=1 C2=HIST=2,SEL_THREADS=1024,SEL_CLUSTER=1 C25=HIST=2,SEL_THREADS=512,SEL_CLUSTER=1
for k in kt_hist2b kt_trace kt_trace2; do
    [ -x "bin/$k" ] || { echo "FAIL no bin/$k (tests/gpu/idx_builds.sh)"; failed=$((failed + 1)); }
done
# NVRTC of every variant below at once, on the host's cores (their sources are not main's: no cache)
for k in "kt_hist2b $C2" "kt_hist2b $C25" "kt_hist2b HIST=0" "kt $T1" "kt HIST=0" "kt_trace $T1" "kt_trace HIST=0" \
    "kt_trace2 $C2" "kt_trace2 $C25" "kt_trace2 HIST=0"; do
    set -- $k
    [ -x "bin/$1" ] && timeout 40 "bin/$1" compile --family mla_indexer --arch sm_90 --config "$2" >/dev/null 2>&1 &
done
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
wait
V=(verify --family mla_indexer --seed "$SEED")
S=(--shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=2048,CTX=8192,DIST=equal,VALUES=tied
    --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid
    --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied)
step verify_hist2b within 12 bin/kt_hist2b "${V[@]}" "${S[@]}" --m 1,3,16 --config $C2
step verify_hist2b_512 within 12 bin/kt_hist2b "${V[@]}" "${S[@]}" --m 1,3,16 --config $C25
B8=(--family mla_indexer --shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 1,16)
show() { grep -v "^kt:" "$LOG/$1.log" | grep "^TOPK" | awk '{print "   ", $1, "B", $2, "kt_us", $3, $NF}'; }
for r in 1 2; do
    step bench_main_$r within 8 bin/kt bench "${B8[@]}" --config $T1 && show bench_main_$r
    step bench_hist2b_$r within 8 bin/kt_hist2b bench "${B8[@]}" --config $C2 && show bench_hist2b_$r
    step bench_hist2b_512_$r within 8 bin/kt_hist2b bench "${B8[@]}" --config $C25 && show bench_hist2b_512_$r
done
S1=(--shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 1,16)
[ "$SECONDS" -lt 70 ] && TT=8 KTT=bin/kt_trace trace trace_hist1 $T1 "${S1[@]}"
[ "$SECONDS" -lt 78 ] && TT=7 KTT=bin/kt_trace2 trace trace_hist2b $C2 "${S1[@]}"
[ "$SECONDS" -lt 85 ] && TT=6 KTT=bin/kt_trace2 trace trace_hist2b_512 $C25 "${S1[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
