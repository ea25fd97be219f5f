/* measure.c — verification and timing of one variant on one problem, the way DESIGN.md's
 * "Measurement" contract says: fresh seeded inputs, outputs poisoned with NaN before
 * every checked run, compared with a float64 reference; timed with events over CUDA-graph
 * replays whose launches rotate over enough input copies that L2 cannot serve them. */
#include "../runtime/cu.h"
#include "tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROTATE_BYTES_FACTOR 3 /* input copies span 3x the L2 */
#define MAX_COPIES 64
#define MIN_LAUNCHES 16       /* launches per graph, so one replay dwarfs its own overhead */
#define WARMUP_REPLAYS 2

struct kt_bench {
    const kt_family *f;
    kt_problem p;
    int n_t, copies;
    kt_tensor_desc t[KT_MAX_TENSORS];
    CUdeviceptr dev[KT_MAX_TENSORS];
    size_t stride[KT_MAX_TENSORS]; /* bytes between rotation copies of an input */
    void *host[KT_MAX_TENSORS];
    double *ref;
    size_t n_ref;
    CUstream stream;
    CUevent ev0, ev1;
};

static size_t tensor_bytes(const kt_tensor_desc *t) { return t->count * kt_dtype_size(t->dtype); }

static int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    return s && atoi(s) > 0 ? atoi(s) : fallback;
}

uint64_t kt_bench_ptr(const kt_bench *b, int i, int r) {
    return b->dev[i] + (b->t[i].role == KT_INPUT ? (size_t)r * b->stride[i] : 0);
}

int kt_bench_copies(const kt_bench *b) { return b->copies; }
void *kt_bench_stream(const kt_bench *b) { return b->stream; }

static void fill_launch(const kt_bench *b, const kt_module *mod, int copy, kt_launch *l) {
    memset(l, 0, sizeof *l);
    l->mod = mod;
    l->ref_mod = mod;
    l->config = mod ? &mod->config : NULL;
    l->problem = &b->p;
    l->stream = b->stream;
    for (int i = 0; i < b->n_t; i++) l->ptr[i] = kt_bench_ptr(b, i, copy);
}

static int compute_reference(kt_bench *b, const kt_module *ref_mod) {
    const kt_family *f = b->f;
    if (f->launch_reference && ref_mod && f->gpu_reference_above > 0 &&
        f->flops(&b->p) / 2 > f->gpu_reference_above) {
        CUdeviceptr d;
        KT_CHECK(CU, kt_cu.cuMemAlloc(&d, b->n_ref * sizeof(double)));
        kt_launch l;
        fill_launch(b, ref_mod, 0, &l);
        int rc = f->launch_reference(&l, d);
        if (!rc) rc = kt_status_CU(kt_cu.cuStreamSynchronize(b->stream), "reference kernel", __FILE__, __LINE__);
        if (!rc) rc = kt_status_CU(kt_cu.cuMemcpyDtoH(b->ref, d, b->n_ref * sizeof(double)), "cuMemcpyDtoH", __FILE__, __LINE__);
        kt_cu.cuMemFree(d);
        return rc;
    }
    f->reference(&b->p, b->host, b->ref);
    return 0;
}

