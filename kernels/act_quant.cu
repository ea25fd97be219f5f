// act_quant.cu — per-token, per-128 activation quantisation for the FP8 GEMM:
//   s[m, g] = max(max |x[m, 128g : 128g+128]|, 1e-10) / 448,  q = e4m3(x / s)
// x bf16 [M, K] -> q e4m3 [M, K], s f32 [M, K/128]. A group of 128 is handled by
// 128/VEC consecutive lanes (VEC elements each, one 8- or 16-byte load), which find
// the group's max with shuffles; GROUPS_PER_BLOCK groups share a block.
// Launched as a programmatic dependent (PDL) like the GEMM it feeds: it lets the GEMM launch
// as soon as every block of it has started, then waits for the kernel before it (whose output
// it reads), so the GEMM's weight loads, which need nothing from it, overlap its wait and its
// work (the GEMM reads the quantised tokens only after its own wait, when this grid is done).
#include "kt_device.cuh"

#ifndef KT_VEC
#define KT_VEC 4
#define KT_GROUPS_PER_BLOCK 4
#endif

constexpr int VEC = KT_VEC, LANES = 128 / VEC, GROUPS = KT_GROUPS_PER_BLOCK;
constexpr int THREADS = LANES * GROUPS;
static_assert(VEC == 4 || VEC == 8, "VEC is 4 or 8 bf16 per thread");
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");

struct alignas(2 * VEC) bf16_vec {
    kt_u16 v[VEC];
};
struct alignas(VEC) e4m3_vec {
    kt_u16 v[VEC / 2];
};

extern "C" __global__ void __launch_bounds__(THREADS)
    act_quant(const kt_u16 *__restrict__ x, kt_u8 *__restrict__ q, float *__restrict__ s, int M, int K) {
    const int lane = threadIdx.x % LANES;
    const long group = (long)blockIdx.x * GROUPS + threadIdx.x / LANES;
    const long groups = (long)M * (K / 128);
    // Threads past the end recompute the last group (stores skipped) so every lane of
    // the warp reaches the full-mask shuffles.
    const bool live = group < groups;
    kt_allow_consumer();
    kt_wait_producer();
    const long base = (live ? group : groups - 1) * 128 + lane * VEC; // K % 128 == 0: groups tile rows
    bf16_vec in = *(const bf16_vec *)(x + base);
    float f[VEC], amax = 0.f;
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        f[i] = kt_bf16_to_f32(in.v[i]);
        amax = fmaxf(amax, fabsf(f[i]));
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = fmaxf(amax, 1e-10f) / 448.0f;
    e4m3_vec out;
#pragma unroll
    for (int i = 0; i < VEC; i += 2) out.v[i / 2] = kt_f32x2_to_e4m3x2(f[i] / scale, f[i + 1] / scale);
    if (!live) return;
    *(e4m3_vec *)(q + base) = out;
    if (lane == 0) s[group] = scale;
}
