// model.cu — the plain kernels of the runtime's decode step (runtime/step.c), one per layer part
// that no kt family covers (embedding, hyper-connections, norms, RoPE, the KV append in the V4
// byte layout, the compressors, the list lengths, the HC head and the LM head), the glue around
// the families (rt_index_q, rt_o_post), and the simple reference path of the parts a family runs
// by default (`kt run --plain-kernels`: the indexer's scores and top-k, sparse attention with
// sinks, the router, the routed experts). Every f32 projection of the hidden state over all
// sequences (LM head, HC mixes, compressors, router, gate, indexer weights) is one kernel,
// rt_gemv (weights read once for 8 sequences, K split over blocks), whose consumers finish per
// sequence. Otherwise simple: a block per (sequence[, head]) or warps per output row, f32 math;
// the float64 reference they match is runtime/model_ref.c (`kt run --reference kt`). Compiled
// at run time by NVRTC through the JIT cache (kt_compile_source("model.cu")); exercised by
// tests/gpu/runtime.sh (correctness) and tests/gpu/speed.sh (correctness and TPOT).
// The decode position comes from device memory (*pos) so one captured graph serves every step.
#include "kt_device.cuh"
#include "indexer_layout.h"
#include "kv_v4.cuh"
#include "mla_layout.h"

#define RT_THREADS 256
#define INFINITY __int_as_float(0x7f800000)

__device__ __forceinline__ float rt_e4m3(kt_u8 c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return (c & 0x80) ? -v : v;
}
__device__ __forceinline__ kt_u8 rt_to_e4m3(float x) { return (kt_u8)(kt_f32x2_to_e4m3x2(x, 0.f) & 0xff); }

// Every kernel's first statement: the step's kernels launch as programmatic dependents (PDL), so
// each may start while the one before it finishes; it waits here for the kernels before it to
// complete (and so, transitively, every earlier one: each waited in turn) and lets the next one
// launch. Unconditional and before any early return, or a later kernel could overtake; only loads
// of what the step never writes (weights) may come before it.
__device__ __forceinline__ void rt_begin() {
    kt_wait_producer();
    kt_allow_consumer();
}

// Sum over the block (every thread gets it); red: 32 floats of shared memory.
__device__ float rt_block_sum(float v, float *red) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < (int)(blockDim.x / 32); i++) t += red[i];
    return t;
}
__device__ float rt_block_max(float v, float *red) {
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int i = 0; i < (int)(blockDim.x / 32); i++) t = fmaxf(t, red[i]);
    return t;
}
// The sum of v over the warp's lanes (a butterfly: one fixed order), in every lane.
__device__ __forceinline__ float rt_warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Dot of a warp over n: a[i] * b[i] (lane-strided), the total in every lane.
__device__ float rt_warp_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = threadIdx.x % 32; i < n; i += 32) s += a[i] * b[i];
    return rt_warp_sum(s);
}

// Pair i of rt_rope, its frequency finv = inv[i].
__device__ __forceinline__ void rt_rope_pair(float *x, int dim, int R, int i, float finv, float p, float sign) {
    float f = p * finv, c = cosf(f), s = sign * sinf(f);
    float a = x[dim - R + 2 * i], b = x[dim - R + 2 * i + 1];
    x[dim - R + 2 * i] = a * c - b * s;
    x[dim - R + 2 * i + 1] = b * c + a * s;
}
// Interleaved RoPE of the trailing R channels of x[dim] (in shared memory) at position p;
// sign -1 rotates back. Threads of the block take pairs.
__device__ void rt_rope(float *x, int dim, int R, const float *inv, float p, float sign) {
    for (int i = threadIdx.x; i < R / 2; i += blockDim.x) rt_rope_pair(x, dim, R, i, inv[i], p, sign);
    __syncthreads();
}

// rsqrt(mean(x^2) + eps) of n values in shared memory (every thread gets it).
__device__ float rt_rms_scale(const float *x, int n, float eps, float *red) {
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
    return rsqrtf(rt_block_sum(ss, red) / n + eps);
}
// A thread's NW weights of a chunk at i0: wv[u] = w[i0 + u T] (1 past n, or without w).
template <int NW> __device__ __forceinline__ void rt_rms_load(const float *w, int n, int i0, float (&wv)[NW]) {
#pragma unroll
    for (int u = 0; u < NW; u++) wv[u] = w && i0 + u * (int)blockDim.x < n ? w[i0 + u * blockDim.x] : 1.0f;
}
// x[i0 + u T] = x[i0 + u T] * r * wv[u] over the chunk (x in shared memory).
template <int NW>
__device__ __forceinline__ void rt_rms_apply(float *x, int n, int i0, float r, const float (&wv)[NW]) {
#pragma unroll
    for (int u = 0; u < NW; u++)
        if (i0 + u * (int)blockDim.x < n) x[i0 + u * blockDim.x] = x[i0 + u * blockDim.x] * r * wv[u];
}
// x * rsqrt(mean(x^2) + eps) * (w or 1), in place over n values in shared memory. A thread's 8
// weights are loaded before its stores: x may alias w for the compiler (x is a generic pointer),
// so a plain loop waits on each weight's load (8 round trips at n = 4096 and 512 threads). Where
// the weights can load before the step's data is there, a kernel loads them ahead (rt_rms_load)
// and applies them with rt_rms_scale + rt_rms_apply.
__device__ void rt_rmsnorm(float *x, int n, const float *w, float eps, float *red) {
    float r = rt_rms_scale(x, n, eps, red);
    for (int i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) {
        float wv[8];
        rt_rms_load(w, n, i0, wv);
        rt_rms_apply(x, n, i0, r, wv);
    }
    __syncthreads();
}

// What a kernel's RoPE reads that the step never writes, the position (copied in before the
// graph) and pair t's frequency inv[t] (t < R / 2; R = 64, model.c: within every block here),
// loaded before the PDL wait; then rt_begin: a kernel's first statement.
struct rt_rope_c {
    float inv;
    int p;
};
__device__ __forceinline__ rt_rope_c rt_rope_load(const float *inv, const int *pos, int R) {
    return rt_rope_c{(int)threadIdx.x < R / 2 ? inv[threadIdx.x] : 0.f, *pos};
}
__device__ __forceinline__ rt_rope_c rt_rope_begin(const float *inv, const int *pos, int R) {
    rt_rope_c c = rt_rope_load(inv, pos, R);
    rt_begin();
    return c;
}
// rt_rope at p with pair t's frequency its thread's c.inv (rt_rope_load).
__device__ void rt_rope_at(float *x, int dim, int R, const rt_rope_c &c, float p, float sign) {
    if ((int)threadIdx.x < R / 2) rt_rope_pair(x, dim, R, threadIdx.x, c.inv, p, sign);
    __syncthreads();
}

// Stores a 512 vector in the V4 layout at token slot t of cache (rounding as kt_quant_kv): a warp
// per 64-group (two values a lane, the group's max by shuffles: no block barrier).
__device__ void rt_kv_store(const float *x, kt_u8 *cache, long t) {
    kt_u8 *data = cache + kt_kv_data(t), *sc = cache + kt_kv_scales(t);
    const int lane = threadIdx.x % 32;
    for (int g = threadIdx.x / 32; g < KT_KV_NOPE / 64; g += blockDim.x / 32) {
        float x0 = x[g * 64 + lane], x1 = x[g * 64 + 32 + lane], a = fmaxf(fabsf(x0), fabsf(x1));
        for (int o = 16; o > 0; o /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        int e = a > 0 ? (int)ceilf(log2f(a / 448.0f)) : 0;
        float s = ldexpf(1.0f, e);
        data[g * 64 + lane] = rt_to_e4m3(x0 / s), data[g * 64 + 32 + lane] = rt_to_e4m3(x1 / s);
        if (lane == 0) sc[g] = (kt_u8)(e + 127);
    }
    kt_u16 *rope = (kt_u16 *)(data + KT_KV_NOPE);
    for (int i = threadIdx.x; i < KT_KV_ROPE; i += blockDim.x) rope[i] = kt_f32_to_bf16(x[KT_KV_NOPE + i]);
    if (threadIdx.x == 0) sc[7] = 0;
}
// Element j of the 512 vector at slot t.
__device__ __forceinline__ float rt_kv_load(const kt_u8 *cache, long t, int j) {
    const kt_u8 *data = cache + kt_kv_data(t);
    if (j >= KT_KV_NOPE) return kt_bf16_to_f32(((const kt_u16 *)(data + KT_KV_NOPE))[j - KT_KV_NOPE]);
    return rt_e4m3(data[j]) * ldexpf(1.0f, (int)cache[kt_kv_scales(t) + j / 64] - 127);
}

// e4m3 codes of x[0..n) / s into out, s = amax / 448 (1 when x is all zeros); returns s.
__device__ float rt_quant_e4m3(const float *x, int n, kt_u8 *out, float *red) {
    float a = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) a = fmaxf(a, fabsf(x[i]));
    a = rt_block_max(a, red);
    float s = a > 0 ? a / 448.0f : 1.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = rt_to_e4m3(x[i] / s);
    return s;
}
// act_quant's rule (kernels/act_quant.cu) over a row of n values in shared memory (n a multiple
// of 128), each rounded to bf16 first (the bf16 activation act_quant would have read): q e4m3
// [n], s f32 [n / 128], bit for bit act_quant's output, so the row's producer quantises it and no
// act_quant launch follows. A warp per 128-group, 4 values a lane, the group's max by shuffles.
__device__ void rt_quant_row(const float *v, int n, kt_u8 *q, float *s) {
    int lane = threadIdx.x % 32;
    for (int g = threadIdx.x / 32; g < n / 128; g += blockDim.x / 32) {
        float f[4], amax = 0;
        for (int i = 0; i < 4; i++) {
            f[i] = kt_bf16_to_f32(kt_f32_to_bf16(v[g * 128 + lane * 4 + i]));
            amax = fmaxf(amax, fabsf(f[i]));
        }
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float scale = fmaxf(amax, 1e-10f) / 448.0f;
        *(kt_u32 *)(q + g * 128 + lane * 4) = kt_f32x2_to_e4m3x2(f[0] / scale, f[1] / scale) |
                                              (kt_u32)kt_f32x2_to_e4m3x2(f[2] / scale, f[3] / scale) << 16;
        if (lane == 0) s[g] = scale;
    }
}
// Stores a 128 indexer key in mla_indexer's paged layout (indexer_layout.h) at slot of page.
__device__ void rt_index_key_store(const float *x, kt_u8 *cache, long long page, int slot, float *red) {
    float s = rt_quant_e4m3(x, KT_IDX_DIM, cache + kt_idx_code_offset(page, slot), red);
    if (threadIdx.x == 0) *(float *)(cache + kt_idx_scale_offset(page, slot)) = s;
}

// The step's f32 GEMVs over every sequence (the LM head, the HC mixes, the compressors', router's,
// gate's and indexer's projections): part[z][b][n] = W[n] . x[b] over split z of K (gridDim.z
// splits of kc values, kc a multiple of 128; W's rows may be several weights of one x, loaded one
// below the other: a CSA layer's two compressors and the indexer's head weights). A block: 8 warps of RT_GV_ROWS rows
// each and RT_GV_SEQS sequences (grid.x, the fastest, so the blocks sharing rows run together and read them once from
// DRAM), the x tile from shared memory; a lane reads float4s of its rows along k. Consumers sum the splits in order
// (rt_gemv_at): no atomics, the same logits every replay.
#define RT_GV_ROWS 4
#define RT_GV_SEQS 8
#define RT_GV_KC 512
static_assert(RT_GV_ROWS * RT_GV_SEQS == 32, "rt_gemv's lane reduction leaves one sum per lane");

// The HC module's post step after a block, for rt_gemv_hc: x[b][k] = post[k] * y[b] + sum_j
// comb[j][k] old[b][j] (postcomb[b] = post[H] | comb[H*H]; y bf16 (yb) or f32 (yf)), the sum in
// that order.
struct rt_hc_post_args {
    const float *old, *pc, *yf;
    float *x;
    const kt_u16 *yb;
    int D, H;
};

// The four values x[b][k..k+3] of the streams after the post step (k a multiple of 4, so in one
// stream), stored into x when `store`.
__device__ __forceinline__ float4 rt_hc_post4(const rt_hc_post_args &a, int b, int k, bool store) {
    const int H = a.H, h = k / a.D, d = k % a.D;
    const float *pc = a.pc + (long)b * (H + H * H);
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; e++)
        v[e] = pc[h] * (a.yb ? kt_bf16_to_f32(a.yb[(long)b * a.D + d + e]) : a.yf[(long)b * a.D + d + e]);
