/* fake_gpu.c — the fake measuring backend of KT_FAKE_GPU=1 (fake_gpu.h): what a sweep's
 * worker answers instead of touching CUDA, for the CPU tests' sweeps (tests/cpu/sweep.sh,
 * test_sweep.c). */
#include "fake_gpu.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A recorded time of "SHAPE M CONFIG" (KT_FAKE_TIME=replay:FILE). */
typedef struct replay_time {
    char key[352];
    double us;
} replay_time;

struct kt_fake_gpu {
    const kt_family *f;
    int smooth; /* KT_FAKE_TIME=smooth: times form a bowl around `bowl` */
    kt_config bowl;
    replay_time *replay; /* KT_FAKE_TIME=replay:FILE: recorded times */
    int n_replay;
    double delay_s; /* KT_FAKE_DELAY_MS */
};

static double env_double(const char *name, double fallback) {
    const char *s = getenv(name);
    char *end;
    double v = s ? strtod(s, &end) : 0;
    return s && end != s && v >= 0 ? v : fallback;
}

/* Reads KT_FAKE_TIME=replay:FILE's recorded times into g; -1 if FILE cannot be read. */
static int load_replay(kt_fake_gpu *g, const char *path) {
    FILE *in = fopen(path, "r");
    if (!in) return -1;
    char shape[128], config[192];
    long m;
    double us;
    size_t cap = 0;
    int rc = 0;
    while (!rc && fscanf(in, "%127s %ld %191s %lf", shape, &m, config, &us) == 4) {
        replay_time *grown = kt_grow(g->replay, &cap, (size_t)g->n_replay, sizeof *grown);
        if (!grown)
            rc = -1;
        else
            g->replay = grown;
        if (!rc) {
            snprintf(g->replay[g->n_replay].key, sizeof g->replay->key, "%s %ld %s", shape, m, config);
            g->replay[g->n_replay++].us = us;
        }
    }
    fclose(in);
    return rc || !g->n_replay ? -1 : 0;
}

int kt_fake_gpu_open(const kt_family *f, kt_fake_gpu **out) {
    *out = NULL;
    if (!getenv("KT_FAKE_GPU") || strcmp(getenv("KT_FAKE_GPU"), "1")) return 0;
    kt_fake_gpu *g = calloc(1, sizeof *g);
    if (!g) return -1;
    const char *fake_time = getenv("KT_FAKE_TIME");
    g->f = f;
    g->smooth = fake_time && !strcmp(fake_time, "smooth");
    g->bowl = f->default_config;
    g->delay_s = env_double("KT_FAKE_DELAY_MS", 0) / 1e3;
    if ((g->smooth && getenv("KT_FAKE_BOWL") && kt_parse_config(f, getenv("KT_FAKE_BOWL"), &g->bowl)) ||
        (fake_time && !strncmp(fake_time, "replay:", 7) && load_replay(g, fake_time + 7))) {
        free(g->replay);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void kt_fake_gpu_hello(kt_worker_hello *h) {
    memset(h, 0, sizeof *h);
    h->ok = 1;
    h->gpu_count = (int)env_double("KT_FAKE_GPU_COUNT", 1);
    if (h->gpu_count < 1) h->gpu_count = 1;
    /* an RTX PRO 6000's 188 SMs, or KT_FAKE_SMS (replays of another GPU's recordings) */
    h->info = (kt_device_info){.name = "kt fake GPU",
                               .cc_major = 12,
                               .cc_minor = 0,
                               .sm_count = (int)env_double("KT_FAKE_SMS", 188),
                               .driver_version = 13000,
                               .l2_bytes = 128u << 20,
                               .smem_per_block_optin = 99u << 10};
}

void kt_fake_gpu_delay(const kt_fake_gpu *g) {
    if (g->delay_s > 0) usleep((useconds_t)(g->delay_s * 1e6));
}

/* The value of the parameter called name in c, or 0 if the family has none. */
static int param(const kt_family *f, const kt_config *c, const char *name) {
    for (int i = 0; i < f->n_params; i++)
        if (!strcmp(f->params[i].name, name)) return c->v[i];
    return 0;
}

/* The planted variants of the selftest family misbehave for real, fake GPU or not. */
static void misbehave(const kt_fake_gpu *g, const kt_config *c) {
    if (param(g->f, c, "FAULT")) {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    if (param(g->f, c, "HANG"))
        for (;;) pause();
}

/* Fake times. By default 10 us times 1.05^k, k from a hash of (variant, shape, M): no
 * structure at all, and distinct times at least 5% apart (never a tie within the noise
 * band unless equal). With KT_FAKE_TIME=smooth, a bowl over the parameters' value indices
 * whose one minimum is the config KT_FAKE_BOWL (unnamed parameters: the default):
 * 10 us x (1 + M/256) x (1 + 0.1 x the squared index distance), so a local search can walk
 * down to it and the right winner is known. A re-timing round r reads 0.1% slower per
 * round, so re-timed numbers differ from the first pass. With KT_FAKE_TIME=replay:FILE,
 * the times FILE recorded ("SHAPE M CONFIG US" lines, e.g. from an exhaustive sweep on a
 * GPU; US 0 for a config that failed there, -1 here), 1 s for a config it lacks: a search
 * replayed against real measurements, offline. */
double kt_fake_gpu_us(const kt_fake_gpu *g, const kt_problem *p, const kt_config *c, const char *variant_id,
                      int round) {
    misbehave(g, c);
    double us;
    if (g->replay) {
        char shape[128], config[192], key[sizeof g->replay->key];
        kt_format_shape(g->f, p, shape, sizeof shape);
        kt_format_config(g->f, c, config, sizeof config);
        snprintf(key, sizeof key, "%s %ld %s", shape, p->m, config);
        us = 1e6;
        for (int r = 0; r < g->n_replay; r++)
            if (!strcmp(g->replay[r].key, key)) us = g->replay[r].us > 0 ? g->replay[r].us : -1;
        if (us < 0) return us;
    } else if (g->smooth) {
        double d2 = 0;
        for (int i = 0; i < g->f->n_params; i++) {
            int d =
                kt_param_value_index(&g->f->params[i], c->v[i]) - kt_param_value_index(&g->f->params[i], g->bowl.v[i]);
            d2 += d * d;
        }
        us = 10.0 * (1 + p->m / 256.0) * (1 + 0.1 * d2);
    } else {
        char shape[128];
        kt_format_shape(g->f, p, shape, sizeof shape);
        uint64_t h = kt_hash(shape, strlen(shape), (uint64_t)p->m);
        h = kt_hash(variant_id, strlen(variant_id), h);
        us = 10.0 * pow(1.05, (double)(h % 40));
    }
    return us * (1 + 0.001 * round);
}

void kt_fake_gpu_measure(const kt_fake_gpu *g, const kt_problem *p, const kt_config *c, const char *variant_id,
                         kt_worker_result *r) {
    kt_timing *t = &r->timing[0];
    r->kept = 1; /* as if loaded: later jobs come without the image, as on a GPU */
    r->status = KT_OK;
    r->rel_err = 1e-3;
    t->median_us = kt_fake_gpu_us(g, p, c, variant_id, 0);
    if (t->median_us < 0) {
        r->status = KT_LAUNCH_ERROR;
        snprintf(r->error, sizeof r->error, "failed in the recording");
        return;
    }
    t->min_us = t->median_us * 0.98;
    t->max_us = t->median_us * 1.03;
}
