/* bench.c — `kt bench` (see bench.h). For each (shape, M): kt's variant verified and
 * timed by kt_bench_variant, the floor from the measured copy bandwidth, and for fp8_gemm
 * two vendor baselines timed by kt_bench_time over the same rotation of input copies:
 *   cublaslt_fp8: e4m3 x e4m3 -> bf16 with one f32 scale per token and one per output
 *                 feature (per-tensor scales where cuBLASLt has no row-wise algorithm);
 *   cublas_bf16:  the same GEMM in bf16 with f32 accumulation.
 * A baseline that cannot run is reported n/a and never stops the kt measurement. */
#include "bench.h"

#include "../runtime/cu.h"
#include "../tuner/tuner.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define COPY_BYTES ((size_t)1 << 30)         /* launch latency is < 0.1% of such a copy */
#define COPY_MIN_BYTES ((size_t)64 << 20)    /* still larger than any L2 */
#define COPY_HEADROOM ((size_t)256 << 20)    /* left free for the context while probing */
#define COPY_REPEATS 5
#define WORKSPACE_BYTES ((size_t)32 << 20)
#define LT_MAX_ALGOS 8
#define KT_MAX_BASELINES 4 /* a family's own baselines bench times (kt_family.baselines) */

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

static int ceiling_run(ceiling_probe *c, probe_events *e, double *best, double *at_8_warps) {
    static const char *const kernels[] = {"kt_mma_ceiling_2x2", "kt_mma_ceiling_4x2", NULL};
    static const int chains[] = {4, 8}, warps[] = {8, 16, 32}; /* mmas per step of each kernel */
    c->sms = kt_gpu_current()->sm_count;
    kt_cubin cubin = {0};
    if (kt_compile_source("ceiling.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("ceiling.cu", kernels, &cubin, &c->mod);
    kt_cubin_free(&cubin);
    if (rc) return -1;
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->out, (size_t)c->sms * 1024 * sizeof(float)));
    *best = *at_8_warps = 0;
    for (c->kernel = 0; c->kernel < 2; c->kernel++)
        for (int w = 0; w < 3; w++) {
            int max_threads = 0;
            KT_CHECK(CU, kt_cu.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                  (CUfunction)c->mod.fn[c->kernel]));
            c->threads = warps[w] * 32;
            if (c->threads > max_threads) continue; /* too many registers for that block */
            float ms;
            if (probe_best_ms(e, CEILING_REPEATS, ceiling_once, c, &ms)) return -1;
            double rate = (double)c->sms * warps[w] * CEILING_ITERS * chains[c->kernel] * (2.0 * 16 * 8 * 32) /
                          (ms * 1e-3);
            if (rate > *best) *best = rate;
            if (warps[w] == 8 && rate > *at_8_warps) *at_8_warps = rate;
        }
    return *best > 0 ? 0 : kt_fail("no mma ceiling kernel could be launched");
}

int kt_bench_mma_ceiling(double *best, double *at_8_warps) {
    ceiling_probe c = {0};
    probe_events e = {0};
    int rc = ceiling_run(&c, &e, best, at_8_warps);
    kt_module_unload(&c.mod);
    if (c.out) kt_cu.cuMemFree(c.out);
    probe_events_free(&e);
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
        double bytes = c->kernel ? 16.0 * c->ctas * c->threads * DSMEM_PROBE_WORDS
                                 : (double)L2_PROBE_PASSES * L2_PROBE_BYTES;
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
    double mma_floor_us; /* flops at the measured mma ceiling; NAN: n/a */
    baseline_result lt_fp8, bf16;
    baseline_result quant_gemm; /* kt's act_quant then this variant: the real decode cost */
    baseline_result fused;      /* kt's quant_fp8_gemm: the same step in one kernel */
    baseline_result family[KT_MAX_BASELINES]; /* the family's own baselines (kt_family.baselines) */
} bench_row;

typedef struct bench_run {
    const kt_bench_options *o;
    const kt_family *f;
    kt_db *db;
    kt_module given;   /* the --config variant, compiled and loaded once */
    kt_module ref;     /* default config's module: its reference kernel checks large problems */
    int have_ref;
    int has_baselines; /* fp8_gemm with cuBLAS(Lt) initialised */
    int a_tensor, b_tensor; /* fp8_gemm's e4m3 A [M,K] and B [N,K] in its tensor order */
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    CUdeviceptr workspace; /* shared: the baselines run one after another on one stream */
    double copy_bytes_per_s;
    double mma_flops_per_s, mma_flops_per_s_8_warps; /* NAN: the family has no flops, or n/a */
    double l2_read_bytes_per_s, dsmem_read_bytes_per_s[3]; /* clusters of 2, 4, 8; NAN: n/a */
    bench_row *rows;
    int n_rows, n_failed, any_tensor_scales;
} bench_run;