#pragma unroll
    for (int j = 0; j < 8; j++) { // H <= 8 (kt_step_open)
        if (j >= H) break;
        float4 o = *(const float4 *)(a.old + ((long)b * H + j) * a.D + d);
        float c = pc[H + j * H + h];
        v[0] += c * o.x, v[1] += c * o.y, v[2] += c * o.z, v[3] += c * o.w;
    }
    float4 r = make_float4(v[0], v[1], v[2], v[3]);
    if (store) *(float4 *)(a.x + (long)b * H * a.D + k) = r;
    return r;
}

// Four bf16 values at p (8-byte aligned) as f32.
__device__ __forceinline__ float4 rt_bf16x4(const kt_u16 *p) {
    const uint2 u = *(const uint2 *)p;
    return make_float4(kt_bf16_to_f32((kt_u16)(u.x & 0xffff)), kt_bf16_to_f32((kt_u16)(u.x >> 16)),
                       kt_bf16_to_f32((kt_u16)(u.y & 0xffff)), kt_bf16_to_f32((kt_u16)(u.y >> 16)));
}

// A lane's weights of rt_gemv's tile at k0 (n4 float4s of each of its RT_GV_ROWS rows), loaded together.
__device__ __forceinline__ void rt_gemv_weights(float4 (&wv)[RT_GV_KC / 128][RT_GV_ROWS],
                                                const float4 *const (&w)[RT_GV_ROWS], int k0, int n4, int lane) {
#pragma unroll
    for (int i = 0; i < RT_GV_KC / 128; i++)
#pragma unroll
        for (int r = 0; r < RT_GV_ROWS; r++)
            wv[i][r] = lane + 32 * i < n4 ? __ldg(w[r] + k0 / 4 + lane + 32 * i) : make_float4(0, 0, 0, 0);
}

// The same tile's weights prefetched into L2 (no registers held: rt_gemv's 128 would not hold them
// through the PDL wait and the post step's loads without spilling).
__device__ __forceinline__ void rt_gemv_prefetch(const float4 *const (&w)[RT_GV_ROWS], int k0, int n4, int lane) {
#pragma unroll
    for (int i = 0; i < RT_GV_KC / 128; i++)
#pragma unroll
        for (int r = 0; r < RT_GV_ROWS; r++)
            if (lane + 32 * i < n4) asm volatile("prefetch.global.L2 [%0];" ::"l"(w[r] + k0 / 4 + lane + 32 * i));
}

// A tile's FMAs of rt_gemv: acc[r][sq] += w_r . x_sq over the lane's float4s (4 FMAs a pair, 32
// independent chains); FULL: all RT_GV_SEQS sequences, else the first nq (the rest are zeros).
template <bool FULL>
__device__ __forceinline__ void rt_gemv_fmas(float (&acc)[RT_GV_ROWS * RT_GV_SEQS],
                                             const float4 (&wv)[RT_GV_KC / 128][RT_GV_ROWS],
                                             const float4 (&xs)[RT_GV_SEQS][RT_GV_KC / 4], int n4, int lane, int nq) {
#pragma unroll
    for (int i = 0; i < RT_GV_KC / 128; i++) {
        if (lane + 32 * i >= n4) break;
#pragma unroll
        for (int sq = 0; sq < RT_GV_SEQS; sq++) {
            if (!FULL && sq >= nq) break;
            float4 v = xs[sq][lane + 32 * i];
#pragma unroll
            for (int r = 0; r < RT_GV_ROWS; r++) {
                float *a = &acc[r * RT_GV_SEQS + sq];
                *a = fmaf(wv[i][r].w, v.w, fmaf(wv[i][r].z, v.z, fmaf(wv[i][r].y, v.y, fmaf(wv[i][r].x, v.x, *a))));
            }
        }
    }
}

// The rows of W a lane of rt_gemv's block reads (RT_GV_ROWS of its warp's, the last repeated past N).
__device__ __forceinline__ void rt_gemv_rows(const float *W, int N, int K, const float4 *(&w)[RT_GV_ROWS]) {
    const int row0 = (blockIdx.y * 8 + threadIdx.x / 32) * RT_GV_ROWS;
#pragma unroll
    for (int r = 0; r < RT_GV_ROWS; r++) w[r] = (const float4 *)(W + (long)min(row0 + r, N - 1) * K);
}

// rt_gemv's kernels' first statement: the block's first tile of weights prefetched into L2, then
// rt_begin: the prefetch runs before the PDL wait, under the previous kernel's tail (the step never
// writes its weights), so the tile's loads after it wait on L2, not DRAM.
__device__ __forceinline__ void rt_gemv_begin(const float *W, int N, int K, int kc) {
    const float4 *w[RT_GV_ROWS];
    rt_gemv_rows(W, N, K, w);
    const int kbeg = blockIdx.z * kc;
    rt_gemv_prefetch(w, kbeg, min(RT_GV_KC, min(kc, K - kbeg)) / 4, threadIdx.x % 32);
    rt_begin();
}

// A lane's weights of its block's first tile, in registers.
struct rt_gemv_tile {
    float4 w[RT_GV_KC / 128][RT_GV_ROWS];
};
// rt_gemv_hc1's first statement: the first tile's weights loaded into registers before the PDL
// wait (not only into L2: its grid of at most 32 blocks leaves registers to spare, so the tile's
// weights need no round trip after the post step's loads), then rt_begin.
__device__ __forceinline__ rt_gemv_tile rt_gemv_tile_begin(const float *W, int N, int K, int kc) {
    rt_gemv_tile t;
    const float4 *w[RT_GV_ROWS];
    rt_gemv_rows(W, N, K, w);
    const int kbeg = blockIdx.z * kc;
    rt_gemv_weights(t.w, w, kbeg, min(RT_GV_KC, min(kc, K - kbeg)) / 4, threadIdx.x % 32);
    rt_begin();
    return t;
}

// rt_gemv's body, after rt_gemv_begin (or, first given, rt_gemv_tile_begin: its first tile's
// weights); POST: x is
// the streams after the post step, made from post.old as the tiles are loaded and stored into
// post.x by the blocks of the first row tile (the HC mixes have at most 32 rows: one row tile, so
// every value is stored once). BF16 (not with POST): x is bf16, read from post.yb (rt_gemv_fin_bf16).
template <bool POST, bool BF16 = false> // inlined into each kernel, post by value: its fields stay in registers
__device__ __forceinline__ void rt_gemv_run(const float *W, const float *x, float *part, int N, int K, int B, int kc,
                                            rt_hc_post_args post, const rt_gemv_tile *first = nullptr) {
    __shared__ float4 xs[RT_GV_SEQS][RT_GV_KC / 4];
    int lane = threadIdx.x % 32, row0 = (blockIdx.y * 8 + threadIdx.x / 32) * RT_GV_ROWS, b0 = blockIdx.x * RT_GV_SEQS;
    int kbeg = blockIdx.z * kc, kend = min(K, kbeg + kc);
    const float4 *w[RT_GV_ROWS];
    rt_gemv_rows(W, N, K, w);
    float acc[RT_GV_ROWS * RT_GV_SEQS] = {};
    for (int k0 = kbeg; k0 < kend; k0 += RT_GV_KC) {
        int n4 = min(RT_GV_KC, kend - k0) / 4; // a multiple of 32: the bounds below are warp-uniform
        float4 wv[RT_GV_KC / 128][RT_GV_ROWS]; // the lane's weights of the tile, loaded together first
        const bool have = first && k0 == kbeg;
        if (have) {
#pragma unroll
            for (int i = 0; i < RT_GV_KC / 128; i++)
#pragma unroll
                for (int r = 0; r < RT_GV_ROWS; r++) wv[i][r] = first->w[i][r];
        }
        if (!POST && !have) rt_gemv_weights(wv, w, k0, n4, lane);
        __syncthreads();
        for (int i = threadIdx.x; i < RT_GV_SEQS * n4; i += blockDim.x) {
            int sq = i / n4, c = i % n4;
            const float4 v = b0 + sq >= B ? make_float4(0, 0, 0, 0)
                             : POST       ? rt_hc_post4(post, b0 + sq, k0 + 4 * c, blockIdx.y == 0)
                             : BF16       ? rt_bf16x4(post.yb + (long)(b0 + sq) * K + k0 + 4 * c)
                                          : ((const float4 *)(x + (long)(b0 + sq) * K + k0))[c];
            xs[sq][c] = v;
        }
        __syncthreads();
        // the post step's loads and the weights' together would spill at sm_90's 128 registers: the
        // weights follow the tile there (one L2 round trip more a tile: the prefetch made it L2's)
        if (POST && !have) rt_gemv_weights(wv, w, k0, n4, lane);
        // a tile's sequences past B are zeros: no FMAs for them (at B = 1, 7 in 8); not in
        // rt_gemv_hc (B > 1), where the second path took sm_90 past 128 registers
        if (b0 + RT_GV_SEQS <= B || (POST && !first))
            rt_gemv_fmas<true>(acc, wv, xs, n4, lane, RT_GV_SEQS);
        else
            rt_gemv_fmas<false>(acc, wv, xs, n4, lane, B - b0);
    }
    // the 32 sums over the lanes by halving: lane l ends with sum l (row l / SEQS, sequence l % SEQS)
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        int up = lane & o;
#pragma unroll
        for (int i = 0; i < 16; i++)
            if (i < o) {
                float give = up ? acc[i] : acc[i + o], keep = up ? acc[i + o] : acc[i];
                acc[i] = keep + __shfl_xor_sync(0xffffffffu, give, o);
            }
    }
    int n = row0 + lane / RT_GV_SEQS, b = b0 + lane % RT_GV_SEQS;
    if (n < N && b < B) part[((long)blockIdx.z * B + b) * N + n] = acc[0];
}

// With out, the last of a tile's S split blocks to finish (count[tile], left at 0 for the next
// launch) sums the tile's outputs into out [B][N], each as a warp's lanes over the splits then
// rt_warp_sum (rt_gemv_at's order: the same values as a separate summing kernel, one launch fewer).
// Not inlined: inlined, sm_90's ptxas gave rt_gemv 168-186 registers (one block an SM) for it.
__device__ __noinline__ void rt_gemv_finish(const float *part, float *out, int *count, int N, int B) {
    __shared__ int last;
    const int tile = blockIdx.y * gridDim.x + blockIdx.x, S = gridDim.z, lane = threadIdx.x % 32;
    __threadfence(); // this block's splits seen by the last block
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count + tile, 1) == S - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x == 0) count[tile] = 0;
    // warp w: the tile's outputs 32 w .. 32 w + 31 (row o / SEQS, sequence o % SEQS), 16 loads in
    // flight (two round trips; the gate's sum took four in rounds of 8; 32 would raise the kernel's
    // registers past 128 on sm_90: half the blocks an SM)
    const int o0 = threadIdx.x / 32 * 32, n0 = blockIdx.y * 32, b0 = blockIdx.x * RT_GV_SEQS;
    for (int j0 = 0; j0 < 32; j0 += 16) {
        float v[16];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int n = n0 + (o0 + j0 + j) / RT_GV_SEQS, b = b0 + (o0 + j0 + j) % RT_GV_SEQS;
            v[j] = lane < S && n < N && b < B ? __ldcg(part + ((long)lane * B + b) * N + n) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int n = n0 + (o0 + j0 + j) / RT_GV_SEQS, b = b0 + (o0 + j0 + j) % RT_GV_SEQS;
            float t = rt_warp_sum(v[j]);
            if (lane == 0 && n < N && b < B) out[(long)b * N + n] = t;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    rt_gemv(const float *W, const float *x, float *part, int N, int K, int B, int kc) {
    rt_gemv_begin(W, N, K, kc);
    rt_gemv_run<false>(W, x, part, N, K, B, kc, rt_hc_post_args{});
}

// rt_gemv split, with its plain output `out` summed by the tiles' last blocks (rt_gemv_finish): a
// kernel of its own so that rt_gemv's code is as it was (the LM head ran 5-9% slower with the call
// in it on the H200).
extern "C" __global__ void __launch_bounds__(256)
    rt_gemv_fin(const float *W, const float *x, float *part, float *out, int *count, int N, int K, int B, int kc) {
    rt_gemv_begin(W, N, K, kc);
    rt_gemv_run<false>(W, x, part, N, K, B, kc, rt_hc_post_args{});
    rt_gemv_finish(part, out, count, N, B);
}

// rt_gemv_fin of bf16 x (B x K): the MoE gate's projection of the attention block's bf16 output at
// B = 1 (gate_y in step.c), beside the HC module that applies it.
extern "C" __global__ void __launch_bounds__(256)
    rt_gemv_fin_bf16(const float *W, const kt_u16 *x, float *part, float *out, int *count, int N, int K, int B,
                     int kc) {
    rt_gemv_begin(W, N, K, kc);
    rt_gemv_run<false, true>(W, nullptr, part, N, K, B, kc,
                             rt_hc_post_args{nullptr, nullptr, nullptr, nullptr, x, 0, 0});
    rt_gemv_finish(part, out, count, N, B);
}

// Lane l's split of rt_gemv's output (B x N) at (b, n): split l, 0 past S (S <= 32, the host's
// gemv_splits), so that rt_warp_sum of it is the value.
__device__ __forceinline__ float rt_gemv_lane(const float *part, int S, int B, int N, int b, int n) {
    int z = threadIdx.x % 32;
    return z < S ? part[((long)z * B + b) * N + n] : 0.f;
}
// Sum of the S splits of rt_gemv's output at (b, n) by a warp, in every lane; (b, n) the same
// across the warp.
__device__ float rt_gemv_at(const float *part, int S, int B, int N, int b, int n) {
    return rt_warp_sum(rt_gemv_lane(part, S, B, N, b, n));
}

// x[b][k][d] = E[tok[b]][d]: every stream starts as the token's embedding; grid (B, H), a block
// a stream. (A thread's 8 loads in flight before its stores: x may alias E for the compiler, so a
// plain loop waits on each load: 58 us at B = 1 on the H200; a block a sequence, 16 us.)
extern "C" __global__ void rt_embed(const float *E, const int *tok, float *x, int D) {
    rt_begin();
    const float *e = E + (long)tok[blockIdx.x] * D;
    float *o = x + ((long)blockIdx.x * gridDim.y + blockIdx.y) * D;
    for (int i0 = threadIdx.x; i0 < D; i0 += 8 * blockDim.x) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = i0 + u * blockDim.x < D ? e[i0 + u * blockDim.x] : 0.f;
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (i0 + u * blockDim.x < D) o[i0 + u * blockDim.x] = v[u];
    }
}

