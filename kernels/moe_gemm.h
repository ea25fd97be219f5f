/* moe_gemm.h — what the MoE families share on the host: the problem key of moe_gemm, the
 * routing distributions it draws, and the layout of its problems' tensors. */
#ifndef KT_MOE_GEMM_H
#define KT_MOE_GEMM_H

#include "../runtime/kt.h"

/* moe_gemm's key fields, in order: FORMAT, STAGE, E, N, K, TOPK, DIST. */
enum { KT_MOE_FORMAT, KT_MOE_STAGE, KT_MOE_E, KT_MOE_N, KT_MOE_K, KT_MOE_TOPK, KT_MOE_DIST, KT_MOE_KEYS };
enum { KT_MOE_FP8, KT_MOE_MXFP4 };
enum { KT_MOE_GATEUP, KT_MOE_DOWN };
enum { KT_MOE_UNIFORM, KT_MOE_ZIPF, KT_MOE_HOT, KT_MOE_GATE };
/* FORMAT, STAGE and DIST are category keys: p->dim holds the index of the name (the DIST names
 * are moe_route's, kernels/moe_route.c). */
extern const char *const kt_moe_format_names[]; /* "fp8", "mxfp4", NULL */
extern const char *const kt_moe_stage_names[];  /* "gateup", "down", NULL */
extern const char *const kt_moe_dist_names[];   /* "uniform", "zipf", "hot", "gate", NULL */
static inline int kt_moe_cat(const kt_problem *p, int key) { return (int)p->dim[key]; }

/* moe_gemm's tensors, the same order for both stages; the ones a stage does not use are
 * one-element inputs (the MoE step pipeline, kernels/moe_step.c, maps them). */
enum {
    KT_MOE_T_X,
    KT_MOE_T_XS,
    KT_MOE_T_W,
    KT_MOE_T_WS,
    KT_MOE_T_IDS,
    KT_MOE_T_TOPW,
    KT_MOE_T_SHARED,
    KT_MOE_T_ALIGN,
    KT_MOE_T_OUT,
    KT_MOE_T_OUTS,
    KT_MOE_T_PART,
    KT_MOE_T_CNT,
    KT_MOE_T_COUNT
};

/* Seeded inputs of stage problem p for the routing ids [M*topk] into host (moe_gemm's tensor
 * order): the activations x, xs (skipped where host[] is NULL), the weights of the experts
 * ids touches (NaN elsewhere, so reading an untouched expert fails the check), and the down
 * stage's shared-expert output. */
void kt_moe_fill_inputs(const kt_problem *p, const int *ids, uint64_t seed, void *const *host);

/* The token tiles the fill builds an alignment record for (moe_gemm's TM values). */
#define KT_MOE_N_TM 4
extern const int kt_moe_tm_values[KT_MOE_N_TM];

/* Draws topk distinct experts of E for each of M tokens from distribution dist (uniform, Zipf
 * s = 1.1 over a seeded ranking, one hot expert in min(1, topk/4) of the tokens, which is
 * 25% of the slots where topk <= 4 and all tokens, the most distinct experts allow, above, or
 * gate: V4's router, sqrt(softplus) + bias with ties to the lower expert, on kt_moe_gate_logits),
 * into ids [M*topk], and routing weights in [0.1, 0.4) into weights [M*topk] (may be NULL). */
void kt_moe_draw_routing(long M, long topk, long E, int dist, uint64_t seed, int *ids, float *weights);
/* DIST=gate: the logits and bias of kt run --synthetic's gate, whose routing the step's moe_gemm
 * sees. A logit is a seeded gate row, U(+-1/sqrt(D)), times an rmsnormed h: N(0, 1/3) by the
 * central limit, independent across tokens and experts; the bias is a seeded 1-d tensor,
 * U(-0.3, 0.3) (runtime/step.c's fill). Logits [M*E] and bias [E] from rng. V4-routed top-6 of
 * 256 this touches ~58 experts at M = 16 and ~103 at M = 64, the busiest ~13 slots there (the
 * step's 40 routed layers measured 57.5 and 101.9: bench/NOTES.md, moe64). */
void kt_moe_gate_logits(long M, long E, uint64_t *rng, float *logits, float *bias);
/* The routing ids [M*topk] of moe_gemm problem p: a function of the problem alone (its key and
 * M), the one its fill and floor use and its vendor baseline times. */
void kt_moe_problem_routing(const kt_problem *p, int *ids);
/* What routing ids [n] over E experts makes a grouped GEMM read: the distinct experts, the
 * busiest expert's slots and the tiles of TM slots the alignment pads them to. */
typedef struct kt_moe_occupancy {
    long touched, busiest, tiles;
} kt_moe_occupancy;
kt_moe_occupancy kt_moe_occupancy_of(const int *ids, long n, long E, long TM);

#endif
