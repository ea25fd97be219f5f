// mla_indexer.cu — the lightning indexer of DeepSeek V3.2 / V4 decode and its top-k:
//   logits[b, t] = k_scale[t] * sum_h w[b, h] * relu(q[b, h, :] . k[t, :])   for t < L_b
// over a paged e4m3 K cache (kernels/common/indexer_layout.h), then the TOPK largest logits of
// each request as the int32 index list mla_decode reads (global ids page * 64 + slot, in
// ascending position order, -1 after the first L_b where L_b < TOPK; ties go to the lower
// position). Exercised by: kt verify --family mla_indexer --shape TOPK=2048,CTX=8192,DIST=equal,VALUES=grid --m 3
//
// Two kernels, so that bench times each:
//  mla_indexer_scan: persistent CTAs (a grid fixed by the SM count, never by a length). Each
//   CTA derives from lens[] (on the device) the requests' groups of 8 * NT tokens and its warps
//   take equal contiguous ranges of all groups (one group each from the first warp on when
//   there are no more groups than warps): the work follows sum(L_b), nothing waits on the
//   host and the launch is graph-capturable. Launched as a programmatic dependent of the
//   kernel before: lens[], the split and the first block table entries come before its
//   griddepcontrol.wait, the cache, q and every write after. A warp keeps its request's 64 x 128 q in
//   registers (64 of them as e4m3 codes, 128 as f16) and loads each token's 128 codes into
//   mma B fragments: the dot product's dims are permuted so that lane t of a quad holds dims
//   [16t, 16t + 16) and [64 + 16t, 80 + 16t) of a token in two 16-byte loads, a quad's loads
//   two whole 32-byte sectors each (the same permutation applies to q: the sum is unchanged).
//   e4m3 mma.sync m16n8k32: 4 head tiles x 4 k-steps per 8 tokens; relu, the weights and the
//   sum over heads in registers and shuffles (two tiles' in four); the token's scale last. A
//   warp's groups stream through its own ring of STAGES slots in shared memory (cp.async,
//   STAGES - 1 groups in flight while one is computed, holding no registers). Two math paths
//   (MATH, chosen per arch): 0, e4m3 mma.sync m16n8k32 on the codes (native on sm_120; sm_90
//   emulates it with two f16 mma and converts both operands on every mma); 1, f16 mma.sync
//   m16n8k16: q converted to f16 once per request (128 registers), each token's codes once per
//   n-tile, both exactly (every e4m3 value is an f16), the same dims permutation and the same
//   f32 accumulators, so both paths give the same logits.
//  mla_indexer_select: a cluster of SEL_CLUSTER CTAs per request (each a slice of its
//   positions), radix select over the order-preserving keys of its logits in three digits
//   (11, 11, 10 bits; 2048-counter histograms summed over the cluster through distributed
//   shared memory: 24 KB of shared memory a CTA), which finds the TOPK-th largest key T and how
//   many of the keys equal to T to take; then one ordered pass writes every key > T and the
//   first of those == T by position (block scans, and the counts of the slices before, give
//   each thread its output slots). A slice that fits the launch's dynamic shared memory (the
//   host sizes it by the longest possible slice, at most 16K keys: 64 KB) is read once into
//   it; a longer one is read from the logits (L2) on every pass. Nothing is ever dropped:
//   there is no candidate buffer to overflow.
//  mla_indexer_naive: the straightforward scan (a thread per token, scalar f32), the in-run
//   baseline (no C library has this kernel); mla_indexer_reference: the float64 logits (f64
//   mma) for the check of large problems.
#include "kt_device.cuh"
#include "indexer_layout.h"

#ifndef KT_WARPS
#define KT_WARPS 8
#define KT_NT 4
#define KT_CTAS_PER_SM 2
#define KT_SEL_THREADS 1024
#define KT_SEL_CLUSTER 1
#define KT_MATH 0
#define KT_STAGES 3
#define KT_HIST 0
#define KT_CHAINS 1
#define KT_SEL_FAST 0
#endif
#if KT_SEL_CLUSTER > 1
#define KT_SEL_CLUSTER_DIMS __cluster_dims__(KT_SEL_CLUSTER, 1, 1)
#else
#define KT_SEL_CLUSTER_DIMS
#endif

constexpr int WARPS = KT_WARPS, NT = KT_NT, THREADS = WARPS * 32;
constexpr bool F16 = KT_MATH == 1, HIST = KT_HIST == 1;
constexpr int QR = F16 ? 16 : 8;  // registers of a lane's 32 dims of a row: e4m3 codes, or f16 pairs
constexpr int GROUP = 8 * NT;     // tokens a warp takes at once (all in one page: GROUP divides 64)
constexpr int CHAINS = KT_CHAINS; // accumulators a head tile's dot products are split over
constexpr int ST = KT_SEL_THREADS, SE = 16 /* the ordered pass's positions a thread */, TILE = ST * SE,
              CLUSTER = KT_SEL_CLUSTER;
constexpr int MAX_B = 1024; // kernels/mla_indexer.c checks B against it
constexpr unsigned FULL = 0xffffffffu;
static_assert(KT_IDX_PAGE % GROUP == 0, "a group of tokens must stay inside one page");
static_assert(TILE < 65536, "the ordered pass packs two per-tile counts into 16 bits each");
static_assert(SE <= 32 && SE < KT_IDX_PAGE,
              "the ordered pass: a thread's positions as bits of a word, in two pages at most");
static_assert(CLUSTER >= 1 && CLUSTER <= 8, "a request's selection is a portable cluster of 1 to 8 CTAs");
static_assert(KT_MATH == 0 || KT_MATH == 1, "MATH: 0 (e4m3 mma) or 1 (f16 mma)");
static_assert(KT_HIST == 0 || KT_HIST == 1, "HIST: 0 (the selection's own passes) or 1 (the scan's histogram)");
static_assert(CHAINS == 1 || CHAINS == 2, "CHAINS: 1 or 2 accumulators a tile");
// SEL_FAST (the twenty-second session's levers, not yet measured on a GPU): 0 the selection as
// measured before; 1 the staging's loads issued together (stage_keys); 2 that and HIST=1's
// gather fused with the ordered pass's read (mask_and_gather)
constexpr int SEL_FAST = KT_SEL_FAST;
static_assert(SEL_FAST >= 0 && SEL_FAST <= 2, "SEL_FAST: 0, 1 or 2");

__device__ __forceinline__ unsigned key_of(float x) { return kt_idx_key(__float_as_uint(x)); }

// HIST=1: the 16-bit key histogram of request b (indexer_layout.h) when its selection reads one
// (L_b > topk), else null. The scan and the selection use the same rule.
__device__ __forceinline__ unsigned *request_hist(unsigned *hist, int b, int len, int topk) {
    return HIST && len > topk ? hist + (long long)b * KT_IDX_HIST_WORDS : nullptr;
}

// Counts logit v in the histogram hb (null: not counted): its fine counter in hb (red.global, no
// reply awaited) and its coarse one in `coarse` (the scan: the warp's shared counters, added to
// hb by flush_coarse; a request's logits fill a few coarse bins, on whose counters in L2 one
// add a logit queued: 3 us at 8K x 1, the scan 1.9x slower at 2M tokens).
__device__ __forceinline__ void hist_add(unsigned *hb, unsigned *coarse, float v) {
    if (!HIST || !hb) return;
    const unsigned key = key_of(v);
    atomicAdd(coarse + kt_idx_hist_coarse(key), 1u);
    atomicAdd(hb + kt_idx_hist_fine(key), 1u);
}

