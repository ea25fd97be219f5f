// mxfp4_bf16.cuh — MXFP4 weights on the bf16 mma (moe_gemm BF16=1, sm_90 and sm_120): the e2m1
// codes and their ue8m0 scale made exact bf16 operands, and one k-step's A operand of a 16-row
// fragment. Shared by kernels/moe_gemm.cu and bench/ceiling.cu's issue-rate probe of the same
// instructions (kt bench prints its rate), so the probe measures what the kernel runs.
#ifndef KT_MXFP4_BF16_CUH
#define KT_MXFP4_BF16_CUH
#include "kt_device.cuh"

// e2m1 codes n and n+4 of word w (n < 4) as two bf16, code n in the low half, each the code's
// value times 2^-126 (sign to bit 15, the three magnitude bits s.e1e0.m to 8:6: exponent field
// e1e0, top mantissa bit m, so e1e0 = 0 lands on the subnormals 0 and 0.5 * 2^-126 as it
// should); times a power of two they stay exact (bf16 holds e2m1's values at ue8m0_bf16x2's scales).
template <int n> __device__ __forceinline__ kt_u32 e2m1x2_bf16(kt_u32 w) {
    const kt_u32 sign = (w << (12 - 4 * n)) & 0x80008000u;
    const kt_u32 mag = (n < 2 ? w << (6 - 4 * n) : w >> (4 * n - 6)) & 0x01c001c0u;
    return sign | mag;
}
// Bytes 0 and 2 of p (e4m3 codes) as two bf16 times 2^7: the code's bits moved into bf16's
// (value * 2^-120, e4m3's subnormals onto bf16's), then multiplied by 2^127 (exact).
__device__ __forceinline__ kt_u32 e4m3x2_bf16(kt_u32 p) {
    return kt_mul_bf16x2(((p << 8) & 0x80008000u) | ((p << 4) & 0x07f007f0u), 0x7f007f00u);
}
// The bf16 pair 2^(s-8) (s the ue8m0 byte), which turns e2m1x2_bf16's values into the weights
// times 2^-7 (the tokens carry the 2^7): exact for 2 <= s <= 135, |w| <= 1536.
__device__ __forceinline__ kt_u32 ue8m0_bf16x2(kt_u32 s) { return min(s + 119u, 255u) * 0x00800080u; }

// The A operand of bf16 k-step 2q+u of a 16-row fragment: v[r] holds the lane's 16 bytes (one
// 32-group) of row g + 8r, f[r] that row's ue8m0_bf16x2 factor. K-step 2q+u feeds mma k 2t, 2t+1
// with the group's k 8q+2u, 8q+2u+4 and 2t+8, 2t+9 with 8q+2u+1, 8q+2u+5 (e2m1x2_bf16's pairs).
__device__ __forceinline__ void kt_mxfp4_bf16_a(const uint4 (&v)[2], const kt_u32 (&f)[2], int q, int u,
                                                kt_u32 (&a)[4]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const kt_u32 w = q == 0 ? v[r].x : q == 1 ? v[r].y : q == 2 ? v[r].z : v[r].w;
        a[r] = kt_mul_bf16x2(u ? e2m1x2_bf16<2>(w) : e2m1x2_bf16<0>(w), f[r]);
        a[2 + r] = kt_mul_bf16x2(u ? e2m1x2_bf16<3>(w) : e2m1x2_bf16<1>(w), f[r]);
    }
}
#endif
