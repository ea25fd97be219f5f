/* moe_gemm.c — host descriptor of the MoE grouped GEMM family (kernels/moe_gemm.cu): the
 * expert GEMMs of a DeepSeek-V4 MoE layer over the touched experts only, as two stages:
 *   GATEUP: h[s] = act_quant(SiLU(min(gate, L)) * clamp(up, -L, L)), gate/up = x[token(s)] W1[e(s)]^T
 *   DOWN:   out[m] = shared[m] + sum_k w[m, k] * (h[m*topk+k] W2[e(m,k)]^T)
 * with e4m3 1x128 activations, FP8 (128x128 block scales) or MXFP4 (ue8m0 per 32) weights.
 * Its key (FORMAT, STAGE, E, N, K, TOPK, DIST), tensors, seeded inputs (the routing drawn from
 * DIST and the alignment records built by the C reference of kernels/common/moe_layout.h),
 * float64 references, launch geometry and the bytes that set the floor. */
#include "../runtime/kt.h"
#include "family_hooks.h"
#include "common/moe_layout.h"
#include "common/moe_router.h"
#include "fp8_gemm.h"
#include "moe_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { P_TM, P_TN, P_WN, P_WK, P_RING, P_SPLIT, P_NATIVE, P_WIDE, P_BF16, P_GATHER, P_EARLY, P_CLUSTER };
/* Kernels: the grouped GEMM per (format, stage), then the float64 references. */
enum { K_FP8_GATEUP, K_FP8_DOWN, K_MXFP4_GATEUP, K_MXFP4_DOWN, K_REF_GATEUP, K_REF_QUANT, K_REF_DOWN };

#define SMEM_LIMIT (99 * 1024) /* sm_120's shared memory per block; kept on every arch */
#define SWIGLU_LIMIT 10.0      /* V4's swiglu_limit */
#define ROUTING_SEED 0x6d6f65ULL
#define SMALL_STEP_BYTES                                                                                               \
    (16.0 * 1024 * 1024) /* touched down weights where default_for takes EARLY (well within the H200's 50 MB L2) */

const int kt_moe_tm_values[KT_MOE_N_TM] = {8, 16, 32, 64};

typedef struct moe_dims {
    long M, E, N, K, topk, MT, KB; /* MT = M*topk slots, KB = K/128 */
    int fmt, stage, dist;
} moe_dims;

static moe_dims dims_of(const kt_problem *p) {
    moe_dims d = {.M = p->m,
                  .E = p->dim[KT_MOE_E],
                  .N = p->dim[KT_MOE_N],
                  .K = p->dim[KT_MOE_K],
                  .topk = p->dim[KT_MOE_TOPK],
                  .fmt = kt_moe_cat(p, KT_MOE_FORMAT),
                  .stage = kt_moe_cat(p, KT_MOE_STAGE),
                  .dist = kt_moe_cat(p, KT_MOE_DIST)};
    d.MT = d.M * d.topk;
    d.KB = d.K / 128;
    return d;
}

/* ---------------------------------------------------------------- routing */

void kt_moe_gate_logits(long M, long E, uint64_t *rng, float *logits, float *bias) {
    for (long e = 0; e < E; e++) bias[e] = 0.3f * kt_rng_uniform(rng);
    const double sd = sqrt(1.0 / 3.0), two_pi = 6.283185307179586;
    for (long i = 0; i < M * E; i += 2) { /* Box-Muller: two normals from two uniforms */
        double u = 1.0 - (double)(kt_rng_next(rng) >> 11) * 0x1p-53,
               a = two_pi * (double)(kt_rng_next(rng) >> 11) * 0x1p-53;
        double r = sd * sqrt(-2.0 * log(u));
        logits[i] = (float)(r * cos(a));
        if (i + 1 < M * E) logits[i + 1] = (float)(r * sin(a));
    }
}

/* DIST=gate: each token's top-k by V4's f32 choice values (moe_router.h: the bits moe_route
 * computes) on kt_moe_gate_logits, ties to the lower expert. */
static void draw_gate(long M, long topk, long E, uint64_t *rng, int *ids) {
    float *logits = malloc(sizeof(float) * (size_t)(M * E)), *bias = malloc(sizeof(float) * (size_t)E);
    float *value = malloc(sizeof(float) * (size_t)E);
    if (!logits || !bias || !value) abort();
    kt_moe_gate_logits(M, E, rng, logits, bias);
    for (long m = 0; m < M; m++) {
        for (long e = 0; e < E; e++) value[e] = kt_moe_choice(kt_moe_sqrt_softplus(logits[m * E + e]), bias[e]);
        for (long k = 0; k < topk; k++) {
            long best = -1;
            for (long e = 0; e < E; e++)
                if (value[e] == value[e] && (best < 0 || value[e] > value[best])) best = e; /* NaN: taken */
            ids[m * topk + k] = (int)best;
            value[best] = NAN;
        }
    }
    free(logits);
    free(bias);
    free(value);
}

