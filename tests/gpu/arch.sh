#!/usr/bin/env bash
# arch.sh — the GPU checks of the arch branch (issue 19): the FP8 GEMM kernel split into named
# device functions (kernels/common/fp8_gemm.cuh) must verify and time as before. Builds the
# kernel as it was (REV, default 78e2e04, before the split) beside this tree's bin/kt, then:
# kt verify of both GEMM families at the target shapes, M = 1 and 64, the default and 2 seeded
# configs (fresh inputs); tools/ab.sh of the old and new kernels on the winners of the H200
# fixture DB (tests/fixtures/h200_small.db: 6 fp8_gemm and 2 quant_fp8_gemm problems), both
# families, a PASS when the mean change is within 2%. Each part under `timeout`, logs in
# $OUT/arch (or /tmp/arch), an ok/FAIL line per step and a PASS/FAIL per A/B, then "N passed,
# N failed". Estimated 5-7 minutes on an H200 (two builds ~1.5 min, verify ~2, A/B ~2).
#   usage: tests/gpu/arch.sh [REV]      (OLD_KT=path: an old kt built elsewhere instead, e.g. where
#          the machine's copy has no .git: git archive 78e2e04 | tar -x -C build/old &&
#          make -C build/old bin/kt, carried as build/old, OLD_KT=build/old/bin/kt)
set -u
cd "$(dirname "$0")/../.."
REV=${1:-78e2e04}
LOGS=${OUT:-/tmp}/arch
source tests/gpu/step.sh # step NAME CMD...
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-arch-cache-$$}
old=/tmp/kt-arch-old-$$
mkdir -p "$old"
step build_new timeout 300 make -j"$(nproc)" bin/kt
old_kt=${OLD_KT:-$old/bin/kt}
[ -n "${OLD_KT:-}" ] || step build_old timeout 300 bash -c "git archive $REV | tar -x -C $old && make -C $old -j$(nproc) bin/kt"
# The fixture is schema v2: a copy, migrated by one fake-GPU tune (opening it writable).
cp tests/fixtures/h200_small.db "$LOGS/winners.db"
step migrate env KT_FAKE_GPU=1 ./bin/kt tune --family selftest --strategy random --shape N=4096 --m 1 \
    --where FAULT=0,HANG=0 --budget 1 --db "$LOGS/winners.db"
for fam in fp8_gemm quant_fp8_gemm; do
    step "verify_$fam" timeout 240 ./bin/kt verify --family "$fam" --shape targets --m 1,64 --sample 2 --seed $RANDOM
    # tools/ab.sh ends with the mean change over the fixture's winners (6 and 2 problems).
    step "ab_$fam" timeout 240 env FAMILY="$fam" tools/ab.sh "$old_kt" ./bin/kt "$LOGS/winners.db" 1
done
for fam in fp8_gemm quant_fp8_gemm; do
    [ -f "$LOGS/ab_$fam.log" ] || continue
    change=$(grep -oE 'mean change[^%]*%' "$LOGS/ab_$fam.log" | grep -oE '[-+]?[0-9.]+%' | tail -n 1)
    if [ -n "$change" ] && awk -v c="${change%\%}" 'BEGIN { exit !(c < 2 && c > -2) }'; then
        passed=$((passed + 1)); echo "PASS ab_$fam: new vs old kernel $change (within 2%)"
    else
        failed=$((failed + 1)); echo "FAIL ab_$fam: new vs old kernel '${change:-no mean change line}' (see ab_$fam.log)"
    fi
done
rm -rf "$old"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
