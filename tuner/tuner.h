/* tuner.h — the tuner: the space of a family under its constraints, verification and
 * timing of one variant on one problem, and the sweep that fills the database. */
#ifndef KT_TUNER_H
#define KT_TUNER_H
#include "kt.h"
#include "../db/kt_db_write.h"
#include "../kernels/common/kt_check.h"

/* Every config of f that passes check_config for arch (and config_fits for p when p is
 * not NULL) and, when where is not NULL, has the params it names at its values
 * ("DIRECT=1,TILE_M=16"; parts separated by ';' are a union: a config in any of them, so
 * parts naming every param list configs), in the family's order. *out is malloc'd; returns the count, -1 on
 * error. *rejected (may be NULL) receives how many were rejected before compiling. */
int kt_space_enumerate(const kt_family *f, int arch, const kt_problem *p, const char *where, kt_config **out,
                       int *rejected);
/* Shuffles list[n] by a seeded shuffle (the default config first when present) and returns
 * min(budget, n): the first that many are the sample. */
int kt_space_sample(const kt_family *f, kt_config *list, int n, int budget, uint64_t seed);

/* Compiles list[n] (items 0..n-1) for arch on `threads` threads, in list order, through the
 * JIT cache, while the caller consumes results with kt_compile_pool_wait (pipelining).
 * NULL when out of memory. */
typedef struct kt_compile_pool kt_compile_pool;
kt_compile_pool *kt_compile_pool_start(const kt_family *f, const kt_config *list, int n, int arch, int threads);
/* Appends config c as the next item and returns its index (-1 with error set if out of
 * memory); an urgent item compiles before every non-urgent one still waiting. */
int kt_compile_pool_add(kt_compile_pool *pool, const kt_config *c, int urgent);
/* How many items the pool has, how many finished compiling, and how many of those failed. */
void kt_compile_pool_counts(kt_compile_pool *pool, int *items, int *compiled, int *failed);
/* 1 when item i has finished compiling (or failed): kt_compile_pool_wait would not block. */
int kt_compile_pool_ready(kt_compile_pool *pool, int i);
/* Waits for item i; returns its cubin (NULL when it failed: *error gets the message). The
 * cubin stays valid until the pool is freed. */
const kt_cubin *kt_compile_pool_wait(kt_compile_pool *pool, int i, const char **error);
/* Joins the threads and frees every cubin. */
void kt_compile_pool_free(kt_compile_pool *pool);

/* A problem made ready on the GPU: inputs rotated over copies, outputs, scratch,
 * and the reference. */
typedef struct kt_bench kt_bench;
/* Allocates, fills from seed and uploads the problem's tensors, computes the reference onto
 * the device (on the CPU and uploaded, or by the family's GPU reference in ref_mod for large
 * problems) and loads the check kernel, all once for every variant checked on it. */
int kt_bench_setup(const kt_family *f, const kt_problem *p, uint64_t seed, const kt_module *ref_mod, kt_bench **out);
void kt_bench_free(kt_bench *b);
/* Loads the module whose reference kernel checks f's large problems (kt_bench_setup's
 * ref_mod): the default config of f->reference_family, or of f. */
int kt_reference_module(const kt_family *f, kt_module *m);
/* The launch of mod (or, for a pipeline, its stages' modules) on b's tensors, rotation copy
 * `copy`, on b's stream: what a baseline's enqueue is handed. */
void kt_bench_launch(const kt_bench *b, const kt_module *mod, int copy, kt_launch *l);

/* Timing method: graph replays over rotated inputs, warm-up excluded, median of repeats. */
typedef struct kt_timing {
    double median_us, min_us, max_us;
    int repeats;
} kt_timing;

/* Verifies mod on b (output poisoned first) and, when it passes, times it, inside the NVTX
 * ranges kt/<family>/<key>/<config> (runtime/nvtx.h; kt_bench_time_variant too). Fills status,
 * error, rel_err and the times of m; returns 0 unless the GPU itself failed. For a pipeline
 * family, mod points to its stages' modules, n_stages of them in order (kt_pipeline_dispatch). */
int kt_bench_variant(kt_bench *b, const kt_module *mod, kt_measurement *m);
/* Times an arbitrary enqueue function over the same rotation (for baselines): fn(ctx, copy,
 * stream), median of at most max_repeats replays (0: the default, 15 or KT_REPEATS). */
int kt_bench_time(kt_bench *b, int (*enqueue)(void *ctx, int copy, void *stream), void *ctx, int max_repeats,
                  kt_timing *t);
/* The inputs' seed of problem (shape text, m) in a sweep or bench of seed: the tuner, `kt bench`
 * and `kt profile` fill the same inputs for the same problem. */
