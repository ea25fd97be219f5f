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
if ! command -v chromium >/dev/null; then
    echo "FAIL report: chromium is not installed (apt-get install chromium; .ci/run installs it)"
    echo "$passed passed, $((failed + 1)) failed"
    exit 1
fi
# Chromium writes its own caches (dconf) under HOME and XDG_CACHE_HOME: keep them in this test's folder.
chrome() { HOME="$tmp/home" XDG_CACHE_HOME="$tmp/home/.cache" XDG_CONFIG_HOME="$tmp/home/.config" timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" "$@" 2>>"$tmp/chromium.log"; }
count() { grep -o "$1" "$tmp/dom.html" | wc -l; }
# render NAME DB "PROBLEMS FAMILIES ROOFLINES FAILED" [--bench FILE ...]: kt report of DB into
# $tmp/NAME, Chromium's DOM of it in $tmp/dom.html, and the plots counted by kind: a
# "variants" chart per measured problem, per family a "winners" and a "buckets" chart and a
# "roofline" where the family has flops().
render() {
    local name=$1 db=$2 problems families rooflines failed_want
    read -r problems families rooflines failed_want <<<"$3"
    shift 3
    local plots=$((problems + 2 * families + rooflines))
    "$KT" report --db "$db" "$@" -o "$tmp/$name" >"$tmp/stdout" 2>"$tmp/stderr"
    check "$name: kt report (exit $?): $(cat "$tmp/stderr")" $?
    grep -q "($plots plots)" "$tmp/stdout"
    check "$name: kt report says $plots plots: $(cat "$tmp/stdout")" $?
    html=$tmp/$name/index.html
    ! grep -qiE '<script|src="http|href="http|@import|url\(' "$html"
    check "$name: the page is self-contained (no scripts, nothing fetched)" $?
    chrome --dump-dom "file://$html" >"$tmp/dom.html"
    local svgs variants rooflines_drawn winners buckets failed_rows
    svgs=$(count '<svg') variants=$(count 'data-plot="variants"') rooflines_drawn=$(count 'data-plot="roofline"')
    winners=$(count 'data-plot="winners"') buckets=$(count 'data-plot="buckets"') failed_rows=$(count 'class="failed"')
    [ "$svgs" -eq "$plots" ]
    check "$name: Chromium's DOM holds $plots <svg> plots, not $svgs" $?
    [ "$variants" -eq "$problems" ] && [ "$winners" -eq "$families" ] && [ "$rooflines_drawn" -eq "$rooflines" ] &&
        [ "$buckets" -eq "$families" ]
    check "$name: plots by kind: variants $variants, winners $winners, roofline $rooflines_drawn, buckets $buckets" $?
    [ "$failed_rows" -eq "$failed_want" ]
    check "$name: $failed_want failed rows drawn, not $failed_rows" $?
}

# The GEMM-era fixture: fp8_gemm 2 shapes x 3 M, act_quant 2 x 3, quant_fp8_gemm 1 x 2, selftest
# 1 x 1 (15 problems), 4 families with flops; selftest's planted fault.
render gemm "$fixture" "15 4 4 1" --bench "$bench"
grep -q "launch-error: the GPU context is lost" "$tmp/dom.html"
check "gemm: selftest's planted fault is drawn with its reason" $?
grep -q "cublaslt_fp8" "$tmp/dom.html" && grep -q "5691b0d-dirty" "$tmp/dom.html" && grep -q ">13.0<" "$tmp/dom.html"
check "gemm: baselines and provenance (commit, driver/NVRTC) on the page" $?

# The families' fixture (tests/fixtures/make_h200_families.sh): mla_decode 2 keys x 2 B,
# mla_indexer 1 x 2, moe_route 1 x 2, moe_gemm FP8 1 x 3 and MXFP4 1 x 2 (13 problems); moe_route
# has no flops (no roofline); 4 indexer variants refused for spilling. The best baseline of
# each winner is a real one (mla_decode's and the indexer's naive kernels, cuBLAS grouped),
# never a part of kt's own kernel (the indexer's scan or selection alone).
render families tests/fixtures/h200_families.db "13 4 3 4" $(for f in tests/fixtures/h200_families_bench_*.json; do echo --bench "$f"; done)
grep -q "ptxas spills .* bytes to local memory: refused" "$tmp/dom.html" && grep -q "cublas_bf16_grouped [0-9.]* us" "$tmp/dom.html" &&
    grep -q "<td>naive [0-9.]* us</td>" "$tmp/dom.html" && ! grep -qE "<td>(kt_)?(scan|select|roof) [0-9.]* us</td>" "$tmp/dom.html"
check "families: refusals with their reason; best baselines naive and cuBLAS grouped, never the indexer's own parts" $?
for name in gemm families; do
    chrome --screenshot="$tmp/$name.png" --window-size=1100,2400 "file://$tmp/$name/index.html" >/dev/null
    read -r width height ink rows < <("$PNG_INK" "$tmp/$name.png" 2>&1)
    # Not blank: over 2% of the pixels drawn, and drawn rows over half the height (plots all
    # the way down, not a heading alone).
    [ "${width:-0}" -eq 1100 ] && [ "${height:-0}" -eq 2400 ] && [ "$ink" -gt $((width * height / 50)) ] &&
        [ "$rows" -gt $((height / 2)) ]
    check "$name: the screenshot is not blank (${width}x${height}, $ink ink pixels in $rows rows)" $?
done

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
