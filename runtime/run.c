/* run.c — `kt run` (run.h): reads the model folder, feeds each sequence its prompt then its
 * greedy tokens one step at a time, and reports what the steps cost. The step itself is the
 * GPU step (runtime/step.c) or, with --reference, the float64 host reference (model_ref.c). */
#include "run.h"

#include "../kernels/moe_gemm.h"

#include "kt.h"
#include "model_ref.h"
#include "step.h"
#include "step_plan.h"

#include <stdlib.h>
#include <string.h>

/* Reads the prompt file: one line of token ids per sequence, all lines the same length. Without one,
 * each sequence starts on its own seeded token, as a server's batch holds distinct requests (one
 * token for all would route every sequence to the same experts: a step that reads K experts a layer). */
static int read_prompt(const char *path, int batch, long vocab, uint64_t seed, int32_t **out, long *len) {
    *len = 1;
    *out = calloc((size_t)batch, sizeof **out);
    if (!path) {
        uint64_t rng = seed ^ 0x70726f6d7074ull; /* "prompt" */
        for (int b = 0; b < batch; b++) (*out)[b] = (int32_t)(kt_rng_next(&rng) % (uint64_t)vocab);
        return 0;
    }
    size_t n;
    char *text = kt_read_file(path, &n);
    if (!text) return -1;
    int32_t *t = NULL;
    size_t cap = 0;
    long count = 0, lines = 0, per = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        long here = 0;
        for (char *p = line, *end; *p; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) {
                if (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',') {
                    end = p + 1;
                    continue;
                }
                free(text), free(t);
                return kt_fail("%s: line %ld: '%c' is not a token id", path, lines + 1, *p);
            }
            if (v < 0 || v >= vocab) {
                free(text), free(t);
                return kt_fail("%s: line %ld: token %ld outside the vocabulary (%ld)", path, lines + 1, v, vocab);
            }
            int32_t *g = kt_grow(t, &cap, (size_t)count, sizeof *t);
            if (!g) return free(text), free(t), -1;
            t = g;
            t[count++] = (int32_t)v;
            here++;
        }
        if (!here) continue;
        if (per >= 0 && here != per) {
            free(text), free(t);
            return kt_fail("%s: line %ld has %ld tokens, line 1 has %ld", path, lines + 1, here, per);
        }
        per = here;
        lines++;
    }
    free(text);
    if (lines != batch) {
        free(t);
        return kt_fail("%s: %ld prompt lines for --batch %d", path, lines, batch);
    }
    free(*out);
    *out = t;
    *len = per;
    return 0;
}

/* The config the run uses: the folder's, cut to --layers and to one rank's shapes. */
static int run_config(const kt_run_options *o, kt_model_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->model_dir);
    if (kt_model_config_read(path, c)) return -1;
    if (o->layers < 0 || o->layers > c->n_layers)
        return kt_fail("--layers %ld: the model has %ld layers", o->layers, c->n_layers);
    if (o->layers) c->n_layers = o->layers;
    if (o->tp_shapes > 1) {
        if (c->n_heads % o->tp_shapes || c->o_groups % o->tp_shapes || c->moe_inter % (128 * o->tp_shapes) ||
            c->vocab % o->tp_shapes)
            return kt_fail("--tp-shapes %d does not divide the heads (%ld), o_groups (%ld), experts' width (%ld) "
                           "and vocabulary (%ld)",
                           o->tp_shapes, c->n_heads, c->o_groups, c->moe_inter, c->vocab);
        c->n_heads /= o->tp_shapes;
        c->o_groups /= o->tp_shapes;
        c->moe_inter /= o->tp_shapes;
        c->head_rows = c->vocab / o->tp_shapes; /* a vocab-parallel LM head (SGLang's and vLLM's ParallelLMHead) */
        fprintf(stderr,
                "kt run: --tp-shapes %d: one rank's shapes (%ld heads, %ld o-groups, expert width %ld, the LM head's "
                "first %ld rows; the indexer and compressors whole); the all-reduces after attention and MoE and the "
                "logits' all-gather are left out (the greedy token is this rank's)\n",
                o->tp_shapes, c->n_heads, c->o_groups, c->moe_inter, c->head_rows);
    }
    return 0;
}

