#!/usr/bin/env bash
# idx19.sh — HIST=2 (the selection from the scan's coarse counters, the keys in registers) on the
# H200 in one bounded run (< 100 s; every part under `within`, the script's cap END): kt verify of
# HIST=2 on fresh seeded inputs (outputs poisoned, logits against float64, index lists exact) on
# the cases its paths take — keys in registers (1024 and 512 threads), few and many candidates,
# ties, all-equal logits, L < k, L = k, requests longer than the tile (the fallback passes) — the
# planted bug in its fine histogram (bin/kt_idx19_planted: verify must fail), then the A/B in one
# run: `kt bench` served by main (bin/kt_main, main's code and config), HIST=2 at 8K (--config,
# 1024 and 512 threads), served by this tree (its HIST=1 and clusters: the refactor's control).
# Built ahead by tests/gpu/idx19_prep.sh (carry bin, lib, .gpu). Logs under $OUT/idx19/; an
# ok/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx19.sh
set -u
cd "$(dirname "$0")/../.."
KT=./bin/kt
LOGS=${OUT:-/tmp}/idx19 LOG=${OUT:-/tmp}/idx19 END=96
source tests/gpu/step.sh # step, within, use_jit_cache
use_jit_cache .gpu/idx19_cache.tar.xz /tmp/kt-idx19-cache
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
C2=HIST=2,SEL_THREADS=1024,SEL_CLUSTER=1 C25=HIST=2,SEL_THREADS=512,SEL_CLUSTER=1
for c in $C2 $C25 HIST=1 HIST=0; do # (the JIT cache may miss: compiled meanwhile, on the host's cores)
    timeout 40 $KT compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
timeout 40 bin/kt_main compile --family mla_indexer --arch sm_90 --config HIST=1 >/dev/null 2>&1 &
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
V=(verify --family mla_indexer --seed "$SEED")
# ragged 8K: L_b up to 16K (in registers at 1024 threads, past the tile at 512), L_b = TOPK and 1;
# tied and all-equal logits: more than 32 and more than 4096 candidates; CTX < TOPK; L = k
S=(--shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=2048,CTX=8192,DIST=equal,VALUES=tied
    --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid
    --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal)
step verify_hist2 within 20 $KT "${V[@]}" "${S[@]}" --m 1,3,16 --config $C2
step verify_hist2_512 within 14 $KT "${V[@]}" "${S[@]}" --m 1,3,16 --config $C25
# one CTA over 32K+ keys: past the tile and not staged (the fallback's passes from memory)
step verify_hist2_long within 9 $KT "${V[@]}" --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied \
    --shape TOPK=512,CTX=32768,DIST=equal,VALUES=grid --m 1,3 --config $C2
# the planted fine histogram (each thread's last run of keys not counted): verify must fail
if within 8 bin/kt_idx19_planted "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --m 3 --config $C2 \
    >"$LOG/planted_fails.log" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL planted_fails: verify passed the planted fine histogram ($LOG/planted_fails.log)"
elif grep -q "^FAIL.*wrong-result" "$LOG/planted_fails.log"; then
    passed=$((passed + 1))
    echo "ok   planted_fails: $(grep -m1 -o 'wrong-result.*' "$LOG/planted_fails.log" | cut -c1-150)"
else
    failed=$((failed + 1))
    echo "FAIL planted_fails: no wrong-result line (a compile or launch error?) ($LOG/planted_fails.log)"
fi
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
E=DIST=equal,VALUES=grid
B3=(--family mla_indexer --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E --shape TOPK=2048,CTX=131072,$E
    --m 1,16)
B8=(--family mla_indexer --shape TOPK=2048,CTX=8192,$E --m 1,16)
show() { grep -v "^kt:" "$LOG/$1.log" | grep "^TOPK\|^shape"; }
step bench_main within 16 bin/kt_main bench "${B3[@]}" --db "$DB" --json "$LOG/bench_main.json" && show bench_main
step bench_hist2 within 8 $KT bench "${B8[@]}" --config $C2 --json "$LOG/bench_hist2.json" && show bench_hist2
step bench_hist2_512 within 8 $KT bench "${B8[@]}" --config $C25 --json "$LOG/bench_hist2_512.json" &&
    show bench_hist2_512
step bench_served within 16 $KT bench "${B3[@]}" --db "$DB" --json "$LOG/bench_served.json" && show bench_served
# the 8K pair again, main then HIST=2, while time is left (drift between the two)
if [ "$SECONDS" -lt 80 ]; then
    step bench_main_again within 7 bin/kt_main bench "${B8[@]}" --db "$DB" --json "$LOG/bench_main_again.json" &&
        show bench_main_again
    step bench_hist2_again within 7 $KT bench "${B8[@]}" --config $C2 --json "$LOG/bench_hist2_again.json" &&
        show bench_hist2_again
else echo "SKIP the 8K pair again: ${SECONDS} s used"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