/* A failure poisons the context for good when it was a fault: then nothing more can run. */
static int context_alive(void) { return kt_cu.cuCtxSynchronize() == CUDA_SUCCESS; }

static void *dev_ptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* Allocates and uploads n positive f32 scales around 2^-7 (the range of kt's own inputs). */
static int upload_scales(CUdeviceptr *dev, size_t n, uint64_t *rng) {
    float *host = malloc(sizeof(float) * n);
    if (!host) return kt_fail("out of memory");
    for (size_t i = 0; i < n; i++) host[i] = (1.25f + 0.75f * kt_rng_uniform(rng)) / 128.0f;
    int rc = kt_status_CU(kt_cu.cuMemAlloc(dev, n * sizeof(float)), "cuMemAlloc", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(*dev, host, n * sizeof(float)), "cuMemcpyHtoD", __FILE__, __LINE__);
    free(host);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------- cuBLASLt FP8 */

/* cuBLASLt is column-major, so it computes C^T[N,M] (ldc N), which is kt's row-major
 * C[M,N], as B[N,K] x A[M,K]^T. FP8 requires the "TN" form: its first operand is kt's B
 * read as a column-major K x N matrix (ld K) and transposed, its second is kt's A read as
 * K x M (ld K), not transposed. */
typedef struct lt_fp8_case {
    cublasLtHandle_t handle;
    kt_bench *bench;
    int a_tensor, b_tensor;
    CUdeviceptr scale_n, scale_m; /* per output feature (N), per token (M) */
    CUdeviceptr out, workspace;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t weights, acts, out_layout;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulAlgo_t algo;
} lt_fp8_case;

static int enqueue_lt_fp8(void *ctx, int copy, void *stream) {
    lt_fp8_case *g = ctx;
    const float one = 1.0f, zero = 0.0f;
    const void *weights = dev_ptr(kt_bench_ptr(g->bench, g->b_tensor, copy));
    const void *acts = dev_ptr(kt_bench_ptr(g->bench, g->a_tensor, copy));
    /* CUstream and cudaStream_t are the same type (struct CUstream_st *). */
    KT_CHECK(CUBLAS, cublasLtMatmul(g->handle, g->op, &one, weights, g->weights, acts, g->acts, &zero,
                                    dev_ptr(g->out), g->out_layout, dev_ptr(g->out), g->out_layout, &g->algo,
                                    dev_ptr(g->workspace), WORKSPACE_BYTES, (cudaStream_t)stream));
    return 0;
}

/* Describes the case for a scale mode. Row-wise (OUTER_VEC_32F) reads N scales for
 * cuBLASLt's A (rows of op(A) = output features) and M for its B (columns = tokens);
 * per-tensor (SCALAR_32F) reads element 0 of the same vectors. Fast accumulation stays
 * off, as in torch._scaled_mm's default, the row-wise peer of TARGETS.md. */
static int lt_fp8_describe(lt_fp8_case *g, const kt_problem *p, cublasLtMatmulMatrixScale_t mode) {
    uint64_t M = (uint64_t)p->m, N = (uint64_t)p->dim[0], K = (uint64_t)p->dim[1];
    int32_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N, scale_mode = mode;
    const void *scale_n = dev_ptr(g->scale_n), *scale_m = dev_ptr(g->scale_m);
    uint64_t workspace = WORKSPACE_BYTES;
    KT_CHECK(CUBLAS, cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode,
                                                    sizeof scale_mode));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode,
                                                    sizeof scale_mode));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_n,
                                                    sizeof scale_n));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_m,
                                                    sizeof scale_m));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->weights, CUDA_R_8F_E4M3, K, N, (int64_t)K));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->acts, CUDA_R_8F_E4M3, K, M, (int64_t)K));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->out_layout, CUDA_R_16BF, N, M, (int64_t)N));
    KT_CHECK(CUBLAS, cublasLtMatmulPreferenceCreate(&g->pref));
    KT_CHECK(CUBLAS, cublasLtMatmulPreferenceSetAttribute(g->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace, sizeof workspace));
    return 0;
}

static void lt_fp8_release_descriptors(lt_fp8_case *g) {
    if (g->pref) cublasLtMatmulPreferenceDestroy(g->pref);
    if (g->out_layout) cublasLtMatrixLayoutDestroy(g->out_layout);
    if (g->acts) cublasLtMatrixLayoutDestroy(g->acts);
    if (g->weights) cublasLtMatrixLayoutDestroy(g->weights);
    if (g->op) cublasLtMatmulDescDestroy(g->op);
    g->pref = NULL;
    g->out_layout = g->acts = g->weights = NULL;
    g->op = NULL;
}

/* Times each algorithm the heuristic proposes (best first) and keeps the fastest in r.
 * One that fails its untimed first run is skipped: the heuristic can propose algorithms
 * that cublasLtMatmul then refuses. Fails when none runs. */