void kt_moe_draw_routing(long M, long topk, long E, int dist, uint64_t seed, int *ids, float *weights) {
    uint64_t rng = seed;
    if (dist == KT_MOE_GATE) {
        draw_gate(M, topk, E, &rng, ids);
        for (long i = 0; weights && i < M * topk; i++) weights[i] = 0.25f + 0.15f * kt_rng_uniform(&rng);
        return;
    }
    double *cdf = malloc(sizeof(double) * (size_t)E);
    int *perm = malloc(sizeof(int) * (size_t)E);
    if (!cdf || !perm) abort();
    for (long e = 0; e < E; e++) perm[e] = (int)e;
    for (long e = E - 1; e > 0; e--) { /* the Zipf ranking and the hot expert, from the seed */
        long j = (long)(kt_rng_next(&rng) % (uint64_t)(e + 1));
        int t = perm[e];
        perm[e] = perm[j];
        perm[j] = t;
    }
    double total = 0;
    for (long r = 0; r < E; r++) cdf[r] = total += pow((double)(r + 1), -1.1);
    const double hot_share = topk >= 4 ? 1.0 : 0.25 * (double)topk;
    for (long m = 0; m < M; m++) {
        int *row = ids + m * topk;
        long k = 0;
        if (dist == KT_MOE_HOT && (double)(kt_rng_next(&rng) >> 11) * 0x1p-53 < hot_share) row[k++] = perm[0];
        while (k < topk) {
            int e;
            if (dist == KT_MOE_ZIPF) {
                double u = (double)(kt_rng_next(&rng) >> 11) * 0x1p-53 * total;
                long lo = 0, hi = E - 1;
                while (lo < hi) {
                    long mid = (lo + hi) / 2;
                    if (cdf[mid] < u)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                e = perm[lo];
            } else {
                e = (int)(kt_rng_next(&rng) % (uint64_t)E);
            }
            int dup = 0;
            for (long j = 0; j < k; j++) dup |= row[j] == e;
            if (!dup) row[k++] = e;
        }
        for (long j = 0; weights && j < topk; j++) weights[m * topk + j] = 0.25f + 0.15f * kt_rng_uniform(&rng);
    }
    free(cdf);
    free(perm);
}

kt_moe_occupancy kt_moe_occupancy_of(const int *ids, long n, long E, long TM) {
    long *count = calloc((size_t)E, sizeof *count);
    kt_moe_occupancy o = {0, 0, 0};
    if (!count) abort();
    for (long i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < E) count[ids[i]]++;
    for (long e = 0; e < E; e++) {
        o.touched += count[e] > 0;
        o.busiest = count[e] > o.busiest ? count[e] : o.busiest;
        o.tiles += (count[e] + TM - 1) / TM;
    }
    free(count);
    return o;
}

/* The routing of problem p: a function of the problem alone (not of the fill's seed), so that
 * bytes() counts the experts the bench's inputs touch. */
static uint64_t routing_seed(const kt_problem *p) {
    return kt_hash(p->dim, sizeof p->dim, ROUTING_SEED ^ (uint64_t)p->m);
}

void kt_moe_problem_routing(const kt_problem *p, int *ids) {
    moe_dims d = dims_of(p);
    kt_moe_draw_routing(d.M, d.topk, d.E, d.dist, routing_seed(p), ids, NULL);
}

static long touched_of(const kt_problem *p) {
    moe_dims d = dims_of(p);
    int *ids = malloc(sizeof(int) * (size_t)d.MT);
    if (!ids) abort();
    kt_moe_problem_routing(p, ids);
    long t = kt_moe_occupancy_of(ids, d.MT, d.E, 1).touched;
    free(ids);
    return t;
}

/* ------------------------------------------------------------ the problem */

static int check_problem(const kt_problem *p, char *why, size_t n) {
    moe_dims d = dims_of(p);
    if (d.fmt < 0 || d.fmt > 1 || d.stage < 0 || d.stage > 1 || d.dist < 0 || d.dist > 3)
        return snprintf(why, n,
                        "moe_gemm: FORMAT is fp8 or mxfp4, STAGE gateup or down, DIST uniform, zipf, hot or gate"),
               -1;
    if (d.N % (d.stage == KT_MOE_GATEUP ? 256 : 128) || d.K % 128)
        return snprintf(why, n, "N=%ld, K=%ld: moe_gemm needs K and N (gate+up: N/2) to be multiples of 128", d.N, d.K),
               -1;
    if (d.E < 1 || d.E > 4096 || d.topk < 1 || d.topk > d.E || d.topk > 16)
        return snprintf(why, n, "E=%ld, TOPK=%ld: moe_gemm takes 1 <= TOPK <= min(E, 16), E <= 4096", d.E, d.topk), -1;
    if (d.M < 1 || d.M > 4096) return snprintf(why, n, "M=%ld: moe_gemm supports M from 1 to 4096", d.M), -1;
    return 0;
}

static long align_offset(const moe_dims *d, int tm_index) {
    long off = 0;
    for (int i = 0; i < tm_index; i++) off += kt_moe_align_ints(d->M, d->topk, d->E, kt_moe_tm_values[i]);
    return off;
}

static size_t weight_bytes(const moe_dims *d) { return (size_t)(d->E * d->N * d->K / (d->fmt == KT_MOE_FP8 ? 1 : 2)); }
static size_t weight_scales(const moe_dims *d) {
    return (size_t)(d->fmt == KT_MOE_FP8 ? d->E * (d->N / 128) * d->KB : d->E * d->N * (d->K / 32));
}
/* Counters of the last-CTA epilogues: gate+up's per (tile of 8, 128 columns), down's per (token, 16 columns). */
static size_t counters(const moe_dims *d) {
    long tiles = kt_moe_max_tiles(d->M, d->topk, d->E, 8);
    long gu = (tiles < d->MT ? tiles : d->MT) * (d->N / 256), dn = d->M * (d->N / 16);
    return (size_t)(d->stage == KT_MOE_GATEUP ? gu : dn);
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    moe_dims d = dims_of(p);
    int gu = d.stage == KT_MOE_GATEUP;
    size_t rows = (size_t)(gu ? d.M : d.MT), MT = (size_t)d.MT;
    t[KT_MOE_T_X] = (kt_tensor_desc){"x", KT_E4M3, rows * d.K, KT_INPUT};
    t[KT_MOE_T_XS] = (kt_tensor_desc){"xs", KT_F32, rows * d.KB, KT_INPUT};
    t[KT_MOE_T_W] = (kt_tensor_desc){"w", KT_U8, weight_bytes(&d), KT_INPUT};
    t[KT_MOE_T_WS] = (kt_tensor_desc){"ws", d.fmt == KT_MOE_FP8 ? KT_F32 : KT_U8, weight_scales(&d), KT_INPUT};
    t[KT_MOE_T_IDS] = (kt_tensor_desc){"topk_ids", KT_I32, MT, KT_INPUT};
    t[KT_MOE_T_TOPW] = (kt_tensor_desc){"topk_weights", KT_F32, gu ? 1 : MT, KT_INPUT};
    t[KT_MOE_T_SHARED] = (kt_tensor_desc){"shared", KT_BF16, gu ? 1 : (size_t)(d.M * d.N), KT_INPUT};
    t[KT_MOE_T_ALIGN] = (kt_tensor_desc){"align", KT_I32, (size_t)align_offset(&d, KT_MOE_N_TM), KT_INPUT};
    if (gu) {
        t[KT_MOE_T_OUT] = (kt_tensor_desc){"h", KT_E4M3, MT * (d.N / 2), KT_OUTPUT};
        t[KT_MOE_T_OUTS] = (kt_tensor_desc){"hs", KT_F32, MT * (d.N / 256), KT_OUTPUT};
    } else {
        t[KT_MOE_T_OUT] = (kt_tensor_desc){"out", KT_BF16, (size_t)(d.M * d.N), KT_OUTPUT};
        t[KT_MOE_T_OUTS] = (kt_tensor_desc){"unused", KT_F32, 1, KT_INPUT};
    }
    t[KT_MOE_T_PART] = (kt_tensor_desc){"partials", KT_F32, 8 * MT * d.N, KT_TEMP};
    t[KT_MOE_T_CNT] = (kt_tensor_desc){"counters", KT_I32, counters(&d), KT_SCRATCH};
    return KT_MOE_T_COUNT;
}

/* Seeded e4m3 codes over every non-NaN code, eight from each draw (the weights are large). */
static void fill_codes_fast(uint8_t *x, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = kt_rng_next(rng);
        for (size_t j = 0; j < 8 && i + j < n; j++, r >>= 8) {
            uint8_t c = (uint8_t)r;
            x[i + j] = (c & 0x7f) == 0x7f ? c ^ 1 : c;
        }
    }
}

