/* moe_step.c — the pipeline family of a whole MoE layer's routed step for decode, in one CUDA
 * graph: moe_route (router + alignment records for the GEMM's tiles) -> moe_gemm GATEUP
 * (SwiGLU, requantised to e4m3 1x128) -> moe_gemm DOWN (weighted combine over each token's
 * slots + the shared expert's output), each stage its family's dispatched winner:
 *   kt verify --family moe_step --shape ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=zipf --m 1,16
 * Inputs: the gate GEMM's f32 logits [M, E] and the correction bias [E]; the hidden state as
 * e4m3 codes [M, HIDDEN] with f32 scales per 128 (the quantised activations the gate GEMM
 * reads too); expert weights (moe_gemm's layouts); the shared expert's bf16 output. Output:
 * out bf16 [M, HIDDEN]. Reference: the float64 model of the same quantised pipeline (the
 * routing of moe_route's reference, then moe_gemm's two references, the intermediate
 * requantised to e4m3 exactly as the kernel does). */
#include "../runtime/kt.h"
#include "common/moe_layout.h"
#include "common/moe_router.h"
#include "moe_gemm.h"
#include "moe_route.h"

#include <stdlib.h>
#include <string.h>

extern const kt_family kt_family_moe_route, kt_family_moe_gemm;

enum { K_ROUTER, K_FORMAT, K_E, K_HIDDEN, K_INTER, K_DIST, K_COUNT };
enum {
    T_LOGITS,
    T_BIAS,
    T_X,
    T_XS,
    T_W1,
    T_WS1,
    T_W2,
    T_WS2,
    T_SHARED,
    T_OUT, /* inputs, the output */
    T_IDS,
    T_TOPW,
    T_ALIGN,
    T_H,
    T_HS,
    T_PART,
    T_CNT,
    T_COUNT /* between the stages */
};
#define TM 8 /* the alignment records: tiles 8, 16, 32, 64 (moe_gemm's TM values) */
#define NTM 4

static long topk_of(const kt_problem *p) { return p->dim[K_ROUTER] == KT_MOE_ROUTER_V4 ? 6 : 8; }

static void route_problem(const kt_problem *p, kt_problem *s) {
    *s = (kt_problem){
        .n_dims = KT_MR_KEYS, .m = p->m, .dim = {p->dim[K_ROUTER], p->dim[K_E], topk_of(p), TM, NTM, p->dim[K_DIST]}};
}
static void gemm_problem(const kt_problem *p, int stage, kt_problem *s) {
    long N = stage == KT_MOE_GATEUP ? 2 * p->dim[K_INTER] : p->dim[K_HIDDEN];
    long K = stage == KT_MOE_GATEUP ? p->dim[K_HIDDEN] : p->dim[K_INTER];
    *s = (kt_problem){.n_dims = KT_MOE_KEYS,
                      .m = p->m,
                      .dim = {p->dim[K_FORMAT], stage, p->dim[K_E], N, K, topk_of(p), p->dim[K_DIST]}};
}
static void gateup_problem(const kt_problem *p, kt_problem *s) { gemm_problem(p, KT_MOE_GATEUP, s); }
static void down_problem(const kt_problem *p, kt_problem *s) { gemm_problem(p, KT_MOE_DOWN, s); }

static int check_problem(const kt_problem *p, char *why, size_t n) {
    if (p->dim[K_ROUTER] == KT_MOE_ROUTER_HASH) /* its inputs are the gate's logits only */
        return snprintf(why, n,
                        "ROUTER=HASH: moe_step routes by the logits (V4, V3); the hash router needs the "
                        "tokens and tid2eid (moe_route ROUTER=HASH, run by kt run's step)"),
               -1;
    kt_problem s;
    route_problem(p, &s);
    if (kt_family_moe_route.check_problem(&s, why, n)) return -1;
    gateup_problem(p, &s);
    if (kt_family_moe_gemm.check_problem(&s, why, n)) return -1;
    down_problem(p, &s);
    return kt_family_moe_gemm.check_problem(&s, why, n);
}