// The warp's coarse counters wc[256] added to hb (null: none were counted) and zeroed.
__device__ __forceinline__ void flush_coarse(unsigned *wc, unsigned *hb) {
    if (!HIST) return;
    __syncwarp(); // the lanes' shared adds are visible
    for (int i = threadIdx.x & 31; i < KT_IDX_HIST_COARSE; i += 32) {
        const unsigned c = wc[i];
        if (c) atomicAdd(hb + i, c), wc[i] = 0;
    }
    __syncwarp();
}

// Two e4m3 codes (bits 16 half .. 16 half + 15 of codes, low byte first) -> an f16 pair, exactly.
// The halves are split in the asm so that ptxas reads the upper one in place (no shift).
__device__ __forceinline__ kt_u32 e4m3x2_to_f16x2(kt_u32 codes, int half) {
    kt_u32 h;
    if (half)
        asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(h) : "r"(codes));
    else
        asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(h) : "r"(codes));
    return h;
}

// The registers of a lane's 32 dims in the math path's operand form: the codes as loaded, or
// the f16 pairs of codes[i / 2]'s half i % 2.
__device__ __forceinline__ void to_operands(const kt_u32 (&codes)[8], kt_u32 (&r)[QR]) {
#pragma unroll
    for (int i = 0; i < QR; i++) r[i] = F16 ? e4m3x2_to_f16x2(codes[i * 8 / QR], i % 2) : codes[i];
}

// D = A(16x16 f16, row) * B(16x8 f16, col) (+ D unless first), f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1, bool first) {
    if (first)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%10,%10,%10};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
    else
        kt_mma_f16(d, a, b0, b1);
}

// Exclusive prefix sum of v over the block (NWARPS warps) and the block's total. Ends with a
// barrier, so warp_sums[32] can be reused at once.
template <int NWARPS> __device__ __forceinline__ unsigned block_scan(unsigned v, unsigned &total, unsigned *warp_sums) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned x = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        unsigned y = __shfl_up_sync(FULL, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        unsigned s = lane < NWARPS ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            unsigned y = __shfl_up_sync(FULL, s, d);
            if (lane >= d) s += y;
        }
        warp_sums[lane] = s;
    }
    __syncthreads();
    unsigned before = warp ? warp_sums[warp - 1] : 0;
    total = warp_sums[NWARPS - 1];
    __syncthreads();
    return before + x - v;
}

// cu_lens[0..B] and cu_groups[0..B] (prefix sums of L_b and of its groups of `group` tokens)
// into shared memory, from lens[] in global memory.
template <int NWARPS>
__device__ void request_prefix(const int *lens, int B, int group, int *cu_lens, int *cu_groups, unsigned *warp_sums) {
    unsigned run_len = 0, run_groups = 0;
    for (int base = 0; base < B; base += NWARPS * 32) {
        int j = base + (int)threadIdx.x;
        unsigned len = j < B ? (unsigned)lens[j] : 0u, total_len, total_groups;
        unsigned el = block_scan<NWARPS>(len, total_len, warp_sums);
        unsigned eg = block_scan<NWARPS>((len + group - 1) / group, total_groups, warp_sums);
        if (j < B) {
            cu_lens[j] = (int)(run_len + el);
            cu_groups[j] = (int)(run_groups + eg);
        }
        run_len += total_len;
        run_groups += total_groups;
    }
    if (threadIdx.x == 0) {
        cu_lens[B] = (int)run_len;
        cu_groups[B] = (int)run_groups;
    }
    __syncthreads();
}

// The 16-byte halves of a row lane t of a quad holds (the permuted order; see the top): bytes
// [16 t, 16 t + 16) and 64 + that, so that a quad's load of either half is two whole sectors.
__device__ __forceinline__ int half_offset(int t, int half) { return 16 * t + 64 * half; }

// The warp's q fragments for request b: rows 16 m + g and 16 m + g + 8 of head tile m, lane
// t of the quad holding its two halves of them in the math path's operand form, and the
// eight weights of those rows.
__device__ __forceinline__ void load_query(const kt_u8 *q, const float *w, int b, kt_u32 (&qf)[4][2][QR],
                                           float (&wf)[4][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int head = 16 * m + g + 8 * h;
            const kt_u8 *row = q + ((long long)b * KT_IDX_HEADS + head) * KT_IDX_DIM;
            const uint4 lo = __ldg((const uint4 *)(row + half_offset(t, 0))),
                        hi = __ldg((const uint4 *)(row + half_offset(t, 1)));
            const kt_u32 codes[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            to_operands(codes, qf[m][h]);
            wf[m][h] = __ldg(w + b * KT_IDX_HEADS + head);
        }
}

// One n-tile of 8 tokens: k holds this lane's 32 codes of token g; s[i] becomes the relu-weighted
// sum over this lane's heads (rows g and g + 8 of each head tile) of token 2t + i (before the k
// scale); reduce_tile / reduce_tile_pair sum it over the row groups.
// Step s of either mma takes registers 2s and 2s + 1 of both operands, so each of its k
// indices (f16: 2t + j, 8 + 2t + j; e4m3: 4t + j, 16 + 4t + j) is the same dim of q and token.
// CHAINS=2: steps alternate between two accumulators, summed at the end, so each dependent
// chain of mma is half as long (the f16 path's 8 steps a tile were the scan's top stall).
__device__ __forceinline__ void tile_sums(const kt_u32 (&qf)[4][2][QR], const float (&wf)[4][2], const uint4 (&k)[2],
                                          float (&s)[2]) {
    const kt_u32 codes[8] = {k[0].x, k[0].y, k[0].z, k[0].w, k[1].x, k[1].y, k[1].z, k[1].w};
    kt_u32 kb[QR];
    to_operands(codes, kb);
    s[0] = s[1] = 0.f;
#pragma unroll
    for (int m = 0; m < 4; m++) {
        float part[CHAINS][4];
#pragma unroll
        for (int s = 0; s < QR / 2; s++) {
            const kt_u32 a[4] = {qf[m][0][2 * s], qf[m][1][2 * s], qf[m][0][2 * s + 1], qf[m][1][2 * s + 1]};
            float(&d)[4] = part[s % CHAINS];
            if (F16)
                mma_f16(d, a, kb[2 * s], kb[2 * s + 1], s < CHAINS);
            else if (s < CHAINS)
                kt_mma_e4m3_first(d, a, kb[2 * s], kb[2 * s + 1]);
            else
                kt_mma_e4m3(d, a, kb[2 * s], kb[2 * s + 1]);
        }
        float acc[4];
#pragma unroll
        for (int i = 0; i < 4; i++) acc[i] = CHAINS == 2 ? part[0][i] + part[CHAINS - 1][i] : part[0][i];
        s[0] += wf[m][0] * fmaxf(acc[0], 0.f) + wf[m][1] * fmaxf(acc[2], 0.f);
        s[1] += wf[m][0] * fmaxf(acc[1], 0.f) + wf[m][1] * fmaxf(acc[3], 0.f);
    }
}

// The sums over the 8 row groups g of one tile's s, in every lane of row group g: token
// 2t + g % 2's. The first step trades halves (a lane of even g keeps token 2t's and sends
// 2t + 1's), so 3 shuffles where a butterfly over both took 6; each sum gets the butterfly's
// additions in its order (pairs over g's bit 0, then bit 1, then bit 2), so the same bits.
__device__ __forceinline__ float reduce_tile(const float (&s)[2]) {
    const bool odd = (threadIdx.x >> 2) & 1;
    float v = odd ? s[1] : s[0];
    v += __shfl_xor_sync(FULL, odd ? s[0] : s[1], 4);
    v += __shfl_xor_sync(FULL, v, 8);
    v += __shfl_xor_sync(FULL, v, 16);
    return v;
}

// The same for two tiles (a: tile j, b: tile j + 1) in 4 shuffles where two reduce_tile take 6:
// xor 4 trades halves of both, xor 8 trades tiles (a lane with g's bit 1 clear keeps tile j's),
// xor 16 adds. The same pairs in the same order as the butterfly (the same bits); lane (g, t)
// ends with token 2t + g % 2 of tile j + (g >> 1) % 2.
__device__ __forceinline__ float reduce_tile_pair(const float (&a)[2], const float (&b)[2]) {
    const int g = (threadIdx.x >> 2) & 7;
    const bool odd = g & 1, second = g & 2;
    float va = odd ? a[1] : a[0], vb = odd ? b[1] : b[0];
    va += __shfl_xor_sync(FULL, odd ? a[0] : a[1], 4);
    vb += __shfl_xor_sync(FULL, odd ? b[0] : b[1], 4);
    float v = second ? vb : va;
    v += __shfl_xor_sync(FULL, second ? va : vb, 8);
    v += __shfl_xor_sync(FULL, v, 16);
    return v;
}

// A group of GROUP tokens (all in one page) as this lane uses it: its 32 codes of token g of
// each n-tile, and that token's scale.
struct group_data {
    uint4 k[NT][2];
    float scale[NT];
};

// One slot of a warp's ring of STAGES groups in shared memory, filled by cp.async: lane l's
// codes at [j][half][l] (16-byte accesses without bank conflicts) and its scale at [j][l].
// A lane reads back only what it copied, so its own cp.async.wait_group is all the ordering
// the ring needs (no barrier, no warp sync); loads in flight hold no registers.
struct ring_slot {
    uint4 codes[NT][2][32];
    float scale[NT][32];
};
constexpr int STAGES = KT_STAGES;
static_assert(STAGES >= 2, "the ring needs a slot being filled and one being read");

__device__ __forceinline__ void prefetch_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }

