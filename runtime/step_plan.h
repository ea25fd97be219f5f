/* step_plan.h — which parts of the runtime's decode step (runtime/step.c) run a kt family and
 * the exact problems they dispatch, decided from the model config alone (no GPU), so that the
 * CPU tests check the problems the GPU step will build (tests/cpu/test_model.c). The parts
 * listed here are those with a plain reference kernel in runtime/model.cu beside the family;
 * the FP8 GEMMs and act_quant always run their families. */
#ifndef KT_STEP_PLAN_H
#define KT_STEP_PLAN_H

#include "kt.h"
#include "model.h"

/* V3.2 (deepseek_v32) has no plain kernels for these parts: the families are its only path, and
 * kt_step_open refuses a V3.2 model whose plan keeps a part plain. */
typedef enum kt_step_part {
    KT_PART_INDEXER, /* CSA layers' (V3.2: every layer's) indexer scores + top-k: mla_indexer | rt_index_score + rt_topk
                      */
    KT_PART_ATTENTION, /* window + compressed sparse attention: mla_decode | rt_attention */
    KT_PART_MOE,       /* router (V4 and hash) + routed experts + combine: moe_route, moe_gemm | rt_router, rt_moe_* */
    KT_N_PARTS
} kt_step_part;

extern const char *const kt_step_part_names[KT_N_PARTS]; /* "indexer", "attention", "moe" */

/* Attention modes of a layer (the mla_decode problem of each): V4's sliding only, CSA, HCA;
 * V3.2's DSA (LAYOUT=V32 over the indexer's top-k of every token). */
enum { KT_PLAN_SLIDING, KT_PLAN_CSA, KT_PLAN_HCA, KT_PLAN_DSA, KT_PLAN_MODES };

typedef struct kt_step_plan {
    int family[KT_N_PARTS];         /* 1: the part runs its kt family; 0: the plain kernels */
    char why[KT_N_PARTS][320];      /* why a part stays plain ("" when it runs its family) */
    kt_problem indexer;             /* mla_indexer */
    kt_problem attn[KT_PLAN_MODES]; /* mla_decode per mode (n_dims 0: no layer of that mode) */
    kt_problem route, gateup, down; /* moe_route V4, moe_gemm STAGE=gateup, STAGE=down */
    kt_problem route_hash;          /* moe_route HASH: the hash-routed layers (n_dims 0: none) */
    int experts;                    /* the routed experts' format: moe_gemm's FORMAT (KT_MOE_FP8, KT_MOE_MXFP4) */
} kt_step_plan;

/* The plan of a B-sequence step over a cache of ctx tokens: plain != 0 (`kt run
 * --plain-kernels`) keeps every part plain; synthetic picks the routing distribution the
 * experts' problems name (uniform for seeded gates, zipf for a checkpoint's); experts is the
 * routed experts' format, moe_gemm's FORMAT index (KT_MOE_FP8 or KT_MOE_MXFP4). */
void kt_step_plan_make(const kt_model_config *c, int B, long ctx, int plain, int synthetic, int experts,
                       kt_step_plan *p);

/* The (family, problem) pairs the plan dispatches, at most max; returns the count. */
int kt_step_plan_problems(const kt_step_plan *p, const kt_family **f, kt_problem *probs, int max);

/* Entries of a compressed cache of rate over ctx tokens (the step's per-sequence capacity). */
static inline long kt_step_entries(long ctx, long rate) { return ctx / rate + 1; }

/* The caches' addressing the families and the plain kernels share: a cache holds B sequences
 * of `per_seq` tokens each in whole 64-token pages (sequence b's pages start at b x pages), and
 * index lists name a token by its cache-wide id, page * 64 + slot (kv_v4.cuh / mla_layout.h).
 * The cache-wide id of token t of sequence b: */
static inline long kt_step_token_id(long per_seq, long b, long t) { return b * ((per_seq + 63) / 64) * 64 + t; }
/* mla_indexer's block table entry (row b, logical page i; row width `width`) for the indexer's
 * key cache, numbered as the compressed KV cache of `per_seq` entries: b x pages + i, -1 past. */
static inline int kt_step_table_entry(long per_seq, long b, long i) {
    long pages = (per_seq + 63) / 64;
    return i < pages ? (int)(b * pages + i) : -1;
}

#endif
