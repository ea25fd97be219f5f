#!/usr/bin/env bash
# ab.sh — two builds of kt, or two databases' winners, timed on the same problems in one run,
# interleaved, the way bench/NOTES.md judges a change: for each winner of DB (shape, M, config),
# `kt bench --config` with OLD, then NEW, and all of that REPS times over; prints each
# problem's best time per side and the change, then the mean and geometric-mean change.
#   - builds: the configs are passed rather than looked up, since a kernel change moves every
#     variant id;
#   - --winners: one build (KT, default ./bin/kt) times OLD.db's winner and NEW.db's winner of
#     every problem both hold (a fresh sweep against an earlier one: "winners within noise").
# Needs a GPU.
#   usage: tools/ab.sh OLD_KT NEW_KT DB [REPS]            (REPS default 2; FAMILY default fp8_gemm)
#          tools/ab.sh --winners OLD.db NEW.db [REPS]
set -u
usage() { echo "usage: $0 OLD_KT NEW_KT DB [REPS] | $0 --winners OLD.db NEW.db [REPS]" >&2; exit 2; }
[ $# -ge 3 ] || usage
FAMILY=${FAMILY:-fp8_gemm}
if [ "$1" = --winners ]; then
    old=${KT:-./bin/kt} new=${KT:-./bin/kt} old_db=$2 new_db=$3 reps=${4:-2}
else
    old=$1 new=$2 old_db=$3 new_db=$3 reps=${4:-2}
fi
for b in "$old" "$new"; do [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 1; }; done
# The winners of FAMILY in a DB as "SHAPE M CONFIG".
winners() {
    local w
    w=$(KT=$new "$(dirname "$0")/winners.sh" "$1") || exit 1
    echo "$w" | awk -v f="$FAMILY" '$1 == f { print $2, $3, $4 }'
}
# "SHAPE M OLD_CONFIG NEW_CONFIG" for the problems both DBs hold.
list=$(join -j 1 <(winners "$old_db" | awk '{print $1 "|" $2, $3}' | sort) \
    <(winners "$new_db" | awk '{print $1 "|" $2, $3}' | sort) | tr '|' ' ')
[ -n "$list" ] || { echo "$0: no $FAMILY winners in common" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for rep in $(seq "$reps"); do
    while read -r shape m old_cfg new_cfg; do
        for b in old new; do
            kt=$old config=$old_cfg
            [ $b = new ] && kt=$new config=$new_cfg
            out=$("$kt" bench --family "$FAMILY" --shape "$shape" --m "$m" --config "$config" </dev/null 2>&1) ||
                { echo "$0: $kt bench $shape M=$m failed: $(echo "$out" | tail -n 1)" >&2; exit 1; }
            us=$(echo "$out" | awk -v s="$shape" -v m="$m" '$1 == s && $2 == m {print $3}')
            [ -n "$us" ] || { echo "$0: $kt bench printed no time for $shape M=$m" >&2; exit 1; }
            echo "$b $shape $m $us $config" >>"$tmp"
        done
    done <<<"$list"
done
awk '
    { key = $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      cfg[key, $1] = $5
      if (!((key, $1) in best) || $4 < best[key, $1]) best[key, $1] = $4 }
    END {
        printf "%-16s %5s %9s %9s %8s  %s\n", "shape", "M", "old_us", "new_us", "change", "config (new; old where it differs)"
        for (i = 1; i <= n; i++) {
            key = order[i]; split(key, k, " "); r = best[key, "new"] / best[key, "old"]
            sum += 100 * (r - 1); logs += log(r)
            other = cfg[key, "old"] == cfg[key, "new"] ? "" : "  (old " cfg[key, "old"] ")"
            printf "%-16s %5s %9.2f %9.2f %+7.1f%%  %s%s\n", k[1], k[2], best[key, "old"], best[key, "new"],
                100 * (r - 1), cfg[key, "new"], other
        }
        printf "mean change %+.2f%%, geometric mean %+.2f%% over %d problems (best of each side)\n",
            sum / n, 100 * (exp(logs / n) - 1), n
    }' "$tmp"
