/* fp8_gemm.h — host parts shared by the two families built on kernels/common/fp8_gemm.cuh:
 * fp8_gemm (e4m3 activations and scales in) and quant_fp8_gemm (bf16 activations in,
 * act_quant fused), and act_quant's quantisation rule, which the latter fuses. */
#ifndef KT_FP8_GEMM_H
#define KT_FP8_GEMM_H

#include "../runtime/kt.h"

enum { P_TILE_N, P_TILE_M, P_DIRECT, P_TILE_K, P_WARPS, P_WARPS_M, P_WARPS_K, P_STAGES, P_SPLIT_K, P_PROMOTE };
/* fp8_gemm's tensors, in its order (its baselines read them from kt_launch.ptr too). */
enum { KT_FP8_GEMM_A, KT_FP8_GEMM_AS, KT_FP8_GEMM_B, KT_FP8_GEMM_BS, KT_FP8_GEMM_C };

/* The tuning space and default of both families (a kt_family initializer fragment); the
 * fast search first samples one config per (TILE_N, TILE_M, DIRECT). */
#define KT_FP8_GEMM_SPACE                                                                                              \
    .n_params = 10,                                                                                                    \
    .params = {{"TILE_N", 4, {16, 32, 64, 128}},                                                                       \
               {"TILE_M", 5, {8, 16, 32, 64, 128}},                                                                    \
               {"DIRECT", 2, {0, 1}},                                                                                  \
               {"TILE_K", 2, {128, 256}},                                                                              \
               {"WARPS", 4, {1, 2, 4, 8}},                                                                             \
               {"WARPS_M", 3, {1, 2, 4}},                                                                              \
               {"WARPS_K", 3, {1, 2, 4}},                                                                              \
               {"STAGES", 5, {2, 3, 4, 6, 8}},                                                                         \
               {"SPLIT_K", 4, {1, 2, 4, 8}},                                                                           \
               {"PROMOTE", 2, {0, 1}}},                                                                                \
    .strata_params = 3, .search_full_budget_from_m = 128, .search_tile_sweep_to_m = 256,                               \
    .default_config = {{64, 16, 0, 128, 4, 1, 1, 4, 1, 0}}

/* The descriptor fields both families share (a kt_family initializer fragment). */
#define KT_FP8_GEMM_FAMILY                                                                                             \
    .n_keys = 2, .keys = {{"N"}, {"K"}}, .m_name = "M", KT_FP8_GEMM_SPACE, .target_shapes = kt_fp8_gemm_targets,       \
    .n_target_shapes = KT_FP8_GEMM_TARGETS, .config_fits = kt_fp8_gemm_config_fits, .hopeless = kt_fp8_gemm_hopeless,  \
    .gpu_reference_above = 1 << 22, .tolerance = 1e-2, .flops = kt_fp8_gemm_flops, .mma = KT_MMA_E4M3

/* The five (N, K) of DeepSeek-V4-Flash's decode that ../shared/TARGETS.md measures. */
#define KT_FP8_GEMM_TARGETS 5
extern const long kt_fp8_gemm_targets[KT_FP8_GEMM_TARGETS][KT_MAX_DIMS];

/* 0 if (N, K, M) is a problem the kernel supports, else -1 with why (naming family). */
int kt_fp8_gemm_check_problem(const char *family, const kt_problem *p, char *why, size_t n);
/* 0 if config c builds (quant_a: the quantising kernel), else -1 with why. */
int kt_fp8_gemm_check_config(const kt_config *c, int quant_a, char *why, size_t n);
/* The family hooks config_fits, hopeless and flops of both families. */
int kt_fp8_gemm_config_fits(const kt_config *c, const kt_problem *p);
int kt_fp8_gemm_hopeless(const kt_config *c, const kt_problem *p);
double kt_fp8_gemm_flops(const kt_problem *p);
/* The config for p without a tuned one (quant_a: the quantising kernel), for a GPU of sms SMs. */
void kt_fp8_gemm_default_for(const kt_problem *p, int sms, int quant_a, kt_config *c);
/* Shared memory the kernel takes for problem p (DIRECT stages the tokens of a CTA's k-range). */
int kt_fp8_gemm_smem(const kt_config *c, int quant_a, const kt_problem *p);
/* Launches the kernel on ptr = {A or X, As (0 when quant_a), B, Bs, C}. */
int kt_fp8_gemm_launch(const kt_launch *l, int quant_a, const uint64_t ptr[5]);
/* Launches the module's reference kernel (index 1) on ptr = {A or X, As, B, Bs} into ref. */
int kt_fp8_gemm_launch_reference(const kt_launch *l, const uint64_t ptr[4], uint64_t ref);
/* Seeded e4m3 codes over the whole range (no NaN), and positive scales around 2^-7. */
void kt_fp8_gemm_fill_codes(uint8_t *x, size_t n, uint64_t *rng);
void kt_fp8_gemm_fill_scales(float *s, size_t n, uint64_t *rng);
/* ref[M, N] in float64 from e4m3 codes A [M, K], B [N, K] and their block scales. */
void kt_fp8_gemm_reference_codes(const kt_problem *p, const uint8_t *A, const float *As, const uint8_t *B,
                                 const float *Bs, double *ref);

/* act_quant's rule for one group of 128 bf16 values: e4m3 codes into q, returns the scale. */
float kt_act_quant_group(const uint16_t *x, uint8_t *q);
/* Seeded bf16 activations, their magnitude varying per group of 128 so the scales differ. */
void kt_act_quant_fill(uint16_t *x, size_t n, uint64_t *rng);

#endif
