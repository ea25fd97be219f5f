// fp8_gemm.cu — the FP8 block-scaled GEMM family's kernels: e4m3 activations with their
// per-128 scales in, bf16 out. The kernel itself is kernels/common/fp8_gemm.cuh.
#include "fp8_gemm.cuh"