/* One expert's weights: seeded where it is touched; elsewhere NaN (FP8 codes and scales, MXFP4
 * scales), so that a kernel reading an expert no slot routes to fails the check. */
static void fill_expert(const moe_dims *d, int touched, long e, uint8_t *w, void *ws, uint64_t *rng) {
    size_t wb = weight_bytes(d) / (size_t)d->E, sb = weight_scales(d) / (size_t)d->E;
    uint8_t *we = w + e * wb;
    if (d->fmt == KT_MOE_FP8) {
        float *s = (float *)ws + e * sb;
        if (!touched) {
            memset(we, 0xff, wb);
            memset(s, 0xff, sb * sizeof *s);
            return;
        }
        fill_codes_fast(we, wb, rng);
        kt_fp8_gemm_fill_scales(s, sb, rng);
        /* gate and up around 8 (some beyond the clip at 10), down's sums around 30 */
        for (size_t i = 0; d->stage == KT_MOE_GATEUP && i < sb; i++) s[i] *= 0.125f;
    } else {
        uint8_t *s = (uint8_t *)ws + e * sb;
        if (!touched) {
            memset(we, 0, wb);
            memset(s, 0xff, sb);
            return;
        }
        for (size_t i = 0; i < wb; i += 8) {
            uint64_t r = kt_rng_next(rng);
            memcpy(we + i, &r, wb - i < 8 ? wb - i : 8);
        }
        for (size_t i = 0; i < sb; i++)
            s[i] = (uint8_t)((d->stage == KT_MOE_GATEUP ? 121 : 125) + kt_rng_next(rng) % 4);
    }
}

void kt_moe_fill_inputs(const kt_problem *p, const int *ids, uint64_t seed, void *const *host) {
    moe_dims d = dims_of(p);
    int gu = d.stage == KT_MOE_GATEUP;
    uint64_t rng = seed;
    size_t rows = (size_t)(gu ? d.M : d.MT);
    if (host[KT_MOE_T_X]) fill_codes_fast(host[KT_MOE_T_X], rows * d.K, &rng);
    if (host[KT_MOE_T_XS]) kt_fp8_gemm_fill_scales(host[KT_MOE_T_XS], rows * d.KB, &rng);
    char *seen = calloc((size_t)d.E, 1);
    if (!seen) abort();
    for (long i = 0; i < d.MT; i++) seen[ids[i]] = 1;
    for (long e = 0; e < d.E; e++) fill_expert(&d, seen[e], e, host[KT_MOE_T_W], host[KT_MOE_T_WS], &rng);
    free(seen);
    uint16_t *shared = host[KT_MOE_T_SHARED];
    for (size_t i = 0; i < (gu ? 1 : (size_t)(d.M * d.N)); i++)
        shared[i] = kt_float_to_bf16(32.0f * kt_rng_uniform(&rng));
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    moe_dims d = dims_of(p);
    int gu = d.stage == KT_MOE_GATEUP;
    int *ids = host[KT_MOE_T_IDS];
    float *topw = host[KT_MOE_T_TOPW];
    kt_moe_draw_routing(d.M, d.topk, d.E, d.dist, routing_seed(p), ids, gu ? NULL : topw);
    if (gu) topw[0] = 0;
    kt_moe_fill_inputs(p, ids, seed, host);
    int *count = malloc(sizeof(int) * (size_t)d.E);
    if (!count) abort();
    for (int i = 0; i < KT_MOE_N_TM; i++)
        kt_moe_align_ref(ids, d.M, d.topk, d.E, kt_moe_tm_values[i], (int *)host[KT_MOE_T_ALIGN] + align_offset(&d, i),
                         count);
    free(count);
    if (!gu) ((float *)host[KT_MOE_T_OUTS])[0] = 0;
}

