#!/usr/bin/env bash
# profiles.sh — the profiling recipes without the profilers: profiles/nsys_run.sh driven with
# a stand-in nsys that records its command lines and runs the profiled command (Nsight Systems
# is installed nowhere the project runs), kt's NVTX ranges as an injected tool receives them,
# and kt profile's answers to bad input on a machine without a GPU. Ends with "N passed, N failed".
#   usage: profiles.sh path/to/kt
set -u
KT=${1:?usage: profiles.sh path/to/kt}
KT=$(cd "$(dirname "$KT")" && pwd)/$(basename "$KT")
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL profiles: $1"; fi; }

# The stand-in: logs argv; `profile` runs what follows its options and writes OUT.nsys-rep
# (failing like nsys when the command fails), `stats` writes the two CSV reports.
cat >"$tmp/nsys" <<'STANDIN'
#!/usr/bin/env bash
echo "$*" >>"$NSYS_LOG"
sub=$1; shift
out=
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do # options (profile's are all --name=value)
    case $1 in --output=*) out=${1#--output=} ;; --report | --format) shift ;; esac
    shift
done
case $sub in
profile) "$@" || exit 3; : >"$out.nsys-rep" ;;
stats) [ -f "${!#}" ] || exit 4; : >"${out}_nvtx_sum.csv"; : >"${out}_cuda_gpu_kern_sum.csv" ;;
esac
STANDIN
chmod +x "$tmp/nsys"
export NSYS_LOG=$tmp/nsys.log KT_NSYS=$tmp/nsys

profiles/nsys_run.sh "$tmp/run1" "$KT" list fp8_gemm >"$tmp/out" 2>"$tmp/err"
rc=$?
check "nsys_run.sh records and summarises (exit $rc: $(head -c 200 "$tmp/err"))" '[ $rc -eq 0 ]'
check "the profiled command ran with its arguments" 'grep -q "TILE_N" "$tmp/out"'
check "nsys profile: cuda, nvtx and osrt traces, graph nodes one by one, the command unchanged" \
    'grep -qx "profile --trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true --output=$tmp/run1 $KT list fp8_gemm" "$NSYS_LOG"'
check "nsys stats: the NVTX-range and kernel summaries of the report it wrote" \
    'grep -qx "stats --report nvtx_sum,cuda_gpu_kern_sum --format csv --force-export=true --output=$tmp/run1 $tmp/run1.nsys-rep" "$NSYS_LOG" &&
     [ -f "$tmp/run1_nvtx_sum.csv" ] && [ -f "$tmp/run1_cuda_gpu_kern_sum.csv" ]'
: >"$NSYS_LOG"
profiles/nsys_run.sh "$tmp/run2" "$KT" frobnicate >/dev/null 2>&1
rc=$?
check "a failed recording stops with nsys's status and no stats (exit $rc)" '[ $rc -eq 3 ] && ! grep -q "^stats" "$NSYS_LOG"'
KT_NSYS=$tmp/none profiles/nsys_run.sh "$tmp/run3" "$KT" list 2>"$tmp/err"
rc=$?
check "no nsys: one line, exit 127" '[ $rc -eq 127 ] && grep -q "not found: install Nsight Systems" "$tmp/err"'
profiles/nsys_run.sh 2>/dev/null
check "usage" '[ $? -eq 2 ]'

# kt's NVTX ranges as a profiler receives them: tools/nvtx_record.c injected the way Nsight
# tools inject themselves (NVTX_INJECTION64_PATH), four nested ranges, closed in order.
NVTX_INJECTION64_PATH=$PWD/build/tools/libnvtx_record.so NVTX_RECORD=$tmp/nvtx.log \
    ./build/test_cpu nvtx_ranges_pushed >/dev/null 2>&1
printf 'push kt\npush act_quant\npush K=4096,M=16\npush VEC=4,GROUPS_PER_BLOCK=4\npop\npop\npop\npop\n' >"$tmp/nvtx.expected"
check "NVTX ranges kt/act_quant/K=4096,M=16/VEC=4,GROUPS_PER_BLOCK=4 reach an injected tool" \
    'cmp -s "$tmp/nvtx.log" "$tmp/nvtx.expected"'

# kt profile's bad input (no GPU needed to refuse it).
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    check "kt profile: $what (exit $rc: $(head -c 200 "$tmp/err"))" \
        '[ $rc -ge 1 ] && [ $rc -lt 126 ] && grep -q -- "$pattern" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ]'
}
expect_fail "two batch sizes" "one --shape and one --m" profile --family fp8_gemm --shape N=1536,K=4096 --m 1,16
expect_fail "no family" "needs --family" profile --shape N=1536,K=4096 --m 1
expect_fail "bad config" "unknown name 'TILES'" profile --family fp8_gemm --shape N=1536,K=4096 --m 1 --config TILES=3
expect_fail "bad --iters" "--iters: 0 is out of range" profile --family fp8_gemm --shape N=1536,K=4096 --m 1 --iters 0
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "no GPU" "needs an NVIDIA GPU" profile --family fp8_gemm --shape N=1536,K=4096 --m 16 --ncu
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
