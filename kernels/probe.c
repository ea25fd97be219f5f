/* probe.c — host descriptor of the probe family (kernels/probe.cu), the test family of the
 * family contract: a categorical key field (LAYOUT), int32 index inputs, two outputs (an f32
 * with +inf entries compared REL_L2, an i32 compared as sets), its own batch ladder (B). The
 * CPU tests take it through the compare, tune (fake GPU), the DB and dispatch. */
#include "family_hooks.h"
#include "../runtime/kt.h"
#include "common/kt_arch.h"
#include "common/probe_layout.h"

#include <math.h>

enum { P_THREADS, P_REVERSE };
enum { K_LAYOUT, K_N };
enum { T_IDX, T_VAL, T_LSE, T_IDS };

static int check_problem(const kt_problem *p, char *why, size_t n) {
    if (p->dim[K_N] < 1 || p->dim[K_N] > (1L << 20)) {
        snprintf(why, n, "N=%ld: probe supports N from 1 to 2^20", p->dim[K_N]);
        return -1;
    }
    if (p->m < 1 || p->m > 4096) {
        snprintf(why, n, "B=%ld: probe supports B from 1 to 4096", p->m);
        return -1;
    }
    return 0;
}

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    if (c->v[P_THREADS] * 2 > kt_arch_limits_of(arch).regs_per_block / 32)
        return snprintf(why, n, "%d threads need more registers than a block has", c->v[P_THREADS]), -1;
    return 0;
}

static int config_fits(const kt_config *c, const kt_problem *p) {
    (void)c;
    (void)p;
    return 1;
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t B = (size_t)p->m, N = (size_t)p->dim[K_N];
    t[T_IDX] = (kt_tensor_desc){"idx", KT_I32, B * KT_PROBE_SLOTS, KT_INPUT};
    t[T_VAL] = (kt_tensor_desc){"val", KT_F32, N, KT_INPUT};
    t[T_LSE] = (kt_tensor_desc){"lse", KT_F32, B, KT_OUTPUT, KT_CMP_REL_L2, 1e-6};
    t[T_IDS] = (kt_tensor_desc){"ids", KT_I32, B * KT_PROBE_SLOTS, KT_OUTPUT, KT_CMP_SET, 0, KT_PROBE_SLOTS};
    return 4;
}

/* Indices over the whole range with a quarter of the slots unused, and every fifth row with
 * none used (its lse is +inf); values in [-1, 1). */
static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    long B = p->m, N = p->dim[K_N];
    int32_t *idx = host[T_IDX];
    float *val = host[T_VAL];
    uint64_t rng = seed;
    for (long b = 0; b < B; b++)
        for (int j = 0; j < KT_PROBE_SLOTS; j++) {
            uint64_t r = kt_rng_next(&rng);
            idx[b * KT_PROBE_SLOTS + j] = b % 5 == 0 || r % 4 == 0 ? -1 : (int32_t)((r >> 8) % (uint64_t)N);
        }
    for (long i = 0; i < N; i++) val[i] = kt_rng_uniform(&rng);
}

/* lse rows, then ids rows (the valid indices in slot order, then -1: any order compares). */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    long B = p->m, N = p->dim[K_N];
    const int32_t *idx = host[T_IDX];
    const float *val = host[T_VAL];
    double *ids = ref + B;
    for (long b = 0; b < B; b++) {
        double best = INFINITY;
        int kept = 0;
        for (int j = 0; j < KT_PROBE_SLOTS; j++) {
            int32_t i = idx[b * KT_PROBE_SLOTS + j];
            if (i < 0) continue;
            best = fmin(best, val[kt_probe_source((int)p->dim[K_LAYOUT], N, i)]);
            ids[b * KT_PROBE_SLOTS + kept++] = i;
        }
        while (kept < KT_PROBE_SLOTS) ids[b * KT_PROBE_SLOTS + kept++] = -1;
        ref[b] = best;
    }
}

static int launch(const kt_launch *l) {
    long rows = l->problem->m, n = l->problem->dim[K_N];
    int layout = (int)l->problem->dim[K_LAYOUT], threads = l->config->v[P_THREADS];
    uint64_t idx = l->ptr[T_IDX], val = l->ptr[T_VAL], lse = l->ptr[T_LSE], ids = l->ptr[T_IDS];
    void *args[] = {&idx, &val, &lse, &ids, &rows, &n, &layout};
    return kt_launch_kernel(l->mod, 0, (unsigned)((rows + threads - 1) / threads), 1, 1, (unsigned)threads, 0,
                            l->stream, args);
}

static double bytes(const kt_problem *p) { return p->m * (8.0 * KT_PROBE_SLOTS + 4) + 4.0 * p->dim[K_N]; }
/* Rows times slots: the work gpu_reference_above would compare (probe has no GPU reference). */
static double work(const kt_problem *p) { return (double)p->m * KT_PROBE_SLOTS; }

static const char *const kernel_names[] = {"probe", NULL};
static const char *const layouts[] = {"V3", "V4", NULL};
static const long batch_buckets[] = {1, 4, 16, 64, 256, 1024, 4096, 0};
static const long target_shapes[][KT_MAX_DIMS] = {{KT_PROBE_V4, 4096}, {KT_PROBE_V3, 512}};

const kt_family kt_family_probe = {
    .name = "probe",
    .summary = "contract test family: int32 slots -> min value (+inf if none) and the valid slots as a set",
    .source = "probe.cu",
    .kernels = kernel_names,
    .n_keys = 2,
    .keys = {{"LAYOUT", KT_KEY_CATEGORY, layouts}, {"N", KT_KEY_SIZE, NULL}},
    .m_name = "B",
    .batch_buckets = batch_buckets,
    .n_params = 2,
    .params = {{"THREADS", 3, {32, 64, 128}}, {"REVERSE", 2, {0, 1}}},
    .default_config = {{64, 0}},
    .target_shapes = target_shapes,
    .n_target_shapes = 2,
    KT_FAMILY_HOOKS,
    .work = work,
    .tolerance = 1e-6,
};