// The physical page of the group of request b starting at token t0 (its block table entry),
// prefetching into L1 the entry of the request's next page, so that the group a page later
// does not wait on it.
__device__ __forceinline__ int group_page(const int *block_table, int max_pages, int B, int b, int t0) {
    const long long entry = (long long)b * max_pages + t0 / KT_IDX_PAGE;
    if (entry + 1 < (long long)B * max_pages) prefetch_l1(block_table + entry + 1);
    return block_table[entry];
}

// Issues the copies of the group starting at token t0 of physical page `page` into slot s
// (rows past L_b are in the page: read, never written).
__device__ __forceinline__ void issue_group(const kt_u8 *cache, long long page, int t0, ring_slot &s) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int slot = t0 % KT_IDX_PAGE + 8 * j + g;
        const kt_u8 *src = cache + kt_idx_code_offset(page, slot);
        kt_cp_async16(kt_smem_addr(&s.codes[j][0][lane]), src + half_offset(t, 0), 16);
        kt_cp_async16(kt_smem_addr(&s.codes[j][1][lane]), src + half_offset(t, 1), 16);
        kt_cp_async4(kt_smem_addr(&s.scale[j][lane]), cache + kt_idx_scale_offset(page, slot), 4);
    }
}

// This lane's part of a landed slot, into registers.
__device__ __forceinline__ void read_group(const ring_slot &s, group_data &gd) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        gd.k[j][0] = s.codes[j][0][lane];
        gd.k[j][1] = s.codes[j][1][lane];
        gd.scale[j] = s.scale[j][lane];
    }
}

// The logits of a loaded group (tokens t0 .. of a request of length L) into out[], each counted
// in hb and the warp's coarse counters wc (HIST=1). The n-tiles are reduced in pairs (an odd
// NT's last alone), each pair's (tile's) logits written at once.
__device__ __forceinline__ void group_logits(const group_data &gd, int t0, int L, float *out, unsigned *hb,
                                             unsigned *wc, const kt_u32 (&qf)[4][2][QR], const float (&wf)[4][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, tl = 2 * t + (g & 1); // this lane's token
    const int second = (g >> 1) & 1; // reduce_tile_pair: this lane's tile of the pair
#pragma unroll
    for (int j = 0; j + 1 < NT; j += 2) {
        float a[2], b[2];
        tile_sums(qf, wf, gd.k[j], a);
        tile_sums(qf, wf, gd.k[j + 1], b);
        // token tl's scales are in the lanes of row group tl; lane 4 tl + i gives tile j + i's, so
        // one shuffle serves both tiles; lanes 0..15 write the pair's 16 tokens
        const float sc = __shfl_sync(FULL, t & 1 ? gd.scale[j + 1] : gd.scale[j], 4 * tl + second);
        const float v = reduce_tile_pair(a, b) * sc;
        const int tok = t0 + 8 * (j + second) + tl;
        if (g < 4 && tok < L) out[tok] = v, hist_add(hb, wc, v);
    }
    if (NT % 2) { // lanes 0..7 write the last tile's 8 tokens
        float s[2];
        tile_sums(qf, wf, gd.k[NT - 1], s);
        const float v = reduce_tile(s) * __shfl_sync(FULL, gd.scale[NT - 1], 4 * tl);
        const int tok = t0 + 8 * (NT - 1) + tl;
        if (g < 2 && tok < L) out[tok] = v, hist_add(hb, wc, v);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, KT_CTAS_PER_SM)
    mla_indexer_scan(const kt_u8 *__restrict__ q, const float *__restrict__ w, const kt_u8 *__restrict__ cache,
                     const int *__restrict__ lens, const int *__restrict__ block_table, int max_pages, int B,
                     float *__restrict__ logits, unsigned *__restrict__ hist, int topk) {
    extern __shared__ __align__(16) unsigned char scan_ring[]; // WARPS x STAGES ring slots (dynamic)
    __shared__ int cu_lens[MAX_B + 1], cu_groups[MAX_B + 1];
    __shared__ unsigned warp_sums[32];
    __shared__ unsigned coarse[HIST ? WARPS : 1][KT_IDX_HIST_COARSE]; // HIST=1: each warp's coarse counts
    unsigned *wc = coarse[HIST ? threadIdx.x >> 5 : 0];
    if (HIST)
        for (int i = threadIdx.x & 31; i < KT_IDX_HIST_COARSE; i += 32) wc[i] = 0; // (synced by request_prefix)
    // the selection (a programmatic dependent) may launch now: it waits for this grid's end
    // and memory, and at small B this grid's idle CTAs leave it SMs long before the end
    kt_allow_consumer();
    // Before the wait for the kernel before (this one is its programmatic dependent): lens[],
    // the split and the block table entries of the first groups, none of which a kernel of the
    // step writes after its first ones (the runtime's rt_lengths; the host's tables), so this
    // prologue runs while the kernel before ends. The cache, q, w, and every write wait.
    request_prefix<WARPS>(lens, B, GROUP, cu_lens, cu_groups, warp_sums);
    const long long gw = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    int first, last;
    kt_idx_scan_range(gw, (long long)gridDim.x * WARPS, cu_groups[B], &first, &last);
    if (first >= last) return;
    int lo = 0, hi = B - 1; // the request of group `first`: the last b with cu_groups[b] <= first
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu_groups[mid] <= first)
            lo = mid;
        else
            hi = mid - 1;
    }
    // the ring: group x in slot x % STAGES, STAGES - 1 groups in flight while one is computed;
    // every iteration commits one cp.async group (empty past `last`) so that the wait counts
    ring_slot *ring = (ring_slot *)scan_ring + (threadIdx.x >> 5) * STAGES;
    int b = lo, ib = lo; // the requests of the group computed and of the group issued
    auto t0_of = [&](int x) {
        while (x >= cu_groups[ib + 1]) ib++;
        return (x - cu_groups[ib]) * GROUP;
    };
    int pages[STAGES - 1]; // the first groups' pages, loaded before the wait (the asm) and all in flight together
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        pages[i] = 0;
        if (first + i < last) {
            const int t0 = t0_of(first + i); // (moves ib to the group's request: before ib is read)
            pages[i] = group_page(block_table, max_pages, B, ib, t0);
        }
    }
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) asm volatile("" : "+r"(pages[i]));
    kt_wait_producer();
    // q's and w's addresses pass through the wait, so no load of them (invariant loads of
    // __restrict__ pointers, which the compiler may schedule freely) can move above it
    // (load_query's loads are __ldg: the addresses have lost their global space here)
    asm volatile("" : "+l"(q), "+l"(w));
    ib = lo;
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (first + i < last) issue_group(cache, pages[i], t0_of(first + i), ring[(first + i) % STAGES]);
        kt_cp_async_commit();
    }
    auto issue = [&](int x) {
        if (x < last) {
            const int t0 = t0_of(x);
            issue_group(cache, group_page(block_table, max_pages, B, ib, t0), t0, ring[x % STAGES]);
        }
        kt_cp_async_commit();
    };
    kt_u32 qf[4][2][QR];
    float wf[4][2];
    load_query(q, w, b, qf, wf);
    for (int grp = first; grp < last; grp++) {
        // the fences keep the compiler from moving shared-memory reads across the copies and
        // the wait (their asm has no memory clobber)
        asm volatile("" ::: "memory");
        issue(grp + STAGES - 1);        // into the slot read (into registers, and used) last iteration
        kt_cp_async_wait<STAGES - 1>(); // group grp has landed
        asm volatile("" ::: "memory");
        group_data gd;
        read_group(ring[grp % STAGES], gd);
        if (grp >= cu_groups[b + 1]) {
            flush_coarse(wc, request_hist(hist, b, lens[b], topk));
            while (grp >= cu_groups[b + 1]) b++;
            load_query(q, w, b, qf, wf);
        }
        // (the histogram's address made here, not kept across the loop: sm_90's e4m3 path has no register to spare)
        group_logits(gd, (grp - cu_groups[b]) * GROUP, lens[b], logits + cu_lens[b],
                     request_hist(hist, b, lens[b], topk), wc, qf, wf);
    }
    flush_coarse(wc, request_hist(hist, b, lens[b], topk));
}

