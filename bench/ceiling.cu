// ceiling.cu — the mma rates kt's kernels are built on, as this GPU runs them: e4m3
// m16n8k32 (the GEMMs) and bf16 m16n8k16 (attention-style kernels). `kt bench` times both
// once per run and reports a compute floor (flops / the family's rate) beside the copy floor. Compiled at run time by
// NVRTC like check.cu: kt_compile_source("ceiling.cu"). Each warp runs a GEMM's inner loop on registers: every step,
// new weight and token fragments (one XOR per operand register standing in for the ldmatrix that would bring them) and
// one mma per pair, so no operand can be hoisted out of the loop or shared between accumulators. Where the fp8 mma is
// emulated (sm_90: two f16 HMMAs, F2FP unpacks and FADDs per mma) that matters: with equal, loop-invariant operands
// ptxas shares the HMMAs between accumulators and hoists the unpacks, and such a loop reports 1,288-1,567 TFLOP/s on
// the H200, several times what any GEMM can reach.
#include "kt_device.cuh"  // kt_mma_e4m3, kt_mma_bf16, kt_e4m3x2_bf16
#include "mxfp4_bf16.cuh" // moe_gemm BF16=1's operands

// A GEMM's inner step: FN weight fragments meet FM token fragments (FN x FM independent
// accumulators), each fragment new every step and converted once where the mma is emulated.
// BF16: the bf16 mma instead of the e4m3 one (0x3737 halves are finite bf16 too).
template <int FN, int FM, bool BF16> __device__ __forceinline__ void mma_tile(float *out, int iters) {
    float acc[FN][FM][4];
    kt_u32 a[FN][4], b[FM][2];
    const kt_u32 seed = threadIdx.x * 0x9e3779b9u + blockIdx.x;
    // 0x37 per byte: finite e4m3 codes below 1, so 32 x iters products stay finite.
#pragma unroll
    for (int i = 0; i < FN; i++)
#pragma unroll
        for (int r = 0; r < 4; r++) a[i][r] = (seed * (2 * i + 1) + (kt_u32)r * 0x01020304u) & 0x37373737u;
#pragma unroll
    for (int j = 0; j < FM; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) b[j][h] = (seed * (2 * j + 5) + (kt_u32)h * 0x03050709u) & 0x37373737u;
#pragma unroll
    for (int i = 0; i < FN; i++)
#pragma unroll
        for (int j = 0; j < FM; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
    for (int it = 0; it < iters; it++) {
        const kt_u32 x = ((kt_u32)it * 0x01010101u) & 0x07070707u;
        kt_u32 wa[FN][4], wb[FM][2];
#pragma unroll
        for (int i = 0; i < FN; i++)
#pragma unroll
            for (int r = 0; r < 4; r++) wa[i][r] = a[i][r] ^ x;
#pragma unroll
        for (int j = 0; j < FM; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) wb[j][h] = b[j][h] ^ x;
#pragma unroll
        for (int i = 0; i < FN; i++)
#pragma unroll
            for (int j = 0; j < FM; j++) {
                if (BF16)
                    kt_mma_bf16(acc[i][j], wa[i], wb[j][0], wb[j][1]);
                else
                    kt_mma_e4m3(acc[i][j], wa[i], wb[j][0], wb[j][1]);
            }
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < FN; i++)
#pragma unroll
        for (int j = 0; j < FM; j++) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// out[gridDim.x * blockDim.x]: each thread's sum, so no mma is dead code.
extern "C" __global__ void kt_mma_ceiling_2x2(float *out, int iters) { mma_tile<2, 2, false>(out, iters); }
extern "C" __global__ void kt_mma_ceiling_4x2(float *out, int iters) { mma_tile<4, 2, false>(out, iters); }
extern "C" __global__ void kt_mma_bf16_ceiling_2x2(float *out, int iters) { mma_tile<2, 2, true>(out, iters); }
extern "C" __global__ void kt_mma_bf16_ceiling_4x2(float *out, int iters) { mma_tile<4, 2, true>(out, iters); }

// MXFP4 on the bf16 mma, as moe_gemm BF16=1's default warp runs a k-block (2 fragments of 16
// rows, one token fragment; kernels/common/mxfp4_bf16.cuh): each step new codes (one XOR per
// 16-byte register standing in for the load), the rows' scale bytes and the 16 token pairs read
// from shared memory as the kernel reads them, 16 bf16 mma, the sums scaled into the
// accumulators. What it leaves out is the kernel's loads, waits and epilogue, so its rate,
// counted in MXFP4 weight bytes (2 KB of codes + 128 B of scales a warp step), bounds from
// above the rate of any kernel that dequantises this way on this GPU (kt bench prints it).
extern "C" __global__ void kt_mxfp4_bf16_ceiling(float *out, int iters) {
    __shared__ uint4 tok[8][4][32]; // [warp % 8][k-step pair][lane]
    __shared__ kt_u32 sc[8][32];
    const int lane = threadIdx.x % 32, w8 = threadIdx.x / 32 % 8;
    const kt_u32 seed = threadIdx.x * 0x9e3779b9u + blockIdx.x;
    for (int q = 0; q < 4; q++) // finite e4m3-made bf16 pairs (0x37 codes: values below 1)
        tok[w8][q][lane] = make_uint4(e4m3x2_bf16(0x00370037u ^ (seed & 0x00030003u)), e4m3x2_bf16(0x00350035u),
                                      e4m3x2_bf16(0x00330033u), e4m3x2_bf16(0x00310031u));
    sc[w8][lane] = 0x7f7e7d7cu ^ (seed & 0x03030303u); // ue8m0 bytes near 2^0
    __syncwarp();
    uint4 v[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const kt_u32 b = seed * (2 * i + r + 1); // any e2m1 codes: all finite (|value| <= 6)
            v[i][r] = make_uint4(b, b ^ 0x5a5a5a5au, b * 3u, b * 5u);
        }
    float acc[2][4] = {};
    const int t = lane & 3, g = lane >> 2;
    for (int it = 0; it < iters; it++) {
        const kt_u32 x = (kt_u32)it * 0x9e3779b9u; // every bit of every code changes: none known to ptxas
        uint4 wv[2][2];
        kt_u32 f[2][2];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                wv[i][r] = make_uint4(v[i][r].x ^ x, v[i][r].y ^ x, v[i][r].z ^ x, v[i][r].w ^ x);
                f[i][r] = ue8m0_bf16x2((sc[w8][(16 * i + g + 8 * r + it) & 31] >> (8 * t)) & 0xffu);
            }
        uint4 xt[4];
#pragma unroll
        for (int q = 0; q < 4; q++) xt[q] = tok[w8][q][(lane + it) & 31];
        float sum[2][4] = {};
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    kt_u32 a[4];
                    kt_mxfp4_bf16_a(wv[i], f[i], q, u, a);
                    kt_mma_bf16(sum[i], a, u ? xt[q].z : xt[q].x, u ? xt[q].w : xt[q].y);
                }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][e] = fmaf(sum[i][e], 0.5f, acc[i][e]);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] =
        acc[0][0] + acc[0][1] + acc[0][2] + acc[0][3] + acc[1][0] + acc[1][1] + acc[1][2] + acc[1][3];
}

