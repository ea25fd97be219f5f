/* measure.c — verification and timing of one variant on one problem, the way DESIGN.md's
 * "Measurement" contract says: fresh seeded inputs, outputs poisoned with NaN before
 * every checked run, compared with a float64 reference; timed with events over CUDA-graph
 * replays whose launches rotate over enough input copies that L2 cannot serve them.
 * Everything a variant is checked against is set up once per problem, the reference on the
 * device too, and outputs are compared there (tuner/check.cu), copying a few numbers back
 * instead of the outputs; KT_CHECK_ON_GPU=0 copies them back and compares on the CPU (the
 * cross-check in tests/gpu/run.sh step check_gpu_vs_cpu). */
#include "../runtime/cu.h"
#include "../runtime/nvtx.h"
#include "tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROTATE_BYTES_FACTOR 3 /* input copies span 3x the L2 */
#define MAX_COPIES 64
#define MIN_LAUNCHES 16        /* launches per graph of a short kernel... */
#define LONG_REPLAY_US 1000.0f /* ...unless one pass over the copies takes this long anyway */
#define MAX_REPEATS 15         /* timed replays (KT_REPEATS overrides)... */
#define MIN_REPEATS 5          /* ...down to this many for long kernels, */
#define TIMED_BUDGET_MS 12.0f  /* so timing one variant stays near this */
#define CHECK_THREADS 256      /* tuner/check.cu's block size */
#define CHECK_BLOCKS 1024      /* enough blocks to fill any GPU; each thread strides over the rest */

