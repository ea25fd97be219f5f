#!/usr/bin/env bash
# report.sh — kt report on the real-GPU fixture (tests/fixtures/h200_small.db, the H200 sweep of
# tests/fixtures/make_h200_small.sh, with its kt bench --json file), rendered by headless
# Chromium (Debian's chromium): the DOM Chromium builds holds every expected plot, and the
# screenshot is not blank. Bad input fails with one line. Ends with "N passed, N failed".
#   usage: report.sh path/to/kt path/to/png_ink
set -u
KT=${1:?usage: report.sh path/to/kt path/to/png_ink}
PNG_INK=${2:?usage: report.sh path/to/kt path/to/png_ink}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # check "what" condition-exit-status
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL report: $1"; fi
}
fixture=tests/fixtures/h200_small.db
bench=tests/fixtures/h200_small_bench.json
# The fixture's plots: a "variants" chart per measured problem (fp8_gemm 2 shapes x 3 M,
# act_quant 2 x 3, quant_fp8_gemm 1 x 2, selftest 1 x 1: 15) and per family (4) a
# "winners", a "roofline" and a "buckets" chart: 27.
expect_problems=15 expect_families=4 expect_plots=27

"$KT" report --db "$fixture" --bench "$bench" -o "$tmp/out" >"$tmp/stdout" 2>"$tmp/stderr"
check "kt report on the fixture (exit $?): $(cat "$tmp/stderr")" $?
grep -q "($expect_plots plots)" "$tmp/stdout"
check "kt report says $expect_plots plots: $(cat "$tmp/stdout")" $?
html=$tmp/out/index.html
! grep -qiE '<script|src="http|href="http|@import|url\(' "$html"
check "the page is self-contained (no scripts, nothing fetched)" $?

if ! command -v chromium >/dev/null; then
    echo "FAIL report: chromium is not installed (apt-get install chromium; .ci/run installs it)"
    echo "$passed passed, $((failed + 1)) failed"
    exit 1
fi
# Chromium writes its own caches (dconf) under HOME and XDG_CACHE_HOME: keep them in this test's folder.
chrome() { HOME="$tmp/home" XDG_CACHE_HOME="$tmp/home/.cache" XDG_CONFIG_HOME="$tmp/home/.config" timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" "$@" 2>>"$tmp/chromium.log"; }
chrome --dump-dom "file://$html" >"$tmp/dom.html"
count() { grep -o "$1" "$tmp/dom.html" | wc -l; }
svgs=$(count '<svg') variants=$(count 'data-plot="variants"') rooflines=$(count 'data-plot="roofline"')
winners=$(count 'data-plot="winners"') buckets=$(count 'data-plot="buckets"') failed_rows=$(count 'class="failed"')
[ "$svgs" -eq "$expect_plots" ]
check "Chromium's DOM holds $expect_plots <svg> plots, not $svgs" $?
[ "$variants" -eq "$expect_problems" ] && [ "$winners" -eq "$expect_families" ] && [ "$rooflines" -eq "$expect_families" ] &&
    [ "$buckets" -eq "$expect_families" ]
check "plots by kind: variants $variants, winners $winners, roofline $rooflines, buckets $buckets" $?
[ "$failed_rows" -eq 1 ] && grep -q "launch-error: the GPU context is lost" "$tmp/dom.html"
check "selftest's planted fault is drawn with its reason ($failed_rows failed rows)" $?
grep -q "cublaslt_fp8" "$tmp/dom.html" && grep -q "5691b0d-dirty" "$tmp/dom.html" && grep -q ">13.0<" "$tmp/dom.html"
check "baselines and provenance (commit, driver/NVRTC) on the page" $?

chrome --screenshot="$tmp/shot.png" --window-size=1100,2400 "file://$html" >/dev/null
read -r width height ink rows < <("$PNG_INK" "$tmp/shot.png" 2>&1)
# Not blank: over 2% of the pixels drawn, and drawn rows over half the height (plots all the
# way down, not a heading alone).
[ "${width:-0}" -eq 1100 ] && [ "${height:-0}" -eq 2400 ] && [ "$ink" -gt $((width * height / 50)) ] &&
    [ "$rows" -gt $((height / 2)) ]
check "the screenshot is not blank (${width}x${height}, $ink ink pixels in $rows rows)" $?

"$KT" report --db "$tmp/none.db" -o "$tmp/x" 2>"$tmp/err"; rc=$?
[ $rc -ge 1 ] && [ $rc -lt 126 ] && grep -q "cannot read database" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "missing DB: one line, exit $rc" $?
"$KT" report --db "$fixture" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "needs -o DIR" "$tmp/err"
check "no -o: one line" $?
echo '{"not": "an array"}' >"$tmp/bad.json"
"$KT" report --db "$fixture" --bench "$tmp/bad.json" -o "$tmp/x" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not the JSON array kt bench --json writes" "$tmp/err"
check "bad bench file: one line" $?
printf 'this is not a database, just text that is long enough to look like a header......' >"$tmp/junk.db"
"$KT" report --db "$tmp/junk.db" -o "$tmp/x" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not a kt database" "$tmp/err"
check "not a database: one line" $?

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
