/* moe_route.c — host descriptor of the MoE routing + alignment family (kernels/moe_route.cu):
 * f32 gate logits [M, E] and the correction bias [E] in (ROUTER=HASH: the tokens [M] and the
 * tid2eid table [rows, TOPK] too, its bias unread); topk_ids, topk_weights and the alignment
 * records of kernels/common/moe_layout.h out. Key: ROUTER (V4, V3, HASH), E, TOPK, TM and
 * NTM (records for the grouped GEMM's token tiles TM, 2 TM, ..., 2^(NTM-1) TM: the GEMM tunes
 * its tile and reads its own), DIST (uniform, zipf, hot, gate: what the fill's routing follows). */
#include "family_hooks.h"
#include "../runtime/kt.h"
#include "common/moe_layout.h"
#include "common/moe_router.h"
#include "moe_gemm.h"
#include "moe_route.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { P_WARPS, P_FUSED, P_BLOCKS, P_SMALL, P_SPREAD };
enum { T_LOGITS, T_BIAS, T_IDS, T_WEIGHTS, T_REC, T_TOKENS, T_TABLE, T_COUNT };
enum { K_FUSED, K_TOKENS, K_ALIGN };
#define HIST_INTS 8192 /* the kernel's per-warp expert counts: WARPS * E of them */
#define MAX_M 8192

const char *const kt_moe_router_names[] = {"V4", "V3", "HASH", NULL};
const char *const kt_moe_dist_names[] = {"uniform", "zipf", "hot", "gate", NULL};

static int check_problem(const kt_problem *p, char *why, size_t n) {
    long E = p->dim[KT_MR_E], K = p->dim[KT_MR_TOPK], TM = p->dim[KT_MR_TM];
    const int router = (int)p->dim[KT_MR_ROUTER];
    if (E % 32 || E < 32 || E > KT_MOE_MAX_E)
        return snprintf(why, n, "E=%ld: moe_route needs a multiple of 32 experts up to %d", E, KT_MOE_MAX_E), -1;
    if (router == KT_MOE_ROUTER_V3 && E % 256)
        return snprintf(why, n, "E=%ld: the V3 router's 8 groups need E to be a multiple of 256", E), -1;
    long most = router == KT_MOE_ROUTER_V3 ? E / KT_MOE_V3_GROUPS * KT_MOE_V3_TOPK_GROUPS : E;
    if (K < 1 || K > KT_MOE_MAX_TOPK || K > most)
        return snprintf(why, n, "TOPK=%ld: moe_route takes 1 to %ld experts a token here", K,
                        most < KT_MOE_MAX_TOPK ? most : KT_MOE_MAX_TOPK),
               -1;
    long NTM = p->dim[KT_MR_NTM];
    if (NTM < 1 || NTM > KT_MOE_MAX_NTM)
        return snprintf(why, n, "NTM=%ld: moe_route writes 1 to %d alignment records", NTM, KT_MOE_MAX_NTM), -1;
    if (TM < 1 || TM << (NTM - 1) > 256)
        return snprintf(why, n, "TM=%ld, NTM=%ld: moe_route pads to token tiles of 1 to 256 rows", TM, NTM), -1;
    if (p->m < 1 || p->m > MAX_M) return snprintf(why, n, "M=%ld: moe_route supports M from 1 to %d", p->m, MAX_M), -1;
    return 0;
}

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)c;
    (void)arch;
    (void)why;
    (void)n;
    return 0; /* 1 to 32 warps and either path build everywhere */
}

/* The block's per-warp expert counts fit its shared memory, and the one-kernel path's slots. */
static int config_fits(const kt_config *c, const kt_problem *p) {
    return c->v[P_WARPS] * p->dim[KT_MR_E] <= HIST_INTS &&
           (!c->v[P_FUSED] || p->m * p->dim[KT_MR_TOPK] <= KT_MOE_FUSED_SLOTS);
}

/* One launch while a block's warps route every token in one pass; two above, where routing
 * spreads over the GPU. 16 aligning blocks share the padding rows, most of the records; up to
 * 32 slots one warp aligns them (SMALL=1), and a lone token's scores spread over the block's
 * warps (SPREAD=1). */
static void default_for(const kt_problem *p, int sms, kt_config *c) {
    (void)sms;
    *c = (kt_config){{8, p->m <= 8, 16, 1, 1}};
    if (!config_fits(c, p)) c->v[P_FUSED] = 0;
}

