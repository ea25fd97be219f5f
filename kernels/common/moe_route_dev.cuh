// moe_route_dev.cuh — the router's device functions, shared by kernels/moe_route.cu (the router
// family) and kernels/moe_gemm.cu (gate+up EARLY=1 at M = 1 routes its one token itself, from
// the same logits with the same functions, so its experts are moe_route's bit for bit).
// A warp routes a token (an expert per lane and j: e = lane + 32 j); the arithmetic is
// kernels/common/moe_router.h's. Compiled by NVRTC.
#pragma once
#include "kt_device.cuh"
#include "moe_router.h"

constexpr int PER_LANE = KT_MOE_MAX_E / 32;
#define NEG_INF __uint_as_float(0xff800000u)

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