uint64_t kt_problem_seed(uint64_t seed, const char *shape, long m);
/* Enqueues one run of mod on b's stream over rotation copy `copy` (mod copies), unchecked. */
int kt_bench_enqueue(kt_bench *b, const kt_module *mod, int copy);
/* Times mod on b by the same method without verifying it (re-timing a verified variant). */
int kt_bench_time_variant(kt_bench *b, const kt_module *mod, int max_repeats, kt_timing *t);
/* Device address of tensor i in rotation copy r (inputs) or its only copy (others). */
uint64_t kt_bench_ptr(const kt_bench *b, int i, int r);
int kt_bench_copies(const kt_bench *b);
/* Seconds b has spent timing (kt_bench_time), all calls together. */
double kt_bench_timing_seconds(const kt_bench *b);
/* Device memory b holds (inputs with their rotation copies, outputs, reference). */
size_t kt_bench_device_bytes(const kt_bench *b);
/* Relative error of the output tensors against the reference (max over tensors); NaN if any
 * unit fails (kt_check.h), and why says which tensor and element. Compares the current device outputs on the GPU
 * (tuner/check.cu), or on the CPU when KT_CHECK_ON_GPU=0 was set at setup; both add up the same kt_check_sums. */
int kt_bench_check(kt_bench *b, double *rel_err, char *why, size_t n);

/* The CPU compare: the sums of output tensor t (its dtype, count, compare, set_len) in host
 * memory against ref[t->count], by kernels/common/kt_check.h's rule, as the GPU's. */
void kt_check_host(const kt_tensor_desc *t, const void *out, const double *ref, kt_check_sums *s);
/* Fills every output tensor with its dtype's poison (kt.h). */
int kt_bench_poison(kt_bench *b);
/* The stream the bench runs on (CUstream). */
void *kt_bench_stream(const kt_bench *b);

/* Measuring workers (worker.c). A worker is a forked child process that owns one GPU: the
 * sweep's own process never initialises CUDA, so a variant that faults or hangs takes
 * down only a worker and its context, never the sweep. Jobs and answers are fixed binary
 * structs on a socket pair. With KT_FAKE_GPU=1 workers skip CUDA and fake the GPU with
 * deterministic times (fake_gpu.h), so the CPU tests can run whole sweeps. */
#define KT_RETIME_MAX 8        /* variants one re-timing compares at most */
#define KT_RETIME_ROUNDS 5     /* interleaved rounds of a re-timing (A B C A B C ...), */
#define KT_RETIME_REPEATS 5    /* each a median of this many replays: the rounds' median is the time */
#define KT_WORKER_MODULES 4096 /* modules a worker keeps loaded; past that it loads per job */

typedef struct kt_worker kt_worker;

/* What a worker reports once started: its GPU and how many the host has, or why not. */
typedef struct kt_worker_hello {
    int ok;
    int gpu_count;
    kt_device_info info;
    char error[512];
} kt_worker_hello;

typedef enum kt_job_kind {
    KT_JOB_REFERENCE, /* load config[0]'s module as the family's GPU reference for setups */
    KT_JOB_MEASURE,   /* verify and time config[0] */
    KT_JOB_RETIME,    /* time config[0..n) again, interleaved over KT_RETIME_ROUNDS rounds */
} kt_job_kind;

/* A job on problem p, inputs from seed (a worker sets a problem up once for its jobs). */
typedef struct kt_worker_job {
    kt_job_kind kind;
    kt_problem problem;
    uint64_t seed;
    int n;
    kt_config config[KT_RETIME_MAX];
    const kt_cubin *cubin[KT_RETIME_MAX];
    int loaded[KT_RETIME_MAX]; /* the worker kept this module from an earlier job: no image sent */
} kt_worker_job;

typedef enum kt_worker_outcome {
    KT_WORKER_DONE,         /* answered: status (measure) or timing (retime) */
    KT_WORKER_SETUP_FAILED, /* the problem or a module could not be set up: error */
    KT_WORKER_LOST,         /* the GPU context is lost: error; the worker has exited */
} kt_worker_outcome;

/* What a worker's time goes to: problem setup (inputs, reference), module loads, checking
 * outputs, timing (first pass and re-timing). */
enum { KT_BUSY_SETUP, KT_BUSY_LOAD, KT_BUSY_CHECK, KT_BUSY_TIME, KT_BUSY_KINDS };
typedef struct kt_worker_result {
    kt_worker_outcome outcome;
    char error[512];
    kt_status status; /* measure */
    double rel_err;
    int kept;                        /* measure: the worker keeps the module loaded for later jobs */
    kt_timing timing[KT_RETIME_MAX]; /* measure: [0]; retime: each variant over the rounds */
    double busy_s[KT_BUSY_KINDS];    /* the worker's seconds on this job, by kind */
    int setups;                      /* problems it set up for this job (0: already held) */
} kt_worker_result;

