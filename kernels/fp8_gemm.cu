// fp8_gemm.cu — FP8 block-scaled GEMM for sm_120 (DeepSeek "w8a8 block"):
//   C[m, n] = sum_kb As[m, kb] * Bs[n/128, kb] * sum_{k in kb} A[m, k] * B[n, k]
// A e4m3 [M, K], As f32 [M, K/128], B e4m3 [N, K], Bs f32 [N/128, K/128], C bf16 [M, N].
//
// Decode has few tokens and many weight rows, so the MMA runs "swapped": weights are
// the 16-row A operand of mma.m16n8k32 and tokens the 8-column B operand; a CTA owns
// TILE_N weight rows x TILE_M tokens. Tiles stream through a STAGES-deep cp.async
// pipeline in a swizzled (conflict-free for ldmatrix) layout. Each k-block of 128 is
// accumulated on its own and promoted with its two scales, as the format requires.
// SPLIT_K CTAs share the K range of a tile; each writes an f32 partial and the last one
// to arrive sums them in a fixed order (deterministic) and writes C. WARPS_K warp
// groups split each stage along K inside the CTA and reduce through shared memory.
#include "kt_device.cuh"

#ifndef KT_TILE_N
#define KT_TILE_N 64
#define KT_TILE_M 16
#define KT_TILE_K 128
#define KT_WARPS 4
#define KT_WARPS_K 1
#define KT_STAGES 4
#define KT_SPLIT_K 1
#endif

constexpr int TILE_N = KT_TILE_N, TILE_M = KT_TILE_M, TILE_K = KT_TILE_K;
constexpr int WARPS = KT_WARPS, WARPS_K = KT_WARPS_K, STAGES = KT_STAGES, SPLIT_K = KT_SPLIT_K;
constexpr int THREADS = WARPS * WARPS_K * 32;
constexpr int WARPS_N = WARPS < TILE_N / 16 ? WARPS : TILE_N / 16;
constexpr int WARPS_M = WARPS / WARPS_N;
constexpr int WN = TILE_N / WARPS_N, WM = TILE_M / WARPS_M; // warp tile
constexpr int FRAG_N = WN / 16, FRAG_M = WM / 8;
constexpr int KBLOCKS = TILE_K / 128;       // scale blocks per stage
constexpr int KSTEPS = 128 / 32 / WARPS_K;  // mma k-steps per k-block per warp group
constexpr int W_BYTES = TILE_N * TILE_K, A_BYTES = TILE_M * TILE_K;
constexpr int SCALE_FLOATS = TILE_M * KBLOCKS + KBLOCKS;
constexpr int STAGE_BYTES = W_BYTES + A_BYTES + ((SCALE_FLOATS * 4 + 15) / 16) * 16;

static_assert(TILE_N % 16 == 0 && 128 % TILE_N == 0, "TILE_N must divide 128");
static_assert(WARPS % WARPS_N == 0 && TILE_M % (WARPS_M * 8) == 0, "warp layout must tile the CTA");
static_assert(TILE_K % 128 == 0 && (4 % WARPS_K) == 0, "TILE_K multiple of 128, WARPS_K divides 4");

// Shared bytes the launch must request (host computes the same in fp8_gemm.c).
constexpr int SMEM_PIPE = STAGES * STAGE_BYTES;
constexpr int SMEM_REDUCE = (WARPS_K - 1) * WARPS * 32 * FRAG_N * FRAG_M * 4 * 4;
constexpr int SMEM_BYTES = SMEM_PIPE > SMEM_REDUCE ? SMEM_PIPE : SMEM_REDUCE;
static_assert(SMEM_BYTES <= 99 * 1024, "sm_120 gives a block at most 99 KB of shared memory");

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile with TILE_K bytes per row.
// XOR-ing the low three chunk bits with the row spreads 8 consecutive rows over all banks.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * TILE_K + ((chunk ^ (row & 7)) << 4); }

