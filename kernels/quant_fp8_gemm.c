/* quant_fp8_gemm.c — host descriptor of the fused act_quant + FP8 block GEMM family
 * (kernels/quant_fp8_gemm.cu): bf16 activations X [M, K] and e4m3 weights with their
 * 128x128 scales in, bf16 out; the activations are quantised per token per 128 inside,
 * by act_quant's rule. Space, constraints and launch are fp8_gemm's (kernels/fp8_gemm.h). */
#include "../runtime/kt.h"
#include "fp8_gemm.h"

#include <math.h>
#include <stdlib.h>

enum { T_X, T_B, T_BS, T_C };

static int check_problem(const kt_problem *p, char *why, size_t n) {
    return kt_fp8_gemm_check_problem("quant_fp8_gemm", p, why, n);
}

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)arch;
    return kt_fp8_gemm_check_config(c, 1, why, n);
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t M = p->m, N = p->dim[0], K = p->dim[1];
    t[T_X] = (kt_tensor_desc){"X", KT_BF16, M * K, KT_INPUT};
    t[T_B] = (kt_tensor_desc){"B", KT_E4M3, N * K, KT_INPUT};
    t[T_BS] = (kt_tensor_desc){"Bs", KT_F32, (N / 128) * (K / 128), KT_INPUT};
    t[T_C] = (kt_tensor_desc){"C", KT_BF16, M * N, KT_OUTPUT};
    return 4;
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    size_t M = p->m, N = p->dim[0], K = p->dim[1];
    uint64_t rng = seed;
    kt_act_quant_fill(host[T_X], M * K, &rng);
    kt_fp8_gemm_fill_codes(host[T_B], N * K, &rng);
    kt_fp8_gemm_fill_scales(host[T_BS], (N / 128) * (K / 128), &rng);
}

/* act_quant's codes and scales first, then fp8_gemm's float64 reference over them. */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    size_t M = p->m, K = p->dim[1], groups = M * (K / 128);
    uint8_t *A = malloc(M * K);
    float *As = malloc(groups * sizeof *As);
    if (!A || !As) {
        for (size_t i = 0; i < M * (size_t)p->dim[0]; i++) ref[i] = NAN; /* fails the check, loudly */
    } else {
        const uint16_t *X = host[T_X];
        for (size_t g = 0; g < groups; g++) As[g] = kt_act_quant_group(X + g * 128, A + g * 128);
        kt_fp8_gemm_reference_codes(p, A, As, host[T_B], host[T_BS], ref);
    }
    free(A);
    free(As);
}

static int launch(const kt_launch *l) {
    uint64_t p[5] = {l->ptr[T_X], 0, l->ptr[T_B], l->ptr[T_BS], l->ptr[T_C]};
    return kt_fp8_gemm_launch(l, 1, p);
}

static int launch_reference(const kt_launch *l, uint64_t ref) {
    uint64_t p[4] = {l->ptr[T_X], 0, l->ptr[T_B], l->ptr[T_BS]};
    return kt_fp8_gemm_launch_reference(l, p, ref);
}

/* The weights and their scales, the bf16 activations read once, the bf16 output. */
static double bytes(const kt_problem *p) {
    double M = p->m, N = p->dim[0], K = p->dim[1];
    return N * K + N * K / 16384 * 4 + 2 * M * K + 2 * M * N;
}

static void default_for(const kt_problem *p, int sms, kt_config *c) { kt_fp8_gemm_default_for(p, sms, 1, c); }

static const char *const kernel_names[] = {"quant_fp8_gemm", "quant_fp8_gemm_reference", NULL};

const kt_family kt_family_quant_fp8_gemm = {
    .name = "quant_fp8_gemm",
    .summary = "act_quant fused into the FP8 block GEMM: bf16 activations in, bf16 out",
    .source = "quant_fp8_gemm.cu",
    .kernels = kernel_names,
    KT_FP8_GEMM_FAMILY,
    .check_problem = check_problem,
    .check_config = check_config,
    .default_for = default_for,
    .tensors = tensors,
    .fill = fill,
    .reference = reference,
    .launch_reference = launch_reference,
    .launch = launch,
    .bytes = bytes,
};