static long argmax(const double *x, long n) {
    long best = 0;
    for (long i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* SMs of the GPU --plan sizes the family defaults for (an H200, the machine the step is timed on). */
#define PLAN_SMS 132

/* --plan: the step's parts and each family problem with the config a DB-less dispatch takes,
 * "plan: FAMILY SHAPE B=M CONFIG" (what tests/cpu/cli.sh feeds `kt compile --config`). */
static int print_plan(const kt_run_options *o, const kt_model_config *c) {
    kt_step_plan plan;
    int experts = o->experts && !strcmp(o->experts, "mxfp4") ? KT_MOE_MXFP4 : KT_MOE_FP8;
    kt_step_plan_make(c, o->batch, o->context, o->plain_kernels, o->synthetic, experts, &plan);
    for (int i = 0; i < KT_N_PARTS; i++)
        printf("part: %s %s%s%s\n", kt_step_part_names[i], plan.family[i] ? "family" : "plain",
               plan.family[i] ? "" : ": ", plan.why[i]);
    const kt_family *f[16];
    kt_problem p[16];
    int n = kt_step_plan_problems(&plan, f, p, 16);
    for (int i = 0; i < n; i++) {
        char shape[256], cfg[256], why[256];
        kt_config k = kt_default_config(f[i], &p[i], PLAN_SMS, o->plan_arch);
        kt_format_shape(f[i], &p[i], shape, sizeof shape);
        kt_format_config(f[i], &k, cfg, sizeof cfg);
        if (f[i]->check_config(&k, o->plan_arch, why, sizeof why) || !f[i]->config_fits(&k, &p[i]))
            return kt_fail("%s %s B=%ld: the default config %s does not build or fit", f[i]->name, shape, p[i].m, cfg);
        printf("plan: %s %s B=%ld %s\n", f[i]->name, shape, p[i].m, cfg);
    }
    return 0;
}

int kt_run(const kt_run_options *o) {
    kt_model_config c;
    if (run_config(o, &c)) return -1;
    if (o->plan_arch) return print_plan(o, &c);
    if (o->reference && o->experts)
        return kt_fail("--experts chooses the GPU step's seeded experts; the host reference runs a checkpoint's "
                       "experts as stored (MXFP4 decoded exactly)");
    int32_t *prompt;
    long plen;
    if (read_prompt(o->prompt_path, o->batch, c.vocab, o->seed, &prompt, &plen)) return -1;
    long total = plen + o->steps;
    if (total > o->context) {
        free(prompt);
        return kt_fail("prompt (%ld) + steps (%ld) exceed --context %ld", plen, o->steps, o->context);
    }
    kt_st_set w = {0};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o->model_dir);
    if (!o->synthetic && kt_st_open_dir(&w, dir)) return free(prompt), -1;
    FILE *dump = o->dump_path ? fopen(o->dump_path, "wb") : NULL;
    if (o->dump_path && !dump) return free(prompt), kt_st_close(&w), kt_fail("cannot write %s", o->dump_path);
    int rc = 0;
    kt_model_ref *ref = NULL;
    kt_step *gpu = NULL;
    if (o->reference) {
        kt_ref_mode mode = !strcmp(o->reference, "exact") ? KT_REF_EXACT : KT_REF_KT;
        rc = kt_model_ref_open(&c, o->synthetic ? NULL : &w, o->seed, mode, o->batch, o->context, &ref);
    } else {
        rc = kt_step_open(&c, o->synthetic ? NULL : &w, o, &gpu);
    }
    double *logits = malloc((size_t)(o->batch * c.head_rows) * sizeof *logits);
    float *f = malloc((size_t)(o->batch * c.head_rows) * sizeof *f);
    int32_t *tok = malloc((size_t)o->batch * sizeof *tok);
    for (int b = 0; b < o->batch; b++) tok[b] = prompt[b * plen];
    for (long t = 0; t < total && !rc; t++) {
        rc = ref ? kt_model_ref_step(ref, tok, t, logits) : kt_step_run(gpu, tok, t, logits);
        if (rc) break;
        for (long i = 0; i < o->batch * c.head_rows; i++) f[i] = (float)logits[i];
        if (dump && fwrite(f, sizeof *f, (size_t)(o->batch * c.head_rows), dump) != (size_t)(o->batch * c.head_rows))
            rc = kt_fail("writing %s failed", o->dump_path);
        printf("step %ld:", t);
        for (int b = 0; b < o->batch; b++) {
            long next = t + 1 < plen ? prompt[b * plen + t + 1] : argmax(logits + b * c.head_rows, c.head_rows);
            printf(" %d->%ld%s", tok[b], argmax(logits + b * c.head_rows, c.head_rows), t + 1 < plen ? "" : "*");
            tok[b] = (int32_t)next;
        }
        printf("\n");
    }
    if (!rc && gpu) rc = kt_step_report(gpu, o);
    if (dump) fclose(dump);
    kt_model_ref_close(ref);
    kt_step_close(gpu);
    kt_st_close(&w);
    free(prompt), free(logits), free(f), free(tok);
    return rc;
}
