/* tuner.h — the tuner: the space of a family under its constraints, verification and
 * timing of one variant on one problem, and the sweep that fills the database. */
#ifndef KT_TUNER_H
#define KT_TUNER_H
#include "kt.h"

/* Every config of f that passes check_config for arch (and config_fits for p when p is
 * not NULL), in the family's order. *out is malloc'd; returns the count, -1 on error.
 * *rejected (may be NULL) receives how many were rejected before compiling. */
int kt_space_enumerate(const kt_family *f, int arch, const kt_problem *p, kt_config **out, int *rejected);
/* Keeps `budget` configs of list[n] chosen by a seeded shuffle (the default config first
 * when present); returns the new count. */
int kt_space_sample(const kt_family *f, kt_config *list, int n, int budget, uint64_t seed);

/* Compiles list[n] for arch on `threads` threads, in list order, through the JIT cache,
 * while the caller consumes results in order with kt_compile_pool_wait (pipelining). */
typedef struct kt_compile_pool kt_compile_pool;
kt_compile_pool *kt_compile_pool_start(const kt_family *f, const kt_config *list, int n, int arch, int threads);
/* Waits for item i; returns its cubin (NULL when it failed: *error gets the message). */
const kt_cubin *kt_compile_pool_wait(kt_compile_pool *pool, int i, const char **error);
/* Joins the threads and frees every cubin. */
void kt_compile_pool_free(kt_compile_pool *pool);

/* A problem made ready on the GPU: inputs rotated over copies, outputs, scratch,
 * and the reference. */
typedef struct kt_bench kt_bench;
/* Allocates, fills from seed and uploads the problem's tensors, and computes the reference
 * (CPU, or the family's GPU reference for large problems, compiled through ref_cubin). */
int kt_bench_setup(const kt_family *f, const kt_problem *p, uint64_t seed, const kt_module *ref_mod,
                   kt_bench **out);
void kt_bench_free(kt_bench *b);

/* Timing method: graph replays over rotated inputs, warm-up excluded, median of repeats. */
typedef struct kt_timing {
    double median_us, min_us, max_us;
    int repeats;
} kt_timing;

/* Verifies mod on b (output poisoned first) and, when it passes, times it. Fills status,
 * error, rel_err and the times of m; returns 0 unless the GPU itself failed. */
int kt_bench_variant(kt_bench *b, const kt_module *mod, kt_measurement *m);
/* Times an arbitrary enqueue function over the same rotation (for baselines): fn(ctx, copy, stream). */
int kt_bench_time(kt_bench *b, int (*enqueue)(void *ctx, int copy, void *stream), void *ctx, kt_timing *t);
/* Device address of tensor i in rotation copy r (inputs) or its only copy (others). */
uint64_t kt_bench_ptr(const kt_bench *b, int i, int r);
int kt_bench_copies(const kt_bench *b);
/* Relative error of the output tensors against the reference (max over tensors); NaN if any
 * element is NaN. Reads the current device outputs. */
int kt_bench_check(kt_bench *b, double *rel_err, char *why, size_t n);
/* Fills every output tensor with NaN bytes. */
int kt_bench_poison(kt_bench *b);
/* The stream the bench runs on (CUstream). */
void *kt_bench_stream(const kt_bench *b);

/* A sweep request, as `kt tune` parses it. */
typedef struct kt_sweep_options {
    const kt_family *family;
    kt_problem shapes[32];
    int n_shapes;
    long ms[32];
    int n_ms;
    const char *db_path;
    const char *strategy; /* "exhaustive" or "random" */
    int budget;           /* random: variants per (shape, M) */
    uint64_t seed;
    int compile_threads;
    int quiet;
    const char *commit;   /* kt's git commit, for the run row */
    const char *cmdline;  /* the command line, for the run row */
} kt_sweep_options;

/* Runs the sweep on the current GPU: compiles, verifies, times, records every result
 * and updates the winners. A variant that fails is recorded and the sweep continues. */
int kt_sweep(const kt_sweep_options *o);

#endif