extern "C" __global__ void __launch_bounds__(THREADS)
fp8_gemm(const kt_u8 *__restrict__ A, const float *__restrict__ As, const kt_u8 *__restrict__ B,
         const float *__restrict__ Bs, kt_u16 *__restrict__ C, float *__restrict__ partials,
         int *__restrict__ counters, int M, int N, int K) {
    extern __shared__ __align__(128) kt_u8 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kgroup = warp / WARPS, wid = warp % WARPS;
    const int warp_n = wid % WARPS_N, warp_m = wid / WARPS_N;
    const int n0 = blockIdx.x * TILE_N, m0 = blockIdx.y * TILE_M;
    const int KB = K / 128, n_ktiles = K / TILE_K;
    const int kt_begin = (int)((long)blockIdx.z * n_ktiles / SPLIT_K);
    const int kt_end = (int)((long)(blockIdx.z + 1) * n_ktiles / SPLIT_K);
    const int nb = n0 / 128;

    auto load_stage = [&](int slot, int ktile) {
        kt_u8 *st = smem + slot * STAGE_BYTES;
        const kt_u32 w_s = kt_smem_addr(st), a_s = w_s + W_BYTES;
        const int k0 = ktile * TILE_K;
        constexpr int CH = TILE_K / 16;
#pragma unroll
        for (int i = tid; i < TILE_N * CH; i += THREADS) {
            int r = i / CH, c = i % CH;
            kt_cp_async16(w_s + swizzle(r, c), B + (long)(n0 + r) * K + k0 + c * 16, 16);
        }
#pragma unroll
        for (int i = tid; i < TILE_M * CH; i += THREADS) {
            int r = i / CH, c = i % CH;
            int m = m0 + r;
            const kt_u8 *src = A + (long)(m < M ? m : 0) * K + k0 + c * 16;
            kt_cp_async16(a_s + swizzle(r, c), src, m < M ? 16 : 0);
        }
        float *sc = (float *)(st + W_BYTES + A_BYTES);
        const int kb0 = ktile * KBLOCKS;
        for (int i = tid; i < SCALE_FLOATS; i += THREADS) {
            if (i < TILE_M * KBLOCKS) {
                int r = i / KBLOCKS, b = i % KBLOCKS, m = m0 + r;
                kt_cp_async4(kt_smem_addr(sc + b * TILE_M + r), As + (long)(m < M ? m : 0) * KB + kb0 + b,
                             m < M ? 4 : 0);
            } else {
                int b = i - TILE_M * KBLOCKS;
                kt_cp_async4(kt_smem_addr(sc + TILE_M * KBLOCKS + b), Bs + (long)nb * KB + kb0 + b, 4);
            }
        }
    };

    float acc[FRAG_N][FRAG_M][4];
#pragma unroll
    for (int i = 0; i < FRAG_N; i++)
#pragma unroll
        for (int j = 0; j < FRAG_M; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (kt_begin + s < kt_end) load_stage(s, kt_begin + s);
        kt_cp_async_commit();
    }

    const int g = lane >> 2, t = lane & 3;
    for (int kt = kt_begin; kt < kt_end; kt++) {
        kt_cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            int next = kt + STAGES - 1;
            if (next < kt_end) load_stage((next - kt_begin) % STAGES, next);
            kt_cp_async_commit();
        }
        const kt_u8 *st = smem + ((kt - kt_begin) % STAGES) * STAGE_BYTES;
        const kt_u32 w_s = kt_smem_addr(st), a_s = w_s + W_BYTES;
        const float *sc = (const float *)(st + W_BYTES + A_BYTES);
#pragma unroll
        for (int b = 0; b < KBLOCKS; b++) {
            float part[FRAG_N][FRAG_M][4];
#pragma unroll
            for (int i = 0; i < FRAG_N; i++)
#pragma unroll
                for (int j = 0; j < FRAG_M; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) part[i][j][e] = 0.f;
#pragma unroll
            for (int s = 0; s < KSTEPS; s++) {
                const int chunk = (b * 128 + (kgroup * KSTEPS + s) * 32) / 16;
                kt_u32 wf[FRAG_N][4];
#pragma unroll
                for (int i = 0; i < FRAG_N; i++) {
                    int q = lane >> 3, row = warp_n * WN + i * 16 + (q & 1) * 8 + (lane & 7);
                    kt_ldmatrix_x4(w_s + swizzle(row, chunk + (q >> 1)), wf[i][0], wf[i][1], wf[i][2], wf[i][3]);
                }
#pragma unroll
                for (int j = 0; j < FRAG_M; j++) {
                    int row = warp_m * WM + j * 8 + (lane & 7);
                    kt_u32 b0, b1;
                    kt_ldmatrix_x2(a_s + swizzle(row, chunk + ((lane >> 3) & 1)), b0, b1);
#pragma unroll
                    for (int i = 0; i < FRAG_N; i++) kt_mma_e4m3(part[i][j], wf[i], b0, b1);
                }
            }
            const float bscale = sc[TILE_M * KBLOCKS + b];
#pragma unroll
            for (int j = 0; j < FRAG_M; j++) {
                int col = warp_m * WM + j * 8 + 2 * t;
                float s0 = sc[b * TILE_M + col] * bscale, s1 = sc[b * TILE_M + col + 1] * bscale;
#pragma unroll
                for (int i = 0; i < FRAG_N; i++) {
                    acc[i][j][0] += part[i][j][0] * s0;
                    acc[i][j][1] += part[i][j][1] * s1;
                    acc[i][j][2] += part[i][j][2] * s0;
                    acc[i][j][3] += part[i][j][3] * s1;
                }
            }
        }
    }
    kt_cp_async_wait<0>();

    if (WARPS_K > 1) {
        // Warp groups 1.. hand their sums to group 0 through the (now idle) pipeline buffers.
        __syncthreads();
        float *red = (float *)smem;
        constexpr int PER_WARP = 32 * FRAG_N * FRAG_M * 4;
        if (kgroup > 0) {
            float *dst = red + ((kgroup - 1) * WARPS + wid) * PER_WARP;
#pragma unroll
            for (int i = 0; i < FRAG_N; i++)
#pragma unroll
                for (int j = 0; j < FRAG_M; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) dst[((i * FRAG_M + j) * 4 + e) * 32 + lane] = acc[i][j][e];
        }
        __syncthreads();
#pragma unroll
        for (int kg = 1; kg < WARPS_K; kg++) {
            const float *src = red + ((kg - 1) * WARPS + wid) * PER_WARP;
#pragma unroll
            for (int i = 0; i < FRAG_N; i++)
#pragma unroll
                for (int j = 0; j < FRAG_M; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[i][j][e] += src[((i * FRAG_M + j) * 4 + e) * 32 + lane];
        }
    }

    // Element e of fragment (i, j) is row n = n0 + warp_n*WN + i*16 + g + (e>>1)*8 and
    // token m = m0 + warp_m*WM + j*8 + 2t + (e&1).
    // Only warp group 0 holds the finished sums; the others stay for the barriers below.
    const bool writer = kgroup == 0;
    if (SPLIT_K == 1) {
        if (!writer) return;
#pragma unroll
        for (int i = 0; i < FRAG_N; i++)
#pragma unroll
            for (int j = 0; j < FRAG_M; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int n = n0 + warp_n * WN + i * 16 + g + (e >> 1) * 8;
                    int m = m0 + warp_m * WM + j * 8 + 2 * t + (e & 1);
                    if (m < M) C[(long)m * N + n] = kt_f32_to_bf16(acc[i][j][e]);
                }
        return;
    }

    float *mine = partials + (long)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < FRAG_N; i++)