/* Forks a worker for GPU ordinal serving family f; NULL with error set if fork failed. */
kt_worker *kt_worker_spawn(const kt_family *f, int ordinal);
/* Workers run as this same program re-executed with argv[1] == KT_WORKER_ARG: every main()
 * of a program that runs sweeps calls this first. It serves and never returns when argv
 * asks for a worker, and returns 0 otherwise. */
#define KT_WORKER_ARG "--kt-sweep-worker"
int kt_worker_main(int argc, char **argv);
/* Waits up to timeout_s for w's hello; -1 with error set if it died or said nothing. */
int kt_worker_hello_wait(kt_worker *w, double timeout_s, kt_worker_hello *h);
/* Sends a job (cubin images included); -1 with error set if the worker is gone. */
int kt_worker_send(kt_worker *w, const kt_worker_job *job);
/* The socket that becomes readable when w answers (for poll). */
int kt_worker_fd(const kt_worker *w);
/* Waits up to timeout_s for the answer to the last job: 0 answered, 1 still busy,
 * -1 (error set) the worker died instead. */
int kt_worker_receive(kt_worker *w, double timeout_s, kt_worker_result *r);
/* Kills w (it may have ended already), reaps it, writes how it ended ("killed by signal
 * 11 (Segmentation fault)") into why[n] (may be NULL), and frees it. */
void kt_worker_stop(kt_worker *w, char *why, size_t n);

/* A search strategy of `kt tune --strategy NAME` (tuner/search.c's table; search.h says what
 * each does). */
typedef struct kt_strategy {
    const char *name;
    int default_budget; /* --budget when none is given */
    int shuffled;       /* walks the space in one seeded shuffle (else in the space's order) */
    int anchored;       /* chooses in phases from anchor Ms, so one shape's Ms go together (shards too) */
} kt_strategy;
/* The strategy called name, NULL if none. */
const kt_strategy *kt_strategy_find(const char *name);

/* A sweep request, as `kt tune` parses it. */
typedef struct kt_sweep_options {
    const kt_family *family;
    kt_problem shapes[32];
    int n_shapes;
    long ms[32];
    int n_ms;
    const char *db_path;
    const char *strategy; /* a kt_strategy's name: "exhaustive", "random" or "fast" (tuner/search.h) */
    int budget;           /* random: configs per (shape, M); fast: per anchor M, its first sample at most and,
                             with budget/2, its local search's share (tuner/search.h) */
    uint64_t seed;
    int compile_threads;
    int quiet;
    const char *commit;           /* kt's git commit, for the run row */
    const char *cmdline;          /* the command line, for the run row */
    int shard_index, shard_count; /* measure only the (shape, M) problems of shard i of n (n <= 1: all);
                                   * fast: the whole shapes of shard i */
    int max_workers;              /* measure on at most this many GPUs (0: every GPU of the host) */
    const char *where;            /* NULL, or the part of the space to sweep ("DIRECT=1,TILE_M=16") */
} kt_sweep_options;

/* What a sweep did. */
typedef struct kt_sweep_report {
    kt_device_info device;        /* the GPU measured on (GPU 0 of the host) */
    int workers;                  /* GPUs measured on, one worker process each */
    long measured;                /* rows this run recorded, faults included */
    long by_phase[3];             /* of those, chosen by phase 1, 2 and 3 (exhaustive, random: all phase 1) */
    long already;                 /* (variant, shape, M) chosen that an earlier run had measured */
    long space;                   /* (variant, shape, M) that fit and are worth timing: what exhaustive measures */
    long pruned;                  /* (variant, shape, M) that fit but the family's hopeless() prunes */
    long faults;                  /* variants recorded as faults (worker died, watchdog, lost context) */
    long retimed;                 /* (shape, M) problems whose finalists were re-timed */
    double busy_s[KT_BUSY_KINDS]; /* the workers' seconds, all together, by kind */
    long setups;                  /* problems the workers set up, all together (again after eviction) */
    double worker_s;              /* the workers' seconds alive, all together (busy or waiting for jobs) */
} kt_sweep_report;

/* Runs the sweep on every GPU of the host (worker processes; this process never touches
 * CUDA): compiles, verifies, times, records every result as it comes, re-times each
 * problem's finalists and updates the winners. A variant that fails, faults or hangs
 * (watchdog: KT_WATCHDOG_S seconds, default 20) is recorded and the sweep continues.
 * report (may be NULL) receives what it did. */
int kt_sweep(const kt_sweep_options *o, kt_sweep_report *report);

#endif