/* ------------------------------------------------------------ references */

static double e2m1_value(unsigned code) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return code & 8 ? -mag[code & 7] : mag[code & 7];
}

/* x [K] (e4m3 codes with K/128 scales) . row n of expert e's weights, in float64. */
static double expert_dot(const moe_dims *d, const uint8_t *x, const float *xs, const uint8_t *w, const void *ws, long e,
                         long n, const double *lut) {
    double total = 0;
    for (long kb = 0; kb < d->KB; kb++) {
        double blk = 0;
        if (d->fmt == KT_MOE_FP8) {
            const uint8_t *row = w + (e * d->N + n) * d->K + kb * 128;
            for (int k = 0; k < 128; k++) blk += lut[x[kb * 128 + k]] * lut[row[k]];
            blk *= ((const float *)ws)[(e * (d->N / 128) + n / 128) * d->KB + kb];
        } else {
            const uint8_t *row = w + ((e * d->N + n) * d->K + kb * 128) / 2;
            const uint8_t *sc = (const uint8_t *)ws + (e * d->N + n) * (d->K / 32) + kb * 4;
            for (int g = 0; g < 4; g++) {
                double s = 0;
                for (int k = 0; k < 32; k++) {
                    int kk = g * 32 + k;
                    s += lut[x[kb * 128 + kk]] * e2m1_value((row[kk / 2] >> (kk % 2 * 4)) & 15);
                }
                blk += s * ldexp(1.0, sc[g] - 127);
            }
        }
        total += blk * xs[kb];
    }
    return total;
}

/* SiLU(min(g, L)) * clamp(u, -L, L), as V4's experts compute it. */
static double swiglu(double g, double u) {
    g = g < SWIGLU_LIMIT ? g : SWIGLU_LIMIT;
    u = u < -SWIGLU_LIMIT ? -SWIGLU_LIMIT : u > SWIGLU_LIMIT ? SWIGLU_LIMIT : u;
    return g / (1.0 + exp(-g)) * u;
}

static void reference(const kt_problem *p, void *const *host, double *ref) {
    moe_dims d = dims_of(p);
    const uint8_t *x = host[KT_MOE_T_X], *w = host[KT_MOE_T_W];
    const float *xs = host[KT_MOE_T_XS];
    const int *ids = host[KT_MOE_T_IDS];
    double lut[256];
    for (int i = 0; i < 256; i++) lut[i] = kt_e4m3_to_float((uint8_t)i);
    if (d.stage == KT_MOE_GATEUP) {
        long inter = d.N / 2, G = inter / 128;
        uint16_t h[128];
        uint8_t q[128];
        for (long s = 0; s < d.MT; s++) {
            const uint8_t *xr = x + (s / d.topk) * d.K;
            const float *xsr = xs + (s / d.topk) * d.KB;
            for (long g = 0; g < G; g++) {
                for (int c = 0; c < 128; c++) {
                    long col = g * 128 + c;
                    double gate = expert_dot(&d, xr, xsr, w, host[KT_MOE_T_WS], ids[s], col, lut);
                    double up = expert_dot(&d, xr, xsr, w, host[KT_MOE_T_WS], ids[s], inter + col, lut);
                    h[c] = kt_float_to_bf16((float)swiglu(gate, up));
                }
                ref[d.MT * inter + s * G + g] = kt_act_quant_group(h, q);
                for (int c = 0; c < 128; c++) ref[s * inter + g * 128 + c] = kt_e4m3_to_float(q[c]);
            }
        }
        return;
    }
    const float *topw = host[KT_MOE_T_TOPW];
    const uint16_t *shared = host[KT_MOE_T_SHARED];
    for (long m = 0; m < d.M; m++)
        for (long n = 0; n < d.N; n++) {
            double v = kt_bf16_to_float(shared[m * d.N + n]);
            for (long k = 0; k < d.topk; k++) {
                long s = m * d.topk + k;
                v += (double)topw[s] * expert_dot(&d, x + s * d.K, xs + s * d.KB, w, host[KT_MOE_T_WS], ids[s], n, lut);
            }
            ref[m * d.N + n] = v;
        }
}

/* --------------------------------------------------------------- configs */

/* Warps, weight fragments per warp and token fragments of a config. */
typedef struct layout {
    int warps, threads, frag_n, frag_m;
} layout;

static layout layout_of(const kt_config *c) {
    const int *v = c->v;
    layout l = {.warps = v[P_WN] * v[P_WK]};
    l.threads = 32 * l.warps;
    l.frag_n = v[P_TN] / 16 / v[P_WN];
    l.frag_m = v[P_TM] / 8;
    return l;
}