// Sinkhorn over the H x H comb in registers: entry e = (e / H, e % H) in lane e % 32's c0 (e < 32)
// or c1; a column pass first, then row and column passes (2 iters - 1 in all), each entry divided
// by its line's sum + hc_eps, the sum in index order from 0 (the serial sum's order). The passes
// alternate unrolled (ROWS a template argument) and a line's source lanes are a multiply-add off
// the entry's row and column, so a pass is its shuffles, the sum and a division: one warp runs it
// alone while the block waits, so every instruction of a pass is on the chain (with the sources
// picked per pass and a loop bounded by H, the 39 passes took ~11 us of rt_gemv_hc1's 22 on the
// H200: ncu, bench/NOTES.md). TWO: H > 5, two entries a lane. Lanes past the matrix read inside
// it (% H) and store nothing.
template <bool TWO, bool ROWS>
__device__ __forceinline__ void rt_sinkhorn_pass(float &c0, float &c1, int i0, int j0, int i1, int j1, int H,
                                                 float hc_eps) {
    constexpr int HM = TWO ? 8 : 5; // H <= 8 (kt_step_open); H <= 5: H * H <= 32
    const int l = threadIdx.x % 32, HH = H * H;
    float s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < HM; k++) {
        const int kk = k < H ? k : H - 1; // past H: shuffled, not summed
        const int f0 = ROWS ? i0 * H + kk : kk * H + j0;
        float v0 = __shfl_sync(0xffffffffu, c0, f0 & 31);
        if (TWO) {
            const int f1 = ROWS ? i1 * H + kk : kk * H + j1;
            float w0 = __shfl_sync(0xffffffffu, c1, f0 & 31), v1 = __shfl_sync(0xffffffffu, c0, f1 & 31),
                  w1 = __shfl_sync(0xffffffffu, c1, f1 & 31);
            v0 = f0 < 32 ? v0 : w0;
            if (k < H) s1 += f1 < 32 ? v1 : w1;
        }
        if (k < H) s0 += v0;
    }
    if (l < HH) c0 /= s0 + hc_eps;
    if (TWO && l + 32 < HH) c1 /= s1 + hc_eps;
}
template <bool TWO> __device__ void rt_hc_sinkhorn(float &c0, float &c1, int H, int iters, float hc_eps) {
    const int l = threadIdx.x % 32, i0 = (l / H) % H, j0 = l % H, i1 = ((l + 32) / H) % H, j1 = (l + 32) % H;
    rt_sinkhorn_pass<TWO, false>(c0, c1, i0, j0, i1, j1, H, hc_eps);
    for (int it = 1; it < iters; it++) {
        rt_sinkhorn_pass<TWO, true>(c0, c1, i0, j0, i1, j1, H, hc_eps);
        rt_sinkhorn_pass<TWO, false>(c0, c1, i0, j0, i1, j1, H, hc_eps);
    }
}

// The HC weights of one sequence from its mix (one warp; comb: H*H floats of shared memory):
// pre = sigmoid(mix * scale0 + base) + hc_eps; with pc, post = 2 sigmoid(..) into pc[0..H) and
// comb = the Sinkhorn projection of the row softmax (+ hc_eps) into pc[H..H+H*H). Lanes take
// the H*H entries (two a lane past 32), held in registers through the passes (rt_hc_sinkhorn).
__device__ void rt_hc_weights(const float *mix, const float *base, const float *scale, float *pre, float *pc,
                              float *comb, int H, int iters, float hc_eps) {
    int l = threadIdx.x % 32;
    if (l < H) pre[l] = 1.0f / (1.0f + expf(-(mix[l] * scale[0] + base[l]))) + hc_eps;
    if (!pc) return;
    if (l < H) pc[l] = 2.0f / (1.0f + expf(-(mix[H + l] * scale[1] + base[H + l])));
    const float *cm = mix + 2 * H, *cb = base + 2 * H;
    for (int e = l; e < H * H; e += 32) { // the row's H values unrolled (H <= 8): its expf's side by side
        int i = e / H;
        float mx = -INFINITY, sum = 0, t[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            t[j] = j < H ? cm[i * H + j] * scale[2] + cb[i * H + j] : -INFINITY;
            mx = fmaxf(mx, t[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < H) sum += expf(t[j] - mx);
        comb[e] = expf(cm[e] * scale[2] + cb[e] - mx) / sum + hc_eps;
    }
    __syncwarp();
    const int HH = H * H;
    float c0 = l < HH ? comb[l] : 0.f, c1 = l + 32 < HH ? comb[l + 32] : 0.f;
    if (HH > 32)
        rt_hc_sinkhorn<true>(c0, c1, H, iters, hc_eps);
    else
        rt_hc_sinkhorn<false>(c0, c1, H, iters, hc_eps);
    if (l < HH) pc[H + l] = c0;
    if (l + 32 < HH) pc[H + l + 32] = c1;
}

// An HC module's block of T threads holds a sequence's H x D streams, 4 H D / T floats a thread, and
// its D norm weights, D / T a thread, in registers: at most RT_HC_HD and RT_HC_D (kt_step_open), so
// rt_hc_pre's 512 threads hold 8 float4s and 8 weights each (its 128 registers), rt_gemv_hc1's 256
// twice that.
#define RT_HC_HD 16384
#define RT_HC_D 4096

// What an HC module's block reads that the step does not write, loaded before the data that
// depends on it is there (rt_hc_pre: before its PDL wait; rt_gemv_hc's blocks: before the
// last-block counter), so its latency hides under another: lane l of warp 0 holds base[l + 32 u]
// (l + 32 u < nmix <= 80) and scale[l] (l < 3; the HC head: nmix H, one scale); every thread the
// norm weights w[t + T u].
template <int T> struct rt_hc_consts { float base[3], scale, w[RT_HC_D / T]; };
template <int T>
__device__ __forceinline__ rt_hc_consts<T> rt_hc_load_consts(const float *base, const float *scale, const float *w,
                                                             bool head, int D, int H) {
    rt_hc_consts<T> c;
    const int l = threadIdx.x, nmix = head ? H : (2 + H) * H;
#pragma unroll
    for (int u = 0; u < 3; u++) c.base[u] = l < 32 && l + 32 * u < nmix ? base[l + 32 * u] : 0.f;
    c.scale = l < (head ? 1 : 3) ? scale[l] : 0.f;
    rt_rms_load(w, D, l, c.w);
    return c;
}
// rt_hc_pre's first statement: its constants, then rt_begin (the loads in flight through the PDL wait).
template <int T>
__device__ __forceinline__ rt_hc_consts<T> rt_hc_begin(const float *base, const float *scale, const float *w, bool head,
                                                       int D, int H) {
    rt_hc_consts<T> c = rt_hc_load_consts<T>(base, scale, w, head, D, H);
    rt_begin();
    return c;
}

// The collapsed input col[d] = sum_k pre[k] x_k[d] (the sum in k order from 0, as the serial one)
// from the streams' float4s a thread holds (xr[m]: float4 t + T m of the H x D / 4); col is D
// floats of shared memory. When T divides D / 4 a thread holds every stream of its columns, in
// stream order: one pass, no barrier; else one pass per stream, a barrier after each.
template <int XR> __device__ void rt_hc_collapse(const float4 (&xr)[XR], const float *pre, float *col, int D, int H) {
    const int T = blockDim.x, n4d = D / 4;
    const bool own = n4d % T == 0;
    float4 *c4 = (float4 *)col;
    for (int k = 0; k < (own ? 1 : H); k++) {
        int kk = threadIdx.x / n4d, d = threadIdx.x % n4d; // slot m's stream and float4 column
#pragma unroll
        for (int m = 0; m < XR; m++) {
            if (kk < H && (own || kk == k)) {
                float4 v = kk ? c4[d] : make_float4(0, 0, 0, 0), u = xr[m];
                const float p = pre[kk];
                v.x += p * u.x, v.y += p * u.y, v.z += p * u.z, v.w += p * u.w;
                c4[d] = v;
            }
            for (d += T; d >= n4d; d -= n4d) kk++;
        }
        __syncthreads();
    }
}

// The HC module before a block (and, postcomb NULL, the HC head) for sequence b (rt_hc_pre: a
// block per sequence; rt_gemv_hc's last block at B = 1), after rt_gemv's mix (S splits of B x
// nmix, nmix = (2 + H) * H, or H for the head): mix = fn . flatten(x) * rsqrt(mean(x^2) + eps);
// pre, post and the Sinkhorn-projected comb (postcomb[b] = post[H] | comb[H*H]; with mixout, the
// mixes stored there instead and only pre made: rt_hc_comb makes post and comb beside the
// block's chain, whose first consumer of them is the next module's post step); the collapsed
// input sum_k pre_k x_k rmsnorm'd with w (c, loaded ahead) into h (f32) and, hq not NULL,
// act_quant'ed into hq / hs (the block's GEMMs' input). The mixes' splits and the streams load
// in one round trip (x read past L1: rt_gemv_hc's last block reads other blocks' x), the streams
// held in registers for the collapse. Dynamic shared memory: D floats. H x D <= RT_HC_HD, D <=
// RT_HC_D (kt_step_open).
template <int T> // the block's threads
__device__ __forceinline__ void rt_hc_pre_seq(const float *x, const float *mixp, int S, int B, int b,
                                              const rt_hc_consts<T> &c, float *postcomb, float *h, kt_u8 *hq, float *hs,
                                              int D, int H, int iters, float eps, float hc_eps, float *col,
                                              float *mixout = nullptr, float *prn = nullptr) {
    __shared__ float red[32], mix[80], pre[8], comb[64], cst[83]; // cst: base [nmix], scale at 80
    constexpr int nw = T / 32, MV = (80 + nw - 1) / nw;           // nmix <= 80: MV rounds of the nw warps
    const int HD = H * D, n4 = HD / 4, nmix = postcomb ? (2 + H) * H : H;
    const float4 *x4 = (const float4 *)(x + (long)b * HD);
    const int wp = threadIdx.x / 32, z = threadIdx.x % 32;
    float mv[MV]; // a warp's mixes wp + nw u, lane z's split (rt_gemv_lane's, read past L1)
#pragma unroll
    for (int u = 0; u < MV; u++) {
        int j = wp + nw * u;
        mv[u] = j < nmix && z < S ? __ldcg(mixp + ((long)z * B + b) * nmix + j) : 0.f;
    }
    constexpr int XR = RT_HC_HD / 4 / T;
    float4 xr[XR];
#pragma unroll
    for (int m = 0; m < XR; m++) {
        int i = threadIdx.x + T * m;
        xr[m] = i < n4 ? __ldcg(x4 + i) : make_float4(0, 0, 0, 0);
    }
    float ss = 0;
#pragma unroll
    for (int m = 0; m < XR; m++)
        if (threadIdx.x + T * m < n4)
            ss += xr[m].x * xr[m].x + xr[m].y * xr[m].y + xr[m].z * xr[m].z + xr[m].w * xr[m].w;
#pragma unroll
    for (int u = 0; u < MV; u++) { // unscaled: r below
        float v = rt_warp_sum(mv[u]);
        if (z == 0 && wp + nw * u < nmix) mix[wp + nw * u] = v;
    }
    if (threadIdx.x < 32) {
#pragma unroll
        for (int u = 0; u < 3; u++)
            if (z + 32 * u < nmix) cst[z + 32 * u] = c.base[u];
        if (z < 3) cst[80 + z] = c.scale;
    }
    float r = rsqrtf(rt_block_sum(ss, red) / HD + eps); // its barrier also publishes mix and cst
    if (threadIdx.x < 32) {
        for (int j = threadIdx.x; j < nmix; j += 32) {
            mix[j] *= r;
            if (mixout) mixout[(long)b * nmix + j] = mix[j];
        }
        __syncwarp();
        float *pc = postcomb && !mixout ? postcomb + (long)b * (H + H * H) : 0;
        rt_hc_weights(mix, cst, cst + 80, pre, pc, comb, H, iters, hc_eps);
    }
    __syncthreads();
    rt_hc_collapse(xr, pre, col, D, H);
    const float rn = rt_rms_scale(col, D, eps, red);
    if (prn && (int)threadIdx.x <= H) prn[threadIdx.x] = (int)threadIdx.x < H ? pre[threadIdx.x] : rn;
    rt_rms_apply(col, D, threadIdx.x, rn, c.w); // rt_rmsnorm, its weights ahead
#pragma unroll
    for (int u = 0; u < RT_HC_D / T; u++)
        if (threadIdx.x + T * u < D) h[(long)b * D + threadIdx.x + T * u] = col[threadIdx.x + T * u];
    __syncthreads();
    if (hq) rt_quant_row(col, D, hq + (long)b * D, hs + (long)b * (D / 128));
}

// The HC module, a block of 512 threads a sequence, from rt_gemv's S splits of the mixes (B > 1, the HC head;
// mixout not NULL: post and comb left to rt_hc_comb).
extern "C" __global__ void __launch_bounds__(512)
    rt_hc_pre(const float *x, const float *mixp, int S, const float *base, const float *scale, const float *w,
              float *postcomb, float *h, kt_u8 *hq, float *hs, int D, int H, int iters, float eps, float hc_eps,
              float *mixout) {
    const rt_hc_consts<512> c = rt_hc_begin<512>(base, scale, w, !postcomb, D, H);
    extern __shared__ float col[];
    rt_hc_pre_seq<512>(x, mixp, S, gridDim.x, blockIdx.x, c, postcomb, h, hq, hs, D, H, iters, eps, hc_eps, col,
                       mixout);
}

// rt_gemv_hc's last block (count: its counter, left at 0) at B = 1: the HC module of the one
// sequence from the GEMV's splits, as rt_hc_pre (a launch fewer a module); every block loads the
// module's constants before the counter (in flight with it). Not inlined: the GEMV's registers
// stay its own. Dynamic shared memory: D floats.
__device__ __noinline__ void rt_hc_pre_last(int *count, const float *x, const float *part, const float *base,
                                            const float *scale, const float *w, float *postcomb, float *h, kt_u8 *hq,
                                            float *hs, int D, int H, int iters, float eps, float hc_eps, float *mixout,
                                            float *prn) {
    extern __shared__ float col[];
    __shared__ int last;
    const rt_hc_consts<256> c = rt_hc_load_consts<256>(base, scale, w, !postcomb, D, H);
    __threadfence(); // this block's splits and x seen by the last block
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count, 1) == (int)gridDim.z - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x == 0) *count = 0;
    rt_hc_pre_seq<256>(x, part, gridDim.z, 1, 0, c, postcomb, h, hq, hs, D, H, iters, eps, hc_eps, col, mixout, prn);
}

