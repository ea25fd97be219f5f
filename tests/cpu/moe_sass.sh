#!/usr/bin/env bash
# moe_sass.sh — moe_gemm's sm_120a path uses the block-scaled tensor-core instruction: the
# NATIVE=1 variant NVRTC builds for sm_120a must hold QMMA.SF (e2m1 x e4m3, ue8m0 scales) in
# its SASS, the dequantising variant must not, and NATIVE=1 is refused for sm_120 and sm_90.
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
for arch in sm_120 sm_90; do
    check "NATIVE=1 refused on $arch" "! '$KT' compile --family moe_gemm --arch $arch --config NATIVE=1 >'$tmp/out' 2>&1 && grep -q 'needs sm_120a' '$tmp/out'"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