/* Shared memory: the CTA's tokens of its k-range (128 bytes, MXFP4 BF16 256 as bf16, and a scale
 * per (k-block, token)) and, MXFP4 with WIDE, its rows' ue8m0 scales [TN][nkb + 1] (4 bytes each;
 * GATHER: each slot's expert's),
 * then, reusing it, the f32 tile [TM][TN + 4] of the epilogue. */
static int smem_of(const kt_config *c, const moe_dims *d) {
    const int *v = c->v;
    long nkb = (d->KB + v[P_SPLIT] - 1) / v[P_SPLIT], mx = d->fmt == KT_MOE_MXFP4;
    long slab = nkb * v[P_TM] * ((mx && v[P_BF16] ? 256 : 128) + 4) +
                (mx && v[P_WIDE] ? (v[P_GATHER] ? d->topk : 1) * v[P_TN] * (nkb + 1) * 4 : 0);
    long red = (long)v[P_TM] * (v[P_TN] + 4) * 4;
    long s = slab > red ? slab : red;
    return (int)(s < 1L << 30 ? s : 1L << 30);
}

/* CLUSTER=1's cluster: the CTAs of a 128-column quantisation group (256 / TN) times SPLIT. */
static int cluster_ctas(const kt_config *c) { return (c->v[P_TN] < 256 ? 256 / c->v[P_TN] : 1) * c->v[P_SPLIT]; }

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    const int *v = c->v;
    layout l = layout_of(c);
    if (v[P_NATIVE] && arch != 1201)
        return snprintf(why, n, "NATIVE=1 (block-scaled mma kind::mxf8f6f4) needs sm_120a"), -1;
    if (v[P_BF16] && (!v[P_WIDE] || v[P_NATIVE]))
        return snprintf(why, n, "BF16=1 (MXFP4 dequantised to bf16) needs WIDE=1 and NATIVE=0"), -1;
    if (v[P_TN] % (16 * v[P_WN]) || l.frag_n > 4)
        return snprintf(why, n, "%d warps along N do not tile TN=%d in 1-4 fragments of 16", v[P_WN], v[P_TN]), -1;
    if (l.threads > 512) return snprintf(why, n, "%d threads per block (at most 512)", l.threads), -1;
    if (v[P_GATHER] && (v[P_TM] != 8 || v[P_SPLIT] != 1))
        return snprintf(why, n, "GATHER=1 (a CTA per token) needs TM=8 and SPLIT=1"), -1;
    if (v[P_CLUSTER] && (cluster_ctas(c) < 2 || cluster_ctas(c) > 8))
        return snprintf(why, n, "CLUSTER=1 makes (256 / TN) x SPLIT = %d CTAs a cluster (2 to 8)", cluster_ctas(c)), -1;
    if ((long)v[P_TM] * (v[P_TN] + 4) * 4 > SMEM_LIMIT)
        return snprintf(why, n, "the epilogue tile needs %d bytes of shared memory", v[P_TM] * (v[P_TN] + 4) * 4), -1;
    /* running sums (4 a fragment pair), the ring of STAGES k-blocks of weight fragments (FP8:
     * 16 registers and ~4 for addresses each), the k-block's mma operands (16 a fragment, BF16 32) and
     * ~20 more; warp tiles of several weight fragments take ~12 a fragment pair on top (ptxas
     * interleaves their token fragments), one fragment with several token fragments ~28 + 8 a token
     * fragment. Fitted to ptxas on sm_90 (the first H200 sweep and the GPU tests' configs): it
     * refuses the 10 configs that spilled (44-4796 bytes) and keeps the 38 that built without
     * spills (95-238 registers); the last term since three 512-thread configs spilled 8-44 bytes
     * (TM 16 and 32 with one fragment a warp, WIDE 0 and 1, sm_90 and sm_120a; one in the H200
     * run's tune) where TM 64 ones build (165-222). */
    int fn = l.frag_n, fm = l.frag_m;
    int need = 4 * fn * fm + 20 * fn * v[P_RING] + (v[P_BF16] && fm > 1 ? 32 : 16) * fn + 20 +
               (fn > 1   ? 12 * fn * fm
                : fm > 1 ? 8 * fm + 28
                         : 0);
    int have = 65536 / l.threads < 255 ? 65536 / l.threads : 255;
    if (need > have)
        return snprintf(why, n, "needs ~%d registers per thread, %d threads get %d", need, l.threads, have), -1;
    return 0;
}

static int config_fits(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    moe_dims d = dims_of(p);
    long nkb = (d.KB + v[P_SPLIT] - 1) / v[P_SPLIT];
    if ((v[P_NATIVE] || v[P_BF16]) && d.fmt != KT_MOE_MXFP4) return 0; /* MXFP4 weights' paths */
    if (d.stage == KT_MOE_GATEUP && (v[P_TN] < 32 || (d.N / 2) % (v[P_TN] / 2))) return 0;
    if (d.stage == KT_MOE_DOWN && d.N % v[P_TN]) return 0;
    if (v[P_GATHER] && (d.stage != KT_MOE_DOWN || d.topk > 8)) return 0; /* GATHER: a token's slots, one tile */
    if (v[P_EARLY] && d.stage != KT_MOE_DOWN) return 0;                  /* gate+up's expert is its producer's output */
    if (v[P_CLUSTER] && d.stage != KT_MOE_GATEUP) return 0;              /* the SwiGLU's group */
    return v[P_SPLIT] <= d.KB && v[P_WK] <= nkb && smem_of(c, &d) <= SMEM_LIMIT;
}