// Every block of the grid arrives, then waits for all (bar[0] the arrivals, left at 0 by the last, bar[1] the
// generation it bumps). The blocks must be co-resident: rt_gemv_hc1's gridDim.z <= 32 blocks of one an SM, all
// started before its dependents may launch (each triggers them in rt_begin), none of which it waits for.
__device__ void rt_grid_sync(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        const unsigned g = *gen;
        __threadfence(); // this block's stores (and its read of g) before its arrival
        if (atomicAdd(bar, 1u) == gridDim.z - 1) {
            bar[0] = 0;
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else
            while (*gen == g) {}
        __threadfence();
    }
    __syncthreads();
}

// rt_gemv_hc1's HC module spread over its S blocks (B = 1, where S >= D / 128; KT_STEP_HC_SPREAD=0 keeps
// rt_hc_pre_last): where
// rt_hc_pre_last's one block re-reads all H x D streams, each block publishes its tile's sum of squares (tss,
// made as rt_gemv_run loaded it) into ssp[z], then after a grid barrier makes the mixes and pre itself from
// the S splits (rt_hc_pre_seq's arithmetic; the ss's order is the blocks', so not byte-identical to it), and
// block z < D / 128 collapses its 128 columns of the H streams (a warp, 4 a lane), publishes their sum of
// squares into ssp[32 + z]; after a second barrier it normalises them with the norm weights w and quantises
// them (one act_quant group; not for the HC head, hq NULL). Block 0 stores the mixes (mixout) or post and comb
// (postcomb), and prn.
__device__ __noinline__ void rt_hc_spread(unsigned *bar, float *ssp, int kc, const float *x, const float *part,
                                          const float *base, const float *scale, const float *w, float *postcomb,
                                          float *h, kt_u8 *hq, float *hs, int D, int H, int iters, float eps,
                                          float hc_eps, float *mixout, float *prn) {
    __shared__ float red[32], mix[80], pre[8], comb[64], cst[83];
    __shared__ float4 col4[32];
    const int S = gridDim.z, z = blockIdx.z, wp = threadIdx.x / 32, l = threadIdx.x % 32;
    const int nmix = postcomb ? (2 + H) * H : H, c0 = z * 128, mine = z < D / 128; // the HC head: H mixes, 1 scale
    float4 wv = make_float4(1, 1, 1, 1);
    if (wp == 0) { // the module's constants, in flight with the block sum and the barrier
        for (int j = l; j < nmix; j += 32) cst[j] = base[j];
        if (l < (postcomb ? 3 : 1)) cst[80 + l] = scale[l];
        if (mine && w) wv = *(const float4 *)(w + c0 + 4 * l);
    }
    // the block's chunk of the streams it stored (its own threads' stores: the barrier in rt_gemv_run's loop
    // and this one's order them), squared
    const int k0 = z * kc, n4 = (min(H * D, k0 + kc) - k0) / 4;
    float tss = 0;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = __ldcg((const float4 *)(x + k0) + i);
        tss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float tot = rt_block_sum(tss, red);
    if (threadIdx.x == 0) ssp[z] = tot;
    rt_grid_sync(bar);
    constexpr int MV = 10; // nmix <= 80 over the 8 warps
    float mv[MV], sv = l < S ? __ldcg(ssp + l) : 0.f;
#pragma unroll
    for (int u = 0; u < MV; u++) {
        int j = wp + 8 * u;
        mv[u] = j < nmix && l < S ? __ldcg(part + (long)l * nmix + j) : 0.f;
    }
    float4 xv[8]; // warp 0's columns c0 + 4 l of the H <= 8 streams
#pragma unroll
    for (int k = 0; k < 8; k++)
        xv[k] = wp == 0 && mine && k < H ? __ldcg((const float4 *)(x + (long)k * D + c0) + l) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < MV; u++) {
        float v = rt_warp_sum(mv[u]);
        if (l == 0 && wp + 8 * u < nmix) mix[wp + 8 * u] = v;
    }
    __syncthreads();
    if (wp == 0) {
        const float r = rsqrtf(rt_warp_sum(sv) / (H * D) + eps);
        for (int j = l; j < nmix; j += 32) {
            mix[j] *= r;
            if (mixout && z == 0) mixout[j] = mix[j];
        }
        __syncwarp();
        rt_hc_weights(mix, cst, cst + 80, pre, postcomb && !mixout && z == 0 ? postcomb : nullptr, comb, H, iters,
                      hc_eps);
        __syncwarp();
        float4 v = make_float4(0, 0, 0, 0); // rt_hc_collapse's sum, in stream order
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < H) {
                const float p = pre[k];
                v.x += p * xv[k].x, v.y += p * xv[k].y, v.z += p * xv[k].z, v.w += p * xv[k].w;
            }
        col4[l] = v;
        const float q = rt_warp_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
        if (mine && l == 0) ssp[32 + z] = q;
    }
    rt_grid_sync(bar);
    if (wp != 0 || !mine) return;
    const float s2 = l < D / 128 ? __ldcg(ssp + 32 + l) : 0.f, rn = rsqrtf(rt_warp_sum(s2) / D + eps);
    if (z == 0 && prn && l <= H) prn[l] = l < H ? pre[l] : rn;
    float4 v = col4[l]; // rt_rms_apply's x * r * w
    v.x = v.x * rn * wv.x, v.y = v.y * rn * wv.y, v.z = v.z * rn * wv.z, v.w = v.w * rn * wv.w;
    *(float4 *)(h + c0 + 4 * l) = v;
    col4[l] = v;
    __syncwarp();
    if (hq) rt_quant_row((const float *)col4, 128, hq + c0, hs + z);
}

// post and comb (postcomb[b], rt_hc_weights') of sequence b = blockIdx.x from the mixes rt_hc_pre_seq
// stored (mix: B x (2 + H) H, scaled), a warp a sequence: on a side chain beside the block the
// module feeds (rt_gemv_hc1 or rt_hc_pre with mixout), so Sinkhorn's 2 iters - 1 dependent passes are off the
// step's critical path; the same arithmetic on the same values as rt_hc_pre_seq's.
extern "C" __global__ void __launch_bounds__(32) rt_hc_comb(const float *mix, const float *base, const float *scale,
                                                            float *postcomb, int H, int iters, float hc_eps) {
    rt_begin();
    __shared__ float m[80], cst[83], pre[8], comb[64];
    const int l = threadIdx.x, nmix = (2 + H) * H, b = blockIdx.x;
    for (int j = l; j < nmix; j += 32) cst[j] = base[j], m[j] = mix[(long)b * nmix + j];
    if (l < 3) cst[80 + l] = scale[l];
    __syncwarp();
    rt_hc_weights(m, cst, cst + 80, pre, postcomb + (long)b * (H + H * H), comb, H, iters, hc_eps);
}

// The HC mixes (N <= 32 rows of W over K = H x D) of the streams after the previous block's post
// step, which it applies on the way (old -> x, rt_hc_post4, with the previous module's pc_in):
// the post step and the next HC module's GEMV in one launch (rt_hc_pre follows it at B > 1).
extern "C" __global__ void __launch_bounds__(256)
    rt_gemv_hc(const float *W, const float *old, float *x, const float *pc_in, const kt_u16 *yb, const float *yf,
               float *part, int N, int K, int B, int kc, int D, int H) {
    rt_gemv_begin(W, N, K, kc);
    rt_gemv_run<true>(W, x, part, N, K, B, kc, rt_hc_post_args{old, pc_in, yf, x, yb, D, H});
}

// rt_gemv_hc at B = 1 whose last block runs the HC module too (rt_hc_pre_last: the arguments
// after count are rt_hc_pre's; mixout not NULL: post and comb left to rt_hc_comb; prn not NULL: pre[H] and h's rms
// scale stored there, for rt_gate_comb; bar not NULL: the module spread over the blocks, rt_hc_spread, with ssp
// its 64 floats of partial sums). A kernel of its own: the module's
// registers (172 on sm_90) would halve rt_gemv_hc's blocks an SM at B > 1; here the grid is its 32 or fewer splits.
extern "C" __global__ void __launch_bounds__(256)
    rt_gemv_hc1(const float *W, const float *old, float *x, const float *pc_in, const kt_u16 *yb, const float *yf,
                float *part, int N, int K, int B, int kc, int D, int H, int *count, const float *base,
                const float *scale, const float *w, float *postcomb, float *h, kt_u8 *hq, float *hs, int iters,
                float eps, float hc_eps, float *mixout, float *prn, unsigned *bar, float *ssp) {
    const rt_gemv_tile first = rt_gemv_tile_begin(W, N, K, kc);
    rt_gemv_run<true>(W, x, part, N, K, B, kc, rt_hc_post_args{old, pc_in, yf, x, yb, D, H}, &first);
    if (bar)
        rt_hc_spread(bar, ssp, kc, x, part, base, scale, w, postcomb, h, hq, hs, D, H, iters, eps, hc_eps, mixout, prn);
    else
        rt_hc_pre_last(count, x, part, base, scale, w, postcomb, h, hq, hs, D, H, iters, eps, hc_eps, mixout, prn);
}

