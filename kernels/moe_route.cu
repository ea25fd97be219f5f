// moe_route.cu — MoE routing and alignment for decode (kt verify --family moe_route
//   --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf --m 1,16,256):
//   router: f32 gate logits [M, E] + correction bias [E] -> topk_ids [M, TOPK], topk_weights
//     (kernels/common/moe_router.h: V4 sqrt(softplus), V3 sigmoid with the best 4 of 8 groups;
//     HASH, V4's hash-routed layers: the ids are the table row tid2eid[tokens[t]], the weights
//     V4's, kt verify --family moe_route --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf);
//   align: topk_ids -> alignment records of kernels/common/moe_layout.h (slots sorted by
//     expert, each expert padded to the tile, the tiles' experts, the tile count).
// Fixed sizes, no host sync: capturable in a CUDA graph. A warp routes a token (an expert per
// lane and j: e = lane + 32 j). The aligning blocks count; each warp ranks a contiguous run
// of slots, so the order within an expert is the slot order (deterministic, compared exactly).
// NTM records for the tiles TM, 2 TM, ... (moe_gemm tunes its tile: it reads the one it uses).
// FUSED=1: one kernel of BLOCKS blocks, each routing every token into shared memory and
// aligning from there (the small-M path: one launch); FUSED=0: moe_route_tokens over
// ceil(M / WARPS) blocks, then moe_align over BLOCKS blocks. Block 0 sorts the slots; all
// blocks share the writes of the padding rows and tiles, most of the record at small M.
// All are programmatic dependents (PDL): they let the next kernel launch at once and wait for
// the previous one (the gate GEMM, or moe_route_tokens) before reading what it wrote.
#include "kt_device.cuh"
#include "moe_layout.h"
#include "moe_router.h"

#ifndef KT_WARPS
#define KT_WARPS 8 // FUSED and BLOCKS only change the launch (kernels/moe_route.c)
#endif

constexpr int WARPS = KT_WARPS, THREADS = 32 * WARPS;
constexpr int PER_LANE = KT_MOE_MAX_E / 32;
constexpr int HIST_INTS = 8192; // WARPS * E per-warp expert counts (moe_route.c: config_fits)
#define NEG_INF __uint_as_float(0xff800000u)
static_assert(WARPS >= KT_MOE_MAX_NTM && WARPS <= 32, "a warp per record scans; at most 32 warps");
// __launch_bounds__(THREADS, 1): one block an SM is all the registers need (without it ptxas
// held 16 warps to 64 registers and spilled the router's keys)

// The warp's largest key in two warp reductions (redux.sync, sm_80+) instead of five rounds of
// 64-bit shuffles: the largest value, then the largest low half (the lowest expert) among the
// lanes holding that value.
__device__ __forceinline__ kt_u64 warp_max_key(kt_u64 k) {
    const kt_u32 hi = (kt_u32)(k >> 32), top_hi = __reduce_max_sync(0xffffffffu, hi);
    const kt_u32 top_lo = __reduce_max_sync(0xffffffffu, hi == top_hi ? (kt_u32)k : 0u);
    return ((kt_u64)top_hi << 32) | top_lo;
}

// The sum of the two largest of a group's values, the group spread over the warp's lanes
// (each lane's two largest in a >= b, merged pairwise).
__device__ __forceinline__ float warp_top2_sum(float a, float b) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float oa = __shfl_xor_sync(0xffffffffu, a, off), ob = __shfl_xor_sync(0xffffffffu, b, off);
        float hi = fmaxf(a, oa), lo = fmaxf(fminf(a, oa), fmaxf(b, ob));
        a = hi;
        b = lo;
    }
    return KT_MR_ADD(a, b);
}

