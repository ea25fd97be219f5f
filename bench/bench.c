/* bench.c — `kt bench` (see bench.h). For each (shape, M): kt's variant (a pipeline: its
 * stages' winners) verified and timed by kt_bench_variant, the floor from the measured copy
 * bandwidth, the mma floor from the measured rate of the family's mma, the family's
 * baselines (kt_family.baselines; fp8_gemm's are bench/baselines.c) timed by kt_bench_time
 * over the same rotation of input copies, and, where a registered pipeline ends in this
 * family, that pipeline with this variant as its last stage (quant+kt_us) and its reference
 * family (fused_us). A baseline that cannot run is reported n/a and never stops the kt
 * measurement. */
#include "bench.h"

#include "../runtime/cu.h"
#include "../runtime/nvtx.h"
#include "../tuner/tuner.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define COPY_BYTES ((size_t)1 << 30)      /* launch latency is < 0.1% of such a copy */
#define COPY_MIN_BYTES ((size_t)64 << 20) /* still larger than any L2 */
#define COPY_HEADROOM ((size_t)256 << 20) /* left free for the context while probing */
#define COPY_REPEATS 5

/* ------------------------------------------------------------ probes: copy and mma floors */

/* Events that bracket one probe's work on the legacy NULL stream, where nothing else runs. */
typedef struct probe_events {
    CUevent start, stop;
} probe_events;

/* Best milliseconds of run(ctx) over `repeats` runs after one warm-up (first touch, clocks);
 * creates the events on first use (probe_events_free destroys them). */
static int probe_best_ms(probe_events *e, int repeats, int (*run)(void *ctx), void *ctx, float *best_ms) {
    if (!e->start) KT_CHECK(CU, kt_cu.cuEventCreate(&e->start, CU_EVENT_DEFAULT));
    if (!e->stop) KT_CHECK(CU, kt_cu.cuEventCreate(&e->stop, CU_EVENT_DEFAULT));
    *best_ms = INFINITY;
    for (int i = 0; i <= repeats; i++) {
        float ms = 0;
        KT_CHECK(CU, kt_cu.cuEventRecord(e->start, NULL));
        if (run(ctx)) return -1;
        KT_CHECK(CU, kt_cu.cuEventRecord(e->stop, NULL));
        KT_CHECK(CU, kt_cu.cuEventSynchronize(e->stop));
        KT_CHECK(CU, kt_cu.cuEventElapsedTime(&ms, e->start, e->stop));
        if (i > 0 && ms < *best_ms) *best_ms = ms;
    }
    if (!(*best_ms > 0) || !isfinite(*best_ms)) return kt_fail("a probe timed at %g ms", *best_ms);
    return 0;
}

static void probe_events_free(probe_events *e) {
    if (e->start) kt_cu.cuEventDestroy(e->start);
    if (e->stop) kt_cu.cuEventDestroy(e->stop);
}

typedef struct copy_probe {
    CUdeviceptr src, dst;
    size_t bytes;
} copy_probe;

/* cuMemcpyDtoD is enqueued on the legacy NULL stream (device-to-device copies do not wait
 * for the host), so the events bracket exactly the copy. */
static int copy_once(void *ctx) {
    copy_probe *c = ctx;
    KT_CHECK(CU, kt_cu.cuMemcpyDtoD(c->dst, c->src, c->bytes));
    return 0;
}

static int copy_probe_run(copy_probe *c, probe_events *e, double *bytes_per_s) {
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->src, c->bytes));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->dst, c->bytes));
    KT_CHECK(CU, kt_cu.cuMemsetD8(c->src, 0x3c, c->bytes));
    float best_ms;
    if (probe_best_ms(e, COPY_REPEATS, copy_once, c, &best_ms)) return -1;
    *bytes_per_s = 2.0 * (double)c->bytes / (best_ms * 1e-3);
    return 0;
}

int kt_bench_copy_bandwidth(double *bytes_per_s) {
    size_t free_bytes, total_bytes;
    KT_CHECK(CU, kt_cu.cuMemGetInfo(&free_bytes, &total_bytes));
    copy_probe c = {.bytes = COPY_BYTES};
    while (c.bytes > COPY_MIN_BYTES && 2 * c.bytes + COPY_HEADROOM > free_bytes) c.bytes /= 2;
    probe_events e = {0};
    int rc = copy_probe_run(&c, &e, bytes_per_s);
    if (c.src) kt_cu.cuMemFree(c.src);
    if (c.dst) kt_cu.cuMemFree(c.dst);
    probe_events_free(&e);
    return rc;
}

#define CEILING_ITERS 2048
#define CEILING_REPEATS 3

typedef struct ceiling_probe {
    kt_module mod;
    CUdeviceptr out;
    int kernel, sms, threads;
} ceiling_probe;

/* One CTA per SM of the kernel and block size chosen in c. */
static int ceiling_once(void *ctx) {
    ceiling_probe *c = ctx;
    int iters = CEILING_ITERS;
    void *args[] = {&c->out, &iters};
    return kt_launch_kernel(&c->mod, c->kernel, (unsigned)c->sms, 1, 1, (unsigned)c->threads, 0, NULL, args);
}

/* Loads ceiling.cu's named kernels (NULL-terminated) and the output buffer every probe writes. */
static int ceiling_open(ceiling_probe *c, const char *const *kernels) {
    c->sms = kt_gpu_current()->sm_count;
    kt_cubin cubin = {0};
    if (kt_compile_source("ceiling.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("ceiling.cu", kernels, &cubin, &c->mod);
    kt_cubin_free(&cubin);
    if (rc) return -1;
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->out, (size_t)c->sms * 1024 * sizeof(float)));
    return 0;
}

static void ceiling_close(ceiling_probe *c, probe_events *e) {
    kt_module_unload(&c->mod);
    if (c->out) kt_cu.cuMemFree(c->out);
    probe_events_free(e);
}

/* Kernel c->kernel at each of n block sizes warps[] that its registers allow: the best rate and
 * the rate at 8 warps (0 where not run), in units of `work` a warp a step per second. */
