#!/usr/bin/env bash
# idx_final.sh — the indexer on merged main in one short bounded run (< 45 s): kt verify of the
# kinds of cases indexer.sh holds that the last changes touch (fresh seed, outputs poisoned,
# logits against float64, index lists exact), then `kt bench` of the issue's B = 1 and 16 cases served by
# default_for. Logs under $OUT/idx/; an ok/FAIL line per check; ends with "N passed, N failed".
#   usage: OUT=dir tests/gpu/idx_final.sh [KT binary]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOGS=${OUT:-/tmp}/idx LOG=${OUT:-/tmp}/idx
source tests/gpu/step.sh # step NAME CMD...
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
# the variants below, NVRTC-compiled in the background at once (the JIT cache serves them)
for c in HIST=0 HIST=1 HIST=1,SEL_THREADS=512,SEL_CLUSTER=4 SEL_THREADS=512,SEL_CLUSTER=2 \
    HIST=1,SEL_THREADS=512,SEL_CLUSTER=8 HIST=0,SEL_THREADS=1024,SEL_CLUSTER=1; do
    timeout 30 $KT compile --family mla_indexer --arch sm_90 --config "$c" >/dev/null 2>&1 &
done
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done' EXIT
V=($KT verify --family mla_indexer --seed "$SEED")
step verify_default timeout 9 "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid \
    --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --m 1,3,64
# one CTA over 32K+ keys: the slice is not staged (keys and pages from memory on every pass)
step verify_unstaged timeout 7 "${V[@]}" --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --m 3
step verify_cluster2 timeout 7 "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --m 16 --config SEL_THREADS=512,SEL_CLUSTER=2
step verify_hist1 timeout 9 "${V[@]}" --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid \
    --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 1,3,16 --config HIST=1
step verify_cluster timeout 9 "${V[@]}" --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --m 1,4 \
    --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=4
DB=$LOG/no_indexer.db
cp tests/fixtures/h200_small.db "$DB" && chmod u+w "$DB" && $KT db migrate --db "$DB" >/dev/null
E=DIST=equal,VALUES=grid
if [ "$SECONDS" -lt 29 ]; then
    step bench_served timeout 15 $KT bench --family mla_indexer --shape TOPK=2048,CTX=8192,$E --shape TOPK=2048,CTX=32768,$E \
        --shape TOPK=2048,CTX=131072,$E --m 1,16 --db "$DB" --json "$LOG/bench_served.json"
    grep -v "^kt:" "$LOG/bench_served.log" | grep "^TOPK\|^shape"
else echo "SKIP bench_served: ${SECONDS} s used"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