// V3's group limit: keeps key[j] of the experts in the best KT_MOE_V3_TOPK_GROUPS groups
// (group score: its two largest choice values summed) and gives the others the value 0, as
// transformers' masked_fill(0.0) does (so they still compete, at 0). Needs E % 256 == 0: a
// group is E/8 experts = E/256 consecutive j of every lane.
__device__ __forceinline__ void v3_group_limit(kt_u64 (&key)[PER_LANE], const float (&choice)[PER_LANE], int E,
                                               int lane) {
    const int per_group = E / 256;
    float gscore[KT_MOE_V3_GROUPS];
#pragma unroll
    for (int g = 0; g < KT_MOE_V3_GROUPS; g++) {
        float a = NEG_INF, b = NEG_INF;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (j / per_group == g && j < E / 32) {
                float v = choice[j];
                b = fmaxf(b, fminf(a, v));
                a = fmaxf(a, v);
            }
        gscore[g] = warp_top2_sum(a, b);
    }
    unsigned chosen = 0; // every lane computes the same groups
#pragma unroll
    for (int r = 0; r < KT_MOE_V3_TOPK_GROUPS; r++) {
        int best = -1;
#pragma unroll
        for (int g = 0; g < KT_MOE_V3_GROUPS; g++)
            if (!(chosen >> g & 1) && (best < 0 || gscore[g] > gscore[best])) best = g;
        chosen |= 1u << best;
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; j++)
        if (j < E / 32 && !(chosen >> (j / per_group) & 1)) key[j] = kt_moe_choice_key(0.0f, lane + 32 * j);
}

// Lanes k < K hold token t's k-th choice (expert, score): topk_ids[t, k] and topk_weights[t, k]
// = score / (the K scores' sum + 1e-20) x routed_scaling_factor (the sum a fixed tree: the same
// bits on every path).
__device__ __forceinline__ void store_choice(int *ids, float *weights, int t, int K, int router, int my_e, float my_s) {
    const int lane = threadIdx.x % 32;
    float sum = lane < K ? my_s : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane < K) {
        ids[(long)t * K + lane] = my_e;
        weights[(long)t * K + lane] = KT_MR_MUL(KT_MR_DIV(my_s, KT_MR_ADD(sum, KT_MOE_NORM_EPS)), kt_moe_scale(router));
    }
}

// One warp routes token t: topk_ids[t, 0..K) in choice order (descending, ties to the lower
// expert), topk_weights = score / (sum of the K scores + 1e-20) * routed_scaling_factor.
__device__ __forceinline__ void route_token(const float *logits, const float *bias, int *ids, float *weights, int t,
                                            int E, int K, int router) {
    const int lane = threadIdx.x % 32;
    float score[PER_LANE], choice[PER_LANE];
    kt_u64 key[PER_LANE];
    // The lane's 8 scores as 8 independent branch-free chains (moe_router.h: no division or
    // square root with a slow path), the router's branch outside them, the experts past E masked
    // after.
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) score[j] = j < E / 32 ? logits[(long)t * E + lane + 32 * j] : 0.0f;
    if (router == KT_MOE_ROUTER_V3) {
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) score[j] = kt_moe_sigmoid(score[j]);
    } else {
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) score[j] = kt_moe_sqrt_softplus(score[j]);
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        const int e = lane + 32 * j;
        choice[j] = j < E / 32 ? kt_moe_choice(score[j], bias[e]) : NEG_INF;
        key[j] = j < E / 32 ? kt_moe_choice_key(choice[j], e) : 0;
    }
    if (router == KT_MOE_ROUTER_V3) v3_group_limit(key, choice, E, lane);
    int my_e = 0;
    float my_s = 0.0f;
    for (int k = 0; k < K; k++) {
        kt_u64 best = 0;
        float best_s = 0.0f;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (key[j] > best) {
                best = key[j];
                best_s = score[j];
            }
        const kt_u64 top = warp_max_key(best);
        const int e = kt_moe_key_expert(top);
        const float s = __shfl_sync(0xffffffffu, best_s, e % 32);
#pragma unroll
        for (int j = 0; j < PER_LANE; j++)
            if (key[j] == top) key[j] = 0;
        if (lane == k) {
            my_e = e;
            my_s = s;
        }
    }
    store_choice(ids, weights, t, K, router, my_e, my_s);
}