// ------------------------------------------------------------------ selection

// Global id of position p of request b (through its block table row).
__device__ __forceinline__ int global_id(const int *bt_row, int p) {
    return bt_row[p / KT_IDX_PAGE] * KT_IDX_PAGE + p % KT_IDX_PAGE;
}

// A CTA's positions [lo, hi) of a request: their keys (and their pages' block table entries)
// from shared memory when the slice fit there (staged: one read of the logits, then every pass
// at shared-memory latency), else from the logits and the block table row (L2) on every pass.
struct slice {
    const float *x;
    const unsigned *keys;
    const int *bt_row, *pages; // pages[i]: bt_row[lo / KT_IDX_PAGE + i] (staged)
    int lo, hi;
    bool staged;
    __device__ __forceinline__ unsigned key(int p) const {
        return staged ? keys[kt_idx_staged_index(p - lo)] : key_of(x[p]);
    }
    __device__ __forceinline__ int page(int p) const { // the physical page of position p
        return staged ? pages[p / KT_IDX_PAGE - lo / KT_IDX_PAGE] : bt_row[p / KT_IDX_PAGE];
    }
};

// HIST=1: the keys of a slice that agree with the scan's histogram's chosen top 16 bits, in
// shared memory (their order is free: only their digit histograms are taken from them).
struct candidates {
    const unsigned *keys;
    int lo, hi; // 0 and their count
    __device__ __forceinline__ unsigned key(int i) const { return keys[i]; }
};

// SEL_FAST=0: 4 vector loads in flight a thread as written (in SASS, at 64 registers, ptxas
// reuses one vector's registers for the next: each waits for the one before, 3 to 4 round trips
// a thread at 8K keys and 1024 threads, ~9 at 16K and 480). Thread t of n stagers.
__device__ __forceinline__ void stage_keys_in_turn(const slice &sl, unsigned *keys, int *pages, int t, int n) {
    const int p0 = sl.lo / KT_IDX_PAGE;
    if (sl.hi > sl.lo)
        for (int i = t; i <= (sl.hi - 1) / KT_IDX_PAGE - p0; i += n) pages[i] = sl.bt_row[p0 + i];
    const int head = kt_idx_stage_head(sl.lo, sl.hi, (int)(((kt_u64)(sl.x + sl.lo) >> 2) & 3)),
              vecs = kt_idx_stage_vecs(head, sl.hi), rest = kt_idx_stage_rest(sl.lo, sl.hi, head);
    const float4 *v = (const float4 *)(sl.x + head);
#pragma unroll 4
    for (int i = t; i < vecs; i += n) {
        const float4 f = v[i];
        const int k = head - sl.lo + 4 * i;
        keys[kt_idx_staged_index(k)] = key_of(f.x), keys[kt_idx_staged_index(k + 1)] = key_of(f.y);
        keys[kt_idx_staged_index(k + 2)] = key_of(f.z), keys[kt_idx_staged_index(k + 3)] = key_of(f.w);
    }
    for (int i = t; i < rest; i += n) {
        const int p = kt_idx_stage_rest_pos(sl.lo, head, vecs, i);
        keys[kt_idx_staged_index(p - sl.lo)] = key_of(sl.x[p]);
    }
}

// SEL_FAST >= 1: every load of a thread's batch (its page entry, its odd key, 4 vectors) is
// issued before any of them is converted or stored (one round trip a batch in SASS).
__device__ __forceinline__ void stage_keys_batched(const slice &sl, unsigned *keys, int *pages, int t, int n) {
    static_assert(KT_IDX_STAGE_PAGES <= ST - 32 && 6 <= ST - 32, "one page entry and one odd key a stager at most");
    constexpr int BATCH = 4;
    const int p0 = sl.lo / KT_IDX_PAGE, n_pages = sl.hi > sl.lo ? (sl.hi - 1) / KT_IDX_PAGE - p0 + 1 : 0;
    const int head = kt_idx_stage_head(sl.lo, sl.hi, (int)(((kt_u64)(sl.x + sl.lo) >> 2) & 3)),
              vecs = kt_idx_stage_vecs(head, sl.hi), rest = kt_idx_stage_rest(sl.lo, sl.hi, head);
    const int page = t < n_pages ? sl.bt_row[p0 + t] : 0;
    const int rest_pos = t < rest ? kt_idx_stage_rest_pos(sl.lo, head, vecs, t) : sl.lo;
    const float odd = t < rest ? sl.x[rest_pos] : 0.f;
    const float4 *v = (const float4 *)(sl.x + head);
    for (int i0 = t; i0 < vecs; i0 += BATCH * n) {
        float4 f[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; u++) f[u] = i0 + u * n < vecs ? v[i0 + u * n] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < BATCH; u++)
            if (i0 + u * n < vecs) {
                const int k = head - sl.lo + 4 * (i0 + u * n);
                keys[kt_idx_staged_index(k)] = key_of(f[u].x);
                keys[kt_idx_staged_index(k + 1)] = key_of(f[u].y);
                keys[kt_idx_staged_index(k + 2)] = key_of(f[u].z);
                keys[kt_idx_staged_index(k + 3)] = key_of(f[u].w);
            }
    }
    if (t < n_pages) pages[t] = page;
    if (t < rest) keys[kt_idx_staged_index(rest_pos - sl.lo)] = key_of(odd);
}

// Copies the slice's keys and its pages' block table entries into shared memory, by threads
// from `first` on (HIST=1: warp 0 reads the scan's histogram meanwhile). The logits come in
// 16-byte loads from the slice's first 16-byte boundary on, the few before it and after the
// last whole vector one by one.
__device__ void stage_keys(const slice &sl, unsigned *keys, int *pages, int first) {
    if ((int)threadIdx.x >= first) {
        if constexpr (SEL_FAST >= 1)
            stage_keys_batched(sl, keys, pages, (int)threadIdx.x - first, ST - first);
        else
            stage_keys_in_turn(sl, keys, pages, (int)threadIdx.x - first, ST - first);
    }
    __syncthreads();
}