struct kt_bench {
    const kt_family *f;
    kt_problem p;
    int n_t, copies;
    double timing_s; /* host seconds spent in kt_bench_time, all calls */
    kt_tensor_desc t[KT_MAX_TENSORS];
    CUdeviceptr dev[KT_MAX_TENSORS];
    size_t stride[KT_MAX_TENSORS]; /* bytes between rotation copies of an input */
    void *host[KT_MAX_TENSORS];    /* inputs as filled; outputs only for the CPU compare */
    CUdeviceptr ref;               /* every output's float64 reference, concatenated */
    double *host_ref;              /* its host copy, for the CPU compare only */
    size_t n_ref;
    int check_on_cpu; /* KT_CHECK_ON_GPU=0 */
    kt_module check;  /* tuner/check.cu (not loaded for the CPU compare) */
    CUdeviceptr sums; /* the check kernel's kt_check_sums, one per tensor */
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
double kt_bench_timing_seconds(const kt_bench *b) { return b->timing_s; }

size_t kt_bench_device_bytes(const kt_bench *b) {
    size_t bytes = sizeof(kt_check_sums) * KT_MAX_TENSORS + b->n_ref * sizeof(double);
    for (int i = 0; i < b->n_t; i++) bytes += b->t[i].role == KT_INPUT ? b->stride[i] * b->copies : b->stride[i];
    return bytes;
}
void *kt_bench_stream(const kt_bench *b) { return b->stream; }

int kt_reference_module(const kt_family *f, kt_module *m) {
    const kt_family *r = f->reference_family ? f->reference_family : f;
    kt_cubin cubin;
    if (kt_compile(r, &r->default_config, kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load(r, &r->default_config, &cubin, m);
    kt_cubin_free(&cubin);
    return rc;
}

void kt_bench_launch(const kt_bench *b, const kt_module *mod, int copy, kt_launch *l) {
    memset(l, 0, sizeof *l);
    l->mod = mod;
    l->ref_mod = mod;
    l->config = mod ? &mod->config : NULL;
    l->problem = &b->p;
    l->stream = b->stream;
    l->copy = copy;
    l->copies = b->copies;
    for (int i = 0; i < b->n_t; i++) l->ptr[i] = kt_bench_ptr(b, i, copy);
}

/* Computes the reference into b->ref on the device: by the family's GPU reference for large
 * problems, else on the CPU and uploaded once. The CPU compare keeps a host copy. */
static int compute_reference(kt_bench *b, const kt_module *ref_mod) {
    const kt_family *f = b->f;
    size_t bytes = b->n_ref * sizeof(double);
    KT_CHECK(CU, kt_cu.cuMemAlloc(&b->ref, bytes ? bytes : sizeof(double)));
    if (b->check_on_cpu && !(b->host_ref = malloc(bytes ? bytes : sizeof(double)))) return kt_fail("out of memory");
    if (f->launch_reference && ref_mod && f->gpu_reference_above > 0 &&
        kt_family_work(f, &b->p) > f->gpu_reference_above) {
        kt_launch l;
        kt_bench_launch(b, ref_mod, 0, &l);
        if (f->launch_reference(&l, b->ref)) return -1;
        KT_CHECK(CU, kt_cu.cuStreamSynchronize(b->stream));
        if (b->host_ref) KT_CHECK(CU, kt_cu.cuMemcpyDtoH(b->host_ref, b->ref, bytes));
        return 0;
    }
    double *ref = b->host_ref ? b->host_ref : malloc(bytes ? bytes : sizeof(double));
    if (!ref) return kt_fail("out of memory");
    f->reference(&b->p, b->host, ref);
    int rc = kt_status_CU(kt_cu.cuMemcpyHtoD(b->ref, ref, bytes), "cuMemcpyHtoD", __FILE__, __LINE__);
    if (ref != b->host_ref) free(ref);
    return rc;
}

/* Loads the check kernel into the current context (compiled once, then from the JIT cache). */
static int load_check(kt_bench *b) {
    static const char *const kernels[] = {"kt_check", NULL};
    kt_cubin cubin;
    if (kt_compile_source("check.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("check.cu", kernels, &cubin, &b->check);
    kt_cubin_free(&cubin);
    return rc;
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
    for (int i = 0; i < b->n_t; i++)
        if (b->t[i].role == KT_OUTPUT && b->t[i].compare == KT_CMP_SET &&
            (!b->t[i].set_len || b->t[i].count % b->t[i].set_len))
            return kt_fail("%s: output %s: a SET compare needs rows (set_len %zu of %zu elements)", f->name,
                           b->t[i].name, b->t[i].set_len, b->t[i].count);
    b->check_on_cpu = getenv("KT_CHECK_ON_GPU") && !strcmp(getenv("KT_CHECK_ON_GPU"), "0");
    size_t input_bytes = 0;
    for (int i = 0; i < b->n_t; i++) {
        b->stride[i] = (tensor_bytes(&b->t[i]) + 255) / 256 * 256;
        if (b->t[i].role == KT_INPUT) input_bytes += b->stride[i];
        if (b->t[i].role == KT_OUTPUT) b->n_ref += b->t[i].count;
    }
    size_t l2 = kt_gpu_current()->l2_bytes ? kt_gpu_current()->l2_bytes : (64u << 20);
    size_t read = f->rotation_bytes ? (size_t)f->rotation_bytes(p) : input_bytes;
    if (read < 1 || read > input_bytes) read = input_bytes;
    b->copies = (int)((ROTATE_BYTES_FACTOR * l2 + read - 1) / read);
    if (b->copies < 1) b->copies = 1;
    if (b->copies > MAX_COPIES) b->copies = MAX_COPIES;
    KT_CHECK(CU, kt_cu.cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING));
    KT_CHECK(CU, kt_cu.cuEventCreate(&b->ev0, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuEventCreate(&b->ev1, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&b->sums, sizeof(kt_check_sums) * KT_MAX_TENSORS));
    for (int i = 0; i < b->n_t; i++) {
        size_t bytes = tensor_bytes(&b->t[i]);
        if ((b->t[i].role == KT_INPUT || (b->t[i].role == KT_OUTPUT && b->check_on_cpu)) &&
            !(b->host[i] = malloc(bytes ? bytes : 1)))
            return kt_fail("out of memory for %s", b->t[i].name);
        size_t dev_bytes = b->t[i].role == KT_INPUT ? b->stride[i] * b->copies : b->stride[i];
        KT_CHECK(CU, kt_cu.cuMemAlloc(&b->dev[i], dev_bytes));
        if (b->t[i].role == KT_SCRATCH) KT_CHECK(CU, kt_cu.cuMemsetD8Async(b->dev[i], 0, dev_bytes, b->stream));
    }
    f->fill(p, seed, b->host);
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_INPUT) continue;
        KT_CHECK(CU, kt_cu.cuMemcpyHtoD(b->dev[i], b->host[i], tensor_bytes(&b->t[i])));
        for (int r = 1; r < b->copies; r++)
            KT_CHECK(CU, kt_cu.cuMemcpyDtoD(b->dev[i] + r * b->stride[i], b->dev[i], tensor_bytes(&b->t[i])));
    }
    if (!b->check_on_cpu && load_check(b)) return -1;
    return compute_reference(b, ref_mod);
}

void kt_bench_free(kt_bench *b) {
    if (!b) return;
    for (int i = 0; i < b->n_t; i++) {
        if (b->dev[i]) kt_cu.cuMemFree(b->dev[i]);
        free(b->host[i]);
    }
    if (b->ref) kt_cu.cuMemFree(b->ref);
    if (b->sums) kt_cu.cuMemFree(b->sums);
    kt_module_unload(&b->check);
    if (b->stream) kt_cu.cuStreamDestroy(b->stream);
    if (b->ev0) kt_cu.cuEventDestroy(b->ev0);
    if (b->ev1) kt_cu.cuEventDestroy(b->ev1);
    free(b->host_ref);
    free(b);
}

int kt_bench_poison(kt_bench *b) {
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_OUTPUT) continue;
        if (b->t[i].dtype == KT_I32)
            KT_CHECK(CU, kt_cu.cuMemsetD32Async(b->dev[i], (unsigned)KT_POISON_I32, b->t[i].count, b->stream));
        else
            KT_CHECK(CU, kt_cu.cuMemsetD8Async(b->dev[i], 0xff, tensor_bytes(&b->t[i]), b->stream));
    }
    return 0;
}

_Static_assert((int)KT_CHECK_I32 == (int)KT_I32 && (int)KT_CHECK_U8 == (int)KT_U8 &&
                   (int)KT_CHECK_SET == (int)KT_CMP_SET && KT_CHECK_POISON_I32 == KT_POISON_I32,
               "kt_check.h's codes are kt.h's");

void kt_check_host(const kt_tensor_desc *t, const void *out, const double *ref, kt_check_sums *s) {
    memset(s, 0, sizeof *s);
    unsigned long long units = kt_check_units(t->count, (int)t->compare, t->set_len);
    for (unsigned long long u = 0; u < units; u++)
        kt_check_unit(out, (int)t->dtype, ref, t->count, (int)t->compare, t->set_len, u, s);
}

/* Each output's sums, the outputs copied to the host and compared there. */
static int sums_on_cpu(kt_bench *b, kt_check_sums *sums) {
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(b->stream));
    size_t off = 0;
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_OUTPUT) continue;
        KT_CHECK(CU, kt_cu.cuMemcpyDtoH(b->host[i], b->dev[i], tensor_bytes(&b->t[i])));
        kt_check_host(&b->t[i], b->host[i], b->host_ref + off, &sums[i]);
        off += b->t[i].count;
    }
    return 0;
}

