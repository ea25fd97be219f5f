/* step.h — the GPU decode step of the bundled runtime (runtime/step.c): weights on the device in
 * kt's formats, the KV caches in the V4 byte layout, every layer part run by a kt family's tuned
 * winner (through kt_dispatch) or by a plain kernel of runtime/model.cu, the whole step captured
 * as one CUDA graph. */
#ifndef KT_STEP_H
#define KT_STEP_H

#include "model.h"
#include "run.h"
#include "safetensors.h"

typedef struct kt_step kt_step;

/* Opens the GPU, uploads the weights (quantising bf16/f32 GEMM weights to FP8), allocates the
 * caches, resolves every kernel the step needs (logging the lookup level of each) and captures
 * the step graph. w NULL: seeded synthetic weights. */
int kt_step_open(const kt_model_config *c, const kt_st_set *w, const kt_run_options *o, kt_step **out);
/* Runs one step (token[b] at position pos) and copies the logits back into logits[b * head_rows]. */
int kt_step_run(kt_step *s, const int32_t *token, long pos, double *logits);
/* Prints (and writes to --json) TPOT, tokens/s, the per-family breakdown and the byte floor. */
int kt_step_report(kt_step *s, const kt_run_options *o);
void kt_step_close(kt_step *s);

#endif