static int ceiling_rates(ceiling_probe *c, probe_events *e, const int *warps, int n, double work, double *best,
                         double *at_8_warps) {
    int max_threads = 0;
    KT_CHECK(CU, kt_cu.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                          (CUfunction)c->mod.fn[c->kernel]));
    *best = *at_8_warps = 0;
    for (int w = 0; w < n; w++) {
        c->threads = warps[w] * 32;
        if (c->threads > max_threads) continue; /* too many registers for that block */
        float ms;
        if (probe_best_ms(e, CEILING_REPEATS, ceiling_once, c, &ms)) return -1;
        double rate = (double)c->sms * warps[w] * CEILING_ITERS * work / (ms * 1e-3);
        if (rate > *best) *best = rate;
        if (warps[w] == 8) *at_8_warps = rate;
    }
    return 0;
}

static const int ceiling_warps[] = {8, 16, 32};

static int ceiling_run(ceiling_probe *c, probe_events *e, kt_mma_kind kind, double *best, double *at_8_warps) {
    static const char *const kernels[] = {"kt_mma_ceiling_2x2", "kt_mma_ceiling_4x2", "kt_mma_bf16_ceiling_2x2",
                                          "kt_mma_bf16_ceiling_4x2", NULL};
    static const int chains[] = {4, 8, 4, 8};                                         /* mmas per step of each kernel */
    const int first = kind == KT_MMA_BF16 ? 2 : 0, k = kind == KT_MMA_BF16 ? 16 : 32; /* the mma's K */
    if (ceiling_open(c, kernels)) return -1;
    *best = *at_8_warps = 0;
    for (c->kernel = first; c->kernel < first + 2; c->kernel++) {
        double b, b8;
        if (ceiling_rates(c, e, ceiling_warps, 3, chains[c->kernel] * (2.0 * 16 * 8 * k), &b, &b8)) return -1;
        *best = b > *best ? b : *best, *at_8_warps = b8 > *at_8_warps ? b8 : *at_8_warps;
    }
    return *best > 0 ? 0 : kt_fail("no mma ceiling kernel could be launched");
}

int kt_bench_mma_ceiling(kt_mma_kind kind, double *best, double *at_8_warps) {
    ceiling_probe c = {0};
    probe_events e = {0};
    int rc = ceiling_run(&c, &e, kind, best, at_8_warps);
    ceiling_close(&c, &e);
    return rc;
}

/* MXFP4 weight bytes one warp step of kt_mxfp4_bf16_ceiling stands for: 2 fragments x 16 rows
 * x 128 k of codes (64 bytes a row) and their 4 ue8m0 scales a row. */
#define MXFP4_STEP_BYTES (2 * 16 * (64 + 4))

static int mxfp4_rate_run(ceiling_probe *c, probe_events *e, double *best, double *at_8_warps) {
    static const char *const kernels[] = {"kt_mxfp4_bf16_ceiling", NULL};
    static const int warps[] = {8, 12, 16, 24, 32};
    if (ceiling_open(c, kernels) || ceiling_rates(c, e, warps, 5, MXFP4_STEP_BYTES, best, at_8_warps)) return -1;
    return *best > 0 ? 0 : kt_fail("the MXFP4 bf16 probe could not be launched");
}

int kt_bench_mxfp4_bf16_rate(double *best, double *at_8_warps) {
    ceiling_probe c = {0};
    probe_events e = {0};
    int rc = mxfp4_rate_run(&c, &e, best, at_8_warps);
    ceiling_close(&c, &e);
    return rc;
}

/* The bf16 mma on e4m3 codes converted in registers (ceiling.cu's kt_cvt_mma_r*, and PATH 3's
 * f16 cvt): each kernel at 8, 16 and 32 warps per SM, its best rate. */
static int cvt_ceiling_run(ceiling_probe *c, probe_events *e, double rate[KT_CVT_RATES]) {
    static const char *const kernels[] = {"kt_cvt_mma_r1", "kt_cvt_mma_r2",   "kt_cvt_mma_r4",
                                          "kt_cvt_mma_r8", "kt_cvt16_mma_r1", NULL};
    static const int mmas[] = {4, 8, 16, 32, 4}; /* mmas per step of each kernel */
    if (ceiling_open(c, kernels)) return -1;
    for (c->kernel = 0; c->kernel < KT_CVT_RATES; c->kernel++) {
        double at_8_warps;
        if (ceiling_rates(c, e, ceiling_warps, 3, mmas[c->kernel] * (2.0 * 16 * 8 * 16), &rate[c->kernel], &at_8_warps))
            return -1;
        if (rate[c->kernel] <= 0) return kt_fail("%s could not be launched", kernels[c->kernel]);
    }
    return 0;
}

int kt_bench_cvt_mma_ceiling(double rate[KT_CVT_RATES]) {
    ceiling_probe c = {0};
    probe_events e = {0};
    int rc = cvt_ceiling_run(&c, &e, rate);
    ceiling_close(&c, &e);
    return rc;
}

#define L2_PROBE_BYTES ((size_t)16 << 20) /* held by any L2 kt targets (H200 60 MB, sm_120 128 MB) */
#define L2_PROBE_PASSES 16
#define DSMEM_PROBE_WORDS 4096 /* per thread */
#define MEMORY_REPEATS 3

typedef struct memory_probe {
    kt_module mod;
    CUdeviceptr buf, out;
    int kernel, ctas, threads;
} memory_probe;

/* kt_l2_read over the whole buffer, or kt_dsmem_read_S: c->ctas CTAs of c->threads. */
static int memory_once(void *ctx) {
    memory_probe *c = ctx;
    unsigned words = (unsigned)(L2_PROBE_BYTES / 16);
    int passes = L2_PROBE_PASSES, thread_words = DSMEM_PROBE_WORDS;
    void *l2_args[] = {&c->buf, &words, &passes, &c->out}, *dsmem_args[] = {&thread_words, &c->out};
    return kt_launch_kernel(&c->mod, c->kernel, (unsigned)c->ctas, 1, 1, (unsigned)c->threads, 0, NULL,
                            c->kernel ? dsmem_args : l2_args);
}