/* Each output's sums from the check kernel, on the stream after the variant's run. */
static int sums_on_gpu(kt_bench *b, kt_check_sums *sums) {
    KT_CHECK(CU, kt_cu.cuMemsetD8Async(b->sums, 0, sizeof *sums * (size_t)b->n_t, b->stream));
    size_t off = 0;
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_OUTPUT || !b->t[i].count) continue;
        CUdeviceptr out = b->dev[i], ref = b->ref + off * sizeof(double), s = b->sums + i * sizeof *sums;
        int dtype = (int)b->t[i].dtype, compare = (int)b->t[i].compare;
        unsigned long long count = b->t[i].count, set_len = b->t[i].set_len;
        void *args[] = {&out, &dtype, &ref, &count, &compare, &set_len, &s};
        unsigned long long blocks = (kt_check_units(count, compare, set_len) + CHECK_THREADS - 1) / CHECK_THREADS;
        if (kt_launch_kernel(&b->check, 0, (unsigned)(blocks < CHECK_BLOCKS ? blocks : CHECK_BLOCKS), 1, 1,
                             CHECK_THREADS, 0, b->stream, args))
            return -1;
        off += count;
    }
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(b->stream));
    KT_CHECK(CU, kt_cu.cuMemcpyDtoH(sums, b->sums, sizeof *sums * (size_t)b->n_t));
    return 0;
}

/* The reference value of output element i (of all outputs, concatenated). */
static int reference_at(const kt_bench *b, size_t i, double *value) {
    if (b->host_ref)
        *value = b->host_ref[i];
    else
        KT_CHECK(CU, kt_cu.cuMemcpyDtoH(value, b->ref + i * sizeof(double), sizeof(double)));
    return 0;
}

