#!/usr/bin/env bash
# replay.sh — the fast search replayed offline against a recorded exhaustive sweep, to judge a
# change to the search before any GPU run: per seed, `kt tune` on the fake GPU with the
# recording's times (KT_FAKE_TIME=replay:, configs it lacks read 1 s), over the recording's
# shapes at the 18 Ms of the target sweep (so anchors and transfers run as in the real one);
# then, for each (shape, M) the recording covers, the regret: the winner's recorded time over
# the recording's best, minus 1. Prints a row per seed (units measured, regret % per problem)
# and the mean per problem with how many seeds missed 3%; the last line is
# "mean regret X% over N problems x S seeds, U units per sweep".
#   usage: tools/replay.sh RECORDING [SEED ...]     (no SEED: kt's default seed)
# RECORDING: "SHAPE M CONFIG US" lines (US 0: the config failed there), plain or .xz, e.g.
# bench/recordings/h200_db5fc94_exhaustive.txt.xz (`kt db export` of an exhaustive sweep's DB).
# KT (default ./bin/kt) and FAMILY (default fp8_gemm) may be set in the environment, and
# KT_FAKE_SMS, the SM count the fake GPU reports (default 132: the recordings are the H200's;
# the search's per-problem default depends on it).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 RECORDING [SEED ...]" >&2; exit 2; }
KT=${KT:-./bin/kt}
FAMILY=${FAMILY:-fp8_gemm}
MS=1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096
rec=$1
shift
[ -r "$rec" ] || { echo "$0: cannot read $rec" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $rec in *.xz) xz -dc "$rec" >"$tmp/rec.txt" ;; *) cp "$rec" "$tmp/rec.txt" ;; esac
shapes=()
for s in $(awk '{print $1}' "$tmp/rec.txt" | sort -u); do shapes+=(--shape "$s"); done
[ ${#shapes[@]} -gt 0 ] || { echo "$0: $rec records nothing" >&2; exit 1; }
[ $# -gt 0 ] || set -- default

for seed in "$@"; do
    db=$tmp/$seed.db
    seed_arg=()
    [ "$seed" = default ] || seed_arg=(--seed "$seed")
    KT_FAKE_GPU=1 KT_FAKE_SMS=${KT_FAKE_SMS:-132} KT_FAKE_TIME=replay:"$tmp/rec.txt" "$KT" tune --family "$FAMILY" "${shapes[@]}" --m $MS \
        "${seed_arg[@]}" --db "$db" 2>"$tmp/tune.log" || { cat "$tmp/tune.log" >&2; exit 1; }
    units=$(grep -oE "[0-9]+ measured" "$tmp/tune.log" | head -n 1 | cut -d' ' -f1)
    # The winners as "SHAPE M CONFIG" (the fake device's name is three words).
    "$KT" db show --db "$db" |
        awk -v f="$FAMILY" '/^winners/ {w = 1; next} w && /^$/ {w = 0} w && $4 == f {print $5, $6, $7}' \
            >"$tmp/winners.$seed"
    echo "$seed $units"
done >"$tmp/seeds"

awk -v nseeds="$#" '
    FILENAME == ARGV[1] { key = $1 " " $2
                          if (!(key in seen)) { seen[key] = 1; problems[++n] = key }
                          if ($4 > 0 && (!(key in best) || $4 < best[key])) best[key] = $4
                          t[key " " $3] = $4; next }
    FILENAME == ARGV[2] { order[++nseed] = $1; units[$1] = $2; next }
    { seed = substr(FILENAME, index(FILENAME, "winners.") + 8); win[seed, $1 " " $2] = $3 }
    END {
        printf "%-12s %6s", "seed", "units"
        for (p = 1; p <= n; p++) printf " %22s", problems[p]
        printf "\n"
        for (s = 1; s <= nseed; s++) {
            seed = order[s]; total_units += units[seed]
            printf "%-12s %6d", seed, units[seed]
            for (p = 1; p <= n; p++) {
                key = problems[p]; us = t[key " " win[seed, key]] + 0
                r = us > 0 ? 100 * (us / best[key] - 1) : 100 # no winner, or one that failed there
                sum[p] += r; if (r > 3) miss[p]++; all += r
                printf " %22.1f", r
            }
            printf "\n"
        }
        printf "%-12s %6s", "mean (>3%)", ""
        for (p = 1; p <= n; p++) printf " %17.2f (%2d)", sum[p] / nseed, miss[p]
        printf "\nmean regret %.2f%% over %d problems x %d seeds, %.0f units per sweep\n",
               all / (n * nseed), n, nseed, total_units / nseed
    }' "$tmp/rec.txt" "$tmp/seeds" "$tmp"/winners.*
