/* step_plan.c — the runtime step's choice between kt families and plain kernels, and the
 * problems the families get (step_plan.h). Problems are written as the families' own shape
 * strings (kt_parse_shape), so a renamed key or category fails here, not on the GPU. */
#include "step_plan.h"

#include "../kernels/common/indexer_layout.h"
#include "../kernels/common/mla_layout.h"
#include "../kernels/common/moe_layout.h"
#include "../kernels/common/moe_router.h"
#include "../kernels/moe_gemm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const kt_step_part_names[KT_N_PARTS] = {"indexer", "attention", "moe"};

/* moe_gemm's SwiGLU clamp (kernels/moe_gemm.cu's SWIGLU_LIMIT, V4's swiglu_limit). */
#define MOE_GEMM_SWIGLU_LIMIT 10.0
/* moe_route's alignment records: token tiles 8, 16, 32, 64, the TM values moe_gemm tunes. */
#define ROUTE_TM 8
#define ROUTE_NTM 4

/* Parses shape string fmt... of family name into *p with batch B; -1 with the reason in why. */
static int problem(const char *name, int B, kt_problem *p, char *why, size_t n, const char *fmt, ...) {
    char shape[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    const kt_family *f = kt_family_find(name);
    memset(p, 0, sizeof *p);
    if (!f || kt_parse_shape(f, shape, p)) return snprintf(why, n, "%s %s: %s", name, shape, kt_error()), -1;
    p->m = B;
    char r[256];
    if (f->check_problem(p, r, sizeof r) || kt_check_problem_size(f, p, r, sizeof r)) {
        snprintf(why, n, "%s B=%d: ", name, B);
        size_t at = strlen(why);
        return snprintf(why + at, n - at, "%.120s", r), -1;
    }
    return 0;
}

static int has_attn(const kt_model_config *c, kt_attn_type t) {
    for (long l = 0; l < c->n_layers; l++)
        if (c->attn[l] == t) return 1;
    return 0;
}

static int has_mlp(const kt_model_config *c, kt_mlp_type t) {
    for (long l = 0; l < c->n_layers; l++)
        if (c->mlp[l] == t) return 1;
    return 0;
}

/* The indexer: q e4m3 [B, 64, 128] with the per-head scale folded into w, the compressed keys
 * paged e4m3 + f32 scale. DIST=equal: kt run decodes its B sequences in lock-step, so every
 * request has the same length (ragged is a serving batch's case). VALUES=grid: real keys give
 * distinct logits (tied and equal are the degenerate inputs the family also checks). CTX: the
 * most entries a sequence has at the context's last position. */
static int plan_indexer(const kt_model_config *c, int B, long ctx, kt_step_plan *p, char *why, size_t n) {
    if (!has_attn(c, KT_ATTN_CSA)) return snprintf(why, n, "no CSA layer"), -1;
    if (c->index_heads != KT_IDX_HEADS || c->index_dim != KT_IDX_DIM)
        return snprintf(why, n, "mla_indexer takes %d heads of %d, the model has %ld of %ld", KT_IDX_HEADS, KT_IDX_DIM,
                        c->index_heads, c->index_dim),
               -1;
    long entries = ctx / c->csa_rate > 0 ? ctx / c->csa_rate : 1;
    return problem("mla_indexer", B, &p->indexer, why, n, "TOPK=%ld,CTX=%ld,DIST=equal,VALUES=grid", c->index_topk,
                   entries);
}

/* V3.2's indexer scores every token of the sequence (DeepSeek's DSA): the keys paged e4m3 + f32
 * scale as mla_indexer's cache, CTX the context's tokens. */
static int plan_indexer_v32(const kt_model_config *c, int B, long ctx, kt_step_plan *p, char *why, size_t n) {
    if (c->index_heads != KT_IDX_HEADS || c->index_dim != KT_IDX_DIM)
        return snprintf(why, n, "mla_indexer takes %d heads of %d, the model has %ld of %ld", KT_IDX_HEADS, KT_IDX_DIM,
                        c->index_heads, c->index_dim),
               -1;
    return problem("mla_indexer", B, &p->indexer, why, n, "TOPK=%ld,CTX=%ld,DIST=equal,VALUES=grid", c->index_topk,
                   ctx);
}

/* V3.2's attention: mla_decode LAYOUT=V32 over the indexer's list (the absorbed 512 + 64 query per
 * head), at the kernel's softmax scale (V3.2's 192^-0.5 x YaRN's mscale^2, a constant there). */
static int plan_attention_v32(const kt_model_config *c, int B, kt_step_plan *p, char *why, size_t n) {
    if (fabs(c->softmax_scale / KT_MLA_V32_SM_SCALE - 1) > 1e-6)
        return snprintf(why, n, "softmax scale %.8g: mla_decode LAYOUT=V32 scales by %.8g", c->softmax_scale,
                        (double)KT_MLA_V32_SM_SCALE),
               -1;
    return problem("mla_decode", B, &p->attn[KT_PLAN_DSA], why, n, "LAYOUT=V32,HQ=%ld,TOPK=%ld,SQ=1", c->n_heads,
                   c->index_topk);
}

/* Attention: the window as mla_decode's 128-slot window list, the compressed entries as its
 * top-k list (CSA: the indexer's; HCA: every entry, TOPK = the cache's capacity; sliding
 * layers: an empty list, TOPK=1 because a key size is at least 1). */
static int plan_attention(const kt_model_config *c, int B, long ctx, kt_step_plan *p, char *why, size_t n) {
    if (c->window > KT_MLA_V4_WINDOW)
        return snprintf(why, n, "sliding_window %ld: mla_decode's window list holds %d", c->window, KT_MLA_V4_WINDOW),
               -1;
    if (c->head_dim != KT_MLA_V4_DQK) return snprintf(why, n, "head_dim %ld: mla_decode V4 takes 512", c->head_dim), -1;
    const kt_attn_type types[KT_PLAN_DSA] = {KT_ATTN_SLIDING, KT_ATTN_CSA, KT_ATTN_HCA};
    const long topk[KT_PLAN_DSA] = {1, c->index_topk, kt_step_entries(ctx, c->hca_rate)};
    for (int m = 0; m < KT_PLAN_DSA; m++)
        if (has_attn(c, types[m]) &&
            problem("mla_decode", B, &p->attn[m], why, n, "LAYOUT=V4,HQ=%ld,TOPK=%ld,SQ=1", c->n_heads, topk[m]))
            return -1;
    return 0;
}

/* moe_route (router r for the routed layers, HASH for the hash-routed ones: tid2eid) and
 * moe_gemm's two stages in the experts' format. DIST: a checkpoint's skew (zipf); a seeded gate
 * routes as DIST=gate does, but stays keyed uniform: the configs that key's defaults give
 * measured within 2% of the best under DIST=gate (bench/NOTES.md, moe64). */
static int plan_experts(const kt_model_config *c, int B, int synthetic, const char *r, int experts, kt_step_plan *p,
                        char *why, size_t n) {
    const char *dist = synthetic ? "uniform" : "zipf", *fmt = kt_moe_format_names[experts];
    long E = c->n_experts, K = c->top_k, I = c->moe_inter, D = c->hidden;
    if ((has_mlp(c, KT_MLP_MOE) &&
         problem("moe_route", B, &p->route, why, n, "ROUTER=%s,E=%ld,TOPK=%ld,TM=%d,NTM=%d,DIST=%s", r, E, K, ROUTE_TM,
                 ROUTE_NTM, dist)) ||
        (has_mlp(c, KT_MLP_HASH) &&
         problem("moe_route", B, &p->route_hash, why, n, "ROUTER=HASH,E=%ld,TOPK=%ld,TM=%d,NTM=%d,DIST=%s", E, K,
                 ROUTE_TM, ROUTE_NTM, dist)) ||
        problem("moe_gemm", B, &p->gateup, why, n, "FORMAT=%s,STAGE=gateup,E=%ld,N=%ld,K=%ld,TOPK=%ld,DIST=%s", fmt, E,
                2 * I, D, K, dist))
        return -1;
    return problem("moe_gemm", B, &p->down, why, n, "FORMAT=%s,STAGE=down,E=%ld,N=%ld,K=%ld,TOPK=%ld,DIST=%s", fmt, E,
                   D, I, K, dist);
}

/* Router and experts go together: the experts read the router's alignment records. The
 * routed layers route by moe_route V4, the hash-routed ones by moe_route HASH (tid2eid), both
 * into the same moe_gemm problems. The expert weights are loaded in moe_gemm's layout of
 * `experts` (kernels/common/moe_layout.h): FP8 ([E, 2I, D] gate|up, [E, D, I], 128x128 f32
 * scales; the plain kernels read it too) or MXFP4 (the checkpoint's, moe_gemm only). */
static int plan_moe(const kt_model_config *c, int B, int synthetic, int experts, kt_step_plan *p, char *why, size_t n) {
    if (!has_mlp(c, KT_MLP_MOE) && !has_mlp(c, KT_MLP_HASH)) return snprintf(why, n, "no MoE layer"), -1;
    if (c->routed_scale != KT_MOE_V4_SCALE)
        return snprintf(why, n, "routed_scaling_factor %g: moe_route's V4 router scales by %g", c->routed_scale,
                        (double)KT_MOE_V4_SCALE),
               -1;
    if (c->swiglu_limit != MOE_GEMM_SWIGLU_LIMIT)
        return snprintf(why, n, "swiglu_limit %g: moe_gemm clamps at %g", c->swiglu_limit, MOE_GEMM_SWIGLU_LIMIT), -1;
    return plan_experts(c, B, synthetic, "V4", experts, p, why, n);
}

/* V3.2's MoE: moe_route's V3 router is DeepSeek-V3's (8 groups, the best 4, normalised weights x
 * 2.5: moe_router.h), so the config must be that router. moe_gemm's SwiGLU clamps at V4's
 * swiglu_limit 10 where V3.2 has no clamp: the same while |gate|, |up| < 10 (kt run says so). */
static int plan_moe_v32(const kt_model_config *c, int B, int synthetic, int experts, kt_step_plan *p, char *why,
                        size_t n) {
    if (!has_mlp(c, KT_MLP_MOE)) return snprintf(why, n, "no routed MoE layer"), -1;
    if (c->n_group != KT_MOE_V3_GROUPS || c->topk_group != KT_MOE_V3_TOPK_GROUPS || !c->norm_topk ||
        c->routed_scale != KT_MOE_V3_SCALE)
        return snprintf(why, n,
                        "n_group %ld, topk_group %ld, norm_topk_prob %d, routed_scaling_factor %g: moe_route's V3 "
                        "router takes %d, %d, 1, %g",
                        c->n_group, c->topk_group, c->norm_topk, c->routed_scale, KT_MOE_V3_GROUPS,
                        KT_MOE_V3_TOPK_GROUPS, (double)KT_MOE_V3_SCALE),
               -1;
    return plan_experts(c, B, synthetic, "V3", experts, p, why, n);
}

void kt_step_plan_make(const kt_model_config *c, int B, long ctx, int plain, int synthetic, int experts,
                       kt_step_plan *p) {
    memset(p, 0, sizeof *p);
    p->experts = experts;
    for (int i = 0; i < KT_N_PARTS; i++) {
        char *why = p->why[i];
        size_t n = sizeof p->why[i];
        if (plain) {
            snprintf(why, n, "--plain-kernels");
            continue;
        }
        int v32 = c->arch == KT_ARCH_V32, rc;
        if (i == KT_PART_INDEXER)
            rc = v32 ? plan_indexer_v32(c, B, ctx, p, why, n) : plan_indexer(c, B, ctx, p, why, n);
        else if (i == KT_PART_ATTENTION)
            rc = v32 ? plan_attention_v32(c, B, p, why, n) : plan_attention(c, B, ctx, p, why, n);
        else
            rc =
                v32 ? plan_moe_v32(c, B, synthetic, experts, p, why, n) : plan_moe(c, B, synthetic, experts, p, why, n);
        p->family[i] = rc == 0;
        if (rc == 0) why[0] = 0;
    }
    if (!p->family[KT_PART_INDEXER]) memset(&p->indexer, 0, sizeof p->indexer);
    if (!p->family[KT_PART_ATTENTION]) memset(p->attn, 0, sizeof p->attn);
    if (!p->family[KT_PART_MOE]) {
        memset(&p->route, 0, sizeof p->route);
        memset(&p->route_hash, 0, sizeof p->route_hash);
        memset(&p->gateup, 0, sizeof p->gateup);
        memset(&p->down, 0, sizeof p->down);
    }
}

int kt_step_plan_problems(const kt_step_plan *p, const kt_family **f, kt_problem *probs, int max) {
    const kt_problem *all[] = {&p->indexer, &p->attn[0],    &p->attn[1], &p->attn[2], &p->attn[3],
                               &p->route,   &p->route_hash, &p->gateup,  &p->down};
    const char *names[] = {"mla_indexer", "mla_decode", "mla_decode", "mla_decode", "mla_decode",
                           "moe_route",   "moe_route",  "moe_gemm",   "moe_gemm"};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; i++)
        if (all[i]->n_dims) {
            f[n] = kt_family_find(names[i]);
            probs[n++] = *all[i];
        }
    return n;
}