static int memory_run(memory_probe *c, probe_events *e, double *l2, double dsmem[3]) {
    static const char *const kernels[] = {"kt_l2_read", "kt_dsmem_read_2", "kt_dsmem_read_4", "kt_dsmem_read_8", NULL};
    static const char *const l2_only[] = {"kt_l2_read", NULL};
    const int sms = kt_gpu_current()->sm_count, clusters = kt_gpu_arch() >= 90; /* sm_89 has none */
    kt_cubin cubin = {0};
    if (kt_compile_source("memory.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("memory.cu", clusters ? kernels : l2_only, &cubin, &c->mod);
    kt_cubin_free(&cubin);
    if (rc) return -1;
    /* Two CTAs of 512 threads per SM, whole clusters of 8 (which every cluster size divides). */
    c->threads = 512;
    c->ctas = 2 * sms / 8 * 8;
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->buf, L2_PROBE_BYTES));
    KT_CHECK(CU, kt_cu.cuMemsetD8(c->buf, 0x3c, L2_PROBE_BYTES));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->out, (size_t)c->ctas * c->threads * sizeof(unsigned)));
    for (c->kernel = 0; c->kernel < (clusters ? 4 : 1); c->kernel++) {
        float ms;
        if (probe_best_ms(e, MEMORY_REPEATS, memory_once, c, &ms)) return -1;
        double bytes =
            c->kernel ? 16.0 * c->ctas * c->threads * DSMEM_PROBE_WORDS : (double)L2_PROBE_PASSES * L2_PROBE_BYTES;
        *(c->kernel ? &dsmem[c->kernel - 1] : l2) = bytes / (ms * 1e-3);
    }
    return 0;
}

int kt_bench_memory_rates(double *l2, double dsmem[3]) {
    memory_probe c = {0};
    probe_events e = {0};
    int rc = memory_run(&c, &e, l2, dsmem);
    kt_module_unload(&c.mod);
    if (c.buf) kt_cu.cuMemFree(c.buf);
    if (c.out) kt_cu.cuMemFree(c.out);
    probe_events_free(&e);
    return rc;
}

/* ------------------------------------------------------------ run state */

#define MAX_BASELINES 4

/* One baseline's result for one case. */
typedef struct baseline_result {
    const char *name; /* what ran ("cublaslt_fp8_rowwise", "cublaslt_fp8_tensor", "cublas_bf16"); NULL: n/a */
    double us;        /* median per launch; NAN: n/a */
    int algo;         /* cuBLASLt: index of the fastest heuristic algorithm; -1 otherwise */
} baseline_result;

/* One (shape, M) case: kt's measurement (shape, m, config, variant, status, times, error). */
typedef struct bench_row {
    kt_measurement kt;
    const char *level; /* lookup level of the served variant, "explicit" for --config, NULL if none */
    double floor_us;
    double mma_floor_us;                 /* flops at the measured rate of the family's mma; NAN: n/a */
    baseline_result base[MAX_BASELINES]; /* the family's baselines, in its order */
    baseline_result quant_gemm;          /* the pipeline ending in this family, this variant its last stage */
    baseline_result fused;               /* that pipeline's reference family: the same step in one kernel */
} bench_row;

typedef struct bench_run {
    const kt_bench_options *o;
    const kt_family *f;
    const kt_family *pipeline; /* a registered pipeline whose last stage is f, or NULL */
    kt_db *db;
    kt_module given;                 /* the --config variant, compiled and loaded once */
    kt_config pinned[KT_MAX_STAGES]; /* a pipeline's --config: its stages' given configs */
    unsigned pinned_mask;            /* bit s: stage s pinned */
    kt_module ref;                   /* default config's module: its reference kernel checks large problems */
    kt_module pipeline_ref;          /* the same for the pipeline */
    int have_ref, have_pipeline_ref;
    int n_baselines;   /* the family's */
    int has_baselines; /* the family has baselines and their libraries are initialised */
    double copy_bytes_per_s;
    double mma_flops_per_s, mma_flops_per_s_8_warps;       /* e4m3; NAN: the family has no flops, or n/a */
    double bf16_mma_flops_per_s;                           /* NAN as above */
    double cvt_mma_flops_per_s[KT_CVT_RATES];              /* a bf16-mma family's; NAN: n/a */
    double l2_read_bytes_per_s, dsmem_read_bytes_per_s[3]; /* clusters of 2, 4, 8; NAN: n/a */
    double mxfp4_bf16_bytes_per_s[2]; /* moe_gemm: kt_bench_mxfp4_bf16_rate's best, at 8 warps; NAN: n/a */
    bench_row *rows;
    int n_rows, n_failed, any_tensor_scales;
} bench_run;

/* A failure poisons the context for good when it was a fault: then nothing more can run. */
static int context_alive(void) { return kt_cu.cuCtxSynchronize() == CUDA_SUCCESS; }

/* ------------------------------------------------------------ baselines */

typedef struct baseline_case {
    const kt_baseline *bl;
    void *state;
    kt_bench *b;
    const kt_module *mod; /* the family's default module, for a naive kernel of its own */
} baseline_case;

static int enqueue_baseline(void *ctx, int copy, void *stream) {
    baseline_case *g = ctx;
    kt_launch l;
    kt_bench_launch(g->b, g->mod, copy, &l);
    l.stream = stream;
    return g->bl->enqueue(g->state, &l);
}

/* Times each alternative of baseline g (one without choose()) on b's rotation and keeps the
 * fastest in r. One that fails its untimed first run is skipped: the cuBLASLt heuristic
 * can propose algorithms that cublasLtMatmul then refuses. Fails when none runs. */
