// quant_fp8_gemm.cu — act_quant fused into the FP8 block-scaled GEMM: bf16 activations in,
// quantised per token per 128 inside the kernel (kernels/common/fp8_gemm.cuh, KT_QUANT_A),
// so a decode step's projection is one launch instead of two.
#define KT_QUANT_A 1
#define KT_GEMM_ENTRY quant_fp8_gemm
#include "fp8_gemm.cuh"