// SPREAD=1, one token (M = 1, V4): the block's warps score its experts side by side (warp w the
// experts 32 j + lane for j = w, w + WARPS, ...: one or two chains a lane where one warp ran 8),
// each warp's top K go to shared memory, and after a barrier warp 0 chooses the K best of them:
// the same keys in the same order as route_token, the weights the same bits.
struct spread_smem {
    kt_u64 key[KT_MOE_MAX_E]; // [warp * K + k]: warp's k-th best (0: none), WARPS * K <= 256
    float score[KT_MOE_MAX_E];
};
__device__ __forceinline__ void route_spread(const float *logits, const float *bias, int *ids, float *weights, int E,
                                             int K, spread_smem &s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int PER = (PER_LANE + WARPS - 1) / WARPS;
    float score[PER];
    kt_u64 key[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int j = warp + WARPS * i, e = lane + 32 * j;
        score[i] = j < E / 32 ? kt_moe_sqrt_softplus(logits[e]) : 0.0f;
        key[i] = j < E / 32 ? kt_moe_choice_key(kt_moe_choice(score[i], bias[e]), e) : 0;
    }
    for (int k = 0; k < K; k++) {
        kt_u64 best = 0;
        float best_s = 0.0f;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (key[i] > best) best = key[i], best_s = score[i];
        const kt_u64 top = warp_max_key(best);
        const int holder = __ffs(__ballot_sync(0xffffffffu, best == top)) - 1;
        const float sc = __shfl_sync(0xffffffffu, best_s, holder);
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (key[i] == top) key[i] = 0;
        if (lane == 0) s.key[warp * K + k] = top, s.score[warp * K + k] = sc;
    }
    __syncthreads();
    if (warp != 0) return;
    const int n = WARPS * K;
    kt_u64 cand[KT_MOE_MAX_E / 32];
#pragma unroll
    for (int i = 0; i < KT_MOE_MAX_E / 32; i++) cand[i] = lane + 32 * i < n ? s.key[lane + 32 * i] : 0;
    int my_e = 0;
    float my_s = 0.0f;
    for (int k = 0; k < K; k++) {
        kt_u64 best = 0;
        int at = 0;
#pragma unroll
        for (int i = 0; i < KT_MOE_MAX_E / 32; i++)
            if (cand[i] > best) best = cand[i], at = lane + 32 * i;
        const kt_u64 top = warp_max_key(best);
        const int holder = __ffs(__ballot_sync(0xffffffffu, best == top)) - 1;
        const int idx = __shfl_sync(0xffffffffu, at, holder);
#pragma unroll
        for (int i = 0; i < KT_MOE_MAX_E / 32; i++)
            if (cand[i] == top) cand[i] = 0;
        if (lane == k) my_e = kt_moe_key_expert(top), my_s = s.score[idx];
    }
    store_choice(ids, weights, 0, K, KT_MOE_ROUTER_V4, my_e, my_s);
}

// One warp routes token t of a hash-routed layer: lane k < K takes expert table[tokens[t]][k]
// and its V4 score; the weights as route_token's, normalised over the row's K scores.
__device__ __forceinline__ void hash_token(const float *logits, const int *tokens, const int *table, int *ids,
                                           float *weights, int t, int E, int K) {
    const int lane = threadIdx.x % 32;
    const int e = lane < K ? table[(long)tokens[t] * K + lane] : 0;
    const float my_s = lane < K ? kt_moe_score(KT_MOE_ROUTER_HASH, logits[(long)t * E + e]) : 0.0f;
    float sum = my_s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane < K) {
        ids[(long)t * K + lane] = e;
        weights[(long)t * K + lane] =
            KT_MR_MUL(KT_MR_DIV(my_s, KT_MR_ADD(sum, KT_MOE_NORM_EPS)), kt_moe_scale(KT_MOE_ROUTER_HASH));
    }
}

// Token t by the problem's router (a warp).
__device__ __forceinline__ void route_any(const float *logits, const float *bias, const int *tokens, const int *table,
                                          int *ids, float *weights, int t, int E, int K, int router) {
    if (router == KT_MOE_ROUTER_HASH)
        hash_token(logits, tokens, table, ids, weights, t, E, K);
    else
        route_token(logits, bias, ids, weights, t, E, K, router);
}

