#!/usr/bin/env bash
# indexer.sh — mla_indexer on the GPU: kt verify on fresh seeded inputs (the seed is printed;
# KT_SEED repeats a run) over B in {1, 3, 8, 64}, equal and ragged lengths (ragged batches hold
# L_b = TOPK and L_b = 1; CTX below TOPK makes every L_b < k), grid, tied (four distinct K
# rows) and all-equal logits, top-k 2048, 512 and odd ones, a few random configs and the
# selection split over clusters of 2 and 8 CTAs, and HIST=1 (the scan's histogram) on the same
# kinds of cases, CHAINS=2 (two accumulators a head tile) and NT 1 and 4 (the epilogue's single
# tile and pairs of tiles). The
# logits are checked against float64 and the index list exactly (outputs poisoned first).
# Ends with "N passed, N failed"; exits 1 on any failure.
#   usage: tests/gpu/indexer.sh [KT binary]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
SEED=${KT_SEED:-$(date +%s)}
echo "seed $SEED"
passed=0 failed=0
check() {
    if $KT verify --family mla_indexer --seed "$SEED" "$@"; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAILED: kt verify --family mla_indexer --seed $SEED $*"; fi
}
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --m 1,3,8,64   # ragged, V3.2's top-k
check --shape TOPK=512,CTX=8192,DIST=equal,VALUES=grid --m 1,8         # V4's top-k
check --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid --m 3          # every L_b < k
check --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --m 8          # L_b = k, all logits equal
check --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --m 3,8        # ties at the threshold; V4.1's top-k
check --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 64          # all equal, ragged, odd k
check --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --m 8 --sample 4  # random configs too
# the selection as a cluster of CTAs per request (verify's default config has one CTA)
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=tied --shape TOPK=512,CTX=4096,DIST=ragged,VALUES=equal --m 1,3,16 \
    --config SEL_THREADS=512,SEL_CLUSTER=8
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --m 64 --config SEL_THREADS=512,SEL_CLUSTER=2
# HIST=1 (default_for's up to B = 16): the selection starts from the scan's histogram and must
# leave it zero (verify replays it: a stale count fails the next run); grid logits gather their
# candidates, tied and equal ones (more than 4096 a request) take the digits over every key
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=2048,CTX=1000,DIST=equal,VALUES=grid \
    --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 1,3,16 \
    --config HIST=1
check --shape TOPK=2048,CTX=32768,DIST=ragged,VALUES=tied --shape TOPK=512,CTX=65536,DIST=ragged,VALUES=grid \
    --shape TOPK=2048,CTX=2048,DIST=equal,VALUES=equal --m 1,4 \
    --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=4,CHAINS=2,WARPS=8,CTAS_PER_SM=1
check --shape TOPK=2048,CTX=131072,DIST=equal,VALUES=grid --shape TOPK=2048,CTX=20000,DIST=ragged,VALUES=equal \
    --m 1,3 --config HIST=1,SEL_THREADS=512,SEL_CLUSTER=8,MATH=0,CHAINS=2
# the scan's epilogue: NT=1 (a single tile, 3 shuffles) and NT=4 (two pairs of tiles, 4 shuffles a pair)
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --m 3 \
    --config NT=1
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=777,CTX=3000,DIST=ragged,VALUES=equal --m 3 \
    --config NT=4,STAGES=2
# CHAINS=2: a head tile's dot products over two accumulators
check --shape TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid --shape TOPK=1152,CTX=5000,DIST=ragged,VALUES=tied --m 3,64 \
    --config CHAINS=2
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
