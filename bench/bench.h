/* bench.h — `kt bench`: times the variant kt serves for a family (or one given config)
 * on chosen shapes, verified, against the floor set by measured copy bandwidth and,
 * for fp8_gemm, against vendor baselines (cuBLASLt FP8 row-wise, cuBLAS bf16) timed by
 * the same method (CUDA-graph replays over rotated inputs, tuner/measure.c). */
#ifndef KT_BENCH_H
#define KT_BENCH_H
#include "kt.h"
#include "../db/kt_db_write.h"

/* A bench request, as `kt bench` parses it. */
typedef struct kt_bench_options {
    const kt_family *family;
    kt_problem shapes[32]; /* shape keys; m is taken from ms[] */
    int n_shapes;
    long ms[32];
    int n_ms;
    const char *db_path;   /* winners DB, opened read-only; NULL: no DB, the family default config is served */
    const char *config;    /* "--config" string (e.g. "TILE_N=64,SPLIT_K=4"); NULL: the DB winner via kt_dispatch */
    const char *json_path; /* NULL: no JSON */
    uint64_t seed;
} kt_bench_options;

/* Runs `kt bench` on the current GPU (opened by the caller): for each shape and M, verifies
 * and times kt's variant, times the baselines, prints a table to stdout and writes the JSON
 * rows; returns -1 if any case failed (after measuring the others) or the GPU failed. */
int kt_bench_run(const kt_bench_options *o);

/* KT_CHECK(CUBLAS, call)'s status checker (cuBLAS and cuBLASLt share the status codes). */
int kt_status_CUBLAS(int status, const char *call, const char *file, int line);

/* The handles and workspace the vendor baselines (bench/baselines.c) share, for one run. */
int kt_bench_baselines_open(void);
void kt_bench_baselines_close(void);
/* fp8_gemm's vendor baselines (kt_baseline hooks; kernels/fp8_gemm.c lists them). */
int kt_baseline_cublaslt_fp8_prepare(const kt_problem *p, void **state);
int kt_baseline_cublaslt_fp8_choose(void *state, int i, int ran, const char **label, int *algo);
int kt_baseline_cublaslt_fp8_enqueue(void *state, const kt_launch *l);
void kt_baseline_cublaslt_fp8_release(void *state);
int kt_baseline_cublas_bf16_prepare(const kt_problem *p, void **state);
int kt_baseline_cublas_bf16_enqueue(void *state, const kt_launch *l);
void kt_baseline_cublas_bf16_release(void *state);
/* moe_gemm's vendor baseline: its GEMMs over the touched experts, one cuBLAS grouped bf16 call. */
int kt_baseline_cublas_grouped_prepare(const kt_problem *p, void **state);
int kt_baseline_cublas_grouped_enqueue(void *state, const kt_launch *l);
void kt_baseline_cublas_grouped_release(void *state);

/* Measured device-to-device copy bandwidth in bytes/s, counting bytes read + written. */
int kt_bench_copy_bandwidth(double *bytes_per_s);

/* Measured rate of the e4m3 (KT_MMA_E4M3) or bf16 (KT_MMA_BF16) mma (bench/ceiling.cu) in
 * flop/s: the best over warp tiles of 2x2 and 4x2 fragments and 8, 16 and 32 warps per SM,
 * and the best at 8 warps per SM (the occupancy of kt's decode tiles). */
int kt_bench_mma_ceiling(kt_mma_kind kind, double *best, double *at_8_warps);

/* Measured rate, in MXFP4 weight bytes/s, of moe_gemm BF16=1's dequantisation and bf16 mma of
 * a k-block without its memory traffic (bench/ceiling.cu: kt_mxfp4_bf16_ceiling), the best
 * over 8-32 warps per SM and at 8 (the default's occupancy): the issue floor of that path is
 * its MXFP4 weight bytes / this rate. */
int kt_bench_mxfp4_bf16_rate(double *best, double *at_8_warps);

/* Measured rates (flop/s) of the bf16 mma on B operands converted from e4m3 codes in registers
 * (bench/ceiling.cu; sm_90 has no e4m3 mma.sync): rate[0..3] with each conversion shared by 1,
 * 2, 4, 8 mmas (16-head groups), rate[4] the f16 mma on cvt.f16x2.e4m3x2 at 1; each the best over
 * 8, 16 and 32 warps per SM. */
#define KT_CVT_RATES 5
int kt_bench_cvt_mma_ceiling(double rate[KT_CVT_RATES]);

/* Measured rates of on-chip reads in bytes/s (bench/memory.cu): all SMs reading a buffer L2
 * holds, and reading other CTAs' shared memory in clusters of 2, 4 and 8 (dsmem[0..2]; left
 * as they are on a GPU without clusters, sm_89). */
int kt_bench_memory_rates(double *l2, double dsmem[3]);

/* `kt bench launch` (bench/launch.c): the time a kernel node costs in a CUDA graph of n_long
 * tiny dependent kernels (n_long > 16, the short chain), without and with PDL, at 1 block and one block per SM; prints
 * the table and, json_path not NULL, writes it; -1 if a chain's counters show a kernel overtook. */
int kt_bench_graph_latency(int n_long, const char *json_path);

/* `kt bench stream` (bench/stream.c): for each of the n sizes mb[i] (MB, > 0), the median time a
 * kernel that only reads that many bytes from DRAM takes (plain, PDL waiting first, PDL loading
 * first), against bytes / the copy bandwidth; prints the table and, json_path not NULL, writes it. */
int kt_bench_dram_stream(const double *mb, int n, const char *json_path);

/* ---------------------------------------------------------- all-reduce (NCCL) */

#define KT_ALLREDUCE_MAX_SIZES 32

/* `kt bench allreduce`: world GPUs of this host, the message sizes in bytes (bf16). */
typedef struct kt_allreduce_options {
    int world;
    long hidden; /* for the B column: bytes / 2 / hidden */
    size_t bytes[KT_ALLREDUCE_MAX_SIZES];
    int n_sizes;
    uint64_t seed;
} kt_allreduce_options;

/* The best NCCL setting for one message size (proto/algo "" = NCCL's own choice). */
typedef struct kt_allreduce_best {
    size_t bytes;
    char proto[16], algo[16];
    double median_us, min_us, max_us, floor_us; /* floor 0 on one GPU */
    double default_us;                          /* NCCL's own choice, same size */
    int nccl_version;
} kt_allreduce_best;

/* Times every setting (a child process each), prints the table, fills best[n_sizes]. */
int kt_bench_allreduce(const kt_allreduce_options *o, kt_allreduce_best *best);
/* The child's part: times each size with the NCCL settings of its environment, checks the
 * sums, prints "size BYTES MEDIAN MIN MAX" lines and one "busbw" line. */
int kt_allreduce_child(int world, const size_t *bytes, int n_sizes, uint64_t seed);

#endif