// Histogram of digit d over the keys of src (a slice or the candidates) that agree with
// prefix above it: one add for the warp when its candidates share a bin (ties, all-equal
// logits, the top digits of close logits), else one a candidate (no __match_any_sync: shared
// atomics to distinct bins go at once).
template <class Keys> __device__ void digit_histogram(const Keys &src, unsigned prefix, int d, unsigned *hist) {
    const int lo = src.lo, hi = src.hi;
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < kt_idx_digit_bins(d); i += ST) hist[i] = 0;
    __syncthreads();
    for (int base = lo; base < hi; base += ST) { // uniform trip count: the warp stays converged
        const int p = base + (int)threadIdx.x;
        const unsigned key = p < hi ? src.key(p) : 0u;
        const bool cand = p < hi && kt_idx_matches(key, prefix, d);
        const unsigned mask = __ballot_sync(FULL, cand), bin = kt_idx_digit(key, d);
        const unsigned first_bin = __shfl_sync(FULL, bin, __ffs(mask) - 1); // no candidate: unused
        if (__all_sync(FULL, !cand || bin == first_bin)) {
            if (mask && lane == __ffs(mask) - 1) atomicAdd(&hist[bin], (unsigned)__popc(mask));
        } else if (cand) {
            atomicAdd(&hist[bin], 1u);
        }
    }
    __syncthreads();
}

// The cluster's histogram of `bins` counters: the sum of every CTA's (distributed shared
// memory), into merged.
__device__ void merge_histograms(const unsigned *hist, int bins, unsigned *merged) {
    kt_cluster_sync(); // every CTA's histogram is complete and visible
    for (int i = threadIdx.x; i < bins / 4; i += ST) {
        uint4 sum = make_uint4(0, 0, 0, 0);
        for (int r = 0; r < CLUSTER; r++) {
            const float4 v = kt_cluster_load4(kt_cluster_map(kt_smem_addr(hist + 4 * i), (kt_u32)r));
            sum.x += __float_as_uint(v.x), sum.y += __float_as_uint(v.y);
            sum.z += __float_as_uint(v.z), sum.w += __float_as_uint(v.w);
        }
        *(uint4 *)(merged + 4 * i) = sum;
    }
    __syncthreads();
}

// The bin of digit d that holds the need-th largest candidate (bins walked from the top):
// updates prefix with it and need with how many are still to take inside it.
__device__ void choose_bin(const unsigned *hist, int d, unsigned &prefix, unsigned &need, unsigned *warp_sums,
                           unsigned *chosen) {
    constexpr int PER_MAX = KT_IDX_BINS / ST > 0 ? KT_IDX_BINS / ST : 1;
    const int bins = kt_idx_digit_bins(d), per = bins / ST > 0 ? bins / ST : 1;
    const int top = bins - 1 - (int)threadIdx.x * per; // this thread's bins: top, top - 1, ...
    unsigned mine = 0;
    for (int i = 0; i < per && i < PER_MAX; i++)
        if (top - i >= 0) mine += hist[top - i];
    unsigned total, above = block_scan<ST / 32>(mine, total, warp_sums);
    if (above < need && above + mine >= need) {
        unsigned cum = above;
        for (int i = 0; i < per; i++) {
            const unsigned c = hist[top - i];
            if (cum + c >= need) {
                chosen[0] = (unsigned)(top - i);
                chosen[1] = need - cum;
                break;
            }
            cum += c;
        }
    }
    __syncthreads();
    prefix |= chosen[0] << kt_idx_digit_shift(d);
    need = chosen[1];
    __syncthreads();
}

// Lane l's 8 of 256 counters c (16-byte aligned; GLOBAL: the scan's, read from L2), bins
// 255 - 8 l down to 248 - 8 l.
template <bool GLOBAL> __device__ __forceinline__ void load_bins(const unsigned *c, unsigned (&v)[8]) {
    const int top = 255 - 8 * (int)(threadIdx.x & 31);
    const uint4 *hp = (const uint4 *)(c + top - 3), *lp = (const uint4 *)(c + top - 7);
    const uint4 hi = GLOBAL ? __ldcg(hp) : *hp, lo = GLOBAL ? __ldcg(lp) : *lp;
    v[0] = hi.w, v[1] = hi.z, v[2] = hi.y, v[3] = hi.x, v[4] = lo.w, v[5] = lo.z, v[6] = lo.y, v[7] = lo.x;
}

// The same choice over 256 counters (each lane's 8 from load_bins) by one warp, with no
// barrier: every lane gets the bin, how many are still to take in it and its count. A warp
// scan finds the lane whose bins hold the need-th. Counters that cannot hold it (a sum under
// need) give bin 0: nothing runs out of bounds.
__device__ __forceinline__ void choose_bin_warp(const unsigned (&v)[8], unsigned need, unsigned &bin, unsigned &rest,
                                                unsigned &count) {
    const int lane = threadIdx.x & 31, top = 255 - 8 * lane;
    unsigned mine = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) mine += v[i];
    unsigned incl = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned y = __shfl_up_sync(FULL, incl, d);
        if (lane >= d) incl += y;
    }
    const unsigned above = incl - mine, owners = __ballot_sync(FULL, above < need && incl >= need);
    unsigned b = 0, r = 0, n = 0, cum = above;
    bool found = false;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (!found && cum + v[i] >= need) b = (unsigned)(top - i), r = need - cum, n = v[i], found = true;
        cum += v[i];
    }
    const int owner = owners ? __ffs(owners) - 1 : 0;
    bin = __shfl_sync(FULL, b, owner);
    rest = __shfl_sync(FULL, r, owner);
    count = __shfl_sync(FULL, n, owner);
}

// HIST=1, warp 0: the top 16 bits of the request's topk-th largest key from the scan's
// histogram hb (a coarse bin, then a fine one in its row: two L2 round trips), how many keys
// with them are still to take, and how many the request has, into chosen[0..2]; the nonzero
// coarse bins (the rows zero_histogram clears) into nonzero[0..chosen[4]), from the counters
// already in registers.
__device__ void choose_from_histogram(const unsigned *hb, unsigned topk, unsigned *nonzero, unsigned *chosen) {
    const int lane = threadIdx.x & 31;
    unsigned v[8], f[8], cb, need, n, fb, rest, count, listed = 0;
    load_bins<true>(hb, v);
    choose_bin_warp(v, topk, cb, need, n);
    load_bins<true>(hb + KT_IDX_HIST_COARSE + cb * 256, f);
#pragma unroll
    for (int i = 0; i < 8; i++) { // (while the fine row is on its way)
        const unsigned mask = __ballot_sync(FULL, v[i] != 0);
        if (v[i]) nonzero[listed + __popc(mask & ((1u << lane) - 1))] = (unsigned)(255 - 8 * lane - i);
        listed += __popc(mask);
    }
    choose_bin_warp(f, need, fb, rest, count);
    if (lane == 0) chosen[0] = cb << 24 | fb << 16, chosen[1] = rest, chosen[2] = count, chosen[4] = listed;
}

