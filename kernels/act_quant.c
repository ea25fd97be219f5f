/* act_quant.c — host descriptor of the activation quantisation family
 * (kernels/act_quant.cu): bf16 [M, K] -> e4m3 codes plus one f32 scale per 128. */
#include "family_hooks.h"
#include "../runtime/kt.h"
#include "fp8_gemm.h"

#include <math.h>
#include <string.h>

enum { P_VEC, P_GROUPS_PER_BLOCK };
enum { T_X, T_Q, T_S };

static int check_problem(const kt_problem *p, char *why, size_t n) {
    if (p->dim[0] % 128) {
        snprintf(why, n, "K=%ld: act_quant needs K to be a multiple of 128 (the scale group)", p->dim[0]);
        return -1;
    }
    if (p->m < 1 || p->m > 65536) {
        snprintf(why, n, "M=%ld: act_quant supports M from 1 to 65536", p->m);
        return -1;
    }
    return 0;
}

static int threads(const kt_config *c) { return 128 / c->v[P_VEC] * c->v[P_GROUPS_PER_BLOCK]; }

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)arch;
    int t = threads(c);
    if (t % 32 || t > 1024) return snprintf(why, n, "%d threads is not whole warps <= 1024", t), -1;
    return 0;
}

static int config_fits(const kt_config *c, const kt_problem *p) {
    (void)c;
    (void)p;
    return 1;
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t M = p->m, K = p->dim[0];
    t[T_X] = (kt_tensor_desc){"x", KT_BF16, M * K, KT_INPUT};
    t[T_Q] = (kt_tensor_desc){"q", KT_E4M3, M * K, KT_OUTPUT};
    t[T_S] = (kt_tensor_desc){"s", KT_F32, M * (K / 128), KT_OUTPUT};
    return 3;
}

void kt_act_quant_fill(uint16_t *x, size_t n, uint64_t *rng) {
    for (size_t g = 0; g < n / 128; g++) {
        float mag = ldexpf(1.0f, (int)(kt_rng_next(rng) % 12) - 6);
        for (size_t i = 0; i < 128; i++) x[g * 128 + i] = kt_float_to_bf16(kt_rng_uniform(rng) * mag);
    }
}

float kt_act_quant_group(const uint16_t *x, uint8_t *q) {
    float amax = 0;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(kt_bf16_to_float(x[i])));
    float s = fmaxf(amax, 1e-10f) / 448.0f;
    for (int i = 0; i < 128; i++) q[i] = kt_float_to_e4m3(kt_bf16_to_float(x[i]) / s);
    return s;
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    uint64_t rng = seed;
    kt_act_quant_fill(host[T_X], p->m * p->dim[0], &rng);
}

/* Expected outputs: the value of each code (x / s rounded to e4m3, the kernel's rule), then the scales. */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    size_t n = p->m * p->dim[0];
    const uint16_t *x = host[T_X];
    uint8_t q[128];
    for (size_t g = 0; g < n / 128; g++) {
        ref[n + g] = kt_act_quant_group(x + g * 128, q);
        for (size_t i = 0; i < 128; i++) ref[g * 128 + i] = kt_e4m3_to_float(q[i]);
    }
}

static int launch(const kt_launch *l) {
    int M = (int)l->problem->m, K = (int)l->problem->dim[0];
    uint64_t p[3];
    memcpy(p, l->ptr, sizeof p);
    void *args[] = {&p[T_X], &p[T_Q], &p[T_S], &M, &K};
    long groups = (long)M * (K / 128);
    int per_block = l->config->v[P_GROUPS_PER_BLOCK];
    return kt_launch_kernel_pdl(l->mod, 0, (unsigned)((groups + per_block - 1) / per_block), 1, 1, threads(l->config),
                                0, l->stream, args);
}

static double bytes(const kt_problem *p) { return p->m * p->dim[0] * 3.0 + p->m * p->dim[0] / 32.0; }
static double flops(const kt_problem *p) { return 3.0 * p->m * p->dim[0]; }

static const char *const kernel_names[] = {"act_quant", NULL};
static const long target_shapes[][KT_MAX_DIMS] = {{4096}, {1024}, {2048}, {512}};

const kt_family kt_family_act_quant = {
    .name = "act_quant",
    .summary = "bf16 -> e4m3 activation quantisation, one f32 scale per token per 128",
    .source = "act_quant.cu",
    .kernels = kernel_names,
    .n_keys = 1,
    .keys = {{"K"}},
    .m_name = "M",
    .n_params = 2,
    .params = {{"VEC", 2, {4, 8}}, {"GROUPS_PER_BLOCK", 6, {1, 2, 4, 8, 16, 32}}},
    /* 4 bf16 per lane, a warp per group, 4 groups a block: within 0-3% of the tuned winner at
     * every target K and M 1-64 on the H200, where 8 per lane was 7-14% slower (NOTES, tenth session) */
    .search_full_budget_from_m = 128, /* the fast search's thresholds as the GEMMs' (bench/NOTES.md) */
    .search_tile_sweep_to_m = 256,
    .default_config = {{4, 4}},
    .target_shapes = target_shapes,
    .n_target_shapes = 4,
    KT_FAMILY_HOOKS,
    .tolerance = 1e-5,
    .flops = flops,
};