static int hopeless(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    moe_dims d = dims_of(p);
    long cap = 8;
    while (cap < d.MT) cap *= 2;
    if (v[P_TM] > cap) return 1; /* token rows that are only padding */
    long per_group = (d.KB + v[P_SPLIT] - 1) / v[P_SPLIT] * (v[P_GATHER] ? d.topk : 1) / v[P_WK];
    return v[P_RING] > 1 && v[P_RING] > per_group; /* ring slots no warp fills (GATHER: every slot's k-blocks) */
}

/* Expected touched experts under uniform routing, E (1 - (1 - k/E)^M). */
static double expected_touched(const moe_dims *d) {
    return (double)d->E * (1.0 - pow(1.0 - (double)d->topk / (double)d->E, (double)d->M));
}

static void default_for(const kt_problem *p, int sms, kt_config *c) {
    moe_dims d = dims_of(p);
    /* 8-token tiles (at V4's E = 256, top-6, an expert gets 6 slots at M = 256 on average),
     * 64 weight rows a CTA as 2 warps of 2 fragments, 2 warp groups along K, 16-byte lanes;
     * MXFP4 gate+up on the bf16 mma (down keeps the e4m3 path: its short CTAs want the
     * registers); FP8 down with enough tiles 128 rows a CTA as 4 warps of 2 fragments (all
     * measured on the H200: bench/NOTES.md, fifteenth session, moe); MXFP4 gate+up with enough
     * tiles the one-CTA SwiGLU tile (256 rows as 8 warps of 2 fragments, a ring of 2: no
     * partials; 91.8 against 99-101 us at M = 16, sixteenth session). Then split-K doubled while
     * the CTAs of the expected tiles stay within one wave of 2 an SM, each split keeping 2
     * k-blocks a warp group, and a ring as deep as a warp group's k-blocks (at most 4). */
    *c = (kt_config){{8, 64, 2, 2, 2, 1, 0, 1, d.fmt == KT_MOE_MXFP4 && d.stage == KT_MOE_GATEUP, 0, 0, 0}};
    int *v = c->v;
    double tiles = expected_touched(&d);
    if (tiles > d.MT) tiles = (double)d.MT;
    /* Down with enough tiles: one warp group along K, 4 fragments a warp; FP8 64 rows a CTA with
     * no ring (each warp's loads of its k-blocks issued at once), MXFP4 128 rows with a ring of 2
     * (the H200, V4-Flash TP4, the fast search of tests/gpu/tune24.sh: FP8 M = 16 63.9 -> 54.8 us,
     * M = 64 152.1 -> 127.5, where 128 rows as 4 warps took a ring of 4; MXFP4 M = 16 74.9 ->
     * 59.3, M = 64 176.4 -> 136.2, where 2 warp groups along K; twenty-fourth session) */
    int down_stream = d.stage == KT_MOE_DOWN && tiles * (double)(d.N / 128) >= 4.0 * sms;
    if (down_stream) v[P_TN] = d.fmt == KT_MOE_FP8 ? 64 : 128, v[P_WN] = v[P_TN] / 32, v[P_WK] = 1;
    int swiglu_tile = v[P_BF16] && tiles * (double)(d.N / 256) >= 2.0 * sms;
    if (swiglu_tile) v[P_TN] = 256, v[P_WN] = 8, v[P_WK] = 1;
    double ctas = tiles * (double)(d.N / v[P_TN]);
    while (v[P_SPLIT] < 8 && 2 * ctas * v[P_SPLIT] <= 2.0 * sms && d.KB / (2 * v[P_SPLIT]) >= 2 * v[P_WK])
        v[P_SPLIT] *= 2;
    while (!config_fits(c, p) && v[P_SPLIT] < 8 && 2 * v[P_SPLIT] <= d.KB) v[P_SPLIT] *= 2;
    long per_group = (d.KB + v[P_SPLIT] - 1) / v[P_SPLIT] / v[P_WK];
    v[P_RING] = swiglu_tile ? 2 : per_group >= 4 ? 4 : per_group >= 3 ? 3 : 2;
    if (per_group < 2) v[P_WK] = 1, v[P_RING] = 2;
    if (down_stream) v[P_RING] = d.fmt == KT_MOE_FP8 ? 1 : 2;
    /* Decode's few tokens (the touched experts' down weights well within L2's 50 MB): down reads
     * its expert and first weights before its PDL wait (EARLY), so its loads overlap gate+up's
     * tail (the H200, V4 M = 1: moe_step 25.53 us against 27.46; eighteenth session; L2 bulk
     * prefetches measured slower there and were removed, nineteenth session). */
    double per_expert = (double)(d.N * d.K) / (d.fmt == KT_MOE_FP8 ? 1.0 : 2.0);
    if (d.stage == KT_MOE_DOWN && tiles * per_expert <= SMALL_STEP_BYTES) v[P_EARLY] = 1;
    /* MXFP4 with one token (M = 1): down's CTAs each own 32 of its output columns across all its
     * topk experts (GATHER=1, 2 x 4 warps: each warp one k-block of every slot, a register ring
     * of 6 holding them all, the bf16 mma), the weighted combine in the CTA: no partials or
     * counters (the H200, V4 M = 1: 16 columns a CTA 6.25 us alone against 9.45, moe_step 30.65
     * against 31.7, twenty-first session; 32 columns 6.00 against 6.10, tune24.sh; FP8 measured
     * even in the step, 24.16 against 23.98, and keeps its tile). */
    if (d.stage == KT_MOE_DOWN && d.fmt == KT_MOE_MXFP4 && d.M == 1 && v[P_EARLY]) {
        kt_config g = *c;
        g.v[P_TN] = 32, g.v[P_WN] = 2, g.v[P_WK] = 4, g.v[P_RING] = 6, g.v[P_SPLIT] = 1, g.v[P_GATHER] = 1;
        g.v[P_BF16] = 1;
        if (config_fits(&g, p) && !hopeless(&g, p)) *c = g;
    }
    /* Gate+up split along K in one wave (decode): its SwiGLU group's CTAs and k-ranges as a
     * cluster, their sums through distributed shared memory instead of the partials' fence,
     * counter and L2 round trips (the H200, V4 M = 1: FP8 12.85 -> 11.14 us, MXFP4 12.00 -> 10.88;
     * at M = 16, several waves and a cluster of 4, 97.5 -> 100.5: slower; nineteenth session). */
    int group = cluster_ctas(c);
    if (d.stage == KT_MOE_GATEUP && v[P_SPLIT] > 1 && group <= 8 && ctas * v[P_SPLIT] <= 2.0 * sms) v[P_CLUSTER] = 1;
    /* ... and twice the warps a CTA there: FP8 4 warps of 1 fragment with a ring of 3, MXFP4 (bf16
     * mma) 128 rows as 8 warps with a ring of 2 (the H200, V4-Flash TP4 M = 1, tune24.sh: FP8 11.10
     * -> 10.35 us, moe_step 23.99 -> 22.98; MXFP4 10.88 -> 10.07, with down's 32 columns moe_step
     * 30.85 -> 26.44) */
    kt_config w = *c;
    if (d.fmt == KT_MOE_FP8)
        w.v[P_WN] = 4, w.v[P_RING] = 3;
    else
        w.v[P_TN] = 128, w.v[P_WN] = 8, w.v[P_RING] = 2;
    if (v[P_CLUSTER] && v[P_TN] == 64 && v[P_WN] == 2 && config_fits(&w, p) && !hopeless(&w, p) &&
        cluster_ctas(&w) <= 8)
        *c = w;
}