int kt_bench_setup(const kt_family *f, const kt_problem *p, uint64_t seed, const kt_module *ref_mod, kt_bench **out) {
    char why[256];
    if (f->check_problem(p, why, sizeof why)) return kt_fail("%s", why);
    kt_bench *b = calloc(1, sizeof *b);
    if (!b) return kt_fail("out of memory");
    *out = b;
    b->f = f;
    b->p = *p;
    b->n_t = f->tensors(p, b->t);
    size_t input_bytes = 0;
    for (int i = 0; i < b->n_t; i++) {
        b->stride[i] = (tensor_bytes(&b->t[i]) + 255) / 256 * 256;
        if (b->t[i].role == KT_INPUT) input_bytes += b->stride[i];
        if (b->t[i].role == KT_OUTPUT) b->n_ref += b->t[i].count;
    }
    size_t l2 = kt_gpu_current()->l2_bytes ? kt_gpu_current()->l2_bytes : (64u << 20);
    b->copies = (int)((ROTATE_BYTES_FACTOR * l2 + input_bytes - 1) / input_bytes);
    if (b->copies < 1) b->copies = 1;
    if (b->copies > MAX_COPIES) b->copies = MAX_COPIES;
    KT_CHECK(CU, kt_cu.cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING));
    KT_CHECK(CU, kt_cu.cuEventCreate(&b->ev0, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuEventCreate(&b->ev1, CU_EVENT_DEFAULT));
    for (int i = 0; i < b->n_t; i++) {
        size_t bytes = tensor_bytes(&b->t[i]);
        if (!(b->host[i] = malloc(bytes ? bytes : 1))) return kt_fail("out of memory for %s", b->t[i].name);
        size_t dev_bytes = b->t[i].role == KT_INPUT ? b->stride[i] * b->copies : b->stride[i];
        KT_CHECK(CU, kt_cu.cuMemAlloc(&b->dev[i], dev_bytes));
        if (b->t[i].role == KT_SCRATCH) KT_CHECK(CU, kt_cu.cuMemsetD8(b->dev[i], 0, dev_bytes));
    }
    f->fill(p, seed, b->host);
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_INPUT) continue;
        KT_CHECK(CU, kt_cu.cuMemcpyHtoD(b->dev[i], b->host[i], tensor_bytes(&b->t[i])));
        for (int r = 1; r < b->copies; r++)
            KT_CHECK(CU, kt_cu.cuMemcpyDtoD(b->dev[i] + r * b->stride[i], b->dev[i], tensor_bytes(&b->t[i])));
    }
    if (!(b->ref = malloc(sizeof(double) * (b->n_ref ? b->n_ref : 1)))) return kt_fail("out of memory");
    return compute_reference(b, ref_mod);
}

void kt_bench_free(kt_bench *b) {
    if (!b) return;
    for (int i = 0; i < b->n_t; i++) {
        if (b->dev[i]) kt_cu.cuMemFree(b->dev[i]);
        free(b->host[i]);
    }
    if (b->stream) kt_cu.cuStreamDestroy(b->stream);
    if (b->ev0) kt_cu.cuEventDestroy(b->ev0);
    if (b->ev1) kt_cu.cuEventDestroy(b->ev1);
    free(b->ref);
    free(b);
}

int kt_bench_poison(kt_bench *b) {
    for (int i = 0; i < b->n_t; i++)
        if (b->t[i].role == KT_OUTPUT)
            KT_CHECK(CU, kt_cu.cuMemsetD8Async(b->dev[i], 0xff, tensor_bytes(&b->t[i]), b->stream));
    return 0;
}

static double element(const void *base, kt_dtype t, size_t i) {
    switch (t) {
    case KT_E4M3: return kt_e4m3_to_float(((const uint8_t *)base)[i]);
    case KT_BF16: return kt_bf16_to_float(((const uint16_t *)base)[i]);
    case KT_F32: return ((const float *)base)[i];
    case KT_I32: return ((const int32_t *)base)[i];
    case KT_U8: return ((const uint8_t *)base)[i];
    }
    return NAN;
}