// HIST=1, one CTA, at most 32 candidates (grid logits: a few): the need-th largest of cand[0..n)
// by warp 0 alone, each lane counting the candidates above its own key, into chosen[0] (the key)
// and chosen[1] (how many keys equal to it to take): the answer of digits 3 and 4 with one
// barrier where they took six (2.3 us of the selection's 9.9 at 8K x 1 on the H200).
__device__ __forceinline__ void choose_in_warp(const unsigned *cand, unsigned n, unsigned need, unsigned *chosen) {
    const int lane = threadIdx.x & 31;
    const unsigned mine = lane < (int)n ? cand[lane] : 0u;
    unsigned gt = 0, ge = 0;
    for (unsigned j = 0; j < n; j++) {
        const unsigned c = __shfl_sync(FULL, mine, (int)j);
        gt += c > mine;
        ge += c >= mine;
    }
    // 1 <= need <= n: the lanes holding the need-th largest (any of its copies) qualify
    const unsigned owners = __ballot_sync(FULL, lane < (int)n && gt < need && ge >= need);
    if (lane == __ffs(owners) - 1) chosen[0] = mine, chosen[1] = need - gt;
}

// HIST=1: the keys of sl agreeing with prefix's top 16 bits into cand[] (warp-aggregated slots;
// the caller has zeroed *n_cand and knows they fit).
__device__ void gather_candidates(const slice &sl, unsigned prefix, unsigned *cand, unsigned *n_cand) {
    const int lane = threadIdx.x & 31;
    for (int base = sl.lo; base < sl.hi; base += ST) {
        const int p = base + (int)threadIdx.x;
        const unsigned key = p < sl.hi ? sl.key(p) : 0u;
        const bool match = p < sl.hi && kt_idx_matches(key, prefix, 3);
        const unsigned mask = __ballot_sync(FULL, match);
        if (!mask) continue;
        const int leader = __ffs(mask) - 1;
        unsigned slot = 0;
        if (lane == leader) slot = atomicAdd(n_cand, (unsigned)__popc(mask));
        slot = __shfl_sync(FULL, slot, leader) + (unsigned)__popc(mask & ((1u << lane) - 1));
        if (match) cand[slot] = key;
    }
    __syncthreads();
}

// HIST=1: leaves the request's histogram zero again: the rows of the n nonzero coarse bins
// (every nonzero fine counter is in one) and those bins' counters, rank r of the cluster the
// bins c with c % CLUSTER == r. Called once every CTA of the cluster has read it.
__device__ void zero_histogram(unsigned *hb, const unsigned *nonzero, unsigned n, int rank) {
    for (int i = threadIdx.x; i < (int)n * 64; i += ST) {
        const unsigned c = nonzero[i >> 6];
        if (c % CLUSTER == (unsigned)rank)
            *(uint4 *)(hb + KT_IDX_HIST_COARSE + c * 256 + 4 * (i & 63)) = make_uint4(0, 0, 0, 0);
    }
    for (int i = threadIdx.x; i < (int)n; i += ST)
        if (nonzero[i] % CLUSTER == (unsigned)rank) hb[nonzero[i]] = 0;
}

// How many keys of x[lo, hi) are > T and how many == T, over the CTA.
__device__ void count_slice(const slice &sl, unsigned T, unsigned *warp_sums, unsigned &gt_total, unsigned &eq_total) {
    unsigned gt = 0, eq = 0, total;
#pragma unroll 4
    for (int p = sl.lo + (int)threadIdx.x; p < sl.hi; p += ST) {
        const unsigned key = sl.key(p);
        gt += key > T;
        eq += key == T;
    }
    block_scan<ST / 32>(gt, total, warp_sums);
    gt_total = total;
    block_scan<ST / 32>(eq, total, warp_sums);
    eq_total = total;
}

// The ordered pass's step for thread positions p0 .. p0 + SE - 1, given their keys > T (gtm) and
// == T (eqm) as bit masks (bit j: position p0 + j), after gt_run keys > T and eq_run keys == T
// before the tile: a block scan of the counts gives the thread's first slot, and the masks its
// keys' slots, with no branch a key (the branchy form cost 7.5K cycles of 1024 threads at 8K keys
// on the H200); gt_run and eq_run move past the tile. A slot past k is not written: only a wrong
// T (HIST=1: a histogram not left zero) makes one, and then the list is wrong, not memory.
__device__ __forceinline__ void write_masks(const slice &sl, int p0, unsigned gtm, unsigned eqm, unsigned need,
                                            unsigned &gt_run, unsigned &eq_run, unsigned k, int *out,
                                            unsigned *warp_sums) {
    const int hi = sl.hi;
    unsigned total, before = block_scan<ST / 32>((unsigned)__popc(gtm) << 16 | (unsigned)__popc(eqm), total, warp_sums);
    const unsigned gb = gt_run + (before >> 16), eb = eq_run + (before & 0xffffu);
    unsigned take = gtm; // and the first need - eb keys == T (by position) if eb < need
    for (unsigned m = eqm, left = eb < need ? need - eb : 0; m && left; m &= m - 1, left--) take |= m & (0u - m);
    if (take) { // positions p0 .. p0 + SE - 1 lie in at most two pages (SE < a page)
        const int page0 = sl.page(p0), page1 = sl.page((p0 + SE < hi ? p0 + SE : hi) - 1);
        // the taken positions only, in order, into consecutive slots (a loop over all SE
        // positions with a branch each was ~23 instructions a position of 1024 threads)
        unsigned slot = gb + (eb < need ? eb : need);
        for (unsigned m = take; m; m &= m - 1, slot++) {
            const int p = p0 + __ffs(m) - 1, page = p / KT_IDX_PAGE == p0 / KT_IDX_PAGE ? page0 : page1;
            if (slot < k) out[slot] = page * KT_IDX_PAGE + p % KT_IDX_PAGE;
        }
    }
    gt_run += total >> 16;
    eq_run += total & 0xffffu;
}

// The ordered pass over x[lo, hi), after gt_run keys > T and eq_run keys == T before lo: every
// key > T and the first `need` keys == T by position, into out[0..k) in ascending position
// order. Each thread takes SE consecutive positions of a tile as bit masks (> T, == T), then
// write_masks.
__device__ __forceinline__ void write_selected(const slice &sl, unsigned T, unsigned need, unsigned gt_run,
                                               unsigned eq_run, unsigned k, int *out, unsigned *warp_sums) {
    const int hi = sl.hi;
    for (int base = sl.lo; base < hi; base += TILE) {
        const int p0 = base + (int)threadIdx.x * SE;
        unsigned gtm = 0, eqm = 0; // bit j: position p0 + j
        if (p0 < hi) // (whole warps past the slice's end skip the loop: at 8K keys and 1024 threads, half)
#pragma unroll
            for (int j = 0; j < SE; j++) {
                const unsigned key = p0 + j < hi ? sl.key(p0 + j) : 0u;
                gtm |= (unsigned)(p0 + j < hi && key > T) << j;
                eqm |= (unsigned)(p0 + j < hi && key == T) << j;
            }
        write_masks(sl, p0, gtm, eqm, need, gt_run, eq_run, k, out, warp_sums);
    }
}

// SEL_FAST=2, HIST=1, one CTA, a staged slice of one tile: the gather and the ordered pass's read of the
// keys as one pass. Thread j reads the ordered pass's positions p0 = lo + SE j .. p0 + SE - 1
// once and keeps as bit masks those whose top 16 bits are above prefix's (above: > T whatever
// the low bits choose) and those equal to them (cands: the candidates, appended to cand; the
// caller knows the request's count fits). Two passes over the staged keys (the gather's 8 and
// the masks' 16 reads a thread at 8K keys) become one; resolve_masks then rereads only the
// candidates' few keys.
__device__ __forceinline__ void mask_and_gather(const slice &sl, unsigned prefix, unsigned *cand, unsigned *n_cand,
                                                unsigned &above, unsigned &cands) {
    const int hi = sl.hi, p0 = sl.lo + (int)threadIdx.x * SE;
    const unsigned top = prefix >> 16;
    unsigned a = 0, c = 0;
    if (p0 < hi)
#pragma unroll
        for (int j = 0; j < SE; j++) {
            const unsigned key = p0 + j < hi ? sl.key(p0 + j) : 0u;
            a |= (unsigned)(p0 + j < hi && (key >> 16) > top) << j;
            c |= (unsigned)(p0 + j < hi && (key >> 16) == top) << j;
        }
    if (c) { // (few threads: the candidates are the keys near the top-k-th)
        unsigned slot = atomicAdd(n_cand, (unsigned)__popc(c));
        for (unsigned m = c; m; m &= m - 1) cand[slot++] = sl.key(p0 + __ffs(m) - 1);
    }
    above = a;
    cands = c;
    __syncthreads();
}