static int time_alternatives(baseline_case *g, baseline_result *r) {
    char last_error[512] = "no alternative in a usable state";
    void *stream = kt_bench_stream(g->b);
    for (int i = 0;; i++) {
        const char *label = g->bl->name;
        int algo = -1, c = g->bl->choose ? g->bl->choose(g->state, i, !isnan(r->us), &label, &algo) : i > 0;
        if (c > 0) break;
        kt_timing t;
        /* The untimed run also does the library's lazy set-up outside graph capture. */
        if (c < 0 || enqueue_baseline(g, 0, stream) ||
            kt_status_CU(kt_cu.cuStreamSynchronize(stream), g->bl->name, __FILE__, __LINE__) ||
            kt_bench_time(g->b, enqueue_baseline, g, 0, &t)) {
            snprintf(last_error, sizeof last_error, "%s", kt_error());
            if (!context_alive()) return kt_fail("the GPU context is lost after %s failed: %s", label, last_error);
            continue;
        }
        if (isnan(r->us) || t.median_us < r->us) {
            r->us = t.median_us;
            r->name = label;
            r->algo = algo;
        }
    }
    if (isnan(r->us)) return kt_fail("none of its alternatives ran: %s", last_error);
    return 0;
}

/* Baseline bl on the bench's own inputs, rotated as kt's variant's are. */
static int time_baseline(bench_run *run, kt_bench *b, const kt_problem *p, const kt_baseline *bl, baseline_result *r) {
    if (!bl->enqueue) return kt_fail("not linked into this program");
    baseline_case g = {.bl = bl, .b = b, .mod = run->have_ref ? &run->ref : NULL};
    int rc = bl->prepare ? bl->prepare(p, &g.state) : 0;
    if (!rc) rc = time_alternatives(&g, r);
    if (bl->release) bl->release(g.state);
    if (rc) r->name = NULL;
    return rc;
}

/* kt's decode step as a model runs it: the pipeline ending in this family (act_quant, the
 * DB's winner for (K, M), then this variant), verified and timed in one graph. */
static int time_pipeline(bench_run *run, const kt_problem *p, const kt_module *mod, uint64_t seed, baseline_result *r) {
    const kt_family *g = run->pipeline;
    kt_module mods[KT_MAX_STAGES];
    kt_bench *b = NULL;
    kt_measurement m = {0};
    if (kt_pipeline_dispatch(run->db, g, p, mods)) return -1;
    kt_module_unload(&mods[g->n_stages - 1]);
    mods[g->n_stages - 1] = *mod; /* not unloaded here: the row's */
    int rc = kt_bench_setup(g, p, seed, run->have_pipeline_ref ? &run->pipeline_ref : NULL, &b) ||
             kt_bench_variant(b, mods, &m);
    if (!rc && m.status != KT_OK) rc = kt_fail("%s: %s", kt_status_name(m.status), m.error);
    if (!rc) {
        r->name = g->name;
        r->us = m.median_us;
    }
    kt_bench_free(b);
    for (int s = 0; s + 1 < g->n_stages; s++) kt_module_unload(&mods[s]);
    return rc ? -1 : 0;
}

/* The pipeline's reference family (quant_fp8_gemm: act_quant fused into the GEMM), the DB's
 * winner for this (N, K, M), on its own inputs: verified against its reference, then timed
 * like kt's own row. */
