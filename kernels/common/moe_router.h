/* moe_router.h — the router's arithmetic, shared by kernels/moe_route.cu and the host
 * reference (kernels/moe_route.c); valid C11 and CUDA C++ (NVRTC).
 *
 * Both DeepSeek routers choose experts by comparing f32 scores (transformers computes them in
 * f32 too). For the kernel and the reference to choose the same experts, ties and near-ties
 * included, the f32 scores must be the same bits on both sides, so they are computed here from
 * IEEE operations that round the same everywhere (mul, add, fma and, for the weights, div with
 * explicit round-to-nearest; no contraction; the scores' divisions and square root by Newton
 * steps on those, kt_mr_recip and kt_mr_sqrt, branch-free on the GPU): exp, log1p, sigmoid and
 * sqrt(softplus) to within a few ulp of the exact functions (tests/cpu/test_moe_route.c
 * measures it), for |x| <= 87.
 *
 * Tie rule (torch.topk documents none; its CUDA kernel takes the elements equal to the k-th
 * value in index order): among equal values the lower index wins, for experts and for V3's
 * groups; -0 and +0 are equal. */
#ifndef KT_MOE_ROUTER_H
#define KT_MOE_ROUTER_H

#ifdef __CUDACC_RTC__
#define KT_MR_FN __device__ __forceinline__
#define KT_MR_MUL(a, b) __fmul_rn(a, b)
#define KT_MR_ADD(a, b) __fadd_rn(a, b)
#define KT_MR_FMA(a, b, c) __fmaf_rn(a, b, c)
#define KT_MR_DIV(a, b) __fdiv_rn(a, b)
KT_MR_FN float kt_mr_bits_to_float(unsigned u) { return __uint_as_float(u); }
KT_MR_FN unsigned kt_mr_float_bits(float f) { return __float_as_uint(f); }
#else
#include <math.h>
#include <string.h>
/* Host C11 (-std=c11: no contraction of a * b + c; SSE float arithmetic rounds each op). */
#define KT_MR_FN static inline
#define KT_MR_MUL(a, b) ((float)(a) * (float)(b))
#define KT_MR_ADD(a, b) ((float)(a) + (float)(b))
#define KT_MR_FMA(a, b, c) fmaf(a, b, c)
#define KT_MR_DIV(a, b) ((float)(a) / (float)(b))
KT_MR_FN float kt_mr_bits_to_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
KT_MR_FN unsigned kt_mr_float_bits(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#endif

/* The routers (the ROUTER key's values, in this order). HASH is V4's hash-routed layers: the
 * experts of token t are tid2eid[t] (a table row, in its order), weighted by V4's scores. */
enum { KT_MOE_ROUTER_V4 = 0, KT_MOE_ROUTER_V3 = 1, KT_MOE_ROUTER_HASH = 2 };
/* The routing distributions of the fill (the DIST key's values). */
enum { KT_MOE_DIST_UNIFORM = 0, KT_MOE_DIST_ZIPF = 1, KT_MOE_DIST_HOT = 2, KT_MOE_DIST_GATE = 3 };

#define KT_MOE_MAX_E 256 /* experts a router handles: 8 per lane of its warp */
#define KT_MOE_MAX_TOPK 16
#define KT_MOE_MAX_NTM 4        /* alignment records one router writes (token tiles TM..8TM) */
#define KT_MOE_FUSED_SLOTS 1024 /* M * TOPK the one-kernel path keeps in shared memory */
#define KT_MOE_V3_GROUPS 8      /* DeepSeek-V3's n_group */
#define KT_MOE_V3_TOPK_GROUPS 4 /* and topk_group */
#define KT_MOE_V4_SCALE 1.5f    /* routed_scaling_factor */
#define KT_MOE_V3_SCALE 2.5f
#define KT_MOE_NORM_EPS 1e-20f /* the weights' denominator: sum + eps, as transformers */
#define KT_MOE_HASH_ROWS 1024  /* the table rows (token ids) the HASH fill draws; a model's are its vocab */

/* e^x for |x| <= 87: x = n ln2 + r (|r| <= ln2 / 2), e^r by its Taylor polynomial of degree 7
 * (truncation below 1e-8 relative), times 2^n built from its bits. */
KT_MR_FN float kt_mr_exp(float x) {
    x = x < -87.0f ? -87.0f : x > 87.0f ? 87.0f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = KT_MR_ADD(KT_MR_FMA(x, 1.44269502f, shifter), -shifter);
    float r = KT_MR_FMA(n, -0.693145751953125f, x); /* ln2's high part: n * it is exact */
    r = KT_MR_FMA(n, -1.42860677e-06f, r);          /* ln2's low part */
    float p = 1.98412698e-04f;                      /* 1/7!, then 1/6! ... 1/1!, 1/0! */
    p = KT_MR_FMA(p, r, 1.38888889e-03f);
    p = KT_MR_FMA(p, r, 8.33333333e-03f);
    p = KT_MR_FMA(p, r, 4.16666667e-02f);
    p = KT_MR_FMA(p, r, 1.66666667e-01f);
    p = KT_MR_FMA(p, r, 0.5f);
    p = KT_MR_FMA(p, r, 1.0f);
    p = KT_MR_FMA(p, r, 1.0f);
    return KT_MR_MUL(p, kt_mr_bits_to_float((unsigned)((int)n + 127) << 23));
}

/* 1 / d for normal d >= 1 from integer, multiply and fma steps only, so that it is the same bits
 * on every IEEE machine and branch-free on the GPU (__fdiv_rn's range check and slow path put a
 * branch around every division, which serialised a lane's 8 scores): the exponent-flipping guess
 * (within 12%) and 3 Newton steps r += r (1 - d r), each squaring the error (to ~4e-8, about
 * an ulp). */
KT_MR_FN float kt_mr_recip(float d) {
    float r = kt_mr_bits_to_float(0x7ef311c3u - kt_mr_float_bits(d));
    for (int i = 0; i < 3; i++) r = KT_MR_FMA(r, KT_MR_FMA(-d, r, 1.0f), r);
    return r;
}

/* a / d (d >= 1): a times kt_mr_recip(d), then one residual step (a - d q) / d: within an ulp of
 * the exact quotient, and the correctly rounded one but for ~1 in 10^6 of the d the scores divide
 * by (tests/cpu/test_moe_route.c samples them). */
KT_MR_FN float kt_mr_div(float a, float d) {
    const float r = kt_mr_recip(d), q = KT_MR_MUL(a, r);
    return KT_MR_FMA(KT_MR_FMA(-d, q, a), r, q);
}

/* sqrt(x) for normal x > 0 (+inf stays +inf) the same way: the classic 1/sqrt guess (within
 * 3.5%), 3 Newton steps y *= 1.5 - x y^2 / 2, then s = x y and one residual step s + (x - s^2) y / 2. */
KT_MR_FN float kt_mr_sqrt(float x) {
    float y = kt_mr_bits_to_float(0x5f3759dfu - (kt_mr_float_bits(x) >> 1));
    const float half_x = KT_MR_MUL(0.5f, x);
    for (int i = 0; i < 3; i++) y = KT_MR_MUL(y, KT_MR_FMA(-KT_MR_MUL(half_x, y), y, 1.5f));
    const float s = KT_MR_MUL(x, y), r = KT_MR_FMA(KT_MR_FMA(-s, s, x), KT_MR_MUL(0.5f, y), s);
    return x > 3.40282347e38f ? x : r;
}

/* log(1 + z) for z in [0, 1]: u = 1 + z rounded, log u = k ln2 + log m (m = u or u / 2 in
 * [0.707, 1.415]) by the atanh series in s = (m - 1) / (m + 1), |s| <= 0.172, then the rounding
 * error of 1 + z (exact: z - (u - 1)) added back divided by u (both divisions kt_mr_div's). */
KT_MR_FN float kt_mr_log1p_unit(float z) {
    float u = KT_MR_ADD(1.0f, z);
    int k = u > 1.41421356f;
    float m = k ? KT_MR_MUL(u, 0.5f) : u;
    float s = kt_mr_div(KT_MR_ADD(m, -1.0f), KT_MR_ADD(m, 1.0f)), s2 = KT_MR_MUL(s, s);
    float q = KT_MR_FMA(s2, 0.111111111f, 0.142857143f); /* 1/9, 1/7, 1/5, 1/3 */
    q = KT_MR_FMA(q, s2, 0.2f);
    q = KT_MR_FMA(q, s2, 0.333333333f);
    float two_s = KT_MR_ADD(s, s);
    float log_m = KT_MR_FMA(KT_MR_MUL(two_s, s2), q, two_s);
    float log_u = k ? KT_MR_ADD(KT_MR_ADD(log_m, 1.42860677e-06f), 0.693145751953125f) : log_m;
    return KT_MR_ADD(log_u, kt_mr_div(KT_MR_ADD(z, -KT_MR_ADD(u, -1.0f)), u));
}

/* sigmoid(x) = 1 / (1 + e^-x): the V3 router's score. */
KT_MR_FN float kt_moe_sigmoid(float x) { return kt_mr_div(1.0f, KT_MR_ADD(1.0f, kt_mr_exp(-x))); }

/* sqrt(softplus(x)), softplus(x) = x above 20 (torch's threshold), else max(x, 0) +
 * log1p(e^-|x|): the V4 router's score. One formula for both: above 20, e^-x < 2.1e-9 is under
 * half an ulp of x, so max(x, 0) + log1p(e^-x) rounds to x exactly (no branch on the GPU). */
KT_MR_FN float kt_moe_sqrt_softplus(float x) {
    float ax = x < 0 ? -x : x;
    return kt_mr_sqrt(KT_MR_ADD(x > 0 ? x : 0.0f, kt_mr_log1p_unit(kt_mr_exp(-ax))));
}

/* The score of a logit under router r (V4 and HASH: sqrt(softplus); V3: sigmoid), and the
 * value experts are chosen by: score + bias, with -0 made +0 (the tie rule treats them as
 * equal; +0 is the canonical one). */
KT_MR_FN float kt_moe_score(int router, float logit) {
    return router == KT_MOE_ROUTER_V3 ? kt_moe_sigmoid(logit) : kt_moe_sqrt_softplus(logit);
}
KT_MR_FN float kt_moe_choice(float score, float bias) { return KT_MR_ADD(KT_MR_ADD(score, bias), 0.0f); }
KT_MR_FN float kt_moe_scale(int router) { return router == KT_MOE_ROUTER_V3 ? KT_MOE_V3_SCALE : KT_MOE_V4_SCALE; }

/* A choice value (not NaN) and its expert as one 64-bit key whose order is the choice order:
 * the larger value first, then the lower expert (-0 must be made +0 first: kt_moe_choice).
 * 0 is below every key of a number (the smallest, -inf, maps to 0x007fffff << 32). */
KT_MR_FN unsigned long long kt_moe_choice_key(float v, int e) {
    unsigned u = kt_mr_float_bits(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned)(0x7fffffff - e);
}
KT_MR_FN int kt_moe_key_expert(unsigned long long k) { return 0x7fffffff - (int)(unsigned)k; }

/* The expert of padded row i of an alignment: the last expert whose rows start at or before
 * i (start[0..E) ascending, experts without slots starting where the next one does). */
KT_MR_FN int kt_moe_expert_of_row(const int *start, int E, long i) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (start[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The router's alignment output for a grouped GEMM that tunes its token tile: NTM records of
 * kernels/common/moe_layout.h for the tiles TM, 2 TM, ..., 2^(NTM-1) TM, one after the other
 * (moe_gemm tunes TM over 8, 16, 32, 64: TM=8, NTM=4). The offset (in int32) of record r, and
 * with r = NTM the size of them all. Needs moe_layout.h included first. */
KT_MR_FN long kt_moe_align_multi_offset(long M, long topk, long E, long TM, int r) {
    long off = 0;
    for (int q = 0; q < r; q++) off += kt_moe_align_ints(M, topk, E, TM << q);
    return off;
}

/* The place and sizes of each of NTM records (int32 elements), computed once on the host and
 * passed to the kernels by value: each is a 64-bit division by the tile, a ~60-instruction call
 * on the GPU that sat on the aligning blocks' chain before their first barrier. */
typedef struct {
    int off[KT_MOE_MAX_NTM];    /* the record's first int32 (kt_moe_align_multi_offset) */
    int padded[KT_MOE_MAX_NTM]; /* kt_moe_max_padded: sorted_slot's length, tile_expert's offset */
    int tiles[KT_MOE_MAX_NTM];  /* kt_moe_max_tiles: tile_expert's length; n_tiles follows it */
} kt_moe_rec_geom;
KT_MR_FN kt_moe_rec_geom kt_moe_rec_geometry(long M, long topk, long E, long TM, int NTM) {
    kt_moe_rec_geom g;
    for (int r = 0; r < KT_MOE_MAX_NTM; r++) {
        const long tm = TM << r, live = r < NTM;
        g.off[r] = (int)kt_moe_align_multi_offset(M, topk, E, TM, live ? r : NTM);
        g.padded[r] = live ? (int)kt_moe_max_padded(M, topk, E, tm) : 0;
        g.tiles[r] = live ? (int)kt_moe_max_tiles(M, topk, E, tm) : 0;
    }
    return g;
}

#endif
