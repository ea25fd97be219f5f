/* moe_route.h — host parts of the moe_route family (kernels/moe_route.c) that the MoE step
 * pipeline and the tests reuse: its key fields, the seeded logits of a routing distribution,
 * and the float64 reference router. */
#ifndef KT_MOE_ROUTE_HOST_H
#define KT_MOE_ROUTE_HOST_H

#include "../runtime/kt.h"

/* moe_route's key fields in kt_problem.dim order; ROUTER and DIST are categories whose indices
 * are kernels/common/moe_router.h's KT_MOE_ROUTER_* and KT_MOE_DIST_*; TM the smallest token
 * tile and NTM the number of alignment records (tiles TM, 2 TM, ...). */
enum { KT_MR_ROUTER, KT_MR_E, KT_MR_TOPK, KT_MR_TM, KT_MR_NTM, KT_MR_DIST, KT_MR_KEYS };
extern const char *const kt_moe_router_names[]; /* "V4", "V3", "HASH", NULL */
extern const char *const kt_moe_dist_names[];   /* "uniform", "zipf", "hot", "gate", NULL */

/* Seeded f32 gate logits [M, E] and correction bias [E] shaped so that the routing follows
 * distribution dist: each token's top-k are drawn (uniform; Zipf s = 1.1 over a seeded
 * ranking; one hot expert in a share min(1, 0.25 topk) of the tokens, its most possible share
 * of the slots when topk > 4) and given logits above the rest. Logits lie on a grid of 1/64 and
 * biases come in equal pairs, so exact ties occur; every 16th token (t % 16 == 5) has all
 * logits equal, so its choice is decided by biases and the tie rule alone. DIST=gate draws no
 * experts: the logits and bias are kt_moe_gate_logits' (kt run --synthetic's gate, moe_gemm.h). */
void kt_moe_route_fill(int router, long E, long topk, int dist, long M, uint64_t seed, float *logits, float *bias);

/* The float64 reference router for one token: experts chosen by the f32 choice values of
 * kernels/common/moe_router.h (V3: within the best 4 of 8 groups, the rest valued 0), in
 * descending order, ties to the lower index (a comparator of its own, not the kernel's keys);
 * weights from the exact float64 scores of the chosen experts, normalised, scaled. */
void kt_moe_route_token_ref(int router, long E, long topk, const float *logits, const float *bias, int *ids,
                            double *weights);

/* The float64 reference of a hash-routed token: ids = its table row [K] in order, weights V4's
 * (the exact float64 sqrt(softplus) of their logits, normalised, x routed_scaling_factor). */
void kt_moe_hash_token_ref(long K, const float *logits, const int *row, int *ids, double *weights);

/* The exact float64 scores, for the reference weights and the accuracy test of the f32 ones. */
double kt_moe_sigmoid_f64(double x);
double kt_moe_sqrt_softplus_f64(double x);

#endif
