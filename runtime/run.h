/* run.h — `kt run`: a DeepSeek-V4 decode loop over a Hugging Face model folder (or seeded
 * synthetic weights of its config), on the GPU from tuned winners, or on the host reference. */
#ifndef KT_RUN_H
#define KT_RUN_H

#include <stdint.h>

typedef struct kt_run_options {
    const char *model_dir;   /* holds config.json (+ safetensors unless synthetic) */
    int synthetic;           /* seeded random weights of the config's shapes */
    int batch;               /* sequences decoded together */
    long context;            /* cache capacity in tokens (prompt + steps must fit) */
    long steps;              /* greedy tokens generated after the prompt */
    long layers;             /* 0: all of the config's layers, else the first N */
    int tp_shapes;           /* run one rank's shapes of an N-way tensor-parallel deployment */
    int tp;                  /* NCCL world size of the all-reduces (0: none; only 1 runs today) */
    const char *db_path;     /* winners DB (read-only); NULL: family defaults */
    const char *json_path;   /* figures for the bench log */
    const char *prompt_path; /* token ids, one line per sequence; NULL: token 0 */
    const char *dump_path;   /* logits of every step, f32 [steps][batch][vocab] */
    const char *reference;   /* NULL: GPU; "exact" or "kt": the float64 host reference */
    int plain_kernels;       /* the step's simple reference path: model.cu's kernels where a family exists */
    int plan_arch;           /* non-zero: print the step's plan and family problems for this arch, no GPU */
    const char *experts;     /* "fp8" or "mxfp4": the seeded routed experts' format (and --plan's); NULL: FP8,
                                or a checkpoint's own (which a non-NULL value must match) */
    uint64_t seed;
} kt_run_options;

/* Runs the decode loop; prints per-step tokens and the figures. 0, or -1 with kt_error(). */
int kt_run(const kt_run_options *o);

#endif