// The MoE gate's logits at B = 1 without a GEMV after the HC module. h = r w . sum_k pre_k x_k (the
// module's collapse and rmsnorm: r a scalar) and x_k = post[k] y + sum_j comb[j][k] o_j (the post
// step before it: o the old streams, y the block's output), so with Wn = W diag(w) (rt_scale_cols at
// load), W h = r sum_k pre_k (post[k] Wn y + sum_j comb[j][k] Wn o_j). go[j][n] = Wn[n] . o_j is made
// by rt_gemv_fin right after the previous module (o is its output), gy[n] = Wn[n] . y by
// rt_gemv_fin_bf16 beside this module; pc is the post step's post | comb (the buffer the module
// read, not the one it writes: step.c's postcomb is double-buffered), prn the module's pre and r
// (rt_gemv_hc1's last block). The sums in rt_hc_post4's order, then k's; the gate's sum is
// reassociated (not byte-identical to the GEMV of h).
extern "C" __global__ void __launch_bounds__(256)
    rt_gate_comb(const float *go, const float *gy, const float *pc, const float *prn, float *out, int N, int H) {
    rt_begin();
    float p[8], po[8]; // H <= 8 (kt_step_open)
#pragma unroll
    for (int k = 0; k < 8; k++) p[k] = k < H ? prn[k] : 0.f, po[k] = k < H ? pc[k] : 0.f;
    const float r = prn[H];
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        float o[8], t = 0;
        const float y = gy[n];
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = j < H ? go[(long)j * N + n] : 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (k >= H) break;
            float v = po[k] * y;
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (j < H) v += pc[H + j * H + k] * o[j];
            t += p[k] * v;
        }
        out[n] = r * t;
    }
}

// v[0..n) = the row of n bf16 values in, as f32 (v: shared memory), then a barrier.
__device__ void rt_row_load(const kt_u16 *in, int n, float *v) {
    for (int i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) { // 8 loads in flight (v may alias in: rt_rmsnorm)
        kt_u16 t[8];
#pragma unroll
        for (int u = 0; u < 8; u++) t[u] = i0 + u * blockDim.x < n ? in[i0 + u * blockDim.x] : 0;
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (i0 + u * blockDim.x < n) v[i0 + u * blockDim.x] = kt_bf16_to_f32(t[u]);
    }
    __syncthreads();
}

// rmsnorm(in) * w of one row of n bf16 values, act_quant'ed into q e4m3 [n] and sc f32 [n / 128]
// (the next GEMM's input); v: n floats of shared memory.
__device__ void rt_norm_quant_row(const kt_u16 *in, const float *w, kt_u8 *q, float *sc, int n, float eps, float *v,
                                  float *red) {
    rt_row_load(in, n, v);
    rt_rmsnorm(v, n, w, eps, red);
    rt_quant_row(v, n, q, sc);
}

// rt_norm_quant_row over rows of n (rows ld apart), a block per row. Dynamic shared memory n floats.
extern "C" __global__ void rt_rmsnorm_bf16(const kt_u16 *in, int ld, const float *w, kt_u8 *q, float *sc, int n,
                                           float eps) {
    rt_begin();
    extern __shared__ float v[];
    __shared__ float red[32];
    long row = blockIdx.x;
    rt_norm_quant_row(in + row * ld, w, q + row * n, sc + row * (n / 128), n, eps, v, red);
}

// Query heads (a sequence's ld apart): unweighted rmsnorm and RoPE at *pos; grid (heads, batch), q bf16 -> qf f32
// (rt_attention's input) or, qf NULL, qb bf16 [B, heads, HD] (mla_decode's q).
extern "C" __global__ void rt_q_prep(const kt_u16 *q, int ld, float *qf, kt_u16 *qb, const float *inv, const int *pos,
                                     int HD, int R, float eps) {
    const rt_rope_c rc = rt_rope_begin(inv, pos, R);
    __shared__ float v[512], red[32];
    long row = (long)blockIdx.y * gridDim.x + blockIdx.x;
    const kt_u16 *in = q + (long)blockIdx.y * ld + (long)blockIdx.x * HD; // a sequence's heads ld apart
    for (int i = threadIdx.x; i < HD; i += blockDim.x) v[i] = kt_bf16_to_f32(in[i]);
    __syncthreads();
    rt_rmsnorm(v, HD, 0, eps, red);
    rt_rope_at(v, HD, R, rc, (float)rc.p, 1.0f);
    for (int i = threadIdx.x; i < HD; i += blockDim.x)
        if (qf)
            qf[row * HD + i] = v[i];
        else
            qb[row * HD + i] = kt_f32_to_bf16(v[i]);
}

#define RT_QKV_NW 8 // norm weights a thread of rt_qkv_a holds: q_lora <= 8 x 256 (kt_step_open)
// rt_qkv_a's first statement: its row's norm weights (q_a's qw, or the KV's kw) and the RoPE's
// frequency and position, loaded before the PDL wait; then rt_begin.
struct rt_qkv_c {
    rt_rope_c rope;
    float w[RT_QKV_NW];
};
__device__ __forceinline__ rt_qkv_c rt_qkv_begin(const float *qw, const float *kw, const float *inv, const int *pos,
                                                 int QL, int R) {
    rt_qkv_c c;
    c.rope = rt_rope_load(inv, pos, R);
    rt_rms_load(blockIdx.y ? kw : qw, blockIdx.y ? KT_KV_DIM : QL, threadIdx.x, c.w);
    rt_begin();
    return c;
}

// V4's q_a and KV of one GEMM (rows [B][ld]: q_a's QL values, then the KV's 512), grid (B, 2):
// blockIdx.y 0, q_a's rmsnorm * qw act_quant'ed into q / sc (rt_norm_quant_row); 1, the new
// token's KV: rmsnorm * kw, RoPE at *pos, stored in the sequence's window cache at slot *pos % W
// (cache: `stride` bytes per sequence). Dynamic shared memory max(QL, 512) floats.
extern "C" __global__ void rt_qkv_a(const kt_u16 *qkv, int ld, int QL, const float *qw, kt_u8 *q, float *sc,
                                    const float *kw, const float *inv, const int *pos, kt_u8 *cache,
                                    unsigned long long stride, int W, int R, float eps) {
    const rt_qkv_c c = rt_qkv_begin(qw, kw, inv, pos, QL, R);
    extern __shared__ float v[];
    __shared__ float red[32];
    long b = blockIdx.x;
    const int n = blockIdx.y ? KT_KV_DIM : QL;
    rt_row_load(qkv + b * ld + (blockIdx.y ? QL : 0), n, v);
    rt_rms_apply(v, n, threadIdx.x, rt_rms_scale(v, n, eps, red), c.w); // rt_rmsnorm, its weights ahead
    __syncthreads();
    if (blockIdx.y == 0) return rt_quant_row(v, QL, q + b * QL, sc + b * (QL / 128));
    rt_rope_at(v, KT_KV_DIM, R, c.rope, (float)c.rope.p, 1.0f);
    rt_kv_store(v, cache + b * stride, c.rope.p % W);
}

#define RT_COMP_PARTS 8 // warps of rt_comp_emit's 256-thread block
#define RT_COMP_NW 2    // norm weights a thread of it holds: width <= KT_KV_DIM = 2 x 256

// What rt_comp_emit's block reads that the step never writes, loaded before its PDL wait (their
// round trips hide under the previous kernel's tail; each was one more in the chain, after a
// store the compiler could not move it above): the position (copied in before the graph), the
// gate's ape values of this slot for the channel a fold thread owns (ape[r]: series r; two
// values, not a warp's share of the block's 128, keep the block at 4 an SM), and for the entry's
// store by the last block the norm weights w[t + 256 u] and the RoPE frequency inv[t] (t < R / 2).
struct rt_comp_consts {
    rt_rope_c rope;
    float ape[2], w[RT_COMP_NW];
};
__device__ __forceinline__ rt_comp_consts rt_comp_begin(const float *ape, const float *w, const float *inv,
                                                        const int *pos, int width, int overlap, int rate, int R) {
    rt_comp_consts c;
    c.rope = rt_rope_load(inv, pos, R);
    const int OW = overlap * width, slot = c.rope.p % rate, ch = blockIdx.x * 32 + threadIdx.x;
#pragma unroll
    for (int r = 0; r < 2; r++)
        c.ape[r] = threadIdx.x < 32 && ch < width && r < overlap ? ape[(long)slot * OW + r * width + ch] : 0.f;
    rt_rms_load(w, width, threadIdx.x, c.w);
    rt_begin();
    return c;
}

// A compressor's projections of the token for the block's 32 channels (with overlap 2 also their
// second series, width + ch), from rt_gemv's S splits of [wkv; wg] . h (B x 2 OW, rows ld apart), into
// sv[i] (the gate without ape, which rt_comp_fold adds): the block's 64 * overlap values, kv then g, each series-major
// over the 32 channels. Warp w takes w, w + 8, ...: their lanes' splits loaded first (in flight
// together), then summed.
__device__ void rt_comp_slot(const float *part, int S, int ld, float *sv, int b, int width, int overlap) {
    int OW = overlap * width, w = threadIdx.x / 32, nv = 64 * overlap;
    float v[128 / RT_COMP_PARTS]; // nv <= 128 (overlap <= 2)
#pragma unroll
    for (int t = 0; t < 128 / RT_COMP_PARTS; t++) {
        int i = w + RT_COMP_PARTS * t, r = i % (32 * overlap), cj = blockIdx.x * 32 + r % 32;
        int n = (i / (32 * overlap)) * OW + (r / 32) * width + cj;
        v[t] = i < nv && cj < width ? rt_gemv_lane(part, S, gridDim.y, ld, b, n) : 0.f;
    }
#pragma unroll
    for (int t = 0; t < 128 / RT_COMP_PARTS; t++) {
        int i = w + RT_COMP_PARTS * t;
        float sum = rt_warp_sum(v[t]);
        if (i < nv && threadIdx.x % 32 == 0) sv[i] = sum;
    }
    __syncthreads();
}

// The online window's state of a channel: a softmax's running max m, its sum s and gated sum v.
struct rt_comp_acc {
    float m, s, v;
};
__device__ __forceinline__ rt_comp_acc rt_comp_add(rt_comp_acc a, float g, float kv) {
    float m = fmaxf(a.m, g), x = expf(a.m - m), y = expf(g - m);
    return {m, a.s * x + y, a.v * x + y * kv};
}

// The online window's slot: the token's values sv (the gate + ape, the thread's c.ape) folded into
// its channel's state st, planes m, s, v N floats apart, [B][overlap][width] each: accumulator 0
// builds this window's entry (from its series, with overlap 2 its second one, width + ch); with
// overlap 2 accumulator 1 the first series, which the next window's slot 0 takes over (CSA: an
// entry softmaxes its window's second series and the previous window's first). Slot 0 starts both
// afresh, so no earlier state leaks past a window. Returns accumulator 0 (threads t < 32 of a
// channel < width; the others' is meaningless), which a window's close divides.
__device__ rt_comp_acc rt_comp_fold(const float *sv, const float *ape, float *st, long N, int b, int width, int overlap,
                                    int slot, int first) {
    int t = threadIdx.x, ch = blockIdx.x * 32 + t;
    const rt_comp_acc none = {-INFINITY, 0.f, 0.f};
    if (t >= 32 || ch >= width) return none;
    long a0 = ((long)b * overlap) * width + ch, a1 = a0 + width;
    rt_comp_acc A = slot ? rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]} : none;
    if (overlap == 2) {
        rt_comp_acc P = rt_comp_acc{st[a1], st[N + a1], st[2 * N + a1]};
        if (!slot && !first) A = P;
        P = rt_comp_add(slot ? P : none, sv[64 + t] + ape[0], sv[t]);
        st[a1] = P.m, st[N + a1] = P.s, st[2 * N + a1] = P.v;
    }
    int k = overlap == 2 ? 32 + t : t;
    A = rt_comp_add(A, sv[32 * overlap + k] + ape[overlap - 1], sv[k]);
    st[a0] = A.m, st[N + a0] = A.s, st[2 * N + a0] = A.v;
    return A;
}

