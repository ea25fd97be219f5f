#!/usr/bin/env bash
# regret.sh — how much slower the fast search's winners are than the best config an
# exhaustive sweep found, per (shape, M) the exhaustive sweep covered. Both times come from
# the exhaustive run (it measured every config, the fast winner's too), so run-to-run drift
# does not enter; the best of ~1000 noisy first-pass medians reads a little low, so this
# overstates the regret slightly.
#   usage: tools/regret.sh FAST.db EXHAUSTIVE.db     (needs the sqlite3 shell)
set -eu
[ $# -eq 2 ] || { echo "usage: $0 FAST.db EXHAUSTIVE.db" >&2; exit 2; }
for db in "$1" "$2"; do [ -r "$db" ] || { echo "$0: cannot read $db" >&2; exit 1; }; done
sqlite3 -header -column "$2" "
ATTACH '$1' AS fast;
WITH best AS (SELECT shape, m, MIN(median_us) AS best_us, COUNT(*) AS configs
              FROM measurements WHERE family = 'fp8_gemm' AND status = 'ok' GROUP BY shape, m),
     chosen AS (SELECT w.shape, w.m_bucket AS m, w.config FROM fast.winners w WHERE w.family = 'fp8_gemm')
SELECT b.shape, b.m, b.configs, ROUND(b.best_us, 2) AS best_us, ROUND(MIN(x.median_us), 2) AS fast_winner_us,
       ROUND(100.0 * (MIN(x.median_us) / b.best_us - 1), 1) AS regret_pct, c.config AS fast_winner
FROM best b JOIN chosen c ON c.shape = b.shape AND c.m = b.m
JOIN measurements x ON x.shape = b.shape AND x.m = b.m AND x.config = c.config AND x.status = 'ok'
GROUP BY b.shape, b.m ORDER BY b.shape, b.m;"