/* ---------------------------------------------------------------- launch */

static int launch(const kt_launch *l) {
    const int *v = l->config->v;
    moe_dims d = dims_of(l->problem);
    layout lay = layout_of(l->config);
    int tm_index = 0;
    while (tm_index < KT_MOE_N_TM - 1 && kt_moe_tm_values[tm_index] != v[P_TM]) tm_index++;
    uint64_t p[KT_MOE_T_COUNT];
    memcpy(p, l->ptr, sizeof p);
    p[KT_MOE_T_ALIGN] += (uint64_t)align_offset(&d, tm_index) * 4;
    int M = (int)d.M, topk = (int)d.topk, E = (int)d.E, N = (int)d.N, K = (int)d.K;
    void *args[] = {&p[KT_MOE_T_X],
                    &p[KT_MOE_T_XS],
                    &p[KT_MOE_T_W],
                    &p[KT_MOE_T_WS],
                    &p[KT_MOE_T_IDS],
                    &p[KT_MOE_T_TOPW],
                    &p[KT_MOE_T_SHARED],
                    &p[KT_MOE_T_ALIGN],
                    &p[KT_MOE_T_OUT],
                    &p[KT_MOE_T_OUTS],
                    &p[KT_MOE_T_PART],
                    &p[KT_MOE_T_CNT],
                    &M,
                    &topk,
                    &E,
                    &N,
                    &K};
    long tiles = kt_moe_max_tiles(d.M, d.topk, d.E, v[P_TM]);
    if (tiles > d.MT) tiles = d.MT; /* a used tile holds a slot at least */
    if (v[P_GATHER]) tiles = d.M;   /* a CTA per token */
    int kernel = (d.fmt == KT_MOE_FP8 ? K_FP8_GATEUP : K_MXFP4_GATEUP) + (d.stage == KT_MOE_DOWN);
    return kt_launch_kernel_pdl(l->mod, kernel, (unsigned)(d.N / v[P_TN]), (unsigned)tiles, (unsigned)v[P_SPLIT],
                                (unsigned)lay.threads, (unsigned)smem_of(l->config, &d), l->stream, args);
}

static int launch_reference(const kt_launch *l, uint64_t ref) {
    moe_dims d = dims_of(l->problem);
    uint64_t p[KT_MOE_T_COUNT];
    memcpy(p, l->ptr, sizeof p);
    int M = (int)d.M, topk = (int)d.topk, E = (int)d.E, N = (int)d.N, K = (int)d.K, fmt = d.fmt;
    void *args[] = {&p[KT_MOE_T_X],
                    &p[KT_MOE_T_XS],
                    &p[KT_MOE_T_W],
                    &p[KT_MOE_T_WS],
                    &p[KT_MOE_T_IDS],
                    &p[KT_MOE_T_TOPW],
                    &p[KT_MOE_T_SHARED],
                    &ref,
                    &M,
                    &topk,
                    &E,
                    &N,
                    &K,
                    &fmt};
    if (d.stage == KT_MOE_DOWN)
        return kt_launch_kernel(l->ref_mod, K_REF_DOWN, (unsigned)((d.M * d.N + 127) / 128), 1, 1, 128, 0, l->stream,
                                args);
    long outs = d.MT * (d.N / 2), groups = d.MT * (d.N / 256);
    if (kt_launch_kernel(l->ref_mod, K_REF_GATEUP, (unsigned)((outs + 127) / 128), 1, 1, 128, 0, l->stream, args))
        return -1;
    void *qargs[] = {&ref, &M, &topk, &N};
    return kt_launch_kernel(l->ref_mod, K_REF_QUANT, (unsigned)((groups + 127) / 128), 1, 1, 128, 0, l->stream, qargs);
}