// mask_and_gather's masks once T is known: each candidate > T joins above, each == T gives eq.
__device__ __forceinline__ void resolve_masks(const slice &sl, unsigned T, unsigned &above, unsigned cands,
                                              unsigned &eq) {
    const int p0 = sl.lo + (int)threadIdx.x * SE;
    eq = 0;
    for (unsigned m = cands; m; m &= m - 1) {
        const int j = __ffs(m) - 1;
        const unsigned key = sl.key(p0 + j);
        above |= (unsigned)(key > T) << j;
        eq |= (unsigned)(key == T) << j;
    }
}

constexpr int SEL_BINS = HIST ? 256 : KT_IDX_BINS; // a digit's counters: HIST=1's digits 3 and 4 have 8 bits
constexpr int CAND = 4096; // HIST=1: candidates a CTA gathers (16 KB); more in the request: digits over the slice

// HIST=0: the top-k-th key T by three digit passes over the slice (the cluster's histograms
// summed each time); need: how many keys == T to take.
__device__ void select_by_digits(const slice &sl, unsigned topk, unsigned (&hist)[2][SEL_BINS], unsigned *merged,
                                 unsigned *warp_sums, unsigned *chosen, unsigned &T, unsigned &need) {
    unsigned prefix = 0;
    need = topk;
    for (int d = 0; d < KT_IDX_DIGITS; d++) {
        digit_histogram(sl, prefix, d, hist[d & 1]); // two buffers: a peer may still read the last
        if constexpr (CLUSTER > 1) merge_histograms(hist[d & 1], kt_idx_digit_bins(d), merged);
        choose_bin(CLUSTER > 1 ? merged : hist[d & 1], d, prefix, need, warp_sums, chosen);
    }
    T = prefix;
}

// HIST=1: the same from the scan's histogram hb: its top 16 bits by warp 0 while the other
// warps stage the keys, then digits 3 and 4 over the gathered candidates (over the slice where
// the request has more than CAND of them), each by warp 0 alone, or with one CTA and at most 32
// candidates choose_in_warp; then hb is zeroed. Returns true when the ordered pass's masks are
// ready in gtm and eqm (SEL_FAST=2, one CTA, a staged slice of one tile, choose_in_warp:
// mask_and_gather).
__device__ bool select_by_histogram(const slice &sl, unsigned *staged, int *pages, unsigned *hb, unsigned topk,
                                    int rank, unsigned (&hist)[2][SEL_BINS], unsigned *merged, unsigned *nonzero,
                                    unsigned *cand, unsigned *chosen, unsigned &T, unsigned &need, unsigned &gtm,
                                    unsigned &eqm) {
    if (threadIdx.x < 32) choose_from_histogram(hb, topk, nonzero, chosen);
    if (threadIdx.x == 0) chosen[3] = 0; // the candidates' count
    if (sl.staged)
        stage_keys(sl, staged, pages, 32);
    else
        __syncthreads();
    unsigned prefix = chosen[0];
    need = chosen[1];
    const bool gathered = chosen[2] <= (unsigned)CAND; // the request's count: each slice's fits
    const bool fused = SEL_FAST == 2 && CLUSTER == 1 && gathered && sl.staged && sl.hi - sl.lo <= TILE;
    unsigned cands = 0;
    if (fused)
        mask_and_gather(sl, prefix, cand, &chosen[3], gtm, cands);
    else if (gathered)
        gather_candidates(sl, prefix, cand, &chosen[3]);
    if (CLUSTER == 1 && gathered && chosen[3] <= 32) { // (the request's count: the histogram has been read)
        if (threadIdx.x < 32) choose_in_warp(cand, chosen[3], need, chosen);
        zero_histogram(hb, nonzero, chosen[4], rank);
        __syncthreads();
        T = chosen[0];
        need = chosen[1];
        if (fused) resolve_masks(sl, T, gtm, cands, eqm);
        return fused;
    }
    const candidates cs = {cand, 0, (int)chosen[3]};
    for (int d = 3; d <= 4; d++) {
        if (gathered)
            digit_histogram(cs, prefix, d, hist[d & 1]);
        else
            digit_histogram(sl, prefix, d, hist[d & 1]);
        if constexpr (CLUSTER > 1) merge_histograms(hist[d & 1], SEL_BINS, merged);
        if (threadIdx.x < 32) {
            unsigned v[8], bin, rest, count;
            load_bins<false>(CLUSTER > 1 ? merged : hist[d & 1], v);
            choose_bin_warp(v, need, bin, rest, count);
            if (threadIdx.x == 0) chosen[0] = bin, chosen[1] = rest;
        }
        __syncthreads();
        prefix |= chosen[0] << kt_idx_digit_shift(d);
        need = chosen[1];
        if (d == 3) zero_histogram(hb, nonzero, chosen[4], rank); // every CTA has read it (the barriers above)
    }
    T = prefix;
    return false;
}

// A cluster of CLUSTER CTAs per request, rank r owning positions [n r / C, n (r + 1) / C):
// each digit's histogram is the sum of the cluster's, every CTA then chooses the same bin;
// the ordered pass starts each slice after the counts of the slices before it.
extern "C" __global__ void __launch_bounds__(ST, 1) KT_SEL_CLUSTER_DIMS
    mla_indexer_select(const float *__restrict__ logits, const int *__restrict__ lens,
                       const int *__restrict__ block_table, int max_pages, int topk, int stage_keys_max,
                       unsigned *__restrict__ hist, int *__restrict__ index) {
    extern __shared__ unsigned staged_keys[]; // kt_idx_staged_words(stage_keys_max) (dynamic shared memory)
    __shared__ __align__(16) unsigned hists[2][SEL_BINS], merged[CLUSTER > 1 ? SEL_BINS : 1];
    __shared__ __align__(16) unsigned nonzero[HIST ? KT_IDX_HIST_COARSE : 1], cand[HIST ? CAND : 1];
    __shared__ __align__(16) unsigned warp_sums[32], chosen[5], counts[4];
    __shared__ int pages[KT_IDX_STAGE_PAGES]; // the staged slice's block table entries
    // the kernel after (a programmatic dependent: the next scan, mla_decode) may launch now; it
    // waits for this grid's end before it reads what this one writes
    kt_allow_consumer();
    const int b = blockIdx.x / CLUSTER, rank = CLUSTER > 1 ? (int)kt_cluster_rank() : 0, n = lens[b];
    unsigned part = 0, off; // this request's logits start after those of requests 0..b-1
    for (int j = threadIdx.x; j < b; j += ST) part += (unsigned)lens[j];
    block_scan<ST / 32>(part, off, warp_sums);
    kt_wait_producer(); // launched as a programmatic dependent of the scan: its logits from here
    const float *x = logits + off;
    const int *bt_row = block_table + (long long)b * max_pages;
    int *out = index + (long long)b * topk;
    if (n <= topk) { // every position is taken, in order, then -1 (the same branch in every rank)
        for (int p = topk * rank / CLUSTER + threadIdx.x; p < topk * (rank + 1) / CLUSTER; p += ST)
            out[p] = p < n ? global_id(bt_row, p) : -1;
        return;
    }
    const int lo = (int)((long long)n * rank / CLUSTER), hi = (int)((long long)n * (rank + 1) / CLUSTER);
    const slice sl = {x, staged_keys, bt_row, pages, lo, hi, hi - lo <= stage_keys_max};
    unsigned T, need;
    if constexpr (HIST) {
        unsigned gtm = 0, eqm = 0, gt_run = 0, eq_run = 0;
        if (select_by_histogram(sl, staged_keys, pages, request_hist(hist, b, n, topk), (unsigned)topk, rank, hists,
                                merged, nonzero, cand, chosen, T, need, gtm, eqm)) {
            write_masks(sl, lo + (int)threadIdx.x * SE, gtm, eqm, need, gt_run, eq_run, (unsigned)topk, out, warp_sums);
            return;
        }
    } else {
        if (sl.staged) stage_keys(sl, staged_keys, pages, 0);
        select_by_digits(sl, (unsigned)topk, hists, merged, warp_sums, chosen, T, need);
    }
    unsigned gt_before = 0, eq_before = 0;
    if constexpr (CLUSTER > 1) {
        unsigned gt, eq;
        count_slice(sl, T, warp_sums, gt, eq);
        if (threadIdx.x == 0) counts[0] = gt, counts[1] = eq;
        kt_cluster_sync(); // every slice's counts are visible
        for (int r = 0; r < rank; r++) {
            const float4 v = kt_cluster_load4(kt_cluster_map(kt_smem_addr(counts), (kt_u32)r));
            gt_before += __float_as_uint(v.x);
            eq_before += __float_as_uint(v.y);
        }
        kt_cluster_sync_relaxed(); // no CTA leaves while another still reads its shared memory
    }
    write_selected(sl, T, need, gt_before, eq_before, (unsigned)topk, out, warp_sums);
}