// Compressed entry `entry` of sequence b from e[width] (written by the grid's other blocks: read
// past L1): rmsnorm * w, RoPE at entry * rate; stored in the V4 layout (kv_cache), as f32 keys
// (rt_index_score's), or as mla_indexer's paged e4m3 keys (ikeys; width 128); `cstride` bytes,
// floats or pages per sequence.
__device__ void rt_comp_store(const float *e, const rt_comp_consts &c, long entry, int b, kt_u8 *kv_cache, float *keys,
                              kt_u8 *ikeys, unsigned long long cstride, int width, int rate, int R, float eps) {
    __shared__ float v[KT_KV_DIM], red[32];
    for (int i = threadIdx.x; i < width; i += blockDim.x) v[i] = __ldcg(e + i);
    __syncthreads();
    rt_rms_apply(v, width, threadIdx.x, rt_rms_scale(v, width, eps, red), c.w); // rt_rmsnorm, its weights ahead
    __syncthreads();
    rt_rope_at(v, width, R, c.rope, (float)(entry * rate), 1.0f);
    if (kv_cache)
        rt_kv_store(v, kv_cache + b * cstride, entry);
    else if (ikeys)
        rt_index_key_store(v, ikeys, (long long)(b * cstride + entry / KT_IDX_PAGE), (int)(entry % KT_IDX_PAGE), red);
    else
        for (int i = threadIdx.x; i < width; i += blockDim.x) keys[b * cstride + entry * width + i] = v[i];
}

// A compressor's step for the token, grid (width / 32, batch), 256 threads: the projections'
// slot *pos % rate (rt_comp_slot) folded into the window's running softmax st (rt_comp_fold: a step
// reads and writes 3 floats per channel and series, and the close no more: HCA's two-pass softmax
// over 128 slots made every 128th step the slow one); when *pos closes a window (every `rate`
// tokens) the entry (*pos+1)/rate - 1 into e[b], and the last of the sequence's blocks to finish
// (count[b], left at 0 for the next launch) stores it (rt_comp_store).
extern "C" __global__ void __launch_bounds__(256, 4)
    rt_comp_emit(const float *part, int S, int ld, const float *ape, float *st, float *e, int *count, const float *w,
                 const float *inv, const int *pos, kt_u8 *kv_cache, float *keys, kt_u8 *ikeys,
                 unsigned long long cstride, int width, int overlap, int rate, int R, float eps) {
    const rt_comp_consts c = rt_comp_begin(ape, w, inv, pos, width, overlap, rate, R);
    __shared__ int last;
    __shared__ float sv[128];
    int b = blockIdx.y, p = c.rope.p, t = threadIdx.x, ch = blockIdx.x * 32 + t;
    long N = (long)gridDim.y * overlap * width;
    rt_comp_slot(part, S, ld, sv, b, width, overlap);
    const rt_comp_acc A = rt_comp_fold(sv, c.ape, st, N, b, width, overlap, p % rate, p < rate);
    if ((p + 1) % rate) return;
    if (t < 32 && ch < width) e[(long)b * width + ch] = A.v / A.s;
    __threadfence(); // e[b] seen by the block that stores it
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count + b, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x == 0) count[b] = 0;
    rt_comp_store(e + (long)b * width, c, (p + 1) / rate - 1, b, kv_cache, keys, ikeys, cstride, width, rate, R, eps);
}

// mla_indexer's inputs for the query, a block per (head, sequence): the head's q = RoPE(iq; a
// sequence's iq_ld apart) in
// e4m3 with its scale s folded into the weight, w[b][h] = (wproj_h . h) / sqrt(IH) s / sqrt(ID)
// (relu(s x) = s relu(x), s > 0; wproj . h from rt_gemv's S splits, rows ld apart), so the family's logit
// sum_h w_h relu(q_h . k) k_scale is rt_index_score's score. Dynamic shared memory ID floats.
extern "C" __global__ void rt_index_q(const kt_u16 *iq, int iq_ld, const float *wpart, int S, int ld, const float *inv,
                                      const int *pos, kt_u8 *qq, float *w, int ID, int R) {
    const rt_rope_c rc = rt_rope_begin(inv, pos, R);
    extern __shared__ float q[];
    __shared__ float red[32];
    int hh = blockIdx.x, IH = gridDim.x, b = blockIdx.y, B = gridDim.y;
    long row = (long)b * IH + hh;
    float dl = threadIdx.x < 32 ? rt_gemv_lane(wpart, S, B, ld, b, hh) : 0.f; // in flight with q's loads
    for (int i = threadIdx.x; i < ID; i += blockDim.x) q[i] = kt_bf16_to_f32(iq[(long)b * iq_ld + hh * ID + i]);
    __syncthreads();
    rt_rope_at(q, ID, R, rc, (float)rc.p, 1.0f);
    float s = rt_quant_e4m3(q, ID, qq + row * ID, red);
    if (threadIdx.x < 32) {
        float d = rt_warp_sum(dl); // rt_gemv_at's sum
        if (threadIdx.x == 0) w[row] = d * rsqrtf((float)IH) * s * rsqrtf((float)ID);
    }
}

// The lightning indexer's scores of every compressed entry for the token: w = wproj . h /
// sqrt(IH) (rt_gemv's S splits, B x IH, rows ld apart), q = RoPE(iq heads, a sequence's iq_ld
// apart), score[s] = sum_h w_h relu(q_h .
// k_s) / sqrt(ID). A block per sequence; dynamic shared memory IH * ID floats.
extern "C" __global__ void rt_index_score(const kt_u16 *iq, int iq_ld, const float *wpart, int S, int ld,
                                          const float *keys, const float *inv, const int *pos, float *scores,
                                          unsigned long long kstride, int IH, int ID, int rate, int R,
                                          int max_entries) {
    rt_begin();
    extern __shared__ float q[];
    __shared__ float wt[64];
    int b = blockIdx.x, n = (*pos + 1) / rate;
    for (int i = threadIdx.x; i < IH * ID; i += blockDim.x) q[i] = kt_bf16_to_f32(iq[(long)b * iq_ld + i]);
    for (int j = threadIdx.x / 32; j < IH; j += blockDim.x / 32) {
        float d = rt_gemv_at(wpart, S, gridDim.x, ld, b, j);
        if (threadIdx.x % 32 == 0) wt[j] = d * rsqrtf((float)IH);
    }
    __syncthreads();
    for (int hh = 0; hh < IH; hh++) rt_rope(q + hh * ID, ID, R, inv, (float)*pos, 1.0f);
    const float *kb = keys + b * kstride;
    for (int s = threadIdx.x / 32; s < n; s += blockDim.x / 32) {
        float t = 0;
        for (int hh = 0; hh < IH; hh++) t += fmaxf(rt_warp_dot(q + hh * ID, kb + (long)s * ID, ID), 0.f) * wt[hh];
        if (threadIdx.x % 32 == 0) scores[(long)b * max_entries + s] = t * rsqrtf((float)ID);
    }
}

// The top k of the n = (*pos+1)/rate scores (ties: the lower index), idx[b][0..k) and -1 after,
// as cache-wide token ids b * seq_ids + entry (what mla_indexer writes through its block table).
extern "C" __global__ void rt_topk(float *scores, int *idx, const int *pos, int rate, int k, int max_entries,
                                   int seq_ids) {
    rt_begin();
    __shared__ float bv[RT_THREADS];
    __shared__ int bi[RT_THREADS];
    int b = blockIdx.x, n = (*pos + 1) / rate;
    float *sc = scores + (long)b * max_entries;
    for (int j = 0; j < k; j++) {
        float best = -INFINITY;
        int at = -1;
        for (int s = threadIdx.x; s < n; s += blockDim.x)
            if (sc[s] > best || (at < 0 && sc[s] > -INFINITY)) best = sc[s], at = s;
        bv[threadIdx.x] = best, bi[threadIdx.x] = at;
        __syncthreads();
        for (int o = blockDim.x / 2; o > 0; o /= 2) {
            if (threadIdx.x < o) {
                float v2 = bv[threadIdx.x + o];
                int i2 = bi[threadIdx.x + o];
                if (i2 >= 0 &&
                    (bi[threadIdx.x] < 0 || v2 > bv[threadIdx.x] || (v2 == bv[threadIdx.x] && i2 < bi[threadIdx.x])))
                    bv[threadIdx.x] = v2, bi[threadIdx.x] = i2;
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            idx[(long)b * k + j] = bi[0] < 0 ? -1 : b * seq_ids + bi[0];
            if (bi[0] >= 0) sc[bi[0]] = -INFINITY;
        }
        __syncthreads();
    }
}

// Attention of one (head, sequence): the window's tokens, then the compressed entries (mode 1
// CSA: those idx lists, cache-wide ids; mode 2 HCA: all (*pos+1)/rate), softmax with the head's sink, the
// weighted sum of the (K = V) vectors, RoPE back at *pos; written bf16 in group order
// og[g][b][GI]. Dynamic shared memory: (W + max_keys) floats of logits.
extern "C" __global__ void rt_attention(const float *qf, const kt_u8 *win, unsigned long long wstride,
                                        const kt_u8 *comp, unsigned long long cstride, const int *idx,
                                        const float *sink, const float *inv, const int *pos, kt_u16 *og, int W,
                                        int mode, int rate, int topk, int R, int GI, int B) {
    rt_begin();
    extern __shared__ float lg[];
    __shared__ float q[KT_KV_DIM], o[KT_KV_DIM], red[32];
    int hh = blockIdx.x, b = blockIdx.y, H = gridDim.x, p = *pos;
    const kt_u8 *wb = win + b * wstride, *cb = comp ? comp + b * cstride : 0;
    for (int i = threadIdx.x; i < KT_KV_DIM; i += blockDim.x) q[i] = qf[((long)b * H + hh) * KT_KV_DIM + i];
    int nw = p + 1 < W ? p + 1 : W, nc = mode == 2 ? (p + 1) / rate : mode == 1 ? topk : 0;
    __syncthreads();
    // key s < nw: window token p - nw + 1 + s; else compressed entry (CSA: idx, -1 = none)
    for (int s = threadIdx.x / 32; s < nw + nc; s += blockDim.x / 32) {
        const kt_u8 *cache = s < nw ? wb : mode == 1 ? comp : cb;
        long t = s < nw ? (long)(p - nw + 1 + s) % W : mode == 1 ? idx[(long)b * topk + s - nw] : s - nw;
        float d = 0;
        if (t >= 0)
            for (int j = threadIdx.x % 32; j < KT_KV_DIM; j += 32) d += q[j] * rt_kv_load(cache, t, j);
        for (int off = 16; off > 0; off /= 2) d += __shfl_xor_sync(0xffffffffu, d, off);
        if (threadIdx.x % 32 == 0) lg[s] = t >= 0 ? d * rsqrtf((float)KT_KV_DIM) : -INFINITY;
    }
    __syncthreads();
    float mx = sink[hh];
    for (int s = threadIdx.x; s < nw + nc; s += blockDim.x) mx = fmaxf(mx, lg[s]);
    mx = rt_block_max(mx, red);
    float sum = 0;
    for (int s = threadIdx.x; s < nw + nc; s += blockDim.x) sum += lg[s] = expf(lg[s] - mx);
    sum = rt_block_sum(sum, red) + expf(sink[hh] - mx);
    for (int j = threadIdx.x; j < KT_KV_DIM; j += blockDim.x) {
        float v = 0;
        for (int s = 0; s < nw + nc; s++) {
            if (lg[s] == 0.f) continue;
            long t = s < nw ? (long)(p - nw + 1 + s) % W : mode == 1 ? idx[(long)b * topk + s - nw] : s - nw;
            v += lg[s] * rt_kv_load(s < nw ? wb : mode == 1 ? comp : cb, t, j);
        }
        o[j] = v / sum;
    }
    __syncthreads();
    rt_rope(o, KT_KV_DIM, R, inv, (float)p, -1.0f);
    for (int j = threadIdx.x; j < KT_KV_DIM; j += blockDim.x) {
        long f = (long)hh * KT_KV_DIM + j;
        og[((f / GI) * B + b) * GI + f % GI] = kt_f32_to_bf16(o[j]);
    }
}

// The lengths of the step's lists at *pos (every sequence at the same position): len[0][b] the
// window's tokens, len[1][b] the HCA entries, len[2][b] the CSA entries (mla_indexer's L_b).
extern "C" __global__ void rt_lengths(const int *pos, int *len, int W, int hca_rate, int csa_rate, int B) {
    rt_begin();
    int b = blockIdx.x * blockDim.x + threadIdx.x, p = *pos;
    if (b >= B) return;
    len[b] = p + 1 < W ? p + 1 : W;
    len[B + b] = (p + 1) / hca_rate;
    len[2 * B + b] = (p + 1) / csa_rate;
}

// mla_decode's output back to the step's: RoPE back at *pos on each head's trailing R values,
// bf16 in group order og[g][b][GI] (as rt_attention writes). Grid (heads, batch).
extern "C" __global__ void rt_o_post(const kt_u16 *o, const float *inv, const int *pos, kt_u16 *og, int R, int GI,
                                     int B) {
    const rt_rope_c rc = rt_rope_begin(inv, pos, R);
    __shared__ float v[KT_KV_DIM];
    int hh = blockIdx.x, b = blockIdx.y, H = gridDim.x;
    for (int j = threadIdx.x; j < KT_KV_DIM; j += blockDim.x)
        v[j] = kt_bf16_to_f32(o[((long)b * H + hh) * KT_KV_DIM + j]);
    __syncthreads();
    rt_rope_at(v, KT_KV_DIM, R, rc, (float)rc.p, -1.0f);
    for (int j = threadIdx.x; j < KT_KV_DIM; j += blockDim.x) {
        long f = (long)hh * KT_KV_DIM + j;
        og[((f / GI) * B + b) * GI + f % GI] = kt_f32_to_bf16(v[j]);
    }
}

// out[b][g*L + i] = in[g][b][i]: the grouped projection's outputs back in token order.
extern "C" __global__ void rt_ungroup(const kt_u16 *in, kt_u16 *out, int G, int B, int L) {
    rt_begin();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)G * B * L) return;
    long g = i / ((long)B * L), b = i / L % B, j = i % L;
    out[b * G * L + g * L + j] = in[i];
}

