/* space.c — a family's tuning space: enumeration under its constraints (rejected
 * before any compile), seeded sampling, and the parallel NVRTC compile pool. */
#include "tuner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int kt_space_enumerate(const kt_family *f, int arch, const kt_problem *p, kt_config **out, int *rejected) {
    long total = 1;
    for (int i = 0; i < f->n_params; i++) total *= f->params[i].n_values;
    kt_config *list = malloc(sizeof *list * (size_t)total);
    if (!list) return kt_fail("out of memory enumerating %ld configs", total);
    int n = 0, bad = 0;
    char why[256];
    for (long idx = 0; idx < total; idx++) {
        kt_config c = {{0}};
        long rest = idx;
        /* The last parameter varies fastest, like nested loops written in order. */
        for (int i = f->n_params - 1; i >= 0; i--) {
            c.v[i] = f->params[i].values[rest % f->params[i].n_values];
            rest /= f->params[i].n_values;
        }
        if (f->check_config(&c, arch, why, sizeof why) || (p && !f->config_fits(&c, p))) bad++;
        else list[n++] = c;
    }
    if (rejected) *rejected = bad;
    *out = list;
    return n;
}

int kt_space_sample(const kt_family *f, kt_config *list, int n, int budget, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(kt_rng_next(&rng) % (uint64_t)(i + 1));
        kt_config t = list[i];
        list[i] = list[j];
        list[j] = t;
    }
    for (int i = 0; i < n; i++)
        if (!memcmp(&list[i], &f->default_config, sizeof(kt_config))) {
            kt_config t = list[0];
            list[0] = list[i];
            list[i] = t;
            break;
        }
    return budget < n ? budget : n;
}

struct kt_compile_pool {
    const kt_family *family;
    const kt_config *list;
    int n, arch, n_threads, next;
    kt_cubin *cubins;
    char **errors;
    int *done; /* 0 pending, 1 compiled, -1 failed */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_t threads[64];
};

static void *compile_worker(void *arg) {
    kt_compile_pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        int i = pool->next < pool->n ? pool->next++ : -1;
        pthread_mutex_unlock(&pool->lock);
        if (i < 0) return NULL;
        kt_cubin c;
        int rc = kt_compile(pool->family, &pool->list[i], pool->arch, &c);
        char *err = rc ? strdup(kt_error()) : NULL;
        pthread_mutex_lock(&pool->lock);
        pool->cubins[i] = c;
        pool->errors[i] = err;
        pool->done[i] = rc ? -1 : 1;
        pthread_cond_broadcast(&pool->changed);
        pthread_mutex_unlock(&pool->lock);
    }
}

kt_compile_pool *kt_compile_pool_start(const kt_family *f, const kt_config *list, int n, int arch, int threads) {
    kt_compile_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->family = f;
    pool->list = list;
    pool->n = n;
    pool->arch = arch;
    pool->cubins = calloc((size_t)n + 1, sizeof *pool->cubins);
    pool->errors = calloc((size_t)n + 1, sizeof *pool->errors);
    pool->done = calloc((size_t)n + 1, sizeof *pool->done);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->changed, NULL);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++)
        if (pthread_create(&pool->threads[pool->n_threads], NULL, compile_worker, pool) == 0) pool->n_threads++;
    return pool;
}

const kt_cubin *kt_compile_pool_wait(kt_compile_pool *pool, int i, const char **error) {
    pthread_mutex_lock(&pool->lock);
    while (!pool->done[i]) pthread_cond_wait(&pool->changed, &pool->lock);
    int ok = pool->done[i] == 1;
    pthread_mutex_unlock(&pool->lock);
    if (error) *error = ok ? NULL : pool->errors[i];
    return ok ? &pool->cubins[i] : NULL;
}

void kt_compile_pool_free(kt_compile_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->next = pool->n; /* workers stop after the item they hold */
    pthread_mutex_unlock(&pool->lock);
    for (int t = 0; t < pool->n_threads; t++) pthread_join(pool->threads[t], NULL);
    for (int i = 0; i < pool->n; i++) {
        kt_cubin_free(&pool->cubins[i]);
        free(pool->errors[i]);
    }
    free(pool->cubins);
    free(pool->errors);
    free(pool->done);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->changed);
    free(pool);
}
