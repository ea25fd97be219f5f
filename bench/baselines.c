/* baselines.c — the vendor baselines `kt bench` times beside fp8_gemm (kt_family.baselines,
 * listed in kernels/fp8_gemm.c by weak reference, so a program that does not link this
 * file, the runtime library, needs no cuBLAS):
 *   cublaslt_fp8: e4m3 x e4m3 -> bf16 with one f32 scale per token and one per output
 *                 feature (per-tensor scales where cuBLASLt has no row-wise algorithm), the
 *                 fastest of the heuristic's algorithms;
 *   cublas_bf16:  the same GEMM in bf16 with f32 accumulation, on bf16 copies of its own;
 * and the one beside moe_gemm (listed in kernels/moe_gemm.c the same way):
 *   cublas_bf16_grouped: the problem's GEMMs over the experts its routing touches, as one
 *                 cuBLAS grouped call in bf16 (f32 accumulation) on bf16 data of its own.
 * All run on the bench's stream over its rotation of input copies (kt_launch.copy). */
#include "bench.h"

#include "../kernels/fp8_gemm.h"
#include "../kernels/moe_gemm.h"
#include "../runtime/cu.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int kt_status_CUBLAS(int status, const char *call, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return 0;
    return kt_status_fail("cuBLAS", cublasGetStatusString((cublasStatus_t)status), status, call, file, line);
}

#define WORKSPACE_BYTES ((size_t)32 << 20)
#define LT_MAX_ALGOS 8

/* What every case shares: the handles and one workspace (the baselines run one after another
 * on one stream). */
static struct {
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    CUdeviceptr workspace;
} shared;

int kt_bench_baselines_open(void) {
    KT_CHECK(CUBLAS, cublasLtCreate(&shared.lt));
    KT_CHECK(CUBLAS, cublasCreate(&shared.blas));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&shared.workspace, WORKSPACE_BYTES));
    return 0;
}

void kt_bench_baselines_close(void) {
    if (shared.blas) cublasDestroy(shared.blas);
    if (shared.lt) cublasLtDestroy(shared.lt);
    if (shared.workspace) kt_cu.cuMemFree(shared.workspace);
    memset(&shared, 0, sizeof shared);
}

static void *dev_ptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* The seed of a baseline's own data for p (the bench's inputs are the family's). */
static uint64_t problem_seed(const kt_problem *p, uint64_t salt) {
    return kt_hash(p->dim, sizeof p->dim, (uint64_t)p->m) ^ salt;
}

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
    kt_problem p;
    int tensor_scales;  /* the fallback: per-tensor scales */
    int n_found, first; /* the heuristic's algorithms; alternative index of the first */
    cublasLtMatmulHeuristicResult_t found[LT_MAX_ALGOS];
    CUdeviceptr scale_n, scale_m; /* per output feature (N), per token (M) */
    CUdeviceptr out;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t weights, acts, out_layout;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulAlgo_t algo;
} lt_fp8_case;