// The router, a block per sequence, from rt_gemv's S splits of the logits wg . h (B x E):
// scores = sqrtsoftplus(logits); experts = tid2eid[tok] (hash layers, bias NULL) or the top K
// of scores + bias; weights = scores normalised * scale.
extern "C" __global__ void rt_router(const float *lp, int S, const float *bias, const int *tid2eid, const int *tok,
                                     int *eidx, float *ew, int E, int K, float scale) {
    rt_begin();
    extern __shared__ float sc[];
    int b = blockIdx.x;
    for (int e = threadIdx.x / 32; e < E; e += blockDim.x / 32) {
        float l = rt_gemv_at(lp, S, gridDim.x, E, b, e);
        if (threadIdx.x % 32 == 0) sc[e] = sqrtf(l > 20.f ? l : log1pf(expf(l)));
    }
    __syncthreads();
    if (threadIdx.x) return;
    int sel[64];
    float wsum = 0;
    for (int k = 0; k < K; k++) {
        if (!bias)
            sel[k] = tid2eid[(long)tok[b] * K + k];
        else {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= sel[j] == e;
                if (!taken && (best < 0 || sc[e] + bias[e] > sc[best] + bias[best])) best = e;
            }
            sel[k] = best;
        }
        wsum += sc[sel[k]];
    }
    for (int k = 0; k < K; k++) {
        eidx[b * K + k] = sel[k];
        ew[b * K + k] = sc[sel[k]] / (wsum + 1e-20f) * scale;
    }
}

// Dot of a warp between FP8 weight row `row` of an [N, Kd] matrix (128x128 block scales ws)
// and the act_quant'ed vector (codes xq, scales xs per 128).
__device__ float rt_warp_dot_fp8(const kt_u8 *w, const float *ws, long row, int Kd, const kt_u8 *xq, const float *xs) {
    float s = 0;
    int kb = Kd / 128;
    for (int i = threadIdx.x % 32; i < Kd; i += 32)
        s += rt_e4m3(w[row * Kd + i]) * ws[(row / 128) * kb + i / 128] * rt_e4m3(xq[i]) * xs[i / 128];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// Routed experts, gate and up: for slot (b, k) of grid.y, a = silu(min(g, L)) * clamp(u, L) with
// g, u = w13[e] rows i and I + i . x (FP8 weights [E][2I][D], act_quant'ed x); a bf16 [B*K][I].
extern "C" __global__ void rt_moe_up(const kt_u8 *w13, const float *s13, const kt_u8 *xq, const float *xs,
                                     const int *eidx, kt_u16 *a, int I, int D, int K, float limit) {
    rt_begin();
    int slot = blockIdx.y, b = slot / K, i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (i >= I) return;
    long e = eidx[slot];
    const kt_u8 *w = w13 + e * 2 * I * D;
    const float *ws = s13 + e * (2 * I / 128) * (D / 128);
    float g = rt_warp_dot_fp8(w, ws, i, D, xq + (long)b * D, xs + (long)b * (D / 128));
    float u = rt_warp_dot_fp8(w, ws, I + i, D, xq + (long)b * D, xs + (long)b * (D / 128));
    g = fminf(g, limit), u = fminf(fmaxf(u, -limit), limit);
    if (threadIdx.x % 32 == 0) a[(long)slot * I + i] = kt_f32_to_bf16(g / (1.f + expf(-g)) * u);
}

// Routed experts, down: y[slot][d] = w2[e] row d . a (FP8 [E][D][I], act_quant'ed a), f32.
extern "C" __global__ void rt_moe_down(const kt_u8 *w2, const float *s2, const kt_u8 *aq, const float *as,
                                       const int *eidx, float *y, int I, int D) {
    rt_begin();
    int slot = blockIdx.y, d = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (d >= D) return;
    long e = eidx[slot];
    float v = rt_warp_dot_fp8(w2 + e * (long)D * I, s2 + e * (D / 128) * (I / 128), d, I, aq + (long)slot * I,
                              as + (long)slot * (I / 128));
    if (threadIdx.x % 32 == 0) y[(long)slot * D + d] = v;
}

// The MoE output: out[b][d] = sum_k ew[b][k] y[b*K+k][d] + shared[b][d] (bf16, may be NULL).
extern "C" __global__ void rt_moe_combine(const float *y, const float *ew, const kt_u16 *shared, float *out, int K,
                                          int D) {
    rt_begin();
    int b = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    float v = 0;
    for (int k = 0; k < K; k++) v += ew[b * K + k] * y[((long)b * K + k) * D + d];
    out[(long)b * D + d] = v + (shared ? kt_bf16_to_f32(shared[(long)b * D + d]) : 0.f);
}

// The shared expert's activation: a[b][i] = silu(min(g, L)) * clamp(u, L), gu = [g | u] bf16 [B][2I].
extern "C" __global__ void rt_swiglu(const kt_u16 *gu, kt_u16 *a, int I, float limit) {
    rt_begin();
    int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= I) return;
    float g = fminf(kt_bf16_to_f32(gu[(long)b * 2 * I + i]), limit);
    float u = fminf(fmaxf(kt_bf16_to_f32(gu[(long)b * 2 * I + I + i]), -limit), limit);
    a[(long)b * I + i] = kt_f32_to_bf16(g / (1.f + expf(-g)) * u);
}

// Greedy sampling: tok[b] = argmax_v logits[b][v] (ties: the lower id); a block of
// RT_ARGMAX_THREADS a sequence.
#define RT_ARGMAX_THREADS 1024
extern "C" __global__ void __launch_bounds__(RT_ARGMAX_THREADS) rt_argmax(const float *logits, int *tok, int V) {
    rt_begin();
    __shared__ float bv[RT_ARGMAX_THREADS];
    __shared__ int bi[RT_ARGMAX_THREADS];
    int b = blockIdx.x;
    float best = -INFINITY;
    int at = 0;
    // 16 loads in flight a thread, then compared in index order (the first of equal maxima kept):
    // one load at a time, the LM head's 129,280 logits took ~195 us a step on the H200; at 256
    // threads, 32 rounds of 16: 38 us (ncu); at 1024, 8
    for (int v0 = threadIdx.x; v0 < V; v0 += 16 * blockDim.x) {
        float x[16];
#pragma unroll
        for (int u = 0; u < 16; u++) {
            int v = v0 + u * blockDim.x;
            x[u] = v < V ? logits[(long)b * V + v] : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < 16; u++)
            if (x[u] > best) best = x[u], at = v0 + u * blockDim.x;
    }
    bv[threadIdx.x] = best, bi[threadIdx.x] = at;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o /= 2) {
        if (threadIdx.x < o && (bv[threadIdx.x + o] > bv[threadIdx.x] ||
                                (bv[threadIdx.x + o] == bv[threadIdx.x] && bi[threadIdx.x + o] < bi[threadIdx.x])))
            bv[threadIdx.x] = bv[threadIdx.x + o], bi[threadIdx.x] = bi[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) tok[b] = bi[0];
}

// ------------------------------------------------------------------------- DeepSeek-V3.2
// V3.2's plain kernels (runtime/step.c's V3.2 section; model_ref.c's attention_v32 and
// indexer_v32 are the math): the residual stream's norms, the KV append in mla_decode's V32
// layout, the absorbed MLA query and output through kv_b_proj (read as FP8 blocks), and the
// indexer's key and query in mla_indexer's formats: a block per sequence, or per head and 8
// sequences (the kv_b_proj GEMVs), or per sequence and 8 heads (the indexer's query).

// h = rmsnorm(x) * w (f32) and, hq not NULL, act_quant'ed into hq / hs (the GEMMs' input); a
// block per row of D. Dynamic shared memory: D floats.
extern "C" __global__ void rt_rmsnorm_f32(const float *x, const float *w, float *h, kt_u8 *hq, float *hs, int D,
                                          float eps) {
    rt_begin();
    extern __shared__ float v[];
    __shared__ float red[32];
    long row = blockIdx.x;
    for (int i = threadIdx.x; i < D; i += blockDim.x) v[i] = x[row * D + i];
    __syncthreads();
    rt_rmsnorm(v, D, w, eps, red);
    for (int i = threadIdx.x; i < D; i += blockDim.x) h[row * D + i] = v[i];
    if (hq) rt_quant_row(v, D, hq + row * D, hs + row * (D / 128));
}

// The residual add x[b] += y[b] (y bf16, a GEMM's output); grid (D / 256, B).
extern "C" __global__ void rt_residual(float *x, const kt_u16 *y, int D) {
    rt_begin();
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    long i = (long)blockIdx.y * D + d;
    if (d < D) x[i] += kt_bf16_to_f32(y[i]);
}

// Half-split RoPE ("rotate_half", V3.2's indexer) on the leading R channels of x at p, cos and
// sin times af (YaRN's attention factor): channel i pairs with i + R / 2.
__device__ void rt_rope_half(float *x, int R, const float *inv, float af, float p) {
    for (int i = threadIdx.x; i < R / 2; i += blockDim.x) {
        float f = p * inv[i], c = af * cosf(f), s = af * sinf(f);
        float a = x[i], b = x[i + R / 2];
        x[i] = a * c - b * s;
        x[i + R / 2] = b * c + a * s;
    }
    __syncthreads();
}

// V3.2's MLA RoPE: interleaved on the trailing R of x[dim], times af.
__device__ void rt_rope_v32(float *x, int dim, int R, const float *inv, float af, float p) {
    rt_rope(x, dim, R, inv, p, 1.0f);
    for (int i = threadIdx.x; i < R; i += blockDim.x) x[dim - R + i] *= af;
    __syncthreads();
}

// A 576 vector into mla_decode's V32 layout at token id (kt_mla_quantise_token's rounding):
// per 128 latent values e4m3 codes with a power-of-two f32 scale, the 64 rope values bf16.
__device__ void rt_v32_store(const float *x, kt_u8 *cache, long id, float *red) {
    kt_u8 *codes = cache + kt_mla_token_at(KT_MLA_V32, id);
    float *scales = (float *)(cache + kt_mla_scales_at(KT_MLA_V32, id));
    for (int t = 0; t < KT_MLA_V32_TILES; t++) {
        float a = 0;
        for (int i = threadIdx.x; i < KT_MLA_V32_TILE; i += blockDim.x) a = fmaxf(a, fabsf(x[t * KT_MLA_V32_TILE + i]));
        a = rt_block_max(a, red);
        float s = exp2f(ceilf(log2f(fmaxf(a / 448.0f, KT_MLA_MIN_SCALE))));
        for (int i = threadIdx.x; i < KT_MLA_V32_TILE; i += blockDim.x)
            codes[t * KT_MLA_V32_TILE + i] = rt_to_e4m3(x[t * KT_MLA_V32_TILE + i] / s);
        if (threadIdx.x == 0) scales[t] = s;
    }
    kt_u16 *rope = (kt_u16 *)(cache + kt_mla_rope_at(KT_MLA_V32, id));
    for (int i = threadIdx.x; i < KT_MLA_ROPE; i += blockDim.x) rope[i] = kt_f32_to_bf16(x[KT_MLA_V32_NOPE + i]);
}

// The new token's MLA key: kv_a's row (bf16, ld values a row) = latent 512 | rope 64; the latent
// rmsnorm'd with w, the rope part rotated at *pos; stored at sequence b's token *pos (cache-wide
// id b * seq_pages * 64 + *pos, runtime/step_plan.h). A block per sequence.
extern "C" __global__ void rt_v32_kv_append(const kt_u16 *kv, int ld, const float *w, const float *inv, float af,
                                            const int *pos, kt_u8 *cache, long seq_pages, float eps) {
    rt_begin();
    __shared__ float v[KT_MLA_V32_DQK], red[32];
    int b = blockIdx.x, p = *pos;
    for (int i = threadIdx.x; i < KT_MLA_V32_DQK; i += blockDim.x) v[i] = kt_bf16_to_f32(kv[(long)b * ld + i]);
    __syncthreads();
    rt_rmsnorm(v, KT_MLA_V32_NOPE, w, eps, red);
    rt_rope_v32(v, KT_MLA_V32_DQK, KT_MLA_ROPE, inv, af, (float)p);
    rt_v32_store(v, cache, (long)b * seq_pages * KT_MLA_PAGE + p, red);
}