/* Writes what tensor i's element at holds and should hold into why[n]. */
static int describe_bad(const kt_bench *b, int i, size_t off, const kt_check_sums *s, char *why, size_t n) {
    const kt_tensor_desc *t = &b->t[i];
    size_t at = t->count - s->bad_rank, size = kt_dtype_size(t->dtype);
    unsigned char bits[8];
    double expected;
    if (reference_at(b, off + at, &expected)) return -1;
    if (b->host[i])
        memcpy(bits, (const unsigned char *)b->host[i] + at * size, size);
    else
        KT_CHECK(CU, kt_cu.cuMemcpyDtoH(bits, b->dev[i] + at * size, size));
    int poison;
    double got = kt_check_load(bits, (int)t->dtype, 0, &poison);
    static const char *const rule[] = {[KT_CMP_REL_L2] = "finite values and matching infinities",
                                       [KT_CMP_EXACT] = "an exact compare",
                                       [KT_CMP_SET] = "its row compared as a set"};
    const char *what = t->compare == KT_CMP_SET ? "row" : "element";
    if (poison && t->dtype != KT_I32)
        snprintf(why, n, "%s[%zu] is NaN (unwritten or invalid; expected %g; %llu NaN in all)", t->name, at, expected,
                 s->bad);
    else if (poison)
        snprintf(why, n, "%s[%zu] is unwritten (still the poison; expected %g; %llu unwritten in all)", t->name, at,
                 expected, s->unwritten);
    else
        snprintf(why, n, "%s[%zu] is %g, expected %g (%s; %llu %ss fail, %llu unwritten)", t->name, at, got, expected,
                 rule[t->compare], s->bad, what, s->unwritten);
    return 0;
}

