/* lt_gemv.c — the step's f32 GEMVs as cuBLASLt TF32 matmuls (lt_gemv.h), cuBLASLt loaded at run time. */
#include "lt_gemv.h"

#include "cu.h"
#include "kt.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// clang-format off
#define KT_LT_FUNCTIONS(X)                                                                                   \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)              \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)             \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)      \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)                                \
    X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmul)
// clang-format on

#define KT_LT_MEMBER(fn) __typeof__(fn) *fn;
static struct { KT_LT_FUNCTIONS(KT_LT_MEMBER) } lt;
#undef KT_LT_MEMBER
static int lt_state; /* 0 untried, 1 loaded, -1 unavailable */
static char lt_error[512];

#define LT_WORKSPACE ((size_t)32 << 20) /* cuBLAS's advice for Hopper: split-K sums of any of the step's shapes */
#define LT_SHAPES 16                    /* the step's distinct GEMVs: 4 (V4-Flash), 5 with --plain-kernels */
#define LT_STREAMS 8                    /* the step's stream and its side chains (step.c's N_SIDES) */

/* One (N, K, B): the matmul in cuBLASLt's column-major terms, D (N x B, ld N) = op_T(W: K x N, ld K) x (x: K x B,
 * ld K), which is out = x W^T row-major; and the heuristic's algorithm for it. */
typedef struct lt_shape {
    long n, k, b;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t w, x, out;
    cublasLtMatmulAlgo_t algo;
} lt_shape;

struct kt_lt_gemv {
    cublasLtHandle_t h;
    lt_shape shape[LT_SHAPES];
    int n_shapes;
    CUstream stream[LT_STREAMS]; /* a workspace each: two matmuls on two streams may run at once */
    CUdeviceptr ws[LT_STREAMS];
    int n_streams;
};

int kt_status_CUBLASLT(int status, const char *call, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return 0;
    const char *msg = lt_state == 1 ? lt.cublasLtGetStatusString((cublasStatus_t)status) : "cuBLASLt not loaded";
    return kt_status_fail("cuBLASLt", msg, status, call, file, line);
}

/* Loads the cuBLASLt of the headers kt was built with (its ABI: the same major version) once. */
static int lt_load(void) {
    if (lt_state == 1) return 0;
    if (lt_state == -1) return kt_fail("%s", lt_error);
    lt_state = -1;
    const char *name = "libcublasLt.so." KT_STR(CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(
            lt_error, sizeof lt_error,
            "cuBLASLt is not installed (%s: %s): the step's GEMVs from B = 16 need it (KT_STEP_GEMV_LT=0: rt_gemv)",
            name, dlerror());
        return kt_fail("%s", lt_error);
    }
#define KT_LT_LOAD(fn)                                                                                                 \
    if (!(*(void **)&lt.fn = dlsym(lib, KT_STR(fn)))) {                                                                \
        snprintf(lt_error, sizeof lt_error, "cuBLASLt too old: %s lacks %s", name, KT_STR(fn));                        \
        return kt_fail("%s", lt_error);                                                                                \
    }
    KT_LT_FUNCTIONS(KT_LT_LOAD)
#undef KT_LT_LOAD
    lt_state = 1;
    return 0;
}

int kt_lt_gemv_open(kt_lt_gemv **out) {
    *out = NULL;
    if (lt_load()) return -1;
    kt_lt_gemv *g = calloc(1, sizeof *g);
    if (!g) return kt_fail("out of memory");
    if (kt_status_CUBLASLT(lt.cublasLtCreate(&g->h), "cublasLtCreate", __FILE__, __LINE__)) return free(g), -1;
    *out = g;
    return 0;
}

/* The heuristic's first algorithm for p's descriptors under pref (at most the workspace; its default alignment of
 * 256 bytes, which kt_lt_gemv_run checks: the step's buffers are cuMemAlloc bases). */
static int lt_pick(kt_lt_gemv *g, lt_shape *p, cublasLtMatmulPreference_t pref) {
    uint64_t ws = LT_WORKSPACE;
    KT_CHECK(CUBLASLT,
             lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    KT_CHECK(CUBLASLT, lt.cublasLtMatmulAlgoGetHeuristic(g->h, p->op, p->w, p->x, p->out, p->out, pref, 1, &r, &found));
    if (found < 1) return kt_fail("cuBLASLt has no TF32 algorithm for the GEMV %ld x %ld at B = %ld", p->n, p->k, p->b);
    p->algo = r.algo;
    int32_t id = -1, splits = 1;
    uint32_t tile = 0, scheme = 0;
    size_t n;
    lt.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &n);
    lt.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &n);
    lt.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &n);
    lt.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme, &n);
    fprintf(stderr,
            "kt run: cuBLASLt TF32 GEMV %ld x %ld at B = %ld: algo %d, tile %u, split-K %d (reduction %u), workspace "
            "%zu bytes, %.2f waves\n",
            p->n, p->k, p->b, id, tile, splits, scheme, r.workspaceSize, r.wavesCount);
    return 0;
}