/* Stage s's tensors (the stage family's declarations) into t. */
static int stage_tensors(const kt_problem *p, int s, kt_tensor_desc *t) {
    kt_problem sp;
    (s == 0 ? route_problem : s == 1 ? gateup_problem : down_problem)(p, &sp);
    return (s == 0 ? &kt_family_moe_route : &kt_family_moe_gemm)->tensors(&sp, t);
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    kt_tensor_desc r[KT_MAX_TENSORS], g[KT_MAX_TENSORS], d[KT_MAX_TENSORS];
    stage_tensors(p, 0, r);
    stage_tensors(p, 1, g);
    stage_tensors(p, 2, d);
    t[T_LOGITS] = r[0];
    t[T_BIAS] = r[1];
    t[T_X] = g[KT_MOE_T_X];
    t[T_XS] = g[KT_MOE_T_XS];
    t[T_W1] = g[KT_MOE_T_W];
    t[T_WS1] = g[KT_MOE_T_WS];
    t[T_W2] = d[KT_MOE_T_W];
    t[T_WS2] = d[KT_MOE_T_WS];
    t[T_SHARED] = d[KT_MOE_T_SHARED];
    t[T_OUT] = d[KT_MOE_T_OUT];
    t[T_OUT].role = KT_OUTPUT;
    t[T_IDS] = (kt_tensor_desc){"topk_ids", KT_I32, r[2].count, KT_TEMP};
    t[T_TOPW] = (kt_tensor_desc){"topk_weights", KT_F32, r[3].count, KT_TEMP};
    t[T_ALIGN] = (kt_tensor_desc){"align", KT_I32, r[4].count, KT_TEMP};
    t[T_H] = (kt_tensor_desc){"h", KT_E4M3, g[KT_MOE_T_OUT].count, KT_TEMP};
    t[T_HS] = (kt_tensor_desc){"hs", KT_F32, g[KT_MOE_T_OUTS].count, KT_TEMP};
    /* one workspace and one set of counters serve both GEMMs (they run one after the other;
     * the counters are left zeroed by each) */
    size_t part = g[KT_MOE_T_PART].count > d[KT_MOE_T_PART].count ? g[KT_MOE_T_PART].count : d[KT_MOE_T_PART].count;
    size_t cnt = g[KT_MOE_T_CNT].count > d[KT_MOE_T_CNT].count ? g[KT_MOE_T_CNT].count : d[KT_MOE_T_CNT].count;
    t[T_PART] = (kt_tensor_desc){"partials", KT_F32, part, KT_TEMP};
    t[T_CNT] = (kt_tensor_desc){"counters", KT_I32, cnt, KT_SCRATCH};
    return T_COUNT;
}

/* The routing of the filled logits by moe_route's reference: ids [M*topk], weights as f32 (the
 * router's output dtype, which the down GEMM reads). */
static void reference_routing(const kt_problem *p, const float *logits, const float *bias, int *ids, float *w) {
    long E = p->dim[K_E], K = topk_of(p);
    double wt[KT_MOE_MAX_TOPK];
    for (long t = 0; t < p->m; t++) {
        kt_moe_route_token_ref((int)p->dim[K_ROUTER], E, K, logits + t * E, bias, ids + t * K, wt);
        for (long k = 0; k < K; k++) w[t * K + k] = (float)wt[k];
    }
}

/* Logits shaped by DIST; then moe_gemm's inputs for that routing: the activations, the touched
 * experts' weights (NaN elsewhere, so a GEMM reading an expert no slot routes to fails) and the
 * shared expert's output. */
static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    kt_problem gu, dn;
    gateup_problem(p, &gu);
    down_problem(p, &dn);
    long MT = p->m * topk_of(p);
    int *ids = malloc(sizeof(int) * MT);
    float *w = malloc(sizeof(float) * MT);
    if (!ids || !w) abort();
    kt_moe_route_fill((int)p->dim[K_ROUTER], p->dim[K_E], topk_of(p), (int)p->dim[K_DIST], p->m, seed, host[T_LOGITS],
                      host[T_BIAS]);
    reference_routing(p, host[T_LOGITS], host[T_BIAS], ids, w);
    uint16_t unused_shared;
    void *g[KT_MOE_T_COUNT] = {0}, *d[KT_MOE_T_COUNT] = {0};
    g[KT_MOE_T_X] = host[T_X], g[KT_MOE_T_XS] = host[T_XS], g[KT_MOE_T_W] = host[T_W1], g[KT_MOE_T_WS] = host[T_WS1];
    g[KT_MOE_T_SHARED] = &unused_shared;
    d[KT_MOE_T_W] = host[T_W2], d[KT_MOE_T_WS] = host[T_WS2], d[KT_MOE_T_SHARED] = host[T_SHARED];
    kt_moe_fill_inputs(&gu, ids, seed ^ 0x9e3779b97f4a7c15ULL, g);
    kt_moe_fill_inputs(&dn, ids, seed ^ 0xc2b2ae3d27d4eb4fULL, d);
    free(ids);
    free(w);
}