int kt_baseline_cublaslt_fp8_enqueue(void *state, const kt_launch *l) {
    lt_fp8_case *g = state;
    const float one = 1.0f, zero = 0.0f;
    const void *weights = dev_ptr(l->ptr[KT_FP8_GEMM_B]), *acts = dev_ptr(l->ptr[KT_FP8_GEMM_A]);
    /* CUstream and cudaStream_t are the same type (struct CUstream_st *). */
    KT_CHECK(CUBLAS, cublasLtMatmul(shared.lt, g->op, &one, weights, g->weights, acts, g->acts, &zero, dev_ptr(g->out),
                                    g->out_layout, dev_ptr(g->out), g->out_layout, &g->algo, dev_ptr(shared.workspace),
                                    WORKSPACE_BYTES, (cudaStream_t)l->stream));
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

/* Describes the case for a scale mode and asks the heuristic for its algorithms. Row-wise
 * (OUTER_VEC_32F) reads N scales for cuBLASLt's A (rows of op(A) = output features) and M
 * for its B (columns = tokens); per-tensor (SCALAR_32F) reads element 0 of the same vectors.
 * Fast accumulation stays off, as in torch._scaled_mm's default, the row-wise peer of
 * TARGETS.md. */
static int lt_fp8_describe(lt_fp8_case *g, cublasLtMatmulMatrixScale_t mode) {
    uint64_t M = (uint64_t)g->p.m, N = (uint64_t)g->p.dim[0], K = (uint64_t)g->p.dim[1];
    int32_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N, scale_mode = mode;
    const void *scale_n = dev_ptr(g->scale_n), *scale_m = dev_ptr(g->scale_m);
    uint64_t workspace = WORKSPACE_BYTES;
    KT_CHECK(CUBLAS, cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    KT_CHECK(CUBLAS, cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    KT_CHECK(CUBLAS,
             cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode, sizeof scale_mode));
    KT_CHECK(CUBLAS,
             cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode, sizeof scale_mode));
    KT_CHECK(CUBLAS,
             cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_n, sizeof scale_n));
    KT_CHECK(CUBLAS,
             cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_m, sizeof scale_m));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->weights, CUDA_R_8F_E4M3, K, N, (int64_t)K));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->acts, CUDA_R_8F_E4M3, K, M, (int64_t)K));
    KT_CHECK(CUBLAS, cublasLtMatrixLayoutCreate(&g->out_layout, CUDA_R_16BF, N, M, (int64_t)N));
    KT_CHECK(CUBLAS, cublasLtMatmulPreferenceCreate(&g->pref));
    KT_CHECK(CUBLAS, cublasLtMatmulPreferenceSetAttribute(g->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                          sizeof workspace));
    KT_CHECK(CUBLAS, cublasLtMatmulAlgoGetHeuristic(shared.lt, g->op, g->weights, g->acts, g->out_layout, g->out_layout,
                                                    g->pref, LT_MAX_ALGOS, g->found, &g->n_found));
    if (g->n_found == 0) return kt_fail("the cuBLASLt heuristic returned no algorithm");
    return 0;
}