static int time_fused(bench_run *run, const kt_problem *p, uint64_t seed, baseline_result *r) {
    const kt_family *q = run->pipeline->reference_family;
    kt_module mod = {0};
    kt_lookup_level level;
    kt_bench *b = NULL;
    kt_measurement m = {0};
    /* The variant's module holds the family's reference kernel too (index 1). */
    int rc = kt_dispatch(run->db, q, p, &mod, &level) || kt_bench_setup(q, p, seed, &mod, &b) ||
             kt_bench_variant(b, &mod, &m);
    if (!rc && m.status != KT_OK) rc = kt_fail("%s: %s", kt_status_name(m.status), m.error);
    if (!rc) {
        r->name = q->name;
        r->us = m.median_us;
    }
    kt_bench_free(b);
    kt_module_unload(&mod);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------ the run */

/* The registered pipeline whose last stage is f on f's own problem (the first), or NULL. A
 * pipeline that maps its problem to the stage's (moe_step's last stage is moe_gemm's down GEMM)
 * cannot be run on f's problem. */
static const kt_family *pipeline_ending_in(const kt_family *f) {
    for (int i = 0; i < kt_family_count(); i++) {
        const kt_family *g = kt_family_at(i);
        if (g->n_stages && g->stages[g->n_stages - 1].family == f && !g->stages[g->n_stages - 1].problem) return g;
    }
    return NULL;
}

/* Loads what every case shares: the --config variant or the DB, the reference modules and
 * the baseline libraries. */
static int open_run(bench_run *run) {
    const kt_bench_options *o = run->o;
    const kt_family *f = run->f;
    int arch = kt_gpu_arch();
    if (!kt_arch_name(arch)) return kt_fail("no JIT target for this GPU (compute capability %d)", arch);
    /* a pipeline's --config pins some of its stages; the others are served from the DB */
    if (o->config && f->n_stages && kt_parse_stage_configs(f, o->config, run->pinned, &run->pinned_mask)) return -1;
    kt_cubin cubin;
    if (o->config && !f->n_stages) {
        char why[256];
        kt_config c;
        if (kt_parse_config(f, o->config, &c)) return -1;
        if (f->check_config(&c, arch, why, sizeof why)) return kt_fail("--config %s: %s", o->config, why);
        if (kt_compile(f, &c, arch, &cubin)) return -1;
        int rc = kt_module_load(f, &c, &cubin, &run->given);
        kt_cubin_free(&cubin);
        if (rc) return -1;
    } else if (o->db_path && kt_db_open(o->db_path, 1, &run->db)) {
        return -1;
    }
    /* As in the sweep: the reference kernel ships in every module; the default config's
     * serves, and without it large problems are checked on the CPU (slow, still exact). */
    if (f->launch_reference) {
        run->have_ref = kt_reference_module(f, &run->ref) == 0;
        if (!run->have_ref)
            fprintf(stderr, "kt bench: GPU reference unavailable (%s); checking on the CPU\n", kt_error());
    }
    run->pipeline = pipeline_ending_in(f);
    if (run->pipeline && run->pipeline->launch_reference)
        run->have_pipeline_ref = kt_reference_module(run->pipeline, &run->pipeline_ref) == 0;
    while (f->baselines && f->baselines[run->n_baselines] && run->n_baselines < MAX_BASELINES) run->n_baselines++;
    if (run->n_baselines) {
        run->has_baselines = kt_bench_baselines_open() == 0;
        if (!run->has_baselines) fprintf(stderr, "kt bench: baselines n/a: %s\n", kt_error());
    }
    return 0;
}

static void close_run(bench_run *run) {
    kt_bench_baselines_close();
    kt_module_unload(&run->given);
    kt_module_unload(&run->ref);
    kt_module_unload(&run->pipeline_ref);
    if (run->db) kt_db_close(run->db);
    free(run->rows);
}

/* Reports a baseline that failed (rc != 0) as n/a; returns -1 only if the context is lost. */
static int report_baseline(int rc, const char *what, const char *label) {
    if (!rc) return 0;
    fprintf(stderr, "kt bench: %s: %s n/a: %s\n", label, what, kt_error());
    return context_alive() ? 0 : kt_fail("the GPU context is lost after %s failed", what);
}

/* The flops per second of the family's mma (NAN: none). */
static double mma_rate(const bench_run *run) {
    return run->f->mma == KT_MMA_E4M3   ? run->mma_flops_per_s
           : run->f->mma == KT_MMA_BF16 ? run->bf16_mma_flops_per_s
                                        : NAN;
}

/* Measures one (shape, M) into row; returns -1 only when the GPU can no longer be used. */
static int bench_case(bench_run *run, const kt_problem *p, bench_row *row) {
    const kt_family *f = run->f;
    kt_measurement *m = &row->kt;
    memset(row, 0, sizeof *row);
    m->family = f->name;
    m->m = p->m;
    m->rel_err = m->median_us = m->min_us = m->max_us = NAN;
    kt_format_shape(f, p, m->shape, sizeof m->shape);
    row->floor_us = f->bytes(p) / run->copy_bytes_per_s * 1e6;
    row->mma_floor_us = f->flops ? f->flops(p) / mma_rate(run) * 1e6 : NAN;
    for (int i = 0; i < MAX_BASELINES; i++) row->base[i] = (baseline_result){NULL, NAN, -1};
    row->quant_gemm = row->fused = (baseline_result){NULL, NAN, -1};
    char label[192];
    snprintf(label, sizeof label, "%s %s=%ld", m->shape, f->m_name, p->m);
    /* The tuner's seed for this case, so bench and sweep see the same inputs. */
    uint64_t seed = kt_problem_seed(run->o->seed, m->shape, p->m);

    kt_module served = {0}, stages[KT_MAX_STAGES];
    const kt_module *mod = NULL;
    if (f->n_stages) {
        row->level = "stages";
        if (kt_pipeline_dispatch_pinned(run->db, f, p, run->pinned, run->pinned_mask, stages) == 0) {
            mod = stages;
        } else {
            m->status = KT_COMPILE_ERROR;
            snprintf(m->error, sizeof m->error, "%s", kt_error());
        }
    } else if (run->o->config) {
        row->level = "explicit";
        if (f->config_fits(&run->given.config, p)) {
            mod = &run->given;
        } else {
            m->status = KT_SKIPPED;
            snprintf(m->error, sizeof m->error, "the given config does not fit this problem");
        }
    } else {
        kt_lookup_level level = KT_DEFAULT;
        if (kt_dispatch(run->db, f, p, &served, &level) == 0) {
            mod = &served;
            row->level = kt_lookup_level_name(level);
        } else {
            m->status = KT_COMPILE_ERROR;
            snprintf(m->error, sizeof m->error, "%s", kt_error());
        }
    }
    const kt_config *config = mod ? &mod->config : run->o->config ? &run->given.config : NULL;
    if (f->n_stages) {
        for (int s = 0; mod && s < f->n_stages; s++) {
            size_t used = strlen(m->config);
            snprintf(m->config + used, sizeof m->config - used, "%s%s:", s ? ";" : "", f->stages[s].family->name);
            used = strlen(m->config);
            kt_format_config(f->stages[s].family, &mod[s].config, m->config + used, sizeof m->config - used);
        }
    } else if (config) {
        kt_format_config(f, config, m->config, sizeof m->config);
    }
    if (mod && !f->n_stages) memcpy(m->variant_id, mod->variant_id, sizeof m->variant_id);

    kt_bench *b = NULL;
    int rc = 0;
    if (kt_bench_setup(f, p, seed, run->have_ref ? &run->ref : NULL, &b)) {
        if (m->status == KT_OK) {
            m->status = KT_LAUNCH_ERROR;
            snprintf(m->error, sizeof m->error, "set-up: %s", kt_error());
        }
        rc = context_alive() ? 0 : kt_fail("the GPU context is lost after: %s", m->error);
    } else {
        if (mod) rc = kt_bench_variant(b, mod, m);
        /* Each baseline inside the NVTX ranges kt/<family>/<key>/<baseline> (runtime/nvtx.h). */
        for (int i = 0; i < run->n_baselines && !rc && run->has_baselines; i++) {
            kt_nvtx_push(f, p, f->baselines[i]->name);
            int e = time_baseline(run, b, p, f->baselines[i], &row->base[i]);
            kt_nvtx_pop();
            rc = report_baseline(e, f->baselines[i]->name, label);
        }
        if (!rc && run->pipeline && mod && m->status == KT_OK) {
            kt_nvtx_push(f, p, run->pipeline->name);
            int e = time_pipeline(run, p, mod, seed ^ 0x3, &row->quant_gemm);
            kt_nvtx_pop();
            rc = report_baseline(e, run->pipeline->name, label);
        }
        if (!rc && run->pipeline && run->pipeline->reference_family)
            rc = report_baseline(time_fused(run, p, seed ^ 0x4, &row->fused), run->pipeline->reference_family->name,
                                 label);
    }
    if (m->status != KT_OK) fprintf(stderr, "kt bench: %s: kt %s: %s\n", label, kt_status_name(m->status), m->error);
    kt_bench_free(b);
    kt_module_unload(&served);
    if (f->n_stages && mod) kt_pipeline_unload(f, stages);
    return rc;
}

/* --------------------------------------------------------------- output */

static double best_baseline_us(const bench_run *run, const bench_row *row) {
    double best = NAN;
    for (int i = 0; i < run->n_baselines; i++)
        if (!run->f->baselines[i]->own && (isnan(best) || row->base[i].us < best)) best = row->base[i].us;
    return best;
}

static double kt_us(const bench_row *row) { return row->kt.status == KT_OK ? row->kt.median_us : NAN; }

/* The roof: the copy floor or the mma floor, whichever is higher. */
static double roof_us(const bench_row *row) {
    return isnan(row->mma_floor_us) ? row->floor_us : fmax(row->floor_us, row->mma_floor_us);
}

/* A baseline's column and JSON key: NAME_us, kt_NAME_us for a part of kt's own kernel. */
static void baseline_key(const kt_baseline *bl, char *out, size_t n) {
    snprintf(out, n, "%s%s_us", bl->own ? "kt_" : "", bl->name);
}

/* A baseline column's width: its "NAME_us" (or "kt_NAME_us") and a space. */
static int baseline_width(const kt_baseline *bl) { return (int)strlen(bl->name) + 4 + (bl->own ? 3 : 0); }

/* 1 when a baseline ran its per-tensor fallback ("T" in its column, see the legend). */
static int tensor_scales(const baseline_result *r) {
    size_t n = r->name ? strlen(r->name) : 0;
    return n > 7 && !strcmp(r->name + n - 7, "_tensor");
}

static void format_value(char *out, size_t n, double v, const char *fmt) {
    if (isfinite(v))
        snprintf(out, n, fmt, v);
    else
        snprintf(out, n, "n/a");
}

static void print_header(const bench_run *run) {
    const kt_family *f = run->f;
    printf("%-20s %6s %10s %9s %9s %9s %9s", "shape", f->m_name, "kt_us", "floor_us", "kt/floor", "mma_us", "roof_us");
    for (int i = 0; i < run->n_baselines; i++) {
        char name[64];
        baseline_key(f->baselines[i], name, sizeof name);
        printf(" %*s", baseline_width(f->baselines[i]), name);
    }
    printf(" %13s %13s %9s %9s  %s\n", "best_base/kt", "quant+kt_us", "fused_us", "rel_err", "config");
}

static void print_row(const bench_run *run, const bench_row *row) {
    const kt_measurement *m = &row->kt;
    char kt[32], ratio[32], mma[32], roof[32], speedup[32], err[32], pair[32], fused[32];
    if (m->status == KT_OK)
        snprintf(kt, sizeof kt, "%.2f", m->median_us);
    else
        snprintf(kt, sizeof kt, "%s", kt_status_name(m->status));
    format_value(ratio, sizeof ratio, kt_us(row) / row->floor_us, "%.2f");
    format_value(mma, sizeof mma, row->mma_floor_us, "%.2f");
    format_value(roof, sizeof roof, roof_us(row), "%.2f");
    format_value(speedup, sizeof speedup, best_baseline_us(run, row) / kt_us(row), "%.2fx");
    format_value(err, sizeof err, m->rel_err, "%.1e");
    format_value(pair, sizeof pair, row->quant_gemm.us, "%.2f");
    format_value(fused, sizeof fused, row->fused.us, "%.2f");
    printf("%-20s %6ld %10s %9.2f %9s %9s %9s", m->shape, m->m, kt, row->floor_us, ratio, mma, roof);
    for (int i = 0; i < run->n_baselines; i++) {
        char v[32] = "-";
        if (run->has_baselines)
            format_value(v, sizeof v, row->base[i].us, tensor_scales(&row->base[i]) ? "%.2fT" : "%.2f");
        printf(" %*s", baseline_width(run->f->baselines[i]), v);
    }
    printf(" %13s %13s %9s %9s  %s\n", speedup, pair, fused, err, m->config[0] ? m->config : "-");
    fflush(stdout);
}

/* A growing text buffer for the JSON; `failed` records an allocation failure. */
typedef struct text {
    char *s;
    size_t len, cap;
    int failed;
} text;

__attribute__((format(printf, 2, 3))) static void text_add(text *t, const char *fmt, ...) {
    if (t->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = 1;
        return;
    }
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = 2 * (t->len + (size_t)n + 1);
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* Appends `, "key": "value"` (escaped), or null when s is NULL or empty. */
static void json_string(text *t, const char *key, const char *s) {
    text_add(t, ", \"%s\": ", key);
    if (!s || !s[0]) {
        text_add(t, "null");
        return;
    }
    text_add(t, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            text_add(t, "\\%c", *c);
        else if (*c < 0x20)
            text_add(t, "\\u%04x", *c);
        else
            text_add(t, "%c", *c);
    }
    text_add(t, "\"");
}

/* Appends `, "key": number`, or null when v is not finite (JSON has no NaN). */
static void json_number(text *t, const char *key, double v) {
    if (isfinite(v))
        text_add(t, ", \"%s\": %.6g", key, v);
    else
        text_add(t, ", \"%s\": null", key);
}

static void json_row(text *t, const bench_run *run, const bench_row *row) {
    const kt_measurement *m = &row->kt;
    int ok = m->status == KT_OK;
    text_add(t, "{\"family\": \"%s\"", run->f->name);
    json_string(t, "shape", m->shape);
    text_add(t, ", \"M\": %ld", m->m);
    json_number(t, "kt_us", kt_us(row));
    json_number(t, "kt_min_us", ok ? m->min_us : NAN);
    json_number(t, "kt_max_us", ok ? m->max_us : NAN);
    json_number(t, "floor_us", row->floor_us);
    json_number(t, "kt_over_floor", kt_us(row) / row->floor_us);
    json_number(t, "mma_floor_us", row->mma_floor_us);
    json_number(t, "kt_over_mma_floor", kt_us(row) / row->mma_floor_us);
    json_number(t, "roof_us", roof_us(row));
    for (int i = 0; i < run->n_baselines; i++) {
        const kt_baseline *bl = run->f->baselines[i];
        const baseline_result *r = &row->base[i];
        char key[80];
        baseline_key(bl, key, sizeof key);
        json_number(t, key, r->us);
        if (!bl->choose) continue; /* what ran, of a baseline with alternatives */
        snprintf(key, sizeof key, "%s_baseline", bl->name);
        json_string(t, key, r->name);
        if (r->algo >= 0)
            text_add(t, ", \"%s_algo\": %d", bl->name, r->algo);
        else
            text_add(t, ", \"%s_algo\": null", bl->name);
    }
    json_number(t, "best_baseline_over_kt", best_baseline_us(run, row) / kt_us(row));
    json_number(t, "kt_quant_gemm_us", row->quant_gemm.us);
    json_number(t, "kt_fused_us", row->fused.us);
    if (run->f->bench_fields) {
        char extra[256] = "";
        kt_problem p = run->o->shapes[0];
        if (kt_parse_shape(run->f, m->shape, &p) == 0) {
            p.m = m->m;
            run->f->bench_fields(&p, extra, sizeof extra);
            text_add(t, "%s", extra);
        }
    }
    json_number(t, "rel_err", m->rel_err);
    json_string(t, "config", m->config);
    json_string(t, "variant_id", m->variant_id);
    json_string(t, "status", kt_status_name(m->status));
    json_string(t, "error", m->error);
    json_string(t, "lookup_level", row->level);
    json_number(t, "copy_bytes_per_s", run->copy_bytes_per_s);
    json_number(t, "mma_flops_per_s", run->mma_flops_per_s);
    json_number(t, "mma_flops_per_s_8_warps", run->mma_flops_per_s_8_warps);
    json_number(t, "bf16_mma_flops_per_s", run->bf16_mma_flops_per_s);
    static const char *const cvt_names[KT_CVT_RATES] = {"cvt_mma_r1_flops_per_s", "cvt_mma_r2_flops_per_s",
                                                        "cvt_mma_r4_flops_per_s", "cvt_mma_r8_flops_per_s",
                                                        "cvt16_mma_r1_flops_per_s"};
    for (int i = 0; i < KT_CVT_RATES; i++) json_number(t, cvt_names[i], run->cvt_mma_flops_per_s[i]);
    json_number(t, "l2_read_bytes_per_s", run->l2_read_bytes_per_s);
    json_number(t, "dsmem_read_bytes_per_s_cluster_2", run->dsmem_read_bytes_per_s[0]);
    json_number(t, "dsmem_read_bytes_per_s_cluster_4", run->dsmem_read_bytes_per_s[1]);
    json_number(t, "dsmem_read_bytes_per_s_cluster_8", run->dsmem_read_bytes_per_s[2]);
    json_number(t, "mxfp4_bf16_bytes_per_s", run->mxfp4_bf16_bytes_per_s[0]);
    json_number(t, "mxfp4_bf16_bytes_per_s_8_warps", run->mxfp4_bf16_bytes_per_s[1]);
    json_string(t, "device", kt_gpu_current()->name);
    text_add(t, "}");
}

static int write_json(const bench_run *run, const char *path) {
    text t = {0};
    text_add(&t, "[\n");
    for (int i = 0; i < run->n_rows; i++) {
        text_add(&t, "  ");
        json_row(&t, run, &run->rows[i]);
        text_add(&t, i + 1 < run->n_rows ? ",\n" : "\n");
    }
    text_add(&t, "]\n");
    int rc = t.failed ? kt_fail("out of memory writing %s", path) : kt_write_file_atomic(path, t.s, t.len);
    free(t.s);
    return rc;
}

int kt_bench_run(const kt_bench_options *o) {
    const kt_family *f = o->family;
    if (!f) return kt_fail("kt bench: no family given");
    if (o->n_shapes < 1 || o->n_shapes > 32 || o->n_ms < 1 || o->n_ms > 32)
        return kt_fail("kt bench needs 1 to 32 shapes and 1 to 32 values of %s", f->m_name);
    char why[256];
    for (int s = 0; s < o->n_shapes; s++)
        for (int j = 0; j < o->n_ms; j++) {
            kt_problem p = o->shapes[s];
            p.m = o->ms[j];
            if (f->check_problem(&p, why, sizeof why)) return kt_fail("%s", why);
        }
    bench_run run = {.o = o, .f = f};
    run.rows = calloc((size_t)(o->n_shapes * o->n_ms), sizeof *run.rows);
    if (!run.rows) return kt_fail("out of memory");
    int rc = open_run(&run) || kt_bench_copy_bandwidth(&run.copy_bytes_per_s) ? -1 : 0;
    run.mma_flops_per_s = run.mma_flops_per_s_8_warps = run.bf16_mma_flops_per_s = NAN;
    if (!rc && f->flops && kt_bench_mma_ceiling(KT_MMA_E4M3, &run.mma_flops_per_s, &run.mma_flops_per_s_8_warps)) {
        fprintf(stderr, "kt bench: mma ceiling n/a: %s\n", kt_error());
        run.mma_flops_per_s = run.mma_flops_per_s_8_warps = NAN;
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the mma ceiling failed");
    }
    double bf16_at_8_warps;
    if (!rc && f->flops && kt_bench_mma_ceiling(KT_MMA_BF16, &run.bf16_mma_flops_per_s, &bf16_at_8_warps)) {
        fprintf(stderr, "kt bench: bf16 mma ceiling n/a: %s\n", kt_error());
        run.bf16_mma_flops_per_s = NAN;
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the bf16 mma ceiling failed");
    }
    for (int i = 0; i < KT_CVT_RATES; i++) run.cvt_mma_flops_per_s[i] = NAN;
    if (!rc && f->flops && f->mma == KT_MMA_BF16 && kt_bench_cvt_mma_ceiling(run.cvt_mma_flops_per_s)) {
        fprintf(stderr, "kt bench: converted-operand mma ceiling n/a: %s\n", kt_error());
        for (int i = 0; i < KT_CVT_RATES; i++) run.cvt_mma_flops_per_s[i] = NAN;
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the converted-operand mma ceiling failed");
    }
    double on_chip[4]; /* L2, then clusters of 2, 4, 8; NAN where not measured */
    for (int i = 0; i < 4; i++) on_chip[i] = NAN;
    if (!rc && kt_bench_memory_rates(&on_chip[0], &on_chip[1])) {
        fprintf(stderr, "kt bench: L2 and cluster read rates n/a: %s\n", kt_error());
        for (int i = 0; i < 4; i++) on_chip[i] = NAN; /* a partial result is no result */
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the memory probe failed");
    }
    run.mxfp4_bf16_bytes_per_s[0] = run.mxfp4_bf16_bytes_per_s[1] = NAN;
    if (!rc && !strcmp(f->name, "moe_gemm") &&
        kt_bench_mxfp4_bf16_rate(&run.mxfp4_bf16_bytes_per_s[0], &run.mxfp4_bf16_bytes_per_s[1])) {
        fprintf(stderr, "kt bench: MXFP4 bf16 issue rate n/a: %s\n", kt_error());
        run.mxfp4_bf16_bytes_per_s[0] = run.mxfp4_bf16_bytes_per_s[1] = NAN;
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the MXFP4 probe failed");
    }
    run.l2_read_bytes_per_s = on_chip[0];
    memcpy(run.dsmem_read_bytes_per_s, &on_chip[1], sizeof run.dsmem_read_bytes_per_s);
    if (!rc) {
        const kt_device_info *dev = kt_gpu_current();
        printf("%s (sm_%d%d): copy bandwidth %.3f TB/s (cuMemcpyDtoD, bytes read + written, best of %d); "
               "floor = family bytes / bandwidth\n",
               dev->name, dev->cc_major, dev->cc_minor, run.copy_bytes_per_s / 1e12, COPY_REPEATS);
        if (f->flops)
            printf("e4m3 mma.sync m16n8k32 ceiling %.0f TFLOP/s (%.0f at 8 warps per SM; bench/ceiling.cu); "
                   "mma_us = flops / ceiling\n"
                   "bf16 mma.sync m16n8k16 ceiling %.0f TFLOP/s; %s's flops run on the %s mma; "
                   "roof_us = max(floor_us, mma_us)\n",
                   run.mma_flops_per_s / 1e12, run.mma_flops_per_s_8_warps / 1e12, run.bf16_mma_flops_per_s / 1e12,
                   f->name,
                   f->mma == KT_MMA_E4M3   ? "e4m3"
                   : f->mma == KT_MMA_BF16 ? "bf16"
                                           : "no");
        const double *cvt = run.cvt_mma_flops_per_s;
        if (!isnan(cvt[0]))
            printf("bf16 mma on e4m3 codes converted in registers (bench/ceiling.cu, 3 instructions per 2 codes): "
                   "%.0f / %.0f / %.0f / %.0f TFLOP/s with a conversion per 1 / 2 / 4 / 8 mmas; f16 mma on "
                   "cvt.f16x2.e4m3x2: %.0f at 1\n",
                   cvt[0] / 1e12, cvt[1] / 1e12, cvt[2] / 1e12, cvt[3] / 1e12, cvt[4] / 1e12);
        const double *dsmem = run.dsmem_read_bytes_per_s;
        printf("on-chip reads (bench/memory.cu): L2 %.2f TB/s (a 16 MB buffer, L1 bypassed); ",
               run.l2_read_bytes_per_s / 1e12);
        if (isnan(dsmem[0]))
            printf("other CTAs' shared memory n/a (no thread-block clusters here)\n");
        else
            printf("other CTAs' shared memory %.2f / %.2f / %.2f TB/s in clusters of 2 / 4 / 8\n", dsmem[0] / 1e12,
                   dsmem[1] / 1e12, dsmem[2] / 1e12);
        if (!isnan(run.mxfp4_bf16_bytes_per_s[0]))
            printf("MXFP4 on the bf16 mma (BF16=1's k-block without its loads; bench/ceiling.cu): %.2f TB/s of "
                   "weights (%.2f at 8 warps per SM); its issue floor = MXFP4 bytes / that rate\n",
                   run.mxfp4_bf16_bytes_per_s[0] / 1e12, run.mxfp4_bf16_bytes_per_s[1] / 1e12);
        print_header(&run);
    }
    for (int s = 0; s < o->n_shapes && !rc; s++)
        for (int j = 0; j < o->n_ms && !rc; j++) {
            kt_problem p = o->shapes[s];
            p.m = o->ms[j];
            bench_row *row = &run.rows[run.n_rows++];
            rc = bench_case(&run, &p, row);
            print_row(&run, row);
            if (row->kt.status != KT_OK) run.n_failed++;
            for (int i = 0; i < run.n_baselines; i++) run.any_tensor_scales |= tensor_scales(&row->base[i]);
        }
    if (run.any_tensor_scales)
        printf("T: cuBLASLt FP8 with per-tensor scales (cublaslt_fp8_tensor): no row-wise algorithm ran on this GPU\n");
    /* The JSON keeps what was measured even when the run stopped early. */
    char stop_error[1024] = "";
    if (rc) snprintf(stop_error, sizeof stop_error, "%s", kt_error());
    if (o->json_path && run.n_rows > 0 && write_json(&run, o->json_path) && !rc) rc = -1;
    if (stop_error[0])
        kt_fail("%s", stop_error);
    else if (!rc && run.n_failed)
        rc = kt_fail("%d of %d cases failed (see the status column)", run.n_failed, run.n_rows);
    close_run(&run);
    return rc;
}
