#!/usr/bin/env bash
# moe_sass.sh — moe_gemm's sm_120a path uses the block-scaled tensor-core instruction: the
# NATIVE=1 variant NVRTC builds for sm_120a must hold QMMA.SF (e2m1 x e4m3, ue8m0 scales) in
# its SASS, the dequantising variant must not, and NATIVE=1 is refused for sm_120 and sm_90;
# WIDE=1 loads the weights in 16 bytes a lane (WIDE=0 in 8 or 4) and BF16=1 runs MXFP4 on the
# bf16 mma.
# cuobjdump (with nvdisasm beside it) comes from $KT_CUOBJDUMP, PATH, $CUDA/bin or NVIDIA's PyPI
# wheel (.ci/run installs it). Ends with "N passed, N failed".
set -u
KT=${1:?usage: moe_sass.sh path/to/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL moe_sass: $1"; fi; }
# the toolkit's, PATH's, or NVIDIA's PyPI wheel (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)
wheel=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/nvidia/cu13/bin/cuobjdump
CUOBJDUMP=${KT_CUOBJDUMP:-$(command -v cuobjdump || { [ -x "${CUDA:-/usr/local/cuda}/bin/cuobjdump" ] &&
    echo "${CUDA:-/usr/local/cuda}/bin/cuobjdump"; } || echo "$wheel")}
if [ ! -x "$CUOBJDUMP" ]; then
    echo "FAIL moe_sass: no cuobjdump (install the CUDA toolkit's, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm and set KT_CUOBJDUMP)"
    echo "0 passed, 1 failed"; exit 1
fi
export KT_CACHE_DIR="$tmp/cache"
sass() { # config arch -> the SASS mnemonics of its cubin
    rm -rf "$tmp/emit" && "$KT" compile --family moe_gemm --arch "$2" --config "$1" --emit "$tmp/emit" >/dev/null 2>&1 &&
        PATH="$(dirname "$CUOBJDUMP"):$PATH" "$CUOBJDUMP" -sass "$tmp"/emit/*.cubin
}
sass NATIVE=1 sm_120a >"$tmp/native.sass" 2>&1
check "sm_120a NATIVE=1 has QMMA.SF e2m1 x e4m3 with ue8m0 scales" "grep -q 'QMMA.SF.16832.F32.E2M1.E4M3.E8' '$tmp/native.sass'"
sass NATIVE=0 sm_120a >"$tmp/dequant.sass" 2>&1
check "sm_120a NATIVE=0 has e4m3 QMMA and no QMMA.SF" "grep -q 'QMMA.16832.F32.E4M3.E4M3' '$tmp/dequant.sass' && ! grep -q 'QMMA.SF' '$tmp/dequant.sass'"
# WIDE=1: the weights in 16-byte loads (LDG.E.NA.128), none of the narrow 8- and 4-byte ones
# (.NA.64, .NA), in both formats; with NATIVE=1 still the block-scaled mma on sm_120a.
wide_loads() { awk -v k="$2" '/Function :/ {f = $3 ~ k} f' "$1" | grep -oE 'LDG\.E\.NA(\.[0-9]+)?' | sort -u | tr '\n' ' '; }
sass WIDE=1 sm_90 >"$tmp/wide.sass" 2>&1
sass WIDE=0 sm_90 >"$tmp/narrow.sass" 2>&1
for k in moe_gemm_fp8_gateup moe_gemm_mxfp4_down; do
    check "sm_90 WIDE=1 $k loads weights in 16 bytes only" "[ \"\$(wide_loads '$tmp/wide.sass' $k)\" = 'LDG.E.NA.128 ' ]"
    check "sm_90 WIDE=0 $k in 8 or 4 bytes" "[ -n \"\$(wide_loads '$tmp/narrow.sass' $k | grep -v 128)\" ]"
done
sass WIDE=1,NATIVE=1 sm_120a >"$tmp/wide_native.sass" 2>&1
check "sm_120a WIDE=1 NATIVE=1 has QMMA.SF and 16-byte weight loads" "grep -q 'QMMA.SF.16832.F32.E2M1.E4M3.E8' '$tmp/wide_native.sass' && [ \"\$(wide_loads '$tmp/wide_native.sass' moe_gemm_mxfp4_gateup)\" = 'LDG.E.NA.128 ' ]"
# BF16=1: MXFP4 on the bf16 mma (HMMA ... .BF16 on sm_90), no e4m3 unpacking of the weights there.
sass WIDE=1,BF16=1 sm_90 >"$tmp/bf16.sass" 2>&1
check "sm_90 BF16=1 MXFP4 runs HMMA.16816.F32.BF16, no F2FP e4m3 unpack" "awk '/Function :/ {f = \$3 ~ /mxfp4/} f' '$tmp/bf16.sass' >'$tmp/bf16_mx.sass' && grep -q 'HMMA.16816.F32.BF16' '$tmp/bf16_mx.sass' && ! grep -q 'F2FP.F16.E4M3' '$tmp/bf16_mx.sass'"
check "BF16=1 without WIDE=1 refused" "! '$KT' compile --family moe_gemm --arch sm_90 --config WIDE=0,BF16=1 >'$tmp/out' 2>&1 && grep -q 'needs WIDE=1' '$tmp/out'"
for arch in sm_120 sm_90; do
    check "NATIVE=1 refused on $arch" "! '$KT' compile --family moe_gemm --arch $arch --config NATIVE=1 >'$tmp/out' 2>&1 && grep -q 'needs sm_120a' '$tmp/out'"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