// Per-expert shared state of the alignment.
struct align_smem {
    // [warp][expert]: slots of the warp's run, then its base within the expert (before the
    // alignment: SPREAD's spread_smem)
    alignas(16) int hist[HIST_INTS];
    int count[KT_MOE_MAX_E];
    int start[KT_MOE_MAX_NTM][KT_MOE_MAX_E + 1]; // per record: exclusive scan of the padded counts; [E] = rows in use
};

// SMALL=1's state (M * TOPK <= 32 slots, one warp's): the touched experts in lane order of
// their first slot, their slot counts and each record's tiles, and the rows in use.
struct small_smem {
    int count[32];
    int tile0[KT_MOE_MAX_NTM][32], tiles[KT_MOE_MAX_NTM][32]; // an expert's tiles [tile0, tile0 + tiles)
    int expert[32];
    int used[KT_MOE_MAX_NTM];
    int n; // touched experts
};

// The warp's run of slots [begin, end): calls f(slot, expert, peers) 32 slots at a time in
// slot order, peers = the lanes of this step holding the same expert.
template <typename F> __device__ __forceinline__ void warp_run(const int *ids, long begin, long end, F f) {
    const int lane = threadIdx.x % 32;
    for (long base = begin; base < end; base += 32) {
        const long s = base + lane;
        const int e = s < end ? ids[s] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (e >= 0) f(s, e, peers);
        __syncwarp();
    }
}

// Exclusive scan of the experts' counts padded to TM into start[0..E] (one warp; E <= 256).
__device__ __forceinline__ void scan_padded(const int *count, int *start, int E, int TM) {
    const int lane = threadIdx.x % 32, per = (E + 31) / 32;
    int local = 0;
    for (int i = lane * per; i < (lane + 1) * per && i < E; i++) local += (count[i] + TM - 1) / TM * TM;
    int incl = local;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        int o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += o;
    }
    int run = incl - local;
    for (int i = lane * per; i < (lane + 1) * per && i < E; i++) {
        start[i] = run;
        run += (count[i] + TM - 1) / TM * TM;
    }
    if (lane == 31) start[E] = incl;
}

// Counts, each warp's base within every expert (its run's slots go after the earlier runs'),
// and the padded starts of every record, in every block of the grid.
__device__ void align_counts(const int *ids, long begin, long end, int E, int TM, int NTM, align_smem &s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int *hist = s.hist + warp * E;
    for (int i = threadIdx.x; i < WARPS * E; i += THREADS) s.hist[i] = 0;
    __syncthreads();
    warp_run(ids, begin, end, [&](long, int e, unsigned peers) {
        if (lane == __ffs(peers) - 1) hist[e] += __popc(peers);
    });
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += THREADS) {
        int total = 0;
        for (int w = 0; w < WARPS; w++) {
            int h = s.hist[w * E + e];
            s.hist[w * E + e] = total;
            total += h;
        }
        s.count[e] = total;
    }
    __syncthreads();
    if (warp < NTM) scan_padded(s.count, s.start[warp], E, TM << warp); // WARPS >= 4 >= NTM
    __syncthreads();
}