// kv_b_proj's weight (FP8 [rows, 512] with 128x128 f32 scales) at (r, j).
__device__ __forceinline__ float rt_v32_wkvb(const kt_u8 *wc, const float *ws, long r, int j) {
    return rt_e4m3(wc[r * KT_MLA_V32_NOPE + j]) * ws[(r / 128) * (KT_MLA_V32_NOPE / 128) + j / 128];
}

// kv_b_proj's GEMVs take RT_V32_SEQS sequences a block (grid.y = ceil(B / RT_V32_SEQS)): each
// weight is read once for them; a missing sequence's inputs are zeros, its outputs not written.
#define RT_V32_SEQS 8

// The absorbed query of head h for sequences b0.. b0 + RT_V32_SEQS (grid (heads, ceil(B / 8))):
// q's rope part rotated at *pos; its nope part through the head's key rows of kv_b_proj into the
// 512 latent, ql[j] = sum_d q[d] W[h (NO + VH) + d][j]; qb[b][h] = ql | rope, bf16 (mla_decode's q).
extern "C" __global__ void rt_v32_q_absorb(const kt_u16 *q, const kt_u8 *wc, const float *ws, const float *inv,
                                           float af, const int *pos, kt_u16 *qb, int NO, int VH, int R, int B) {
    rt_begin();
    __shared__ float v[RT_V32_SEQS][512];
    int h = blockIdx.x, H = gridDim.x, QK = NO + R, b0 = blockIdx.y * RT_V32_SEQS;
    for (int s = 0; s < RT_V32_SEQS; s++) {
        for (int i = threadIdx.x; i < QK; i += blockDim.x)
            v[s][i] = b0 + s < B ? kt_bf16_to_f32(q[((long)(b0 + s) * H + h) * QK + i]) : 0.0f;
        __syncthreads();
        rt_rope_v32(v[s], QK, R, inv, af, (float)*pos);
    }
    for (int j = threadIdx.x; j < KT_MLA_V32_NOPE; j += blockDim.x) {
        float acc[RT_V32_SEQS] = {0};
        for (int d = 0; d < NO; d++) {
            float w = rt_v32_wkvb(wc, ws, (long)h * (NO + VH) + d, j);
#pragma unroll
            for (int s = 0; s < RT_V32_SEQS; s++) acc[s] += v[s][d] * w;
        }
#pragma unroll
        for (int s = 0; s < RT_V32_SEQS; s++)
            if (b0 + s < B) qb[((long)(b0 + s) * H + h) * KT_MLA_V32_DQK + j] = kt_f32_to_bf16(acc[s]);
    }
    for (int s = 0; s < RT_V32_SEQS && b0 + s < B; s++)
        for (int i = threadIdx.x; i < R; i += blockDim.x)
            qb[((long)(b0 + s) * H + h) * KT_MLA_V32_DQK + KT_MLA_V32_NOPE + i] = kt_f32_to_bf16(v[s][NO + i]);
}

// mla_decode's latent output of head h through the head's value rows of kv_b_proj, for sequences
// b0.. b0 + RT_V32_SEQS: o[b][h VH + d] = sum_j ol[j] W[h (NO + VH) + NO + d][j], bf16 (o_proj's
// act_quant input). Grid (heads, ceil(B / 8)), a warp per output row.
extern "C" __global__ void rt_v32_o_up(const kt_u16 *ob, const kt_u8 *wc, const float *ws, kt_u16 *o, int NO, int VH,
                                       int B) {
    rt_begin();
    __shared__ float ol[RT_V32_SEQS][KT_MLA_V32_NOPE];
    int h = blockIdx.x, H = gridDim.x, b0 = blockIdx.y * RT_V32_SEQS;
    for (int s = 0; s < RT_V32_SEQS; s++)
        for (int j = threadIdx.x; j < KT_MLA_V32_NOPE; j += blockDim.x)
            ol[s][j] = b0 + s < B ? kt_bf16_to_f32(ob[((long)(b0 + s) * H + h) * KT_MLA_V32_NOPE + j]) : 0.0f;
    __syncthreads();
    for (int d = threadIdx.x / 32; d < VH; d += blockDim.x / 32) {
        long r = (long)h * (NO + VH) + NO + d;
        float acc[RT_V32_SEQS] = {0};
        for (int j = threadIdx.x % 32; j < KT_MLA_V32_NOPE; j += 32) {
            float w = rt_v32_wkvb(wc, ws, r, j);
#pragma unroll
            for (int s = 0; s < RT_V32_SEQS; s++) acc[s] += ol[s][j] * w;
        }
#pragma unroll
        for (int s = 0; s < RT_V32_SEQS; s++) {
            for (int off = 16; off > 0; off /= 2) acc[s] += __shfl_xor_sync(0xffffffffu, acc[s], off);
            if (threadIdx.x % 32 == 0 && b0 + s < B) o[((long)(b0 + s) * H + h) * VH + d] = kt_f32_to_bf16(acc[s]);
        }
    }
}

// The indexer's key of the new token (a block per sequence): wk's output k (bf16 [B][128])
// LayerNorm'd (weight, bias, eps 1e-6, as transformers' k_norm), half-split RoPE at *pos on its
// leading R, stored in mla_indexer's pages at sequence b's page b * seq_pages + *pos / 64.
extern "C" __global__ void rt_v32_index_k(const kt_u16 *k, const float *w, const float *bias, const float *inv,
                                          float af, const int *pos, kt_u8 *cache, long seq_pages, int R) {
    rt_begin();
    __shared__ float v[KT_IDX_DIM], red[32];
    int b = blockIdx.x, p = *pos;
    float s = 0;
    for (int i = threadIdx.x; i < KT_IDX_DIM; i += blockDim.x) s += v[i] = kt_bf16_to_f32(k[(long)b * KT_IDX_DIM + i]);
    float mean = rt_block_sum(s, red) / KT_IDX_DIM, ss = 0;
    for (int i = threadIdx.x; i < KT_IDX_DIM; i += blockDim.x) ss += (v[i] - mean) * (v[i] - mean);
    float r = rsqrtf(rt_block_sum(ss, red) / KT_IDX_DIM + 1e-6f);
    for (int i = threadIdx.x; i < KT_IDX_DIM; i += blockDim.x) v[i] = (v[i] - mean) * r * w[i] + bias[i];
    __syncthreads();
    rt_rope_half(v, R, inv, af, (float)p);
    rt_index_key_store(v, cache, (long long)b * seq_pages + p / KT_IDX_PAGE, p % KT_IDX_PAGE, red);
}

// mla_indexer's query of sequence b, heads h0.. h0 + RT_V32_HEADS (grid (B, ceil(IH / 8)); as
// rt_index_q, with V3.2's half-split RoPE on each head's leading R): heads in e4m3 with the scale
// s_h folded into w[b][h] = (wproj_h . h / sqrt(IH)) s_h / sqrt(ID). Dynamic shared memory
// RT_V32_HEADS * ID floats.
#define RT_V32_HEADS 8
extern "C" __global__ void rt_v32_index_q(const kt_u16 *iq, const float *h, const float *wproj, const float *inv,
                                          float af, const int *pos, kt_u8 *qq, float *w, int IH, int ID, int D, int R) {
    rt_begin();
    extern __shared__ float q[];
    __shared__ float wt[RT_V32_HEADS], red[32];
    int b = blockIdx.x, h0 = blockIdx.y * RT_V32_HEADS, n = min(RT_V32_HEADS, IH - h0);
    for (int i = threadIdx.x; i < n * ID; i += blockDim.x) q[i] = kt_bf16_to_f32(iq[((long)b * IH + h0) * ID + i]);
    for (int j = threadIdx.x / 32; j < n; j += blockDim.x / 32) {
        float d = rt_warp_dot(wproj + (long)(h0 + j) * D, h + (long)b * D, D);
        if (threadIdx.x % 32 == 0) wt[j] = d * rsqrtf((float)IH);
    }
    __syncthreads();
    for (int hh = 0; hh < n; hh++) rt_rope_half(q + hh * ID, R, inv, af, (float)*pos);
    for (int hh = 0; hh < n; hh++) {
        float s = rt_quant_e4m3(q + hh * ID, ID, qq + ((long)b * IH + h0 + hh) * ID, red);
        if (threadIdx.x == 0) w[(long)b * IH + h0 + hh] = wt[hh] * s * rsqrtf((float)ID);
    }
}

// Seeded synthetic weights on the device (--synthetic): f32 values base + amp * u[-1, 1), or
// e4m3 codes of u * 448 (with scales set by the host), from a hash of (seed, index).
__device__ __forceinline__ float rt_hash_uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) / (float)(1ull << 23) - 1.0f;
}
extern "C" __global__ void rt_fill_f32(float *x, unsigned long long n, unsigned long long seed, float base, float amp) {
    rt_begin();
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        x[i] = base + amp * rt_hash_uniform(seed, i);
}
extern "C" __global__ void rt_fill_e4m3(kt_u8 *x, unsigned long long n, unsigned long long seed) {
    rt_begin();
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        x[i] = rt_to_e4m3(rt_hash_uniform(seed, i) * 448.0f);
}
extern "C" __global__ void rt_fill_i32(int *x, unsigned long long n, unsigned long long seed, int mod) {
    rt_begin();
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        x[i] = (int)((rt_hash_uniform(seed, i) + 1.0f) * 0.5f * mod) % mod;
}

// KT_RUN_SEED_KV=1 (--synthetic; step.c's seed_kv): the history a step at the timed position P
// reads (every KV cache's entries before P) made once at open, so the step is never timed on the
// zeros the caches were allocated as (all-zero indexer logits tie every key: a degenerate top-k).
// Each entry is a seeded vector stored by the step's own store, so its bytes are in the layout
// the step writes: RT_SEED_V4 rt_kv_store (window rings, compressed caches: slot e of cache + b
// stride bytes), RT_SEED_IDX rt_index_key_store (mla_indexer's pages: page b stride + e / 64),
// RT_SEED_F32 rt_index_score's f32 keys (b stride floats + e width), RT_SEED_V32 rt_v32_store
// (V3.2's MLA cache: token id b stride + e).
#define RT_SEED_V4 0
#define RT_SEED_IDX 1
#define RT_SEED_F32 2
#define RT_SEED_V32 3

// Entry id's seeded vector v[width] (shared memory): u[-1, 1) from a hash of (seed, id width + i),
// rmsnorm'd with w (NULL: 1), as the step's keys are. No RoPE: a rotation of a random vector is
// another of the same norm, so the rotation at the entry's position would change no statistic.
__device__ void rt_seed_vector(float *v, int width, const float *w, unsigned long long seed, long long id, float eps,
                               float *red) {
    for (int i = threadIdx.x; i < width; i += blockDim.x)
        v[i] = rt_hash_uniform(seed, (unsigned long long)id * width + i);
    __syncthreads();
    rt_rmsnorm(v, width, w, eps, red);
}

// Entries e = blockIdx.x of sequences b = blockIdx.y of one cache (kind RT_SEED_*; width <= 576).
extern "C" __global__ void rt_seed_kv(kt_u8 *cache, float *keys, int kind, unsigned long long stride, int width,
                                      const float *w, unsigned long long seed, float eps) {
    rt_begin();
    __shared__ float v[KT_MLA_V32_DQK], red[32];
    const long long e = blockIdx.x, b = blockIdx.y;
    rt_seed_vector(v, width, w, seed, b * gridDim.x + e, eps, red);
    if (kind == RT_SEED_V4)
        rt_kv_store(v, cache + b * stride, e);
    else if (kind == RT_SEED_IDX)
        rt_index_key_store(v, cache, (long long)(b * stride) + e / KT_IDX_PAGE, (int)(e % KT_IDX_PAGE), red);
    else if (kind == RT_SEED_V32)
        rt_v32_store(v, cache, (long)(b * stride + e), red);
    else
        for (int i = threadIdx.x; i < width; i += blockDim.x) keys[b * stride + e * width + i] = v[i];
}

// Wn[i][k] = W[i][k] * w[k] over n rows of K (at load: the MoE gate's rows times its norm weights for
// rt_gate_comb's projections, after their rt_fill or upload on the same stream); grid-stride.
extern "C" __global__ void rt_scale_cols(float *Wn, const float *W, const float *w, unsigned long long n, int K) {
    rt_begin();
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n * K;
         i += (unsigned long long)gridDim.x * blockDim.x)
        Wn[i] = W[i] * w[i % K];
}
