/* compile_pool.c — the parallel NVRTC compile pool of a sweep: threads compile variants
 * through the JIT cache while the sweep consumes them, and the pool takes new variants while
 * it runs (a search chooses them round by round). */
#include "tuner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One variant of the pool: its config, and once compiled its cubin or error. Items are
 * allocated one by one so the cubin pointers handed out stay valid as the pool grows. */
typedef struct pool_item {
    kt_config config;
    kt_cubin cubin;
    char *error;
    int done; /* 0 pending, 1 compiled, -1 failed */
} pool_item;

/* A FIFO of item indices waiting for a compile thread: queue[head..n). */
typedef struct pool_queue {
    int *at;
    int head, n;
    size_t cap;
} pool_queue;

struct kt_compile_pool {
    const kt_family *family;
    int arch, n_threads, closing;
    pool_item **items;
    int n;
    int compiled, failed; /* items done, and of those, failed */
    size_t cap;
    pool_queue urgent, normal; /* threads take urgent items first */
    pthread_mutex_t lock;
    pthread_cond_t work;    /* an item was queued, or the pool is closing */
    pthread_cond_t changed; /* an item finished */
    pthread_t threads[64];
};

static int queue_push(pool_queue *q, int i) {
    int *at = kt_grow(q->at, &q->cap, (size_t)q->n, sizeof *at);
    if (!at) return -1;
    q->at = at;
    q->at[q->n++] = i;
    return 0;
}

/* The next item to compile (urgent first), or -1 when none waits. Called locked. */
static int queue_pop(kt_compile_pool *pool) {
    pool_queue *q = pool->urgent.head < pool->urgent.n ? &pool->urgent : &pool->normal;
    return q->head < q->n ? q->at[q->head++] : -1;
}

static void *compile_worker(void *arg) {
    kt_compile_pool *pool = arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        int i = pool->closing ? -1 : queue_pop(pool);
        if (i < 0 && !pool->closing) {
            pthread_cond_wait(&pool->work, &pool->lock);
            continue;
        }
        if (i < 0) break;
        pool_item *item = pool->items[i]; /* the item stays put; the array may grow meanwhile */
        pthread_mutex_unlock(&pool->lock);
        kt_cubin c;
        int rc = kt_compile(pool->family, &item->config, pool->arch, &c);
        char *err = rc ? strdup(kt_error()) : NULL;
        if (!rc && pool->arch != KT_SHIP_ARCH && c.report.spill_bytes == 0) {
            /* ptxas allocates registers per arch: a variant can fit on the GPU measuring it and
             * spill on sm_120 (seen on the H200: a winner with 32 bytes of spills there). One
             * that spills here is refused already. */
            kt_cubin ship;
            c.ship_spill_bytes =
                kt_compile(pool->family, &item->config, KT_SHIP_ARCH, &ship) ? -1 : ship.report.spill_bytes;
            if (c.ship_spill_bytes >= 0) kt_cubin_free(&ship);
        }
        pthread_mutex_lock(&pool->lock);
        item->cubin = c;
        item->error = err;
        item->done = rc ? -1 : 1;
        pool->compiled++;
        pool->failed += rc != 0;
        pthread_cond_broadcast(&pool->changed);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

kt_compile_pool *kt_compile_pool_start(const kt_family *f, const kt_config *list, int n, int arch, int threads) {
    kt_compile_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->family = f;
    pool->arch = arch;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->changed, NULL);
    for (int i = 0; i < n; i++)
        if (kt_compile_pool_add(pool, &list[i], 0) < 0) {
            kt_compile_pool_free(pool);
            return NULL;
        }
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++)
        if (pthread_create(&pool->threads[pool->n_threads], NULL, compile_worker, pool) == 0) pool->n_threads++;
    return pool;
}

int kt_compile_pool_add(kt_compile_pool *pool, const kt_config *c, int urgent) {
    pool_item *item = calloc(1, sizeof *item);
    if (!item) return kt_fail("out of memory");
    item->config = *c;
    pthread_mutex_lock(&pool->lock);
    int i = pool->n;
    pool_item **items = kt_grow(pool->items, &pool->cap, (size_t)pool->n, sizeof *items);
    if (items) pool->items = items;
    if (!items || queue_push(urgent ? &pool->urgent : &pool->normal, i)) {
        pthread_mutex_unlock(&pool->lock);
        free(item);
        return -1;
    }
    pool->items[pool->n++] = item;
    pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    return i;
}

void kt_compile_pool_counts(kt_compile_pool *pool, int *items, int *compiled, int *failed) {
    pthread_mutex_lock(&pool->lock);
    *items = pool->n;
    *compiled = pool->compiled;
    *failed = pool->failed;
    pthread_mutex_unlock(&pool->lock);
}

int kt_compile_pool_ready(kt_compile_pool *pool, int i) {
    pthread_mutex_lock(&pool->lock);
    int ready = pool->items[i]->done != 0;
    pthread_mutex_unlock(&pool->lock);
    return ready;
}

const kt_cubin *kt_compile_pool_wait(kt_compile_pool *pool, int i, const char **error) {
    pthread_mutex_lock(&pool->lock);
    pool_item *item = pool->items[i];
    while (!item->done) pthread_cond_wait(&pool->changed, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    if (error) *error = item->done == 1 ? NULL : item->error;
    return item->done == 1 ? &item->cubin : NULL;
}

void kt_compile_pool_free(kt_compile_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->closing = 1; /* threads stop after the item they hold */
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (int t = 0; t < pool->n_threads; t++) pthread_join(pool->threads[t], NULL);
    for (int i = 0; i < pool->n; i++) {
        kt_cubin_free(&pool->items[i]->cubin);
        free(pool->items[i]->error);
        free(pool->items[i]);
    }
    free(pool->items);
    free(pool->urgent.at);
    free(pool->normal.at);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->changed);
    free(pool);
}