/* ------------------------------------------------------------- the floor */

/* The touched experts' weights and scales, the activations read and the outputs written. */
static double bytes(const kt_problem *p) {
    moe_dims d = dims_of(p);
    double per_expert = (double)(weight_bytes(&d) + weight_scales(&d) * (d.fmt == KT_MOE_FP8 ? 4 : 1)) / (double)d.E;
    double act = d.K * (1 + 4.0 / 128), moved = (double)touched_of(p) * per_expert + 8.0 * d.MT;
    if (d.stage == KT_MOE_GATEUP) return moved + d.M * act + d.MT * (d.N / 2) * (1 + 4.0 / 128);
    return moved + d.MT * act + 4.0 * d.M * d.N;
}

static double flops(const kt_problem *p) {
    moe_dims d = dims_of(p);
    return 2.0 * d.MT * d.N * d.K;
}

static void bench_fields(const kt_problem *p, char *json, size_t n) {
    snprintf(json, n, ", \"touched_experts\": %ld", touched_of(p));
}

/* The vendor baseline of bench/baselines.c, by weak reference (the runtime library links no
 * cuBLAS): the same GEMMs over the touched experts as one cuBLAS grouped bf16 call. */
int kt_baseline_cublas_grouped_prepare(const kt_problem *p, void **state) __attribute__((weak));
int kt_baseline_cublas_grouped_enqueue(void *state, const kt_launch *l) __attribute__((weak));
void kt_baseline_cublas_grouped_release(void *state) __attribute__((weak));
static const kt_baseline cublas_grouped = {.name = "cublas_bf16_grouped",
                                           .prepare = kt_baseline_cublas_grouped_prepare,
                                           .enqueue = kt_baseline_cublas_grouped_enqueue,
                                           .release = kt_baseline_cublas_grouped_release};
static const kt_baseline *const baselines[] = {&cublas_grouped, NULL};

static const char *const kernel_names[] = {
    "moe_gemm_fp8_gateup", "moe_gemm_fp8_down", "moe_gemm_mxfp4_gateup", "moe_gemm_mxfp4_down",
    "moe_ref_gateup",      "moe_ref_quant",     "moe_ref_down",          NULL};
const char *const kt_moe_format_names[] = {"fp8", "mxfp4", NULL};
const char *const kt_moe_stage_names[] = {"gateup", "down", NULL};

/* V4-Flash at TP4, one rank: E 256, top-6, gate+up (N 1024, K 4096), down (N 4096, K 512), FP8
 * and MXFP4, uniform and Zipf routing. */
static const long target_shapes[][KT_MAX_DIMS] = {{0, 0, 256, 1024, 4096, 6, 0}, {0, 1, 256, 4096, 512, 6, 0},
                                                  {1, 0, 256, 1024, 4096, 6, 0}, {1, 1, 256, 4096, 512, 6, 0},
                                                  {0, 0, 256, 1024, 4096, 6, 1}, {0, 1, 256, 4096, 512, 6, 1},
                                                  {1, 0, 256, 1024, 4096, 6, 1}, {1, 1, 256, 4096, 512, 6, 1}};

const kt_family kt_family_moe_gemm = {
    .name = "moe_gemm",
    .summary = "MoE grouped GEMM over the touched experts: gate+up (SwiGLU, e4m3 requant) or down (weighted "
               "combine + shared), FP8 or MXFP4 weights",
    .source = "moe_gemm.cu",
    .kernels = kernel_names,
    .n_keys = KT_MOE_KEYS,
    .keys = {{"FORMAT", KT_KEY_CATEGORY, kt_moe_format_names},
             {"STAGE", KT_KEY_CATEGORY, kt_moe_stage_names},
             {"E"},
             {"N"},
             {"K"},
             {"TOPK"},
             {"DIST", KT_KEY_CATEGORY, kt_moe_dist_names}},
    .m_name = "M",
    .n_params = 12,
    .params = {{"TM", 4, {8, 16, 32, 64}},
               {"TN", 5, {16, 32, 64, 128, 256}},
               {"WARPS_N", 4, {1, 2, 4, 8}},
               {"WARPS_K", 3, {1, 2, 4}},
               {"STAGES", 6, {1, 2, 3, 4, 6, 8}},
               {"SPLIT", 4, {1, 2, 4, 8}},
               {"NATIVE", 2, {0, 1}},
               {"WIDE", 2, {0, 1}},
               {"BF16", 2, {0, 1}},
               {"GATHER", 2, {0, 1}},
               {"EARLY", 2, {0, 1}},
               {"CLUSTER", 2, {0, 1}}},
    .strata_params = 2,
    .default_config = {{8, 64, 2, 2, 2, 1, 0, 1, 0, 0, 0, 0}},
    .target_shapes = target_shapes,
    .n_target_shapes = 8,
    KT_FAMILY_HOOKS,
    .hopeless = hopeless,
    .default_for = default_for,
    KT_FAMILY_GPU_REFERENCE(1 << 20),
    .tolerance = 1e-2,
    .flops = flops,
    .mma = KT_MMA_E4M3, /* the portable path: the weights dequantised to e4m3 operands (NATIVE=1: block-scaled) */
    .rotation_bytes = bytes,
    .bench_fields = bench_fields,
    .baselines = baselines,
};