static int lt_fp8_time_algos(lt_fp8_case *g, baseline_result *r) {
    cublasLtMatmulHeuristicResult_t found[LT_MAX_ALGOS];
    int n_found = 0;
    KT_CHECK(CUBLAS, cublasLtMatmulAlgoGetHeuristic(g->handle, g->op, g->weights, g->acts, g->out_layout,
                                                    g->out_layout, g->pref, LT_MAX_ALGOS, found, &n_found));
    if (n_found == 0) return kt_fail("the cuBLASLt heuristic returned no algorithm");
    void *stream = kt_bench_stream(g->bench);
    char last_error[512] = "no algorithm in a usable state";
    for (int i = 0; i < n_found; i++) {
        if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
        g->algo = found[i].algo;
        kt_timing t;
        /* The untimed run also does cuBLASLt's lazy set-up outside graph capture. */
        if (enqueue_lt_fp8(g, 0, stream) ||
            kt_status_CU(kt_cu.cuStreamSynchronize(stream), "cublasLtMatmul", __FILE__, __LINE__) ||
            kt_bench_time(g->bench, enqueue_lt_fp8, g, 0, &t)) {
            snprintf(last_error, sizeof last_error, "%s", kt_error());
            continue;
        }
        if (isnan(r->us) || t.median_us < r->us) {
            r->us = t.median_us;
            r->algo = i;
        }
    }
    if (isnan(r->us)) return kt_fail("none of %d cuBLASLt algorithms ran: %s", n_found, last_error);
    return 0;
}

static int lt_fp8_attempt(lt_fp8_case *g, const kt_problem *p, cublasLtMatmulMatrixScale_t mode,
                          baseline_result *r) {
    r->us = NAN;
    r->algo = -1;
    int rc = lt_fp8_describe(g, p, mode) || lt_fp8_time_algos(g, r) ? -1 : 0;
    lt_fp8_release_descriptors(g);
    return rc;
}

/* The cuBLASLt FP8 baseline on the bench's own A and B copies: row-wise scales, or
 * per-tensor scales (said in r->name) when no row-wise algorithm runs on this GPU. One
 * set of scale vectors serves every copy: N + M floats are noise next to the weights. */
static int baseline_lt_fp8(bench_run *run, kt_bench *b, const kt_problem *p, const char *label, uint64_t seed,
                           baseline_result *r) {
    lt_fp8_case g = {.handle = run->lt, .bench = b, .a_tensor = run->a_tensor, .b_tensor = run->b_tensor,
                     .workspace = run->workspace};
    uint64_t rng = seed;
    int rc = upload_scales(&g.scale_n, (size_t)p->dim[0], &rng) || upload_scales(&g.scale_m, (size_t)p->m, &rng) ||
                     kt_status_CU(kt_cu.cuMemAlloc(&g.out, (size_t)p->m * (size_t)p->dim[0] * sizeof(uint16_t)),
                                  "cuMemAlloc", __FILE__, __LINE__)
                 ? -1
                 : 0;
    if (!rc) {
        r->name = "cublaslt_fp8_rowwise";
        rc = lt_fp8_attempt(&g, p, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, r);
        if (rc && context_alive()) {
            fprintf(stderr, "kt bench: %s: cublaslt_fp8_rowwise unavailable (%s); timing cublaslt_fp8_tensor\n",
                    label, kt_error());
            r->name = "cublaslt_fp8_tensor";
            rc = lt_fp8_attempt(&g, p, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, r);
        }
    }
    if (rc) r->name = NULL;
    if (g.scale_n) kt_cu.cuMemFree(g.scale_n);
    if (g.scale_m) kt_cu.cuMemFree(g.scale_m);
    if (g.out) kt_cu.cuMemFree(g.out);
    return rc;
}

/* --------------------------------------------------------- cuBLAS bf16 */

/* The same orientation as the FP8 baseline, on bf16 copies of random data rotated over
 * as many copies as the bench rotates its own inputs. */
typedef struct bf16_case {
    cublasHandle_t handle;
    CUdeviceptr acts, weights, out, workspace;
    size_t acts_stride, weights_stride; /* bytes between rotation copies */
    int m, n, k;
} bf16_case;