/* Offset of record r of p's alignment output (r = NTM: its size). */
static long record_offset(const kt_problem *p, int r) {
    return kt_moe_align_multi_offset(p->m, p->dim[KT_MR_TOPK], p->dim[KT_MR_E], p->dim[KT_MR_TM], r);
}
static long record_ints(const kt_problem *p) { return record_offset(p, (int)p->dim[KT_MR_NTM]); }

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t M = p->m, E = p->dim[KT_MR_E], K = p->dim[KT_MR_TOPK];
    t[T_LOGITS] = (kt_tensor_desc){"logits", KT_F32, M * E, KT_INPUT};
    t[T_BIAS] = (kt_tensor_desc){"bias", KT_F32, E, KT_INPUT};
    /* ids in choice order and the record in its defined order: both exact */
    t[T_IDS] = (kt_tensor_desc){"topk_ids", KT_I32, M * K, KT_OUTPUT, KT_CMP_EXACT};
    t[T_WEIGHTS] = (kt_tensor_desc){"topk_weights", KT_F32, M * K, KT_OUTPUT};
    t[T_REC] = (kt_tensor_desc){"align", KT_I32, (size_t)record_ints(p), KT_OUTPUT, KT_CMP_EXACT};
    /* HASH's tokens and table (the fill's KT_MOE_HASH_ROWS rows; a model's has its vocab's);
     * one-element inputs the other routers never read */
    int hash = p->dim[KT_MR_ROUTER] == KT_MOE_ROUTER_HASH;
    t[T_TOKENS] = (kt_tensor_desc){"tokens", KT_I32, hash ? M : 1, KT_INPUT};
    t[T_TABLE] = (kt_tensor_desc){"tid2eid", KT_I32, hash ? KT_MOE_HASH_ROWS * K : 1, KT_INPUT};
    return T_COUNT;
}

/* A double in [0, 1) from the generator. */
static double uniform01(uint64_t *rng) { return (double)(kt_rng_next(rng) >> 11) * 0x1p-53; }

/* Draws topk distinct experts into pick[]: the hot expert first when the coin says so, the
 * rest by the cumulative weights cdf[E], rejecting repeats and, for V3 (group_size > 0),
 * experts that would spread the token over more groups than the router keeps. */
