/* profile.h — `kt profile`: one variant (the DB winner, or a given config) run in a loop
 * inside its NVTX ranges on the tuner's seeded inputs, next to its floor and roof; with
 * --ncu the same run under Nsight Compute with the metric set of profiles/why_slow.ncu,
 * whose answer (DRAM and L2 throughput against peak, tensor pipe, occupancy, the top warp
 * stalls) is parsed from ncu's raw CSV and printed beside the floor and roof. */
#ifndef KT_PROFILE_H
#define KT_PROFILE_H
#include "kt.h"

/* A `kt profile` request, as the CLI parses it. */
typedef struct kt_profile_options {
    const kt_family *family;
    kt_problem problem;  /* shape and batch */
    const char *db_path; /* winners DB (read-only) when no config is given; may be absent */
    const char *config;  /* NULL: the DB winner (or the family default), as kt_dispatch serves it */
    int iters;           /* launches inside the range (0: 100) */
    int ncu;             /* re-execute this command under ncu and summarise its metrics */
    uint64_t seed;       /* the sweep's --seed: inputs as the tuner had them */
} kt_profile_options;

/* Runs the profile on the current GPU (opened by the caller); prints to stdout. */
int kt_profile_run(const kt_profile_options *o);

/* Nsight Compute's raw CSV (`--csv --page raw --print-units base`), parsed: one row per
 * profiled kernel, with every metric's name, unit and value (NaN when not a number). */
#define KT_NCU_MAX_KERNELS 16
typedef struct kt_ncu_metric {
    char name[128];
    char unit[32];
    double value;
} kt_ncu_metric;
typedef struct kt_ncu_kernel {
    char name[256];
    kt_ncu_metric *metrics;
    int n_metrics;
} kt_ncu_kernel;
typedef struct kt_ncu_report {
    kt_ncu_kernel kernels[KT_NCU_MAX_KERNELS];
    int n_kernels;
} kt_ncu_report;

/* Parses ncu's output (lines that are not CSV, such as ==PROF== messages, skipped); 0 with
 * r filled (n_kernels may be 0), -1 with the error set when the CSV is malformed. */
int kt_ncu_parse(const char *text, kt_ncu_report *r);
void kt_ncu_free(kt_ncu_report *r);
/* The value of metric name in k (NaN when absent). */
double kt_ncu_value(const kt_ncu_kernel *k, const char *name);

/* What the "why is this slow" summary reads from one kernel: NaN where ncu had no metric. */
typedef struct kt_ncu_summary {
    double duration_us;
    double dram_pct, l2_pct, sm_pct; /* throughput, % of peak */
    double dram_bytes;               /* read + written */
    double tensor_pct;               /* the busiest tensor pipe, % of peak */
    char tensor_metric[128];
    double occupancy_pct, theoretical_pct; /* achieved and theoretical warps, % of peak */
    double registers, grid, block;
    int n_stalls; /* the top stall reasons, most cycles first */
    char stall[4][48];
    double stall_cycles[4]; /* cycles per issued instruction */
} kt_ncu_summary;
void kt_ncu_summarize(const kt_ncu_kernel *k, kt_ncu_summary *s);

#endif