static int enqueue_bf16(void *ctx, int copy, void *stream) {
    bf16_case *g = ctx;
    const float one = 1.0f, zero = 0.0f;
    const void *weights = dev_ptr(g->weights + (size_t)copy * g->weights_stride);
    const void *acts = dev_ptr(g->acts + (size_t)copy * g->acts_stride);
    /* cublasSetStream resets the workspace to cuBLAS's own pool, which may allocate (not
     * allowed during graph capture): hand it the preallocated one after every stream set. */
    KT_CHECK(CUBLAS, cublasSetStream(g->handle, (cudaStream_t)stream));
    KT_CHECK(CUBLAS, cublasSetWorkspace(g->handle, dev_ptr(g->workspace), WORKSPACE_BYTES));
    KT_CHECK(CUBLAS, cublasGemmEx(g->handle, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->m, g->k, &one, weights, CUDA_R_16BF,
                                  g->k, acts, CUDA_R_16BF, g->k, &zero, dev_ptr(g->out), CUDA_R_16BF, g->n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* Allocates `copies` copies, *stride bytes apart, of count random bf16 values in [-1, 1). */
static int upload_bf16_copies(CUdeviceptr *dev, size_t count, int copies, size_t *stride, uint64_t *rng) {
    size_t bytes = count * sizeof(uint16_t);
    *stride = (bytes + 255) / 256 * 256;
    uint16_t *host = malloc(bytes);
    if (!host) return kt_fail("out of memory");
    for (size_t i = 0; i < count; i++) host[i] = kt_float_to_bf16(kt_rng_uniform(rng));
    int rc = kt_status_CU(kt_cu.cuMemAlloc(dev, *stride * (size_t)copies), "cuMemAlloc", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(*dev, host, bytes), "cuMemcpyHtoD", __FILE__, __LINE__);
    for (int r = 1; r < copies && !rc; r++)
        rc = kt_status_CU(kt_cu.cuMemcpyDtoD(*dev + (size_t)r * *stride, *dev, bytes), "cuMemcpyDtoD", __FILE__,
                          __LINE__);
    free(host);
    return rc ? -1 : 0;
}

static int baseline_bf16(bench_run *run, kt_bench *b, const kt_problem *p, uint64_t seed, baseline_result *r) {
    if (p->dim[0] > INT_MAX || p->dim[1] > INT_MAX || p->m > INT_MAX) return kt_fail("too large for cublasGemmEx");
    bf16_case g = {.handle = run->blas, .workspace = run->workspace, .m = (int)p->m, .n = (int)p->dim[0],
                   .k = (int)p->dim[1]};
    uint64_t rng = seed;
    int copies = kt_bench_copies(b);
    void *stream = kt_bench_stream(b);
    kt_timing t;
    /* The untimed run also does cuBLAS's lazy set-up outside graph capture. */
    int rc = upload_bf16_copies(&g.acts, (size_t)g.m * g.k, copies, &g.acts_stride, &rng) ||
                     upload_bf16_copies(&g.weights, (size_t)g.n * g.k, copies, &g.weights_stride, &rng) ||
                     kt_status_CU(kt_cu.cuMemAlloc(&g.out, (size_t)g.m * g.n * sizeof(uint16_t)), "cuMemAlloc",
                                  __FILE__, __LINE__) ||
                     enqueue_bf16(&g, 0, stream) ||
                     kt_status_CU(kt_cu.cuStreamSynchronize(stream), "cublasGemmEx", __FILE__, __LINE__) ||
                     kt_bench_time(b, enqueue_bf16, &g, 0, &t)
                 ? -1
                 : 0;
    if (!rc) {
        r->name = "cublas_bf16";
        r->us = t.median_us;
    }
    /* The bench's stream dies with the bench: leave the handle on the NULL stream. */
    cublasSetStream(run->blas, NULL);
    if (g.acts) kt_cu.cuMemFree(g.acts);
    if (g.weights) kt_cu.cuMemFree(g.weights);
    if (g.out) kt_cu.cuMemFree(g.out);
    return rc;
}

/* kt's decode step as a model runs it: act_quant (bf16 activations -> e4m3 + scales, the
 * DB's winner for (K, M)) then the GEMM variant, both in one graph, activations rotated. */
typedef struct quant_gemm_case {
    const kt_family *quant, *gemm;
    const kt_module *quant_mod, *gemm_mod;
    kt_problem quant_p, gemm_p;
    kt_bench *b; /* the GEMM bench: its weights, scales and output */
    int b_tensor, bs_tensor, c_tensor;
    CUdeviceptr x, a, as;
    size_t x_stride, a_stride, as_stride;
} quant_gemm_case;

static int enqueue_quant_gemm(void *ctx, int copy, void *stream) {
    quant_gemm_case *g = ctx;
    uint64_t a = g->a + (size_t)copy * g->a_stride, as = g->as + (size_t)copy * g->as_stride;
    kt_launch q = {.mod = g->quant_mod, .config = &g->quant_mod->config, .problem = &g->quant_p, .stream = stream,
                   .ptr = {g->x + (size_t)copy * g->x_stride, a, as}};
    kt_launch m = {.mod = g->gemm_mod, .config = &g->gemm_mod->config, .problem = &g->gemm_p, .stream = stream,
                   .ptr = {a, as, kt_bench_ptr(g->b, g->b_tensor, copy), kt_bench_ptr(g->b, g->bs_tensor, copy),
                           kt_bench_ptr(g->b, g->c_tensor, copy)}};
    return g->quant->launch(&q) || g->gemm->launch(&m) ? -1 : 0;
}

/* Index of the tensor called name in the family's order for p, or -1. */
static int tensor_index(const kt_family *f, const kt_problem *p, const char *name) {
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(p, t);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return i;
    return -1;
}

static int time_quant_gemm(bench_run *run, kt_bench *b, const kt_problem *p, const kt_module *gemm, uint64_t seed,
                           baseline_result *r) {
    quant_gemm_case g = {.quant = kt_family_find("act_quant"), .gemm = run->f, .gemm_mod = gemm, .gemm_p = *p, .b = b,
                         .b_tensor = tensor_index(run->f, p, "B"), .bs_tensor = tensor_index(run->f, p, "Bs"),
                         .c_tensor = tensor_index(run->f, p, "C")};
    if (!g.quant || g.b_tensor < 0 || g.bs_tensor < 0 || g.c_tensor < 0) return kt_fail("no act_quant + GEMM pair");
    g.quant_p = (kt_problem){.n_dims = 1, .dim = {p->dim[1]}, .m = p->m};
    kt_module quant = {0};
    kt_lookup_level level;
    size_t m = (size_t)p->m, k = (size_t)p->dim[1];
    int copies = kt_bench_copies(b);
    uint64_t rng = seed;
    kt_timing t;
    g.a_stride = (m * k + 255) / 256 * 256;
    g.as_stride = (m * (k / 128) * sizeof(float) + 255) / 256 * 256;
    int rc = kt_dispatch(run->db, g.quant, &g.quant_p, &quant, &level) ||
             upload_bf16_copies(&g.x, m * k, copies, &g.x_stride, &rng) ||
             kt_status_CU(kt_cu.cuMemAlloc(&g.a, g.a_stride * (size_t)copies), "cuMemAlloc", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemAlloc(&g.as, g.as_stride * (size_t)copies), "cuMemAlloc", __FILE__, __LINE__);
    g.quant_mod = &quant;
    if (!rc) rc = enqueue_quant_gemm(&g, 0, kt_bench_stream(b)) ||
                  kt_status_CU(kt_cu.cuStreamSynchronize(kt_bench_stream(b)), "act_quant + fp8_gemm", __FILE__, __LINE__) ||
                  kt_bench_time(b, enqueue_quant_gemm, &g, 0, &t);
    if (!rc) {
        r->name = "kt_act_quant+fp8_gemm";
        r->us = t.median_us;
    }
    if (g.x) kt_cu.cuMemFree(g.x);
    if (g.a) kt_cu.cuMemFree(g.a);
    if (g.as) kt_cu.cuMemFree(g.as);
    kt_module_unload(&quant);
    return rc ? -1 : 0;
}

/* kt's fused act_quant + GEMM (quant_fp8_gemm, the DB's winner for this (N, K, M)) on its
 * own inputs: verified against its reference, then timed like kt's own row. */
static int time_fused(bench_run *run, const kt_problem *p, uint64_t seed, baseline_result *r) {
    const kt_family *q = kt_family_find("quant_fp8_gemm");
    kt_module mod = {0};
    kt_lookup_level level;
    kt_bench *b = NULL;
    kt_measurement m = {0};
    /* The variant's module holds the family's reference kernel too (index 1). */
    int rc = !q || kt_dispatch(run->db, q, p, &mod, &level) || kt_bench_setup(q, p, seed, &mod, &b) ||
             kt_bench_variant(b, &mod, &m);
    if (!rc && m.status != KT_OK) rc = kt_fail("%s: %s", kt_status_name(m.status), m.error);
    if (!rc) {
        r->name = "kt_quant_fp8_gemm";
        r->us = m.median_us;
    }
    kt_bench_free(b);
    kt_module_unload(&mod);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------ the run */

static int open_baselines(bench_run *run, const kt_problem *p) {
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = run->f->tensors(p, t);
    run->a_tensor = run->b_tensor = -1;
    for (int i = 0; i < n; i++) {
        if (t[i].dtype != KT_E4M3) continue;
        if (!strcmp(t[i].name, "A")) run->a_tensor = i;
        if (!strcmp(t[i].name, "B")) run->b_tensor = i;
    }
    if (run->a_tensor < 0 || run->b_tensor < 0) return kt_fail("%s declares no e4m3 tensors A and B", run->f->name);
    KT_CHECK(CUBLAS, cublasLtCreate(&run->lt));
    KT_CHECK(CUBLAS, cublasCreate(&run->blas));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&run->workspace, WORKSPACE_BYTES));
    return 0;
}

/* Loads what every case shares: the --config variant or the DB, the reference module and
 * the baseline libraries. */
static int open_run(bench_run *run) {
    const kt_bench_options *o = run->o;
    const kt_family *f = run->f;
    int arch = kt_gpu_arch();
    if (!kt_arch_name(arch)) return kt_fail("no JIT target for this GPU (compute capability %d)", arch);
    kt_cubin cubin;
    if (o->config) {
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
        if (kt_compile(f, &f->default_config, arch, &cubin) == 0) {
            run->have_ref = kt_module_load(f, &f->default_config, &cubin, &run->ref) == 0;
            kt_cubin_free(&cubin);
        }
        if (!run->have_ref) fprintf(stderr, "kt bench: GPU reference unavailable (%s); checking on the CPU\n", kt_error());
    }
    if (!strcmp(f->name, "fp8_gemm")) {
        kt_problem p = o->shapes[0];
        p.m = o->ms[0];
        run->has_baselines = open_baselines(run, &p) == 0;
        if (!run->has_baselines) fprintf(stderr, "kt bench: baselines n/a: %s\n", kt_error());
    }
    return 0;
}

static void close_run(bench_run *run) {
    if (run->blas) cublasDestroy(run->blas);
    if (run->lt) cublasLtDestroy(run->lt);
    if (run->workspace) kt_cu.cuMemFree(run->workspace);
    kt_module_unload(&run->given);
    kt_module_unload(&run->ref);
    if (run->db) kt_db_close(run->db);
    free(run->rows);
}

/* Reports a baseline that failed (rc != 0) as n/a; returns -1 only if the context is lost. */
static int report_baseline(int rc, const char *what, const char *label) {
    if (!rc) return 0;
    fprintf(stderr, "kt bench: %s: %s n/a: %s\n", label, what, kt_error());
    return context_alive() ? 0 : kt_fail("the GPU context is lost after %s failed", what);
}

/* ------------------------------------------------- the family's own baselines */

typedef struct family_baseline_case {
    const kt_baseline *base;
    void *state;
    kt_bench *bench;
    const kt_module *mod;
    const kt_problem *p;
    int n_tensors;
} family_baseline_case;

static int enqueue_family_baseline(void *ctx, int copy, void *stream) {
    family_baseline_case *c = ctx;
    kt_launch l = {.mod = c->mod, .ref_mod = c->mod, .config = &c->mod->config, .problem = c->p, .stream = stream};
    for (int i = 0; i < c->n_tensors; i++) l.ptr[i] = kt_bench_ptr(c->bench, i, copy);
    return c->base->enqueue(c->state, &l);
}

/* Times baseline i of the family over b's rotation, on mod: the served variant's module, so
 * that a family can time its variant's kernels one by one (CONTRACT.md says the default
 * config's; mla_indexer's scan and select baselines are the served kernels alone), or the
 * default config's (run->ref) when none was served. */
static int time_family_baseline(bench_run *run, kt_bench *b, const kt_problem *p, const kt_module *mod, int i,
                                baseline_result *r) {
    kt_tensor_desc t[KT_MAX_TENSORS];
    if (!mod && !run->have_ref) return kt_fail("the family's default module is not loaded");
    family_baseline_case c = {run->f->baselines[i], NULL, b, mod ? mod : &run->ref, p, run->f->tensors(p, t)};
    if (c.base->prepare && c.base->prepare(p, &c.state)) return -1;
    kt_timing tm;
    int rc = kt_bench_time(b, enqueue_family_baseline, &c, 0, &tm);
    if (!rc) *r = (baseline_result){c.base->name, tm.median_us, -1};
    if (c.base->release) c.base->release(c.state);
    return rc;
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
    row->mma_floor_us = f->flops ? f->flops(p) / run->mma_flops_per_s * 1e6 : NAN;
    row->lt_fp8 = row->bf16 = row->quant_gemm = row->fused = (baseline_result){NULL, NAN, -1};
    for (int i = 0; i < KT_MAX_BASELINES; i++) row->family[i] = (baseline_result){NULL, NAN, -1};
    char label[192];
    snprintf(label, sizeof label, "%s %s=%ld", m->shape, f->m_name, p->m);
    /* The tuner's seed for this case, so bench and sweep see the same inputs. */
    uint64_t seed = run->o->seed ^ kt_hash(m->shape, strlen(m->shape), (uint64_t)p->m);

    kt_module served = {0};
    const kt_module *mod = NULL;
    if (run->o->config) {
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
    if (config) kt_format_config(f, config, m->config, sizeof m->config);
    if (mod) memcpy(m->variant_id, mod->variant_id, sizeof m->variant_id);

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
        if (!rc && run->has_baselines)
            rc = report_baseline(baseline_lt_fp8(run, b, p, label, seed ^ 0x1, &row->lt_fp8), "cublaslt_fp8", label);
        if (!rc && run->has_baselines)
            rc = report_baseline(baseline_bf16(run, b, p, seed ^ 0x2, &row->bf16), "cublas_bf16", label);
        if (!rc && run->has_baselines && mod && m->status == KT_OK)
            rc = report_baseline(time_quant_gemm(run, b, p, mod, seed ^ 0x3, &row->quant_gemm), "act_quant+fp8_gemm",
                                 label);
        if (!rc && run->has_baselines)
            rc = report_baseline(time_fused(run, p, seed ^ 0x4, &row->fused), "quant_fp8_gemm", label);
        for (int i = 0; !rc && f->baselines && f->baselines[i] && i < KT_MAX_BASELINES; i++)
            rc = report_baseline(time_family_baseline(run, b, p, m->status == KT_OK ? mod : NULL, i, &row->family[i]),
                                 f->baselines[i]->name, label);
    }
    if (m->status != KT_OK) fprintf(stderr, "kt bench: %s: kt %s: %s\n", label, kt_status_name(m->status), m->error);
    kt_bench_free(b);
    kt_module_unload(&served);
    return rc;
}

/* --------------------------------------------------------------- output */

static double best_baseline_us(const bench_row *row) {
    double a = row->lt_fp8.us, b = row->bf16.us;
    return isnan(a) ? b : isnan(b) ? a : fmin(a, b);
}

static double kt_us(const bench_row *row) { return row->kt.status == KT_OK ? row->kt.median_us : NAN; }

static void format_value(char *out, size_t n, double v, const char *fmt) {
    if (isfinite(v)) snprintf(out, n, fmt, v);
    else snprintf(out, n, "n/a");
}

static void print_header(const kt_family *f) {
    printf("%-20s %6s %10s %9s %9s %9s %16s %15s %13s %13s %9s %9s  %s\n", "shape", f->m_name, "kt_us", "floor_us",
           "kt/floor", "mma_us", "cublaslt_fp8_us", "cublas_bf16_us", "best_base/kt", "quant+kt_us", "fused_us",
           "rel_err", "config");
}

static void print_row(const bench_run *run, const bench_row *row) {
    const kt_measurement *m = &row->kt;
    char kt[32], ratio[32], mma[32], lt[32], bf16[32], speedup[32], err[32], pair[32], fused[32];
    if (m->status == KT_OK) snprintf(kt, sizeof kt, "%.2f", m->median_us);
    else snprintf(kt, sizeof kt, "%s", kt_status_name(m->status));
    format_value(ratio, sizeof ratio, kt_us(row) / row->floor_us, "%.2f");
    format_value(mma, sizeof mma, row->mma_floor_us, "%.2f");
    format_value(speedup, sizeof speedup, best_baseline_us(row) / kt_us(row), "%.2fx");
    format_value(err, sizeof err, m->rel_err, "%.1e");
    format_value(pair, sizeof pair, row->quant_gemm.us, "%.2f");
    format_value(fused, sizeof fused, row->fused.us, "%.2f");
    if (!run->has_baselines) {
        snprintf(lt, sizeof lt, "-");
        snprintf(bf16, sizeof bf16, "-");
    } else {
        /* "T": cuBLASLt ran with per-tensor scales (no row-wise algorithm), see the legend. */
        int tensor = row->lt_fp8.name && !strcmp(row->lt_fp8.name, "cublaslt_fp8_tensor");
        format_value(lt, sizeof lt, row->lt_fp8.us, tensor ? "%.2fT" : "%.2f");
        format_value(bf16, sizeof bf16, row->bf16.us, "%.2f");
    }
    printf("%-20s %6ld %10s %9.2f %9s %9s %16s %15s %13s %13s %9s %9s  %s\n", m->shape, m->m, kt, row->floor_us,
           ratio, mma, lt, bf16, speedup, pair, fused, err, m->config[0] ? m->config : "-");
    for (int i = 0; i < KT_MAX_BASELINES && row->family[i].name; i++)
        printf("%s  %s_us %.2f", i ? "," : "    baselines (served config):", row->family[i].name, row->family[i].us);
    if (row->family[0].name) printf("\n");
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
        if (*c == '"' || *c == '\\') text_add(t, "\\%c", *c);
        else if (*c < 0x20) text_add(t, "\\u%04x", *c);
        else text_add(t, "%c", *c);
    }
    text_add(t, "\"");
}

/* Appends `, "key": number`, or null when v is not finite (JSON has no NaN). */
static void json_number(text *t, const char *key, double v) {
    if (isfinite(v)) text_add(t, ", \"%s\": %.6g", key, v);
    else text_add(t, ", \"%s\": null", key);
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
    json_number(t, "roof_us", isnan(row->mma_floor_us) ? row->floor_us : fmax(row->floor_us, row->mma_floor_us));
    json_number(t, "kt_over_roof",
                kt_us(row) / (isnan(row->mma_floor_us) ? row->floor_us : fmax(row->floor_us, row->mma_floor_us)));
    if (strcmp(run->f->m_name, "M")) text_add(t, ", \"%s\": %ld", run->f->m_name, m->m);
    kt_problem key;
    if (kt_parse_shape(run->f, m->shape, &key) == 0)
        for (int i = 0; i < run->f->n_dims; i++) text_add(t, ", \"%s\": %ld", run->f->dim_names[i], key.dim[i]);
    for (int i = 0; i < KT_MAX_BASELINES && row->family[i].name; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s_us", row->family[i].name);
        json_number(t, name, row->family[i].us);
    }
    json_number(t, "kt_over_mma_floor", kt_us(row) / row->mma_floor_us);
    json_number(t, "cublaslt_fp8_us", row->lt_fp8.us);
    json_string(t, "cublaslt_fp8_baseline", row->lt_fp8.name);
    if (row->lt_fp8.algo >= 0) text_add(t, ", \"cublaslt_fp8_algo\": %d", row->lt_fp8.algo);
    else text_add(t, ", \"cublaslt_fp8_algo\": null");
    json_number(t, "cublas_bf16_us", row->bf16.us);
    json_number(t, "best_baseline_over_kt", best_baseline_us(row) / kt_us(row));
    json_number(t, "kt_quant_gemm_us", row->quant_gemm.us);
    json_number(t, "kt_fused_us", row->fused.us);
    json_number(t, "rel_err", m->rel_err);
    json_string(t, "config", m->config);
    json_string(t, "variant_id", m->variant_id);
    json_string(t, "status", kt_status_name(m->status));
    json_string(t, "error", m->error);
    json_string(t, "lookup_level", row->level);
    json_number(t, "copy_bytes_per_s", run->copy_bytes_per_s);
    json_number(t, "mma_flops_per_s", run->mma_flops_per_s);
    json_number(t, "mma_flops_per_s_8_warps", run->mma_flops_per_s_8_warps);
    json_number(t, "l2_read_bytes_per_s", run->l2_read_bytes_per_s);
    json_number(t, "dsmem_read_bytes_per_s_cluster_2", run->dsmem_read_bytes_per_s[0]);
    json_number(t, "dsmem_read_bytes_per_s_cluster_4", run->dsmem_read_bytes_per_s[1]);
    json_number(t, "dsmem_read_bytes_per_s_cluster_8", run->dsmem_read_bytes_per_s[2]);
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
    run.mma_flops_per_s = run.mma_flops_per_s_8_warps = NAN;
    if (!rc && f->flops && kt_bench_mma_ceiling(&run.mma_flops_per_s, &run.mma_flops_per_s_8_warps)) {
        fprintf(stderr, "kt bench: mma ceiling n/a: %s\n", kt_error());
        run.mma_flops_per_s = run.mma_flops_per_s_8_warps = NAN;
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the mma ceiling failed");
    }
    double on_chip[4]; /* L2, then clusters of 2, 4, 8; NAN where not measured */
    for (int i = 0; i < 4; i++) on_chip[i] = NAN;
    if (!rc && kt_bench_memory_rates(&on_chip[0], &on_chip[1])) {
        fprintf(stderr, "kt bench: L2 and cluster read rates n/a: %s\n", kt_error());
        for (int i = 0; i < 4; i++) on_chip[i] = NAN; /* a partial result is no result */
        if (!context_alive()) rc = kt_fail("the GPU context is lost after the memory probe failed");
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
                   "mma_us = flops / ceiling\n",
                   run.mma_flops_per_s / 1e12, run.mma_flops_per_s_8_warps / 1e12);
        const double *dsmem = run.dsmem_read_bytes_per_s;
        printf("on-chip reads (bench/memory.cu): L2 %.2f TB/s (a 16 MB buffer, L1 bypassed); ",
               run.l2_read_bytes_per_s / 1e12);
        if (isnan(dsmem[0])) printf("other CTAs' shared memory n/a (no thread-block clusters here)\n");
        else
            printf("other CTAs' shared memory %.2f / %.2f / %.2f TB/s in clusters of 2 / 4 / 8\n", dsmem[0] / 1e12,
                   dsmem[1] / 1e12, dsmem[2] / 1e12);
        print_header(f);
    }
    for (int s = 0; s < o->n_shapes && !rc; s++)
        for (int j = 0; j < o->n_ms && !rc; j++) {
            kt_problem p = o->shapes[s];
            p.m = o->ms[j];
            bench_row *row = &run.rows[run.n_rows++];
            rc = bench_case(&run, &p, row);
            print_row(&run, row);
            if (row->kt.status != KT_OK) run.n_failed++;
            if (row->lt_fp8.name && !strcmp(row->lt_fp8.name, "cublaslt_fp8_tensor")) run.any_tensor_scales = 1;
        }
    if (run.any_tensor_scales)
        printf("T: cuBLASLt FP8 with per-tensor scales (cublaslt_fp8_tensor): no row-wise algorithm ran on this GPU\n");
    /* The JSON keeps what was measured even when the run stopped early. */
    char stop_error[1024] = "";
    if (rc) snprintf(stop_error, sizeof stop_error, "%s", kt_error());
    if (o->json_path && run.n_rows > 0 && write_json(&run, o->json_path) && !rc) rc = -1;
    if (stop_error[0]) kt_fail("%s", stop_error);
    else if (!rc && run.n_failed)
        rc = kt_fail("%d of %d cases failed (see the status column)", run.n_failed, run.n_rows);
    close_run(&run);
    return rc;
}