/* Switches g to per-tensor scales (the heuristic's algorithms for them from alternative i on). */
static int lt_fp8_fall_back(lt_fp8_case *g, int i, const char *why) {
    fprintf(stderr, "kt bench: cublaslt_fp8_rowwise unavailable (%s); timing cublaslt_fp8_tensor\n", why);
    lt_fp8_release_descriptors(g);
    g->tensor_scales = 1;
    g->first = i;
    g->n_found = 0;
    return lt_fp8_describe(g, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
}

/* The scale vectors and the output (one set serves every copy: N + M floats are noise next
 * to the weights), then the row-wise description; a heuristic with nothing row-wise falls
 * back at once. */
int kt_baseline_cublaslt_fp8_prepare(const kt_problem *p, void **state) {
    lt_fp8_case *g = calloc(1, sizeof *g);
    if (!g) return kt_fail("out of memory");
    *state = g;
    g->p = *p;
    uint64_t rng = problem_seed(p, 0x1);
    if (upload_scales(&g->scale_n, (size_t)p->dim[0], &rng) || upload_scales(&g->scale_m, (size_t)p->m, &rng))
        return -1;
    KT_CHECK(CU, kt_cu.cuMemAlloc(&g->out, (size_t)p->m * (size_t)p->dim[0] * sizeof(uint16_t)));
    if (lt_fp8_describe(g, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)) return lt_fp8_fall_back(g, 0, kt_error());
    return 0;
}

/* Alternative i: the heuristic's algorithms best first, row-wise; when none of them ran,
 * the per-tensor ones after them. Algorithms in no usable state are skipped as failed. */
int kt_baseline_cublaslt_fp8_choose(void *state, int i, int ran, const char **label, int *algo) {
    lt_fp8_case *g = state;
    if (i - g->first >= g->n_found) {
        if (ran || g->tensor_scales) return 1;
        if (lt_fp8_fall_back(g, i, "none of its algorithms ran")) return -1;
    }
    *label = g->tensor_scales ? "cublaslt_fp8_tensor" : "cublaslt_fp8_rowwise";
    *algo = i - g->first;
    if (g->found[*algo].state != CUBLAS_STATUS_SUCCESS) return kt_fail("algorithm %d is not in a usable state", *algo);
    g->algo = g->found[*algo].algo;
    return 0;
}

void kt_baseline_cublaslt_fp8_release(void *state) {
    lt_fp8_case *g = state;
    if (!g) return;
    lt_fp8_release_descriptors(g);
    if (g->scale_n) kt_cu.cuMemFree(g->scale_n);
    if (g->scale_m) kt_cu.cuMemFree(g->scale_m);
    if (g->out) kt_cu.cuMemFree(g->out);
    free(g);
}

/* --------------------------------------------------------- cuBLAS bf16 */

/* The same orientation as the FP8 baseline, on bf16 copies of random data rotated over as
 * many copies as the bench rotates its own inputs (allocated at the first, untimed run:
 * only then is the number of copies known). */
typedef struct bf16_case {
    kt_problem p;
    CUdeviceptr acts, weights, out;
    size_t acts_stride, weights_stride; /* bytes between rotation copies */
    int m, n, k, copies;
} bf16_case;

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

int kt_baseline_cublas_bf16_prepare(const kt_problem *p, void **state) {
    if (p->dim[0] > INT_MAX || p->dim[1] > INT_MAX || p->m > INT_MAX) return kt_fail("too large for cublasGemmEx");
    bf16_case *g = calloc(1, sizeof *g);
    if (!g) return kt_fail("out of memory");
    *state = g;
    *g = (bf16_case){.p = *p, .m = (int)p->m, .n = (int)p->dim[0], .k = (int)p->dim[1]};
    KT_CHECK(CU, kt_cu.cuMemAlloc(&g->out, (size_t)g->m * g->n * sizeof(uint16_t)));
    return 0;
}

static int bf16_upload(bf16_case *g, int copies) {
    uint64_t rng = problem_seed(&g->p, 0x2);
    g->copies = copies;
    return upload_bf16_copies(&g->acts, (size_t)g->m * g->k, copies, &g->acts_stride, &rng) ||
                   upload_bf16_copies(&g->weights, (size_t)g->n * g->k, copies, &g->weights_stride, &rng)
               ? -1
               : 0;
}

int kt_baseline_cublas_bf16_enqueue(void *state, const kt_launch *l) {
    bf16_case *g = state;
    if (!g->copies && bf16_upload(g, l->copies > 0 ? l->copies : 1)) return -1;
    if (l->copy >= g->copies) return kt_fail("cublas_bf16: copy %d of %d", l->copy, g->copies);
    const float one = 1.0f, zero = 0.0f;
    const void *weights = dev_ptr(g->weights + (size_t)l->copy * g->weights_stride);
    const void *acts = dev_ptr(g->acts + (size_t)l->copy * g->acts_stride);
    /* cublasSetStream resets the workspace to cuBLAS's own pool, which may allocate (not
     * allowed during graph capture): hand it the preallocated one after every stream set. */
    KT_CHECK(CUBLAS, cublasSetStream(shared.blas, (cudaStream_t)l->stream));
    KT_CHECK(CUBLAS, cublasSetWorkspace(shared.blas, dev_ptr(shared.workspace), WORKSPACE_BYTES));
    KT_CHECK(CUBLAS, cublasGemmEx(shared.blas, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->m, g->k, &one, weights, CUDA_R_16BF,
                                  g->k, acts, CUDA_R_16BF, g->k, &zero, dev_ptr(g->out), CUDA_R_16BF, g->n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

void kt_baseline_cublas_bf16_release(void *state) {
    bf16_case *g = state;
    /* The bench's stream dies with the bench: leave the handle on the NULL stream. */
    if (shared.blas) cublasSetStream(shared.blas, NULL);
    if (!g) return;
    if (g->acts) kt_cu.cuMemFree(g->acts);
    if (g->weights) kt_cu.cuMemFree(g->weights);
    if (g->out) kt_cu.cuMemFree(g->out);
    free(g);
}

/* ------------------------------------------------- cuBLAS bf16, grouped */

/* Expert e's c_e slots [c_e, K] times its weights [N, K]^T -> [c_e, N], one group per touched
 * expert, in the fp8_gemm baselines' orientation (C^T = W x X^T, column-major). No SwiGLU,
 * requantisation or weighted combine: what a vendor library gives a MoE layer's GEMMs, a
 * lower bound of a layer built on it. */
typedef struct grouped_case {
    kt_problem p;
    int groups, copies, slots, n, k;
    int *rows; /* [groups]: the touched experts' slot counts */
    /* cublasGemmGroupedBatchedEx's per-group host arrays (every group alike but its rows) */
    cublasOperation_t *ta, *tb;
    int *n_out, *k_in, *ld_k, *ld_n, *size;
    float *one, *zero;
    CUdeviceptr weights, acts, out, ptrs; /* ptrs: [copies][3][groups] device addresses */
    size_t weights_stride, acts_stride;
} grouped_case;

int kt_baseline_cublas_grouped_prepare(const kt_problem *p, void **state) {
    long E = p->dim[KT_MOE_E], slots = p->m * p->dim[KT_MOE_TOPK];
    if (p->dim[KT_MOE_N] > INT_MAX || p->dim[KT_MOE_K] > INT_MAX || slots > INT_MAX)
        return kt_fail("too large for cublasGemmGroupedBatchedEx");
    grouped_case *g = calloc(1, sizeof *g);
    int *ids = malloc(sizeof(int) * (size_t)slots), *count = calloc((size_t)E, sizeof(int));
    if (!g || !ids || !count) return free(g), free(ids), free(count), kt_fail("out of memory");
    *state = g;
    *g = (grouped_case){.p = *p, .slots = (int)slots, .n = (int)p->dim[KT_MOE_N], .k = (int)p->dim[KT_MOE_K]};
    kt_moe_problem_routing(p, ids);
    for (long i = 0; i < slots; i++) count[ids[i]]++;
    g->rows = malloc(sizeof(int) * (size_t)E);
    for (long e = 0; g->rows && e < E; e++)
        if (count[e]) g->rows[g->groups++] = count[e];
    free(ids);
    free(count);
    if (!g->rows) return kt_fail("out of memory");
    size_t n = (size_t)g->groups;
    g->ta = malloc(n * sizeof *g->ta), g->tb = malloc(n * sizeof *g->tb);
    g->n_out = malloc(n * sizeof(int)), g->k_in = malloc(n * sizeof(int)), g->ld_k = malloc(n * sizeof(int));
    g->ld_n = malloc(n * sizeof(int)), g->size = malloc(n * sizeof(int));
    g->one = malloc(n * sizeof(float)), g->zero = malloc(n * sizeof(float));
    if (!g->ta || !g->tb || !g->n_out || !g->k_in || !g->ld_k || !g->ld_n || !g->size || !g->one || !g->zero)
        return kt_fail("out of memory");
    for (size_t i = 0; i < n; i++) {
        g->ta[i] = CUBLAS_OP_T, g->tb[i] = CUBLAS_OP_N, g->n_out[i] = g->n, g->k_in[i] = g->k;
        g->ld_k[i] = g->k, g->ld_n[i] = g->n, g->size[i] = 1, g->one[i] = 1.0f, g->zero[i] = 0.0f;
    }
    KT_CHECK(CU, kt_cu.cuMemAlloc(&g->out, (size_t)g->slots * g->n * sizeof(uint16_t)));
    return 0;
}

/* The weights of the touched experts and the slots' rows, `copies` times, and each copy's
 * pointer arrays (A = weights, B = slot rows, C = outputs, group by group). */
static int grouped_upload(grouped_case *g, int copies) {
    uint64_t rng = problem_seed(&g->p, 0x3);
    g->copies = copies;
    if (upload_bf16_copies(&g->weights, (size_t)g->groups * g->n * g->k, copies, &g->weights_stride, &rng) ||
        upload_bf16_copies(&g->acts, (size_t)g->slots * g->k, copies, &g->acts_stride, &rng))
        return -1;
    size_t n_ptrs = (size_t)copies * 3 * g->groups;
    uint64_t *host = malloc(sizeof(uint64_t) * n_ptrs);
    if (!host) return kt_fail("out of memory");
    for (int c = 0; c < copies; c++) {
        uint64_t *a = host + (size_t)c * 3 * g->groups, *b = a + g->groups, *o = b + g->groups;
        size_t row = 0;
        for (int i = 0; i < g->groups; i++) {
            a[i] = g->weights + c * g->weights_stride + (size_t)i * g->n * g->k * sizeof(uint16_t);
            b[i] = g->acts + c * g->acts_stride + row * g->k * sizeof(uint16_t);
            o[i] = g->out + row * g->n * sizeof(uint16_t);
            row += (size_t)g->rows[i];
        }
    }
    int rc =
        kt_status_CU(kt_cu.cuMemAlloc(&g->ptrs, sizeof(uint64_t) * n_ptrs), "cuMemAlloc", __FILE__, __LINE__) ||
        kt_status_CU(kt_cu.cuMemcpyHtoD(g->ptrs, host, sizeof(uint64_t) * n_ptrs), "cuMemcpyHtoD", __FILE__, __LINE__);
    free(host);
    return rc ? -1 : 0;
}

int kt_baseline_cublas_grouped_enqueue(void *state, const kt_launch *l) {
    grouped_case *g = state;
    if (!g->copies && grouped_upload(g, l->copies > 0 ? l->copies : 1)) return -1;
    if (l->copy >= g->copies) return kt_fail("cublas_bf16_grouped: copy %d of %d", l->copy, g->copies);
    const void *const *a = (const void *const *)dev_ptr(g->ptrs + (size_t)l->copy * 3 * g->groups * sizeof(uint64_t));
    KT_CHECK(CUBLAS, cublasSetStream(shared.blas, (cudaStream_t)l->stream));
    KT_CHECK(CUBLAS, cublasSetWorkspace(shared.blas, dev_ptr(shared.workspace), WORKSPACE_BYTES));
    KT_CHECK(CUBLAS, cublasGemmGroupedBatchedEx(shared.blas, g->ta, g->tb, g->n_out, g->rows, g->k_in, g->one, a,
                                                CUDA_R_16BF, g->ld_k, a + g->groups, CUDA_R_16BF, g->ld_k, g->zero,
                                                (void *const *)(a + 2 * g->groups), CUDA_R_16BF, g->ld_n, g->groups,
                                                g->size, CUBLAS_COMPUTE_32F));
    return 0;
}

void kt_baseline_cublas_grouped_release(void *state) {
    grouped_case *g = state;
    if (shared.blas) cublasSetStream(shared.blas, NULL);
    if (!g) return;
    if (g->weights) kt_cu.cuMemFree(g->weights);
    if (g->acts) kt_cu.cuMemFree(g->acts);
    if (g->out) kt_cu.cuMemFree(g->out);
    if (g->ptrs) kt_cu.cuMemFree(g->ptrs);
    free(g->rows), free(g->ta), free(g->tb), free(g->n_out), free(g->k_in), free(g->ld_k), free(g->ld_n);
    free(g->size), free(g->one), free(g->zero);
    free(g);
}