/* moe_route's reference routing, then moe_gemm's GATEUP reference on it (the e4m3 values and
 * scales of h, turned back into codes: exact), then its DOWN reference on those. */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    kt_problem gu, dn;
    gateup_problem(p, &gu);
    down_problem(p, &dn);
    kt_tensor_desc g[KT_MAX_TENSORS];
    kt_family_moe_gemm.tensors(&gu, g);
    long MT = p->m * topk_of(p);
    size_t nh = g[KT_MOE_T_OUT].count, nhs = g[KT_MOE_T_OUTS].count;
    int *ids = malloc(sizeof(int) * MT);
    float *w = malloc(sizeof(float) * MT), *hs = malloc(sizeof(float) * nhs);
    uint8_t *h = malloc(nh);
    double *href = malloc(sizeof(double) * (nh + nhs));
    if (!ids || !w || !hs || !h || !href) abort();
    reference_routing(p, host[T_LOGITS], host[T_BIAS], ids, w);
    void *gh[KT_MOE_T_COUNT] = {0}, *dh[KT_MOE_T_COUNT] = {0};
    gh[KT_MOE_T_X] = host[T_X], gh[KT_MOE_T_XS] = host[T_XS], gh[KT_MOE_T_W] = host[T_W1];
    gh[KT_MOE_T_WS] = host[T_WS1], gh[KT_MOE_T_IDS] = ids;
    kt_family_moe_gemm.reference(&gu, gh, href);
    for (size_t i = 0; i < nh; i++) h[i] = kt_float_to_e4m3((float)href[i]);
    for (size_t i = 0; i < nhs; i++) hs[i] = (float)href[nh + i];
    dh[KT_MOE_T_X] = h, dh[KT_MOE_T_XS] = hs, dh[KT_MOE_T_W] = host[T_W2], dh[KT_MOE_T_WS] = host[T_WS2];
    dh[KT_MOE_T_IDS] = ids, dh[KT_MOE_T_TOPW] = w, dh[KT_MOE_T_SHARED] = host[T_SHARED];
    kt_family_moe_gemm.reference(&dn, dh, ref);
    free(ids);
    free(w);
    free(hs);
    free(h);
    free(href);
}

/* The floor: both GEMMs' bytes (the touched experts' weights, once each, and their
 * activations) plus the router's logits; the records and intermediates between the stages
 * are the pipeline's own cost. */
static double bytes(const kt_problem *p) {
    kt_problem gu, dn;
    gateup_problem(p, &gu);
    down_problem(p, &dn);
    return kt_family_moe_gemm.bytes(&gu) + kt_family_moe_gemm.bytes(&dn) + 4.0 * p->m * p->dim[K_E];
}

static const long target_shapes[][KT_MAX_DIMS] = {{KT_MOE_ROUTER_V4, KT_MOE_FP8, 256, 4096, 512, KT_MOE_DIST_UNIFORM},
                                                  {KT_MOE_ROUTER_V4, KT_MOE_FP8, 256, 4096, 512, KT_MOE_DIST_ZIPF},
                                                  {KT_MOE_ROUTER_V4, KT_MOE_MXFP4, 256, 4096, 512, KT_MOE_DIST_UNIFORM},
                                                  {KT_MOE_ROUTER_V4, KT_MOE_MXFP4, 256, 4096, 512, KT_MOE_DIST_ZIPF}};

/* For each stage's tensors (in its family's order), the pipeline tensor: the gate+up stage's
 * unused weights and shared inputs, and the down stage's unused scale, take tensors it ignores. */
const kt_family kt_family_moe_step = {
    .name = "moe_step",
    .summary = "pipeline: moe_route -> moe_gemm gate+up -> moe_gemm down (+ shared), one graph",
    .n_keys = K_COUNT,
    .keys = {{"ROUTER", KT_KEY_CATEGORY, kt_moe_router_names},
             {"FORMAT", KT_KEY_CATEGORY, kt_moe_format_names},
             {"E"},
             {"HIDDEN"},
             {"INTER"},
             {"DIST", KT_KEY_CATEGORY, kt_moe_dist_names}},
    .m_name = "M",
    .target_shapes = target_shapes,
    .n_target_shapes = 4,
    .check_problem = check_problem,
    .tensors = tensors,
    .fill = fill,
    .reference = reference,
    .tolerance = 1e-2,
    .bytes = bytes,
    .rotation_bytes = bytes, /* a step reads the touched experts only: rotate copies enough for those */
    .n_stages = 3,
    /* moe_route's HASH-only tokens and table (int32, one element): V4 and V3 never read them */
    .stages = {{&kt_family_moe_route, route_problem, {T_LOGITS, T_BIAS, T_IDS, T_TOPW, T_ALIGN, T_IDS, T_IDS}},
               {&kt_family_moe_gemm,
                gateup_problem,
                {T_X, T_XS, T_W1, T_WS1, T_IDS, T_TOPW, T_SHARED, T_ALIGN, T_H, T_HS, T_PART, T_CNT}},
               {&kt_family_moe_gemm,
                down_problem,
                {T_H, T_HS, T_W2, T_WS2, T_IDS, T_TOPW, T_SHARED, T_ALIGN, T_OUT, T_PART, T_PART, T_CNT}}},
};