// The alignment records of topk_ids [M*K] (shared memory, or global memory written by the
// previous grid) into rec: NTM records for the tiles TM << r (kernels/common/moe_router.h), at
// the places g gives. Every block of the grid counts; block 0 scatters the slots; all write the
// padding rows and tiles, a grid-strided share each.
__device__ void align_grid(const int *ids, int *rec, int M, int K, int E, int TM, int NTM, const kt_moe_rec_geom &g,
                           align_smem &s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long n = (long)M * K, run = (n + WARPS - 1) / WARPS;
    const long begin = warp * run < n ? warp * run : n, end = begin + run < n ? begin + run : n;
    align_counts(ids, begin, end, E, TM, NTM, s);
    if (blockIdx.x == 0) {
        int *hist = s.hist + warp * E;
        warp_run(ids, begin, end, [&](long slot, int e, unsigned peers) {
            const int at = hist[e] + __popc(peers & ((1u << lane) - 1));
            for (int r = 0; r < NTM; r++) rec[g.off[r] + s.start[r][e] + at] = (int)slot;
            __syncwarp(peers);
            if (lane == __ffs(peers) - 1) hist[e] += __popc(peers);
        });
    }
    const int first = blockIdx.x * THREADS + threadIdx.x, stride = gridDim.x * THREADS;
    for (int r = 0; r < NTM; r++) {
        const int tm = TM << r, *start = s.start[r], used = start[E];
        int *sorted = rec + g.off[r], *tile_expert = sorted + g.padded[r]; // KT_MOE_TILES
        for (int i = first; i < g.padded[r]; i += stride) { // the padding rows (the scatter writes the rest)
            if (i >= used) {
                sorted[i] = KT_MOE_PAD;
                continue;
            }
            const int e = kt_moe_expert_of_row(start, E, i);
            if (i - start[e] >= s.count[e]) sorted[i] = KT_MOE_PAD;
        }
        for (int t = first; t < g.tiles[r]; t += stride)
            tile_expert[t] = t * tm < used ? kt_moe_expert_of_row(start, E, t * tm) : KT_MOE_PAD;
        if (first == 0) tile_expert[g.tiles[r]] = used / tm; // KT_MOE_NTILES
    }
}

// SMALL=1, n = M * K <= 32 slots: warp 0 holds a slot a lane and finds each slot's row from its
// peers (the lanes of its expert) and the padded counts of the touched experts below its own, no
// per-warp histograms or scans over all E experts; block 0's warp 0 writes the slots' rows. One
// barrier, then every block writes its share of the rows and tiles past those in use (most of
// the record at small M), and block 0's warps the touched experts' padding rows and tiles, a
// warp an expert (no look-up a row: the first version searched the experts' list for each
// row in use, 2x slower at 24 slots).
__device__ void align_small(const int *ids, int *rec, int n, int TM, int NTM, const kt_moe_rec_geom &g, small_smem &s) {
    const int lane = threadIdx.x % 32;
    if (threadIdx.x < 32) {
        const int e = lane < n ? ids[lane] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e), below = (1u << lane) - 1;
        const bool lead = e >= 0 && lane == __ffs(peers) - 1;
        const unsigned leads = __ballot_sync(0xffffffffu, lead);
        const int count = __popc(peers), rank = __popc(peers & below), at = __popc(leads & below);
        // the expert's tiles of TM rows; of TM << r: ceil(q / 2^r) (the only division)
        const int q = lead ? (count + TM - 1) / TM : 0;
        if (lead) {
            s.count[at] = count;
            s.expert[at] = e;
        }
        int below_tiles[KT_MOE_MAX_NTM] = {}; // each record's tiles of the touched experts below e
        for (unsigned m = leads; m; m &= m - 1) {
            const int j = __ffs(m) - 1, ej = __shfl_sync(0xffffffffu, e, j), qj = __shfl_sync(0xffffffffu, q, j);
#pragma unroll
            for (int r = 0; r < KT_MOE_MAX_NTM; r++)
                if (ej < e) below_tiles[r] += (qj + (1 << r) - 1) >> r;
        }
#pragma unroll
        for (int r = 0; r < KT_MOE_MAX_NTM; r++) {
            if (r >= NTM) break;
            const int tiles = (q + (1 << r) - 1) >> r, used = __reduce_add_sync(0xffffffffu, tiles) * (TM << r);
            if (lead) s.tile0[r][at] = below_tiles[r], s.tiles[r][at] = tiles;
            if (blockIdx.x == 0 && e >= 0) rec[g.off[r] + below_tiles[r] * (TM << r) + rank] = lane;
            if (lane == 0) s.used[r] = used;
        }
        if (lane == 0) s.n = __popc(leads);
    }
    __syncthreads();
    const int first = blockIdx.x * THREADS + threadIdx.x, stride = gridDim.x * THREADS;
    const int warp = threadIdx.x / 32;
    for (int r = 0; r < NTM; r++) {
        const int tm = TM << r, used = s.used[r];
        int *sorted = rec + g.off[r], *tile_expert = sorted + g.padded[r]; // KT_MOE_TILES
        for (int i = used + first; i < g.padded[r]; i += stride) sorted[i] = KT_MOE_PAD;
        for (int t = used / tm + first; t < g.tiles[r]; t += stride) tile_expert[t] = KT_MOE_PAD;
        if (first == 0) tile_expert[g.tiles[r]] = used / tm;         // KT_MOE_NTILES
        for (int x = warp; blockIdx.x == 0 && x < s.n; x += WARPS) { // expert x's rows past its slots, its tiles
            const int t0 = s.tile0[r][x], nt = s.tiles[r][x];
            for (int i = t0 * tm + s.count[x] + lane; i < (t0 + nt) * tm; i += 32) sorted[i] = KT_MOE_PAD;
            for (int t = t0 + lane; t < t0 + nt; t += 32) tile_expert[t] = s.expert[x];
        }
    }
}

