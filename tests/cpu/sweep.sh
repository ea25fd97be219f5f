#!/usr/bin/env bash
# sweep.sh — `kt tune` and `kt db merge` end to end on the fake GPU (KT_FAKE_GPU=1: real
# compiles and worker processes, fake times, the selftest family's planted faulting and
# hanging variants). A sweep killed with -9 and run again resumes: nothing is measured
# twice, no committed row is lost, and it ends with the rows and winners of a sweep that
# was never interrupted. Two shards merged give those rows and winners too. Both hold for
# the exhaustive strategy (selftest) and for fast (fp8_gemm: its later phases choose from
# committed results, and its shards take whole shapes). Merging a database into itself or
# an unreadable file fails clearly. Ends with "N passed, N failed".
set -u
KT=${1:?usage: sweep.sh path/to/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KT_FAKE_GPU=1 KT_WATCHDOG_S=0.2 KT_CACHE_DIR="$tmp/cache"
unset KT_FAKE_GPU_COUNT KT_FAKE_DELAY_MS
passed=0 failed=0

# check "what" 'CONDITION': evaluates the shell condition and counts it.
check() {
    if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL sweep: $1"; fi
}

# 2 shapes x 2 M x 12 variants; 24 of the 48 units fault and 12 hang.
TUNE=(tune --family selftest --strategy exhaustive --shape N=4096 --shape N=1024 --m 1,64 --threads 2)
UNITS=48

# The measurements of a DB as CSV without the header, the commas inside quoted fields (config,
# a shape of several dims) made ';' so that fields split on ','. A comma is inside a quoted
# field when an odd number of quotes stands before it.
rows() {
    "$KT" db export --format csv --db "$1" 2>/dev/null | tail -n +2 | tr -d '\r' |
        sed -E ':a;s/^(([^"]*"[^"]*")*[^"]*"[^",]*),/\1;/;ta'
}
# What identifies a measurement across DBs: variant, shape, m, status, median.
units() { rows "$1" | cut -d, -f10,12,13,14,16 | sort; }
# The winners: shape, M bucket, config, variant, median (the device name is three words).
winners() {
    "$KT" db show --db "$1" |
        awk '/^winners/ {w = 1; next} w && /^$/ {w = 0} w && $1 == "kt" {print $5, $6, $7, $8, $9}' | sort
}

"$KT" "${TUNE[@]}" --db "$tmp/ref.db" 2>"$tmp/ref.log"
rc=$?
check "uninterrupted sweep" '[ $rc -eq 0 ]'
units "$tmp/ref.db" >"$tmp/ref.units"
winners "$tmp/ref.db" >"$tmp/ref.winners"
check "uninterrupted sweep has every unit once" '[ "$(sort -u "$tmp/ref.units" | wc -l)" -eq $UNITS ]'
check "faulting and hanging variants recorded" '[ "$(grep -c ",launch-error," "$tmp/ref.units")" -eq 36 ]'
check "a winner per (shape, M), all honest variants" \
    '[ "$(wc -l <"$tmp/ref.winners")" -eq 4 ] && [ "$(grep -c "FAULT=0,HANG=0" "$tmp/ref.winners")" -eq 4 ]'

# kill -9 once some rows are committed, while workers hang (three fake GPUs, a 10 s
# watchdog: the hanging ones end only because their sweep did)
KT_FAKE_GPU_COUNT=3 KT_WATCHDOG_S=10 KT_FAKE_DELAY_MS=60 "$KT" "${TUNE[@]}" --db "$tmp/kill.db" 2>"$tmp/kill.log" &
pid=$!
for _ in $(seq 200); do
    [ "$(rows "$tmp/kill.db" | wc -l)" -ge 5 ] && break
    sleep 0.05
done
{ kill -9 $pid; wait $pid; } 2>/dev/null # quiet: the shell reports the killed job
rows "$tmp/kill.db" >"$tmp/before.rows"
before=$(wc -l <"$tmp/before.rows")
check "killed mid-sweep ($before rows)" '[ "$before" -ge 5 ] && [ "$before" -lt $UNITS ]'
sleep 0.2
check "no worker outlives a killed sweep" '[ -z "$(ps -eo args | grep -F "$tmp/kill.db" | grep -v grep)" ]'
"$KT" "${TUNE[@]}" --db "$tmp/kill.db" 2>"$tmp/resume.log"
rc=$?
check "resumed sweep finishes" '[ $rc -eq 0 ]'
check "resume skips the committed rows" 'grep -q "$before already measured" "$tmp/resume.log"'
rows "$tmp/kill.db" >"$tmp/after.rows"
check "no committed row lost or changed" '[ -z "$(grep -Fxvf "$tmp/after.rows" "$tmp/before.rows")" ]'
check "every unit measured exactly once" \
    '[ "$(wc -l <"$tmp/after.rows")" -eq $UNITS ] && [ "$(cut -d, -f10,12,13 "$tmp/after.rows" | sort -u | wc -l)" -eq $UNITS ]'
check "resumed rows equal the uninterrupted sweep's" 'cmp -s "$tmp/ref.units" <(units "$tmp/kill.db")'
check "resumed winners equal the uninterrupted sweep's" 'cmp -s "$tmp/ref.winners" <(winners "$tmp/kill.db")'

# two shards, each on two fake GPUs, merged
for i in 0 1; do
    KT_FAKE_GPU_COUNT=2 "$KT" "${TUNE[@]}" --shard $i/2 --db "$tmp/shard$i.db" 2>"$tmp/shard$i.log"
    rc=$?
    check "shard $i/2 measures half" '[ $rc -eq 0 ] && [ "$(rows "$tmp/shard$i.db" | wc -l)" -eq $((UNITS / 2)) ]'
done
"$KT" db merge --db "$tmp/merged.db" "$tmp/shard0.db" "$tmp/shard1.db" >"$tmp/merge.log" 2>&1
rc=$?
check "merge" '[ $rc -eq 0 ]'
check "merged rows equal the unsharded sweep's" 'cmp -s "$tmp/ref.units" <(units "$tmp/merged.db")'
check "merged winners equal the unsharded sweep's" 'cmp -s "$tmp/ref.winners" <(winners "$tmp/merged.db")'
"$KT" db merge --db "$tmp/merged.db" "$tmp/shard1.db" >/dev/null 2>&1
check "merging again copies nothing twice" '[ "$(rows "$tmp/merged.db" | wc -l)" -eq $UNITS ]'

# The fast strategy (the default) on fp8_gemm: two shapes, anchors at M = 1, 4, 16 with 2
# between; the same checks. Killed once phase 1 is behind it, resumed, it must choose the
# same later-phase units from the committed rows as the uninterrupted sweep.
FAST=(tune --family fp8_gemm --shape N=4096,K=512 --shape N=1024,K=4096 --m 1,2,4,16 --budget 6 --threads 2)
"$KT" "${FAST[@]}" --db "$tmp/fast.db" 2>"$tmp/fast.log"
rc=$?
check "uninterrupted fast sweep" '[ $rc -eq 0 ] && grep -q "phase 1/2/3: 42/[1-9][0-9]*/[1-9]" "$tmp/fast.log"'
units "$tmp/fast.db" >"$tmp/fast.units"
winners "$tmp/fast.db" >"$tmp/fast.winners"
fast_units=$(wc -l <"$tmp/fast.units")
check "fast sweep has every unit once and a winner per (shape, M)" \
    '[ "$(sort -u "$tmp/fast.units" | wc -l)" -eq "$fast_units" ] && [ "$(wc -l <"$tmp/fast.winners")" -eq 8 ]'
KT_FAKE_GPU_COUNT=2 KT_FAKE_DELAY_MS=30 "$KT" "${FAST[@]}" --db "$tmp/fastkill.db" 2>"$tmp/fastkill.log" &
pid=$!
for _ in $(seq 400); do
    [ "$(rows "$tmp/fastkill.db" | wc -l)" -ge 50 ] && break
    sleep 0.05
done
{ kill -9 $pid; wait $pid; } 2>/dev/null
rows "$tmp/fastkill.db" >"$tmp/fastbefore.rows"
before=$(wc -l <"$tmp/fastbefore.rows")
check "fast sweep killed mid-sweep ($before of $fast_units rows)" '[ "$before" -ge 50 ] && [ "$before" -lt "$fast_units" ]'
"$KT" "${FAST[@]}" --db "$tmp/fastkill.db" 2>"$tmp/fastresume.log"
rc=$?
check "resumed fast sweep finishes, skipping the committed rows" \
    '[ $rc -eq 0 ] && grep -q "$before already measured" "$tmp/fastresume.log"'
check "no committed fast row lost or changed" \
    '[ -z "$(grep -Fxvf <(rows "$tmp/fastkill.db") "$tmp/fastbefore.rows")" ]'
check "resumed fast rows equal the uninterrupted sweep's" 'cmp -s "$tmp/fast.units" <(units "$tmp/fastkill.db")'
check "resumed fast winners equal the uninterrupted sweep's" 'cmp -s "$tmp/fast.winners" <(winners "$tmp/fastkill.db")'
for i in 0 1; do
    KT_FAKE_GPU_COUNT=2 "$KT" "${FAST[@]}" --shard $i/2 --db "$tmp/fastshard$i.db" 2>"$tmp/fastshard$i.log"
    rc=$?
    check "fast shard $i/2 sweeps one whole shape" \
        '[ $rc -eq 0 ] && [ "$(units "$tmp/fastshard$i.db" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]'
done
"$KT" db merge --db "$tmp/fastmerged.db" "$tmp/fastshard0.db" "$tmp/fastshard1.db" >"$tmp/fastmerge.log" 2>&1
rc=$?
check "merged fast shards equal the unsharded fast sweep" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/fast.units" <(units "$tmp/fastmerged.db") &&
     cmp -s "$tmp/fast.winners" <(winners "$tmp/fastmerged.db")'

# expect_fail "what" "stderr pattern" kt-args...: exit 1 and the pattern on stderr.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >/dev/null 2>"$tmp/err"
    rc=$?
    check "$what" '[ $rc -eq 1 ] && grep -q -- "$pattern" "$tmp/err"'
}
expect_fail "merge into itself refused" "into itself" db merge --db "$tmp/merged.db" "$tmp/merged.db"
expect_fail "merge of a missing file refused" "cannot read .*none.db" db merge --db "$tmp/merged.db" "$tmp/none.db"
expect_fail "merge without inputs shows usage" "usage: kt db merge" db merge --db "$tmp/merged.db"
expect_fail "bad --shard refused" "--shard wants i/n" tune --family selftest --shape N=4096 --m 1 --shard 2/2
expect_fail "bad --workers refused" "--workers wants" tune --family selftest --shape N=4096 --m 1 --workers 0

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