/* p's descriptors: f32 in and out, TF32 products summed in f32 (CUBLAS_COMPUTE_32F_FAST_TF32), W transposed. */
static int lt_describe(kt_lt_gemv *g, lt_shape *p) {
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KT_CHECK(CUBLASLT, lt.cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
    KT_CHECK(CUBLASLT, lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    KT_CHECK(CUBLASLT, lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    KT_CHECK(CUBLASLT, lt.cublasLtMatrixLayoutCreate(&p->w, CUDA_R_32F, (uint64_t)p->k, (uint64_t)p->n, p->k));
    KT_CHECK(CUBLASLT, lt.cublasLtMatrixLayoutCreate(&p->x, CUDA_R_32F, (uint64_t)p->k, (uint64_t)p->b, p->k));
    KT_CHECK(CUBLASLT, lt.cublasLtMatrixLayoutCreate(&p->out, CUDA_R_32F, (uint64_t)p->n, (uint64_t)p->b, p->n));
    cublasLtMatmulPreference_t pref;
    KT_CHECK(CUBLASLT, lt.cublasLtMatmulPreferenceCreate(&pref));
    int rc = lt_pick(g, p, pref);
    lt.cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

/* The shape (N, K, B), set up the first time where mode allows (*p NULL, -1 where not). */
static int lt_shape_of(kt_lt_gemv *g, long N, long K, long B, kt_lt_mode mode, lt_shape **p) {
    for (int i = 0; i < g->n_shapes; i++)
        if (g->shape[i].n == N && g->shape[i].k == K && g->shape[i].b == B) return *p = &g->shape[i], 0;
    *p = NULL;
    if (mode == KT_LT_CAPTURE)
        return kt_fail("internal: the cuBLASLt GEMV %ld x %ld at B = %ld first met under stream capture (its "
                       "heuristic must run before: the collecting walk or the eager step)",
                       N, K, B);
    if (N % 4 || K % 4 || N <= 0 || K <= 0 || B <= 0 || N > 2147483647L || K > 2147483647L || B > 2147483647L)
        return kt_fail("internal: the cuBLASLt GEMV %ld x %ld at B = %ld: N and K must be positive multiples of 4", N,
                       K, B);
    if (g->n_shapes == LT_SHAPES) return kt_fail("internal: more than %d cuBLASLt GEMV shapes", LT_SHAPES);
    lt_shape *s = &g->shape[g->n_shapes];
    *s = (lt_shape){.n = N, .k = K, .b = B};
    if (lt_describe(g, s)) return -1;
    g->n_shapes++;
    *p = s;
    return 0;
}

/* Stream st's workspace, allocated the first time where mode allows. */
static int lt_workspace(kt_lt_gemv *g, CUstream st, kt_lt_mode mode, CUdeviceptr *ws) {
    for (int i = 0; i < g->n_streams; i++)
        if (g->stream[i] == st) return *ws = g->ws[i], 0;
    if (mode == KT_LT_CAPTURE)
        return kt_fail("internal: a cuBLASLt GEMV on a stream first met under stream capture (its workspace must be "
                       "allocated before: the eager step)");
    if (g->n_streams == LT_STREAMS) return kt_fail("internal: cuBLASLt GEMVs on more than %d streams", LT_STREAMS);
    KT_CHECK(CU, kt_cu.cuMemAlloc(&g->ws[g->n_streams], LT_WORKSPACE));
    g->stream[g->n_streams] = st;
    *ws = g->ws[g->n_streams++];
    return 0;
}

static void *lt_ptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

int kt_lt_gemv_run(kt_lt_gemv *g, CUdeviceptr W, CUdeviceptr x, CUdeviceptr out, long N, long K, long B, CUstream st,
                   kt_lt_mode mode) {
    static const float one = 1.0f, zero = 0.0f; /* read when the call enqueues (host pointer mode) */
    lt_shape *p;
    CUdeviceptr ws = 0;
    if (lt_shape_of(g, N, K, B, mode, &p)) return -1;
    if (mode == KT_LT_PLAN) return 0;
    if ((W | x | out) % 256)
        return kt_fail("internal: the cuBLASLt GEMV %ld x %ld: a buffer not 256-byte aligned", N, K);
    if (lt_workspace(g, st, mode, &ws)) return -1;
    /* CUstream and cudaStream_t are the same type (struct CUstream_st *) */
    KT_CHECK(CUBLASLT,
             lt.cublasLtMatmul(g->h, p->op, &one, lt_ptr(W), p->w, lt_ptr(x), p->x, &zero, lt_ptr(out), p->out,
                               lt_ptr(out), p->out, &p->algo, lt_ptr(ws), LT_WORKSPACE, (cudaStream_t)st));
    return 0;
}

void kt_lt_gemv_close(kt_lt_gemv *g) {
    if (!g) return;
    for (int i = 0; i < g->n_shapes; i++) {
        lt_shape *p = &g->shape[i];
        lt.cublasLtMatrixLayoutDestroy(p->out), lt.cublasLtMatrixLayoutDestroy(p->x);
        lt.cublasLtMatrixLayoutDestroy(p->w), lt.cublasLtMatmulDescDestroy(p->op);
    }
    for (int i = 0; i < g->n_streams; i++) kt_cu.cuMemFree(g->ws[i]);
    lt.cublasLtDestroy(g->h);
    free(g);
}