static void draw_experts(long E, long topk, const double *cdf, int hot, double hot_share, long group_size,
                         uint64_t *rng, int *pick) {
    int n = 0;
    if (hot >= 0 && uniform01(rng) < hot_share) pick[n++] = hot;
    while (n < topk) {
        double u = uniform01(rng) * cdf[E - 1];
        long lo = 0, hi = E - 1;
        while (lo < hi) {
            long mid = (lo + hi) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        int dup = (int)lo == hot, groups = 0, new_group = 1;
        unsigned used = 0;
        for (int i = 0; i < n; i++) {
            dup |= pick[i] == (int)lo;
            if (group_size) used |= 1u << (pick[i] / group_size);
        }
        if (group_size) {
            new_group = !(used >> (lo / group_size) & 1);
            for (int g = 0; g < KT_MOE_V3_GROUPS; g++) groups += used >> g & 1;
        }
        if (!dup && !(new_group && groups == KT_MOE_V3_TOPK_GROUPS)) pick[n++] = (int)lo;
    }
}

static float on_grid(double x) { return (float)(round(x * 64.0) / 64.0); }

void kt_moe_route_fill(int router, long E, long topk, int dist, long M, uint64_t seed, float *logits, float *bias) {
    uint64_t rng = seed;
    if (dist == KT_MOE_DIST_GATE) { /* the synthetic gate itself: its logits and bias, nothing planted */
        kt_moe_gate_logits(M, E, &rng, logits, bias);
        return;
    }
    int *rank = calloc((size_t)E, sizeof(int)); /* the popularity ranking: rank[r] is the r-th expert */
    double *cdf = malloc(sizeof(double) * E);
    if (!rank || !cdf) abort();
    for (long e = 0; e < E; e++) rank[e] = (int)e;
    for (long e = E - 1; e > 0; e--) {
        long j = (long)(kt_rng_next(&rng) % (uint64_t)(e + 1));
        int x = rank[e];
        rank[e] = rank[j];
        rank[j] = x;
    }
    double *w = cdf; /* weights by expert, then summed in place */
    for (long r = 0; r < E; r++) w[rank[r]] = dist == KT_MOE_DIST_ZIPF ? pow((double)(r + 1), -1.1) : 1.0;
    for (long e = 1; e < E; e++) cdf[e] += cdf[e - 1];
    int hot = dist == KT_MOE_DIST_HOT ? rank[0] : -1;
    double hot_share = fmin(1.0, 0.25 * (double)topk);
    for (long e = 0; e < E; e += 2)
        bias[e] = bias[e + 1] = (float)((double)(kt_rng_next(&rng) % 33) / 1024.0 - 16.0 / 1024.0);
    /* The drawn experts well above the rest under either score: V4's sqrt(softplus) >= 1.76
     * against <= 1.17; V3's sigmoid >= 0.88 against <= 0.27, so that a group holding a drawn
     * expert (top two >= 0.92) beats every other (<= 0.54). */
    double high = router == KT_MOE_ROUTER_V4 ? 3.0 : 2.0, low = router == KT_MOE_ROUTER_V4 ? -1.0 : -3.0;
    long group_size = router == KT_MOE_ROUTER_V3 ? E / KT_MOE_V3_GROUPS : 0;
    int pick[KT_MOE_MAX_TOPK];
    for (long t = 0; t < M; t++) {
        float *row = logits + t * E;
        if (t % 16 == 5) {
            for (long e = 0; e < E; e++) row[e] = 0.5f;
            continue;
        }
        for (long e = 0; e < E; e++) row[e] = on_grid(low + 2.0 * uniform01(&rng));
        draw_experts(E, topk, cdf, hot, hot_share, group_size, &rng, pick);
        for (long i = 0; i < topk; i++) row[pick[i]] = on_grid(high + uniform01(&rng));
    }
    free(rank);
    free(cdf);
}

/* HASH: V4's logits (only the table's experts' scores count), the table's rows drawn from
 * DIST (kt_moe_draw_routing: distinct experts a row) and seeded tokens over its rows; the
 * other routers' one-element tokens and table 0. */
static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    const int router = (int)p->dim[KT_MR_ROUTER], dist = (int)p->dim[KT_MR_DIST];
    const long E = p->dim[KT_MR_E], K = p->dim[KT_MR_TOPK];
    kt_moe_route_fill(router == KT_MOE_ROUTER_HASH ? KT_MOE_ROUTER_V4 : router, E, K, dist, p->m, seed, host[T_LOGITS],
                      host[T_BIAS]);
    int *tokens = host[T_TOKENS], *table = host[T_TABLE];
    if (router != KT_MOE_ROUTER_HASH) {
        tokens[0] = table[0] = 0;
        return;
    }
    uint64_t rng = seed ^ 0x68617368ULL;
    kt_moe_draw_routing(KT_MOE_HASH_ROWS, K, E, dist, kt_rng_next(&rng), table, NULL);
    for (long t = 0; t < p->m; t++) tokens[t] = (int)(kt_rng_next(&rng) % KT_MOE_HASH_ROWS);
}

double kt_moe_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
double kt_moe_sqrt_softplus_f64(double x) { return sqrt(x > 20.0 ? x : log1p(exp(x))); }

/* The weights of a token's chosen experts ids[K]: the float64 scores, normalised, scaled. */
static void ref_weights(int router, long K, const float *logits, const int *ids, double *weights) {
    double sum = 0;
    for (long k = 0; k < K; k++) {
        double x = logits[ids[k]];
        weights[k] = router == KT_MOE_ROUTER_V3 ? kt_moe_sigmoid_f64(x) : kt_moe_sqrt_softplus_f64(x);
        sum += weights[k];
    }
    for (long k = 0; k < K; k++) weights[k] = weights[k] / (sum + 1e-20) * kt_moe_scale(router);
}

void kt_moe_hash_token_ref(long K, const float *logits, const int *row, int *ids, double *weights) {
    for (long k = 0; k < K; k++) ids[k] = row[k];
    ref_weights(KT_MOE_ROUTER_HASH, K, logits, ids, weights);
}

/* a before b in the choice order: the larger value, then the lower index (-0 == +0). */
static int chosen_first(float va, long a, float vb, long b) { return va > vb || (va == vb && a < b); }

/* The V3 group limit on value[E]: the groups outside the best 4 (by the sum of their two
 * largest values) get 0. */