int kt_bench_check(kt_bench *b, double *rel_err, char *why, size_t n) {
    kt_check_sums sums[KT_MAX_TENSORS] = {{0}};
    if (b->check_on_cpu ? sums_on_cpu(b, sums) : sums_on_gpu(b, sums)) return -1;
    size_t off = 0;
    double worst = 0;
    why[0] = 0;
    for (int i = 0; i < b->n_t; i++) {
        if (b->t[i].role != KT_OUTPUT) continue;
        const kt_check_sums *s = &sums[i];
        if (s->bad) {
            *rel_err = NAN;
            return describe_bad(b, i, off, s, why, n);
        }
        double rel = s->ref2 > 0 ? sqrt(s->diff2 / s->ref2) : sqrt(s->diff2);
        double tolerance = b->t[i].tolerance > 0 ? b->t[i].tolerance : b->f->tolerance;
        if (rel > worst) worst = rel;
        if (rel > tolerance && !why[0])
            snprintf(why, n, "%s: relative error %.3g > tolerance %.1g", b->t[i].name, rel, tolerance);
        off += b->t[i].count;
    }
    *rel_err = worst;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Replays exec once between two events and gives its duration. */
static int replay_ms(kt_bench *b, CUgraphExec exec, float *ms) {
    KT_CHECK(CU, kt_cu.cuEventRecord(b->ev0, b->stream));
    KT_CHECK(CU, kt_cu.cuGraphLaunch(exec, b->stream));
    KT_CHECK(CU, kt_cu.cuEventRecord(b->ev1, b->stream));
    KT_CHECK(CU, kt_cu.cuEventSynchronize(b->ev1));
    KT_CHECK(CU, kt_cu.cuEventElapsedTime(ms, b->ev0, b->ev1));
    return 0;
}

/* Times enqueue over the rotation: one direct launch (warms up, sizes the graph), a graph of
 * launches uploaded ahead, then the timed replays, the first of which sizes how many there
 * are: at most max_repeats (0: MAX_REPEATS, or KT_REPEATS). No untimed replay: every replay
 * starts from an L2 that the rotation has emptied of its inputs, the first as well. */
static int time_replays(kt_bench *b, int (*enqueue)(void *ctx, int copy, void *stream), void *ctx, int max_repeats,
                        kt_timing *t) {
    float first_ms = 0;
    KT_CHECK(CU, kt_cu.cuEventRecord(b->ev0, b->stream));
    if (enqueue(ctx, 0, b->stream)) return -1;
    KT_CHECK(CU, kt_cu.cuEventRecord(b->ev1, b->stream));
    KT_CHECK(CU, kt_cu.cuEventSynchronize(b->ev1));
    KT_CHECK(CU, kt_cu.cuEventElapsedTime(&first_ms, b->ev0, b->ev1));
    /* Every replay walks all the copies (so L2 cannot serve the inputs) and lasts long enough
     * to dwarf the graph launch's own few microseconds. */
    int launches = b->copies;
    if (launches < MIN_LAUNCHES && first_ms * 1e3 * launches < LONG_REPLAY_US) launches = MIN_LAUNCHES;
    const int fixed = !max_repeats && getenv("KT_REPEATS");
    int repeats = max_repeats ? max_repeats : env_int("KT_REPEATS", MAX_REPEATS);
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
    rc = kt_status_CU(kt_cu.cuGraphUpload(exec, b->stream), "cuGraphUpload", __FILE__, __LINE__);
    double *us = malloc(sizeof(double) * (size_t)repeats);
    if (!us && !rc) rc = kt_fail("out of memory");
    for (int i = 0; i < repeats && !rc; i++) {
        float ms = 0;
        rc = replay_ms(b, exec, &ms);
        us[i] = ms * 1e3 / launches;
        if (i == 0 && !rc && !fixed && ms * repeats > TIMED_BUDGET_MS) {
            const int fit = (int)(TIMED_BUDGET_MS / ms) < MIN_REPEATS ? MIN_REPEATS : (int)(TIMED_BUDGET_MS / ms);
            if (fit < repeats) repeats = fit;
        }
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

int kt_bench_time(kt_bench *b, int (*enqueue)(void *ctx, int copy, void *stream), void *ctx, int max_repeats,
                  kt_timing *t) {
    double t0 = kt_now();
    int rc = time_replays(b, enqueue, ctx, max_repeats, t);
    b->timing_s += kt_now() - t0;
    return rc;
}

typedef struct variant_ctx {
    kt_bench *b;
    const kt_module *mod;
} variant_ctx;

static int enqueue_variant(void *ctx, int copy, void *stream) {
    variant_ctx *v = ctx;
    kt_launch l;
    kt_bench_launch(v->b, v->mod, copy, &l);
    l.stream = stream;
    const kt_family *f = v->b->f;
    return f->n_stages ? kt_pipeline_launch(f, v->mod, &l) : f->launch(&l);
}

int kt_bench_enqueue(kt_bench *b, const kt_module *mod, int copy) {
    variant_ctx v = {b, mod};
    return enqueue_variant(&v, copy % b->copies, b->stream);
}

/* Opens the NVTX ranges of mod's config on b's problem (runtime/nvtx.h). */
static void push_variant(const kt_bench *b, const kt_module *mod) {
    char cfg[256];
    kt_format_config(b->f, &mod->config, cfg, sizeof cfg);
    kt_nvtx_push(b->f, &b->p, cfg);
}

int kt_bench_time_variant(kt_bench *b, const kt_module *mod, int max_repeats, kt_timing *t) {
    variant_ctx v = {b, mod};
    push_variant(b, mod);
    int rc = kt_bench_time(b, enqueue_variant, &v, max_repeats, t);
    kt_nvtx_pop();
    return rc;
}

/* Records a failure of kind s; returns -1 when the context itself is lost (a fault). */
static int failed(kt_measurement *m, kt_status s, const char *what) {
    m->status = s;
    snprintf(m->error, sizeof m->error, "%s", what);
    if (s == KT_LAUNCH_ERROR && kt_cu.cuCtxSynchronize() != CUDA_SUCCESS)
        return kt_fail("the GPU context is lost after: %s", m->error);
    return 0;
}

static int verify_and_time(kt_bench *b, const kt_module *mod, kt_measurement *m) {
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
    if (kt_bench_poison(b) || kt_bench_time(b, enqueue_variant, &v, 0, &t))
        return failed(m, KT_LAUNCH_ERROR, kt_error());
    double rel2;
    if (kt_bench_check(b, &rel2, why, sizeof why)) return failed(m, KT_LAUNCH_ERROR, kt_error());
    if (why[0]) return failed(m, KT_WRONG_RESULT, why);
    m->median_us = t.median_us;
    m->min_us = t.min_us;
    m->max_us = t.max_us;
    return 0;
}

int kt_bench_variant(kt_bench *b, const kt_module *mod, kt_measurement *m) {
    push_variant(b, mod);
    int rc = verify_and_time(b, mod, m);
    kt_nvtx_pop();
    return rc;
}

uint64_t kt_problem_seed(uint64_t seed, const char *shape, long m) {
    return seed ^ kt_hash(shape, strlen(shape), (uint64_t)m);
}