// ------------------------------------------------------------------ baseline and reference

// The request of token `i` of the concatenated lengths (cu_lens in shared memory).
__device__ __forceinline__ int request_of(const int *cu_lens, int B, long long i) {
    int lo = 0, hi = B - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu_lens[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// e4m3 -> f32 by its definition, in integer and f32 operations only.
__device__ __forceinline__ float e4m3_to_f32(kt_u8 c) {
    const kt_u32 exp = (c >> 3) & 15, man = c & 7;
    const float v = exp ? __uint_as_float((exp + 120) << 23 | man << 20) : (float)man * 0.001953125f;
    return (c & 0x80) ? -v : v;
}

// The straightforward scan: a thread per token, every product in scalar f32 (in-run baseline).
extern "C" __global__ void __launch_bounds__(256)
    mla_indexer_naive(const kt_u8 *__restrict__ q, const float *__restrict__ w, const kt_u8 *__restrict__ cache,
                      const int *__restrict__ lens, const int *__restrict__ block_table, int max_pages, int B,
                      float *__restrict__ logits, unsigned *__restrict__ hist, int topk) {
    __shared__ int cu_lens[MAX_B + 1], cu_groups[MAX_B + 1];
    __shared__ unsigned warp_sums[32];
    request_prefix<8>(lens, B, 1, cu_lens, cu_groups, warp_sums);
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < cu_lens[B]; i += (long long)gridDim.x * 256) {
        const int b = request_of(cu_lens, B, i), t = (int)(i - cu_lens[b]);
        const long long page = block_table[(long long)b * max_pages + t / KT_IDX_PAGE];
        const kt_u8 *k = cache + kt_idx_code_offset(page, t % KT_IDX_PAGE);
        float sum = 0.f;
        for (int h = 0; h < KT_IDX_HEADS; h++) {
            const kt_u8 *qh = q + ((long long)b * KT_IDX_HEADS + h) * KT_IDX_DIM;
            float dot = 0.f;
            for (int d = 0; d < KT_IDX_DIM; d++) dot += e4m3_to_f32(qh[d]) * e4m3_to_f32(k[d]);
            sum += w[b * KT_IDX_HEADS + h] * fmaxf(dot, 0.f);
        }
        const float v = sum * *(const float *)(cache + kt_idx_scale_offset(page, t % KT_IDX_PAGE));
        logits[i] = v;
        unsigned *hb = request_hist(hist, b, lens[b], topk);
        hist_add(hb, hb, v); // the coarse counter in hb too: the baseline is not timed for it
    }
}

// D = A(8x4) * B(4x8) + D in float64 on the tensor cores (sm_80+): lane l holds A[l/4][l%4],
// B[l%4][l/4] and D[l/4][2 (l%4) + 0, 1].
__device__ __forceinline__ void mma_f64(double (&d)[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+d"(d[0]), "+d"(d[1])
                 : "d"(a), "d"(b));
}

constexpr int REF_THREADS = 256, REF_TOKENS = REF_THREADS / 4; // 8 tokens a warp

// The float64 logits (the check's reference for problems too large for the CPU): a CTA per
// (64 tokens, request), grid sized by the host's bound on L_b. Every e4m3 product is exact in
// float64 and the sums are float64 mma (dims in 32 steps of 4, heads in 8 tiles of 8).
extern "C" __global__ void __launch_bounds__(REF_THREADS)
    mla_indexer_reference(const kt_u8 *__restrict__ q, const float *__restrict__ w, const kt_u8 *__restrict__ cache,
                          const int *__restrict__ lens, const int *__restrict__ block_table, int max_pages, int B,
                          double *__restrict__ ref) {
    __shared__ float qs[KT_IDX_HEADS][KT_IDX_DIM];
    __shared__ unsigned warp_sums[32];
    const int b = blockIdx.y, L = lens[b], lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    unsigned part = 0, off;
    for (int j = threadIdx.x; j < b; j += REF_THREADS) part += (unsigned)lens[j];
    block_scan<REF_THREADS / 32>(part, off, warp_sums);
    for (int i = threadIdx.x; i < KT_IDX_HEADS * KT_IDX_DIM; i += REF_THREADS)
        qs[i / KT_IDX_DIM][i % KT_IDX_DIM] = e4m3_to_f32(q[(long long)b * KT_IDX_HEADS * KT_IDX_DIM + i]);
    __syncthreads();
    const int t0 = blockIdx.x * REF_TOKENS + (threadIdx.x >> 5) * 8;
    if (t0 >= L) return;
    const int tl = t0 + g < L ? t0 + g : L - 1; // this lane's token for the B fragments
    const long long page = block_table[(long long)b * max_pages + tl / KT_IDX_PAGE];
    const kt_u8 *k = cache + kt_idx_code_offset(page, tl % KT_IDX_PAGE);
    double kd[KT_IDX_DIM / 4];
#pragma unroll
    for (int s = 0; s < KT_IDX_DIM / 4; s++) kd[s] = e4m3_to_f32(k[4 * s + c]);
    double sum[2] = {0, 0};
    for (int ht = 0; ht < KT_IDX_HEADS / 8; ht++) {
        double d[2] = {0, 0};
#pragma unroll
        for (int s = 0; s < KT_IDX_DIM / 4; s++) mma_f64(d, qs[8 * ht + g][4 * s + c], kd[s]);
        const double wh = w[b * KT_IDX_HEADS + 8 * ht + g];
        sum[0] += wh * (d[0] > 0 ? d[0] : 0); // head 8 ht + g, tokens t0 + 2c and t0 + 2c + 1
        sum[1] += wh * (d[1] > 0 ? d[1] : 0);
    }
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) {
        sum[0] += __shfl_xor_sync(FULL, sum[0], x);
        sum[1] += __shfl_xor_sync(FULL, sum[1], x);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = t0 + 2 * c + i;
        if (g != 0 || t >= L) continue;
        const long long pg = block_table[(long long)b * max_pages + t / KT_IDX_PAGE];
        ref[off + t] = sum[i] * *(const float *)(cache + kt_idx_scale_offset(pg, t % KT_IDX_PAGE));
    }
}
