/* act_quant_fp8_gemm.c — the pipeline family of a decode step's projection as two kernels:
 * act_quant (bf16 activations -> e4m3 codes and per-128 scales, KT_TEMP intermediates) then
 * fp8_gemm, each stage its own family's dispatched winner; checked against the fused
 * family's reference (the same math) and benched as one graph:
 *   kt verify --family act_quant_fp8_gemm --shape targets --m 1,16 */
#include "../runtime/kt.h"
#include "fp8_gemm.h"

extern const kt_family kt_family_act_quant, kt_family_fp8_gemm, kt_family_quant_fp8_gemm;

/* X, B, Bs, C in quant_fp8_gemm's order (its fill and reference serve), then the codes. */
enum { T_X, T_B, T_BS, T_C, T_A, T_AS };

static int check_problem(const kt_problem *p, char *why, size_t n) {
    return kt_fp8_gemm_check_problem("act_quant_fp8_gemm", p, why, n);
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t M = p->m, K = p->dim[1];
    kt_family_quant_fp8_gemm.tensors(p, t);
    t[T_A] = (kt_tensor_desc){"A", KT_E4M3, M * K, KT_TEMP};
    t[T_AS] = (kt_tensor_desc){"As", KT_F32, M * (K / 128), KT_TEMP};
    return 6;
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    kt_family_quant_fp8_gemm.fill(p, seed, host);
}

static void reference(const kt_problem *p, void *const *host, double *ref) {
    kt_family_quant_fp8_gemm.reference(p, host, ref);
}

/* quant_fp8_gemm's reference kernel (l->ref_mod is one of its modules) over X, B, Bs. */
static int launch_reference(const kt_launch *l, uint64_t ref) {
    uint64_t p[4] = {l->ptr[T_X], 0, l->ptr[T_B], l->ptr[T_BS]};
    return kt_fp8_gemm_launch_reference(l, p, ref);
}

/* act_quant's problem: K of the GEMM's (N, K), the same tokens. */
static void quant_problem(const kt_problem *p, kt_problem *s) {
    *s = (kt_problem){.n_dims = 1, .dim = {p->dim[1]}, .m = p->m};
}

/* The weights and their scales, the bf16 activations read once, the bf16 output: the fused
 * kernel's floor (the codes between the stages are the pipeline's own cost). */
static double bytes(const kt_problem *p) { return kt_family_quant_fp8_gemm.bytes(p); }

const kt_family kt_family_act_quant_fp8_gemm = {
    .name = "act_quant_fp8_gemm",
    .summary = "pipeline: act_quant then fp8_gemm, each its own winner, in one graph",
    .n_keys = 2,
    .keys = {{"N"}, {"K"}},
    .m_name = "M",
    .target_shapes = kt_fp8_gemm_targets,
    .n_target_shapes = KT_FP8_GEMM_TARGETS,
    .check_problem = check_problem,
    .tensors = tensors,
    .fill = fill,
    .reference = reference,
    .gpu_reference_above = 1 << 22,
    .launch_reference = launch_reference,
    .reference_family = &kt_family_quant_fp8_gemm,
    .tolerance = 1e-2,
    .bytes = bytes,
    .flops = kt_fp8_gemm_flops,
    .mma = KT_MMA_E4M3,
    .n_stages = 2,
    .stages = {{&kt_family_act_quant, quant_problem, {T_X, T_A, T_AS}},
               {&kt_family_fp8_gemm, NULL, {T_A, T_AS, T_B, T_BS, T_C}}},
};
