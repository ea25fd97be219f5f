#!/usr/bin/env bash
# ab.sh — two builds of kt timed on the same configs in one run, interleaved, the way
# bench/NOTES.md judges a kernel change: for each winner of DB (shape, M, config), `kt bench
# --config` with OLD, then NEW, and all of that REPS times over; prints each problem's best
# time per build and the change, then the mean change. The configs are passed rather than
# looked up, since a kernel change moves every variant id. Needs a GPU.
#   usage: tools/ab.sh OLD_KT NEW_KT DB [REPS]     (REPS default 2; FAMILY default fp8_gemm)
set -u
[ $# -ge 3 ] || { echo "usage: $0 OLD_KT NEW_KT DB [REPS]" >&2; exit 2; }
old=$1 new=$2 db=$3 reps=${4:-2}
FAMILY=${FAMILY:-fp8_gemm}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 1; }; done
# The winners as "SHAPE M CONFIG".
list=$(KT=$new "$(dirname "$0")/winners.sh" "$db") || exit 1
list=$(echo "$list" | awk -v f="$FAMILY" '$1 == f { print $2, $3, $4 }')
[ -n "$list" ] || { echo "$0: $db has no $FAMILY winners" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for rep in $(seq "$reps"); do
    while read -r shape m config; do
        for b in old new; do
            kt=$old
            [ $b = new ] && kt=$new
            out=$("$kt" bench --family "$FAMILY" --shape "$shape" --m "$m" --config "$config" </dev/null 2>&1) ||
                { echo "$0: $kt bench $shape M=$m failed: $(echo "$out" | tail -n 1)" >&2; exit 1; }
            us=$(echo "$out" | awk -v s="$shape" -v m="$m" '$1 == s && $2 == m {print $3}')
            [ -n "$us" ] || { echo "$0: $kt bench printed no time for $shape M=$m" >&2; exit 1; }
            echo "$b $shape $m $us $config" >>"$tmp"
        done
    done <<<"$list"
done
awk '
    { key = $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key; cfg[key] = $5 }
      if (!((key, $1) in best) || $4 < best[key, $1]) best[key, $1] = $4 }
    END {
        printf "%-16s %5s %9s %9s %8s  %s\n", "shape", "M", "old_us", "new_us", "change", "config"
        for (i = 1; i <= n; i++) {
            key = order[i]; split(key, k, " "); d = 100 * (best[key, "new"] / best[key, "old"] - 1); sum += d
            printf "%-16s %5s %9.2f %9.2f %+7.1f%%  %s\n", k[1], k[2], best[key, "old"], best[key, "new"], d, cfg[key]
        }
        printf "mean change %+.2f%% over %d problems (best of each build)\n", sum / n, n
    }' "$tmp"