int kt_bench_check(kt_bench *b, double *rel_err, char *why, size_t n) {
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(b->stream));
    size_t off = 0;
    double worst = 0;
    why[0] = 0;
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_OUTPUT) continue;
        KT_CHECK(CU, kt_cu.cuMemcpyDtoH(b->host[i], b->dev[i], tensor_bytes(&b->t[i])));
        double diff = 0, norm = 0;
        for (size_t j = 0; j < b->t[i].count; j++) {
            double o = element(b->host[i], b->t[i].dtype, j), r = b->ref[off + j];
            if (isnan(o)) {
                snprintf(why, n, "%s[%zu] is NaN (unwritten or invalid; expected %g)", b->t[i].name, j, r);
                *rel_err = NAN;
                return 0;
            }
            diff += (o - r) * (o - r);
            norm += r * r;
        }
        double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
        if (rel > worst) worst = rel;
        if (rel > b->f->tolerance && !why[0])
            snprintf(why, n, "%s: relative error %.3g > tolerance %.1g", b->t[i].name, rel, b->f->tolerance);
        off += b->t[i].count;
    }
    *rel_err = worst;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int kt_bench_time(kt_bench *b, int (*enqueue)(void *ctx, int copy, void *stream), void *ctx, kt_timing *t) {
    int launches = b->copies < MIN_LAUNCHES ? MIN_LAUNCHES : b->copies;
    int repeats = env_int("KT_REPEATS", 15);
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    KT_CHECK(CU, kt_cu.cuStreamBeginCapture(b->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int rc = 0;
    for (int i = 0; i < launches && !rc; i++) rc = enqueue(ctx, i % b->copies, b->stream);
    CUresult end = kt_cu.cuStreamEndCapture(b->stream, &graph);
    if (rc) {
        if (graph) kt_cu.cuGraphDestroy(graph);
        return -1;
    }
    KT_CHECK(CU, end);
    rc = kt_status_CU(kt_cu.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate", __FILE__, __LINE__);
    kt_cu.cuGraphDestroy(graph);
    if (rc) return -1;
    double *us = malloc(sizeof(double) * (size_t)repeats);
    for (int i = 0; i < WARMUP_REPLAYS && !rc; i++)
        rc = kt_status_CU(kt_cu.cuGraphLaunch(exec, b->stream), "cuGraphLaunch", __FILE__, __LINE__);
    for (int i = 0; i < repeats && !rc; i++) {
        float ms = 0;
        rc = kt_status_CU(kt_cu.cuEventRecord(b->ev0, b->stream), "cuEventRecord", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuGraphLaunch(exec, b->stream), "cuGraphLaunch", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuEventRecord(b->ev1, b->stream), "cuEventRecord", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuEventSynchronize(b->ev1), "kernel execution", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuEventElapsedTime(&ms, b->ev0, b->ev1), "cuEventElapsedTime", __FILE__, __LINE__);
        us[i] = ms * 1e3 / launches;
    }
    kt_cu.cuGraphExecDestroy(exec);
    if (!rc) {
        qsort(us, (size_t)repeats, sizeof *us, cmp_double);
        t->median_us = us[repeats / 2];
        t->min_us = us[0];
        t->max_us = us[repeats - 1];
        t->repeats = repeats;
    }
    free(us);
    return rc ? -1 : 0;
}

typedef struct variant_ctx {
    kt_bench *b;
    const kt_module *mod;
} variant_ctx;

static int enqueue_variant(void *ctx, int copy, void *stream) {
    variant_ctx *v = ctx;
    kt_launch l;
    fill_launch(v->b, v->mod, copy, &l);
    l.stream = stream;
    return v->b->f->launch(&l);
}

int kt_bench_time_variant(kt_bench *b, const kt_module *mod, kt_timing *t) {
    variant_ctx v = {b, mod};
    return kt_bench_time(b, enqueue_variant, &v, t);
}

/* Records a failure of kind s; returns -1 when the context itself is lost (a fault). */
static int failed(kt_measurement *m, kt_status s, const char *what) {
    m->status = s;
    snprintf(m->error, sizeof m->error, "%s", what);
    if (s == KT_LAUNCH_ERROR && kt_cu.cuCtxSynchronize() != CUDA_SUCCESS)
        return kt_fail("the GPU context is lost after: %s", m->error);
    return 0;
}

int kt_bench_variant(kt_bench *b, const kt_module *mod, kt_measurement *m) {
    m->status = KT_OK;
    m->error[0] = 0;
    m->rel_err = NAN;
    m->median_us = m->min_us = m->max_us = NAN;
    variant_ctx v = {b, mod};
    char why[512];
    if (kt_bench_poison(b) || enqueue_variant(&v, 0, b->stream) ||
        kt_status_CU(kt_cu.cuStreamSynchronize(b->stream), "variant run", __FILE__, __LINE__))
        return failed(m, KT_LAUNCH_ERROR, kt_error());
    if (kt_bench_check(b, &m->rel_err, why, sizeof why)) return failed(m, KT_LAUNCH_ERROR, kt_error());
    if (why[0]) return failed(m, KT_WRONG_RESULT, why);
    /* Timed launches are checked too: poison, replay the timing graph, compare again. */
    kt_timing t;
    if (kt_bench_poison(b) || kt_bench_time(b, enqueue_variant, &v, &t))
        return failed(m, KT_LAUNCH_ERROR, kt_error());
    double rel2;
    if (kt_bench_check(b, &rel2, why, sizeof why)) return failed(m, KT_LAUNCH_ERROR, kt_error());
    if (why[0]) return failed(m, KT_WRONG_RESULT, why);
    m->median_us = t.median_us;
    m->min_us = t.min_us;
    m->max_us = t.max_us;
    return 0;
}
