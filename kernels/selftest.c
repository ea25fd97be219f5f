/* selftest.c — host descriptor of the selftest family (kernels/selftest.cu): y = 2 x in
 * f32, the smallest real kernel, with planted faulting (FAULT=1) and hanging (HANG=1)
 * variants. The tests sweep it to prove a sweep records a fault as that variant's result,
 * restarts its worker and still picks the right winner. */
#include "family_hooks.h"
#include "../runtime/kt.h"

#include <string.h>

enum { P_VEC, P_FAULT, P_HANG };
enum { T_X, T_Y };
#define THREADS 256

static int check_problem(const kt_problem *p, char *why, size_t n) {
    if (p->dim[0] % 4 || p->dim[0] > (1L << 26)) {
        snprintf(why, n, "N=%ld: selftest needs N to be a multiple of 4 up to 2^26", p->dim[0]);
        return -1;
    }
    if (p->m < 1 || p->m > 4096) {
        snprintf(why, n, "M=%ld: selftest supports M from 1 to 4096", p->m);
        return -1;
    }
    return 0;
}

/* Every combination is accepted: the planted FAULT and HANG variants are the point. */
static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)c;
    (void)arch;
    (void)why;
    (void)n;
    return 0;
}

static int config_fits(const kt_config *c, const kt_problem *p) {
    (void)c;
    (void)p;
    return 1;
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t n = (size_t)p->m * (size_t)p->dim[0];
    t[T_X] = (kt_tensor_desc){"x", KT_F32, n, KT_INPUT};
    t[T_Y] = (kt_tensor_desc){"y", KT_F32, n, KT_OUTPUT};
    return 2;
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    size_t n = (size_t)p->m * (size_t)p->dim[0];
    float *x = host[T_X];
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) x[i] = kt_rng_uniform(&rng);
}

/* Doubling a float is exact, so the reference is too. */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    size_t n = (size_t)p->m * (size_t)p->dim[0];
    const float *x = host[T_X];
    for (size_t i = 0; i < n; i++) ref[i] = 2.0 * x[i];
}

static int launch(const kt_launch *l) {
    long n = l->problem->m * l->problem->dim[0];
    uint64_t x = l->ptr[T_X], y = l->ptr[T_Y];
    void *args[] = {&x, &y, &n};
    long per_block = (long)THREADS * l->config->v[P_VEC];
    return kt_launch_kernel(l->mod, 0, (unsigned)((n + per_block - 1) / per_block), 1, 1, THREADS, 0, l->stream, args);
}

static double bytes(const kt_problem *p) { return 8.0 * p->m * p->dim[0]; }
static double flops(const kt_problem *p) { return (double)p->m * p->dim[0]; }

static const char *const kernel_names[] = {"selftest", NULL};
static const long target_shapes[][KT_MAX_DIMS] = {{4096}};

const kt_family kt_family_selftest = {
    .name = "selftest",
    .summary = "y = 2x in f32 with planted faulting and hanging variants (tests the sweep)",
    .source = "selftest.cu",
    .kernels = kernel_names,
    .n_keys = 1,
    .keys = {{"N"}},
    .m_name = "M",
    .n_params = 3,
    .params = {{"VEC", 3, {1, 2, 4}}, {"FAULT", 2, {0, 1}}, {"HANG", 2, {0, 1}}},
    .search_full_budget_from_m = 128, /* the fast search's thresholds as the GEMMs' (bench/NOTES.md) */
    .search_tile_sweep_to_m = 256,
    .default_config = {{4, 0, 0}},
    .target_shapes = target_shapes,
    .n_target_shapes = 1,
    KT_FAMILY_HOOKS,
    .tolerance = 1e-6,
    .flops = flops,
};