static void v3_mask(long E, float *value) {
    const long per = E / KT_MOE_V3_GROUPS;
    float gscore[KT_MOE_V3_GROUPS];
    for (int g = 0; g < KT_MOE_V3_GROUPS; g++) {
        long a = -1, b = -1; /* the two largest of the group */
        for (long e = g * per; e < (g + 1) * per; e++) {
            if (a < 0 || value[e] > value[a])
                b = a, a = e;
            else if (b < 0 || value[e] > value[b])
                b = e;
        }
        gscore[g] = value[a] + value[b];
    }
    int chosen[KT_MOE_V3_GROUPS] = {0};
    for (int r = 0; r < KT_MOE_V3_TOPK_GROUPS; r++) {
        int best = -1;
        for (int g = 0; g < KT_MOE_V3_GROUPS; g++)
            if (!chosen[g] && (best < 0 || chosen_first(gscore[g], g, gscore[best], best))) best = g;
        chosen[best] = 1;
    }
    for (long e = 0; e < E; e++)
        if (!chosen[e / per]) value[e] = 0.0f;
}

void kt_moe_route_token_ref(int router, long E, long topk, const float *logits, const float *bias, int *ids,
                            double *weights) {
    float value[KT_MOE_MAX_E];
    int taken[KT_MOE_MAX_E] = {0};
    for (long e = 0; e < E; e++) value[e] = kt_moe_choice(kt_moe_score(router, logits[e]), bias[e]);
    if (router == KT_MOE_ROUTER_V3) v3_mask(E, value);
    for (long k = 0; k < topk; k++) {
        long best = -1;
        for (long e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || chosen_first(value[e], e, value[best], best))) best = e;
        taken[best] = 1;
        ids[k] = (int)best;
    }
    ref_weights(router, topk, logits, ids, weights);
}

/* Expected outputs: the reference routing, then moe_layout.h's reference alignment of it. */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    const long M = p->m, E = p->dim[KT_MR_E], K = p->dim[KT_MR_TOPK], TM = p->dim[KT_MR_TM];
    const int router = (int)p->dim[KT_MR_ROUTER];
    const float *logits = host[T_LOGITS], *bias = host[T_BIAS];
    const int *tokens = host[T_TOKENS], *table = host[T_TABLE];
    int *ids = malloc(sizeof(int) * M * K), *rec = malloc(sizeof(int) * record_ints(p)),
        *count = malloc(sizeof(int) * E);
    double *w = malloc(sizeof(double) * K);
    if (!ids || !rec || !count || !w) abort();
    for (long t = 0; t < M; t++) {
        if (router == KT_MOE_ROUTER_HASH)
            kt_moe_hash_token_ref(K, logits + t * E, table + (long)tokens[t] * K, ids + t * K, w);
        else
            kt_moe_route_token_ref(router, E, K, logits + t * E, bias, ids + t * K, w);
        for (long k = 0; k < K; k++) ref[M * K + t * K + k] = w[k];
    }
    for (long i = 0; i < M * K; i++) ref[i] = ids[i];
    for (int r = 0; r < p->dim[KT_MR_NTM]; r++)
        kt_moe_align_ref(ids, M, K, E, TM << r, rec + record_offset(p, r), count);
    for (long i = 0; i < record_ints(p); i++) ref[2 * M * K + i] = rec[i];
    free(ids);
    free(rec);
    free(count);
    free(w);
}