// The records by the small path where it applies (small and n <= 32), else align_grid.
__device__ __forceinline__ void align_any(const int *ids, int *rec, int M, int K, int E, int TM, int NTM,
                                          const kt_moe_rec_geom &g, int small, align_smem &s, small_smem &ss) {
    if (small && M * K <= 32)
        align_small(ids, rec, M * K, TM, NTM, g, ss);
    else
        align_grid(ids, rec, M, K, E, TM, NTM, g, s);
}

// FUSED=1 (M * K <= KT_MOE_FUSED_SLOTS): every block routes every token into shared memory
// (block 0 also writes ids and weights) and aligns from there: one launch, no round trip.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    moe_route_fused(const float *__restrict__ logits, const float *__restrict__ bias, int *ids, float *weights,
                    int *rec, const int *__restrict__ tokens, const int *__restrict__ table, int M, int E, int K,
                    int TM, int NTM, int router, kt_moe_rec_geom g, int small, int spread) {
    __shared__ align_smem s;
    __shared__ small_smem ss;
    __shared__ int ids_s[KT_MOE_FUSED_SLOTS];
    __shared__ float weights_s[KT_MOE_FUSED_SLOTS];
    static_assert(sizeof(spread_smem) <= sizeof(s.hist), "SPREAD's keys live in the histograms' space");
    kt_allow_consumer();
    kt_wait_producer();
    if (spread && M == 1 && router == KT_MOE_ROUTER_V4) // the histograms are zeroed after the barrier below
        route_spread(logits, bias, ids_s, weights_s, E, K, *reinterpret_cast<spread_smem *>(s.hist));
    else
        for (int t = threadIdx.x / 32; t < M; t += WARPS)
            route_any(logits, bias, tokens, table, ids_s, weights_s, t, E, K, router);
    __syncthreads();
    for (int i = threadIdx.x; blockIdx.x == 0 && i < M * K; i += THREADS) {
        ids[i] = ids_s[i];
        weights[i] = weights_s[i];
    }
    align_any(ids_s, rec, M, K, E, TM, NTM, g, small, s, ss);
}

// FUSED=0, first kernel: a warp per token over ceil(M / WARPS) blocks.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    moe_route_tokens(const float *__restrict__ logits, const float *__restrict__ bias, int *ids, float *weights,
                     const int *__restrict__ tokens, const int *__restrict__ table, int M, int E, int K, int router) {
    kt_allow_consumer();
    kt_wait_producer();
    const int t = blockIdx.x * WARPS + threadIdx.x / 32;
    if (t < M) route_any(logits, bias, tokens, table, ids, weights, t, E, K, router);
}

// FUSED=0, second kernel: BLOCKS blocks align what moe_route_tokens wrote.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    moe_align(const int *ids, int *rec, int M, int E, int K, int TM, int NTM, kt_moe_rec_geom g, int small) {
    __shared__ align_smem s;
    __shared__ small_smem ss;
    kt_allow_consumer();
    kt_wait_producer();
    align_any(ids, rec, M, K, E, TM, NTM, g, small, s, ss);
}
