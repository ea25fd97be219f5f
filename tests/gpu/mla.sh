#!/usr/bin/env bash
# mla.sh — the GPU tests of the sparse MLA decode family (tests/gpu/run.sh calls it; it also
# runs alone): kt verify on fresh seeded inputs over B in {1,3,8,64,128}, HQ {16,64,128},
# SQ 1 and 2, both layouts, odd top-k, with the fill's -1 holes, empty requests, rows with no
# valid slot, short contexts and (V4) sinks; the GPU compare against the CPU compare; then a
# fast tune of the target cases and the bench of its winners. Prints "N passed, N failed".
#   usage: tests/gpu/mla.sh [KT] [LOGS]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
LOGS=${2:-${LOGS:-/tmp/kt-gpu-mla}}
SEED=${KT_SEED:-$RANDOM}
SAMPLE=${KT_MLA_SAMPLE:-2}
source tests/gpu/step.sh # step NAME CMD...
echo "mla.sh: seed $SEED"
v() { $KT verify --family mla_decode --sample "$SAMPLE" --seed "$SEED" "$@"; }
step mla_v4_h64 v --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=1 --m 1,3,8,64,128
step mla_v4_h16_mtp v --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 1,3,8,64,128
step mla_v32_h128 v --shape LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 --m 1,3,8,64,128
step mla_v32_h16_mtp v --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --m 1,3,8,64,128
step mla_odd_topk v --shape LAYOUT=V4,HQ=128,TOPK=1152,SQ=1 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 1,3,8
# The same variants compared on the CPU (KT_CHECK_ON_GPU=0): the lse's infinities and the
# out's values must be judged alike by both compares.
compare() {
    local args=(verify --family mla_decode --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --shape LAYOUT=V32,HQ=16,TOPK=256,SQ=1
                --m 3,8 --seed 7)
    $KT "${args[@]}" >"$LOGS/cmp_gpu.txt" && KT_CHECK_ON_GPU=0 $KT "${args[@]}" >"$LOGS/cmp_cpu.txt" || return 1
    paste -d' ' <(grep '^ok ' "$LOGS/cmp_gpu.txt") <(grep '^ok ' "$LOGS/cmp_cpu.txt") | awk '
        { n++; a = $6 + 0; b = $(NF - 2) + 0; d = a > b ? a - b : b - a
          if (d > 1e-6 * (a > b ? a : b)) { bad++; print "differ: " $0 } }
        END { printf "%d compared, %d differ\n", n, bad; exit !(n >= 4 && bad == 0) }'
}
step mla_check_gpu_vs_cpu compare
# The toolkit end to end: a fast tune of the target cases into a fresh DB, then the bench of
# its winners (dispatch from the DB; the naive kernel as the in-run baseline).
rm -f "$LOGS/mla.db"*
step mla_tune $KT tune --family mla_decode --shape targets --m 1,64 --budget "${KT_MLA_BUDGET:-8}" --db "$LOGS/mla.db"
step mla_bench $KT bench --family mla_decode --shape targets --m 1,8,64 --db "$LOGS/mla.db" --json "$LOGS/mla_bench.json"
cat "$LOGS/mla_bench.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