static int launch(const kt_launch *l) {
    const kt_problem *p = l->problem;
    int M = (int)p->m, E = (int)p->dim[KT_MR_E], K = (int)p->dim[KT_MR_TOPK], TM = (int)p->dim[KT_MR_TM];
    int NTM = (int)p->dim[KT_MR_NTM], router = (int)p->dim[KT_MR_ROUTER], warps = l->config->v[P_WARPS];
    unsigned blocks = (unsigned)l->config->v[P_BLOCKS], threads = (unsigned)(32 * warps);
    int small = l->config->v[P_SMALL], spread = l->config->v[P_SPREAD];
    kt_moe_rec_geom g = kt_moe_rec_geometry(M, K, E, TM, NTM);
    uint64_t ptr[T_COUNT];
    memcpy(ptr, l->ptr, sizeof ptr);
    if (l->config->v[P_FUSED]) {
        void *args[] = {&ptr[T_LOGITS],
                        &ptr[T_BIAS],
                        &ptr[T_IDS],
                        &ptr[T_WEIGHTS],
                        &ptr[T_REC],
                        &ptr[T_TOKENS],
                        &ptr[T_TABLE],
                        &M,
                        &E,
                        &K,
                        &TM,
                        &NTM,
                        &router,
                        &g,
                        &small,
                        &spread};
        return kt_launch_kernel_pdl(l->mod, K_FUSED, blocks, 1, 1, threads, 0, l->stream, args);
    }
    void *route[] = {
        &ptr[T_LOGITS], &ptr[T_BIAS], &ptr[T_IDS], &ptr[T_WEIGHTS], &ptr[T_TOKENS], &ptr[T_TABLE], &M, &E, &K, &router};
    void *align[] = {&ptr[T_IDS], &ptr[T_REC], &M, &E, &K, &TM, &NTM, &g, &small};
    return kt_launch_kernel_pdl(l->mod, K_TOKENS, (unsigned)((M + warps - 1) / warps), 1, 1, threads, 0, l->stream,
                                route) ||
                   kt_launch_kernel_pdl(l->mod, K_ALIGN, blocks, 1, 1, threads, 0, l->stream, align)
               ? -1
               : 0;
}

/* Logits and bias read (HASH: logits, tokens and the rows read); ids, weights and the whole
 * record written. */
static double bytes(const kt_problem *p) {
    double M = (double)p->m, E = (double)p->dim[KT_MR_E], K = (double)p->dim[KT_MR_TOPK];
    double in = p->dim[KT_MR_ROUTER] == KT_MOE_ROUTER_HASH ? M * E + M + M * K : M * E + E;
    return 4.0 * (in + 2 * M * K + (double)record_ints(p));
}

static const char *const kernel_names[] = {"moe_route_fused", "moe_route_tokens", "moe_align", NULL};
/* V4-Flash (top-6; its hash-routed layers too) and V3 (top-8) over 256 experts, records for
 * moe_gemm's tiles 8-64, each distribution. */
static const long target_shapes[][KT_MAX_DIMS] = {
    {KT_MOE_ROUTER_V4, 256, 6, 8, 4, KT_MOE_DIST_UNIFORM},   {KT_MOE_ROUTER_V4, 256, 6, 8, 4, KT_MOE_DIST_ZIPF},
    {KT_MOE_ROUTER_V4, 256, 6, 8, 4, KT_MOE_DIST_HOT},       {KT_MOE_ROUTER_V3, 256, 8, 8, 4, KT_MOE_DIST_UNIFORM},
    {KT_MOE_ROUTER_V3, 256, 8, 8, 4, KT_MOE_DIST_ZIPF},      {KT_MOE_ROUTER_V3, 256, 8, 8, 4, KT_MOE_DIST_HOT},
    {KT_MOE_ROUTER_HASH, 256, 6, 8, 4, KT_MOE_DIST_UNIFORM}, {KT_MOE_ROUTER_HASH, 256, 6, 8, 4, KT_MOE_DIST_ZIPF}};

const kt_family kt_family_moe_route = {
    .name = "moe_route",
    .summary = "MoE router (V4 sqrt-softplus top-6, V3 sigmoid group-limited top-8, V4's tid2eid hash) + alignment "
               "to the GEMM tile",
    .source = "moe_route.cu",
    .kernels = kernel_names,
    .n_keys = KT_MR_KEYS,
    .keys = {{"ROUTER", KT_KEY_CATEGORY, kt_moe_router_names},
             {"E"},
             {"TOPK"},
             {"TM"},
             {"NTM"},
             {"DIST", KT_KEY_CATEGORY, kt_moe_dist_names}},
    .m_name = "M",
    .n_params = 5,
    /* 32 warps cap a thread at 64 registers: the router's 8 keys a lane spill there */
    .params = {{"WARPS", 3, {4, 8, 16}},
               {"FUSED", 2, {0, 1}},
               {"BLOCKS", 3, {1, 4, 16}},
               {"SMALL", 2, {0, 1}},
               {"SPREAD", 2, {0, 1}}},
    .default_config = {{8, 0, 16, 1, 1}},
    .target_shapes = target_shapes,
    .n_target_shapes = 8,
    KT_FAMILY_HOOKS,
    .default_for = default_for,
    .tolerance = 2e-6, /* the f32 weights against float64: a few ulp */
};