// The bf16 mma on B operands converted from e4m3 codes in registers, as mla_decode's PATH 2 runs
// on sm_90 (which has no e4m3 mma.sync): per step one ldmatrix.x4 of raw codes from shared
// memory (rows of random finite codes, a new row each step), each of its 4 words made a B
// fragment (2 prmt + 2 shifts + 2 masks: 4 codes as bf16x2 pairs), each fragment used by R mmas
// (R groups of 16 heads sharing one conversion; R independent A fragments held in registers, as
// q is). CVT16: one cvt.rn.f16x2.e4m3x2 per 2 codes (F2FP) and the f16 mma instead, as PATH 3's
// q . k. The rate these reach is the most a kernel that converts every code once per R head
// groups can do on this GPU.
template <int R, bool CVT16> __device__ __forceinline__ void cvt_mma_tile(float *out, int iters) {
    __shared__ __align__(16) kt_u32 codes[256 * 4]; // 256 rows of 16 bytes
    const kt_u32 seed = threadIdx.x * 0x9e3779b9u + blockIdx.x;
    for (int i = threadIdx.x; i < 256 * 4; i += blockDim.x) codes[i] = (seed ^ (kt_u32)i * 0x01030507u) & 0x37373737u;
    __syncthreads();
    float acc[R][4][4];
    kt_u32 a[R][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < 4; e++) a[r][e] = (seed * (2 * r + 1) + (kt_u32)e * 0x01020304u) & 0x37373737u;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[r][j][e] = 0.f;
    const kt_u32 base = kt_smem_addr(codes), lane = threadIdx.x & 31;
    for (int it = 0; it < iters; it++) {
        kt_u32 w[4];
        kt_ldmatrix_x4(base + (((kt_u32)it * 32 + lane) & 255) * 16, w[0], w[1], w[2], w[3]);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const kt_u32 b0 = CVT16 ? kt_e4m3x2_f16x2((kt_u16)w[j]) : kt_e4m3x2_bf16<KT_SEL_01>(w[j]);
            const kt_u32 b1 = CVT16 ? kt_e4m3x2_f16x2((kt_u16)(w[j] >> 16)) : kt_e4m3x2_bf16<KT_SEL_23>(w[j]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (CVT16)
                    kt_mma_f16(acc[r][j], a[r], b0, b1);
                else
                    kt_mma_bf16(acc[r][j], a[r], b0, b1);
            }
        }
    }
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < 4; j++) s += acc[r][j][0] + acc[r][j][1] + acc[r][j][2] + acc[r][j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// out as above; mmas per step: 4 R.
extern "C" __global__ void kt_cvt_mma_r1(float *out, int iters) { cvt_mma_tile<1, false>(out, iters); }
extern "C" __global__ void kt_cvt_mma_r2(float *out, int iters) { cvt_mma_tile<2, false>(out, iters); }
extern "C" __global__ void kt_cvt_mma_r4(float *out, int iters) { cvt_mma_tile<4, false>(out, iters); }
extern "C" __global__ void kt_cvt_mma_r8(float *out, int iters) { cvt_mma_tile<8, false>(out, iters); }
extern "C" __global__ void kt_cvt16_mma_r1(float *out, int iters) { cvt_mma_tile<1, true>(out, iters); }