#pragma unroll
        for (int j = 0; j < FRAG_M; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = n0 + warp_n * WN + i * 16 + g + (e >> 1) * 8;
                int m = m0 + warp_m * WM + j * 8 + 2 * t + (e & 1);
                if (writer && m < M) mine[(long)m * N + n] = acc[i][j][e];
            }
    // Publish the partial, then count arrivals; the last CTA of the tile reduces.
    __threadfence();
    __syncthreads();
    __shared__ int last;
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    if (tid == 0) last = atomicAdd(&counters[tile], 1) == SPLIT_K - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int rows = min(TILE_M, M - m0);
    for (int i = tid; i < rows * TILE_N; i += THREADS) {
        int m = m0 + i / TILE_N, n = n0 + i % TILE_N;
        float sum = 0.f;
#pragma unroll 4
        for (int z = 0; z < SPLIT_K; z++) sum += __ldcg(partials + ((long)z * M + m) * N + n);
        C[(long)m * N + n] = kt_f32_to_bf16(sum);
    }
    // Leave the counter zeroed for the next launch (graphs replay without a memset).
    if (tid == 0) counters[tile] = 0;
}

// The trusted reference: one thread per output, exact products summed in double.
extern "C" __global__ void fp8_gemm_reference(const kt_u8 *A, const float *As, const kt_u8 *B, const float *Bs,
                                              double *ref, int M, int N, int K) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)M * N) return;
    int m = (int)(idx / N), n = (int)(idx % N), KB = K / 128;
    double total = 0;
    for (int kb = 0; kb < KB; kb++) {
        double s = 0;
        for (int k = kb * 128; k < kb * 128 + 128; k++)
            s += kt_e4m3_to_f64(A[(long)m * K + k]) * kt_e4m3_to_f64(B[(long)n * K + k]);
        total += s * (double)As[(long)m * KB + kb] * (double)Bs[(long)(n / 128) * KB + kb];
    }
    ref[idx] = total;
}
