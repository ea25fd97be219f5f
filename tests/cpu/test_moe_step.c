/* test_moe_step.c — CPU tests of the moe_step pipeline: every stage tensor maps to a pipeline
 * tensor of its dtype and at least its size, with the roles a pipeline needs; its reference
 * on a small layer is finite, reads only the experts its routing touches (the others are NaN),
 * and a token's output follows its routing and no other token's. */
#include "../../kernels/moe_route.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

KT_TEST(moe_step_stage_tensors_map_onto_the_pipeline) {
    const kt_family *f = kt_family_find("moe_step");
    kt_problem p = {0};
    EXPECT(f && kt_parse_shape(f, "ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=zipf", &p) == 0);
    char why[256];
    int bad = 0;
    for (long m = 1; m <= 256; m *= 4) {
        p.m = m;
        EXPECT(f->check_problem(&p, why, sizeof why) == 0);
        kt_tensor_desc t[KT_MAX_TENSORS], st[KT_MAX_TENSORS];
        int n = f->tensors(&p, t), outputs = 0;
        for (int i = 0; i < n; i++) outputs += t[i].role == KT_OUTPUT;
        bad += outputs != 1;
        for (int s = 0; s < f->n_stages; s++) {
            kt_problem sp;
            kt_stage_problem(f, s, &p, &sp);
            int ns = f->stages[s].family->tensors(&sp, st);
            for (int i = 0; i < ns; i++) {
                const kt_tensor_desc *pt = &t[f->stages[s].tensor[i]];
                bad += pt->dtype != st[i].dtype || pt->count < st[i].count;
                bad += st[i].role == KT_SCRATCH && pt->role != KT_SCRATCH; /* kept zeroed */
                bad += st[i].role == KT_OUTPUT && pt->role == KT_INPUT;    /* never writes an input */
            }
        }
    }
    EXPECT(bad == 0);
    EXPECT(kt_parse_shape(f, "ROUTER=V4,FORMAT=fp8,E=512,HIDDEN=4096,INTER=512,DIST=zipf", &p) == 0);
    EXPECT(f->check_problem(&p, why, sizeof why) < 0);
}

/* A small V4 layer (E 256, hidden 256, inter 128), its inputs filled and its reference run. */
typedef struct step {
    const kt_family *f;
    kt_problem p;
    kt_tensor_desc t[KT_MAX_TENSORS];
    void *h[KT_MAX_TENSORS];
    int n;
    double *ref;
} step;

static void step_open(step *s, const char *shape, long m) {
    s->f = kt_family_find("moe_step");
    memset(&s->p, 0, sizeof s->p);
    kt_parse_shape(s->f, shape, &s->p);
    s->p.m = m;
    s->n = s->f->tensors(&s->p, s->t);
    size_t n_ref = 0;
    for (int i = 0; i < s->n; i++) {
        s->h[i] = s->t[i].role == KT_INPUT ? calloc(s->t[i].count, kt_dtype_size(s->t[i].dtype)) : NULL;
        if (s->t[i].role == KT_OUTPUT) n_ref += s->t[i].count;
    }
    s->f->fill(&s->p, 7, s->h);
    s->ref = calloc(n_ref, sizeof(double));
    s->f->reference(&s->p, s->h, s->ref);
}

static void step_close(step *s) {
    for (int i = 0; i < s->n; i++) free(s->h[i]);
    free(s->ref);
}

KT_TEST(moe_step_reference_follows_the_routing) {
    static const char *const shapes[] = {"ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=256,INTER=128,DIST=uniform",
                                         "ROUTER=V3,FORMAT=mxfp4,E=256,HIDDEN=256,INTER=128,DIST=hot"};
    for (int k = 0; k < 2; k++) {
        step s;
        step_open(&s, shapes[k], 6);
        long H = 256, nonzero = 0;
        int finite = 1;
        for (long i = 0; i < 6 * H; i++) {
            finite &= isfinite(s.ref[i]);
            nonzero += s.ref[i] != 0;
        }
        EXPECT(finite && nonzero > 5 * H); /* untouched experts are NaN: none was read */
        /* token 2 routed elsewhere (its logits all equal: the tie token's routing): its output
         * changes, the others' do not */
        double *before = malloc(sizeof(double) * 6 * H);
        memcpy(before, s.ref, sizeof(double) * 6 * H);
        float *logits = s.h[0];
        for (long e = 0; e < 256; e++) logits[2 * 256 + e] = 0.5f;
        s.f->reference(&s.p, s.h, s.ref); /* may read NaN experts: only token 2 can change */
        int others_same = 1, two_changed = 0;
        for (long i = 0; i < 6 * H; i++) {
            if (i / H == 2)
                two_changed |= !(s.ref[i] == before[i]);
            else
                others_same &= s.ref[i] == before[i];
        }
        EXPECT(others_same && two_changed);
        free(before);
        step_close(&s);
    }
}

/* A pipeline's --config: one part a stage in order (kt bench's row format, FAMILY: optional), an
 * empty part leaving that stage to the DB; a wrong count, family or config is refused. */
KT_TEST(moe_step_stage_configs_parse) {
    const kt_family *f = kt_family_find("moe_step");
    kt_config c[KT_MAX_STAGES];
    unsigned mask = 7;
    EXPECT(kt_parse_stage_configs(f, ";;", c, &mask) == 0 && mask == 0);
    EXPECT(kt_parse_stage_configs(f, "moe_route:WARPS=8,FUSED=1;;TM=8,TN=32,GATHER=1", c, &mask) == 0 && mask == 5);
    EXPECT(c[0].v[0] == 8 && c[2].v[1] == 32);
    EXPECT(kt_parse_stage_configs(f, ";moe_gemm:TN=128;", c, &mask) == 0 && mask == 2 && c[1].v[1] == 128);
    const char *bad[] = {"", ";", ";;;", "moe_gemm:TM=8;;", "moe_route:WARPZ=8;;", ";;TN=12x", "moe_route;;"};
    for (int i = 0; i < 7; i++) EXPECT(kt_parse_stage_configs(f, bad[i], c, &mask) == -1);
    EXPECT(kt_parse_stage_configs(f, "moe_gemm:TM=8;;", c, &mask) == -1 && strstr(kt_error(), "is moe_route"));
}
