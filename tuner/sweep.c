/* sweep.c — the sweep driver behind `kt tune`. This process never touches CUDA: its
 * search strategy (search.c) chooses the (variant, shape, M) units round by round; each
 * variant is compiled once (the parallel NVRTC pool, pipelined with measuring: a unit whose
 * variant is compiled goes before one still compiling); units go to one worker process per
 * GPU (worker.c) as each gets idle, and every answer is recorded as it arrives and handed
 * back to the search. A unit whose worker dies, loses its context or outlives the watchdog
 * is recorded as a launch error and the worker restarted. Once a (shape, M) has all its
 * results its finalists are re-timed interleaved on one GPU and its winner chosen by db.c's
 * rule. Units already in the database are not measured again, their results read back, so
 * a killed sweep resumes. --shard i/n keeps every n-th (shape, M) of the sorted list (fast:
 * every n-th shape, whole, since its Ms learn from each other), so machines split a sweep
 * and `kt db merge` joins their databases. */
#include "search.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_PROBLEMS 1024     /* 32 shapes x 32 M values */
#define FINALISTS 3           /* variants re-timed per problem */
#define START_TIMEOUT_S 120.0 /* a worker's CUDA start-up; far above what a healthy GPU needs */
#define COMPILE_POLL_S 0.005  /* how often an idle worker looks for a newly compiled unit */
#define IDLE (-1)
#define RETIMING (-2)

/* One (shape, M) of this shard. */
typedef struct problem {
    kt_problem p;
    char shape[128];
    uint64_t seed;
    int group; /* units of a lower group go first: fast, its shape's rank in this shard; else 0 */
} problem;

/* A config to measure on a problem: indices into sweep.problems and sweep.space, and the
 * search's choice number and phase it answers. */
typedef struct unit {
    int problem, k, choice, phase;
} unit;

/* One GPU's worker and the job it is on. */
typedef struct slot {
    int ordinal;
    kt_worker *w;       /* NULL once it could not be restarted */
    int job;            /* IDLE, RETIMING, or the unit it measures */
    int problem;        /* of a re-timing */
    kt_worker_job sent; /* the re-timing: its configs, in the order of the answer */
    double since;
    unsigned char *loaded; /* by compile pool item: the worker holds its module (no image to send) */
} slot;

typedef struct sweep {
    const kt_sweep_options *o;
    const kt_family *f;
    kt_sweep_report *rep;
    kt_db *db;
    long long device_id, run_id;
    char source_hash[17];
    int arch;
    double watchdog_s;
    kt_cubin reference;
    int have_reference;
    kt_config *space; /* every config of the space (random, fast: in one seeded shuffle) */
    char (*space_ids)[17];
    int n_space;
    int *variant_of; /* space index -> compile pool item, -1 until a unit needs it */
    kt_compile_pool *pool;
    kt_search *search;
    problem problems[MAX_PROBLEMS];
    int n_problems;
    unit *units; /* every unit of this run, in the order chosen */
    int n_units;
    size_t cap_units;
    int *todo; /* units waiting for a worker, by group, then in the order chosen */
    int n_todo;
    size_t cap_todo;
    int compiling;           /* a worker is idle only because every waiting unit still compiles */
    int queue[MAX_PROBLEMS]; /* problems waiting for their re-timing */
    int n_queue;
    slot slots[MAX_WORKERS];
    int n_slots;
    long done, total, done_before;
    double start;
    int tty;          /* stderr is a terminal: one progress line redrawn in place */
    double last_line; /* otherwise: when the last progress line was written */
    double period;    /* and how often one is */
    long failures;    /* units of this run that did not measure ok */
    int settled;      /* problems whose winner is chosen */
} sweep;

#define PROGRESS_LOG_S 10.0 /* a log's progress period (KT_PROGRESS_S overrides) */

static double progress_period(void) {
    const char *e = getenv("KT_PROGRESS_S");
    char *end;
    double v = e ? strtod(e, &end) : 0;
    return e && end != e && v >= 0 ? v : PROGRESS_LOG_S;
}

/* Writes where the sweep stands: units done of those chosen so far, problems settled,
 * variants compiled, units measured and how many failed, what it is on, and the ETA. A
 * terminal's line is redrawn in place (last: ended); a log's is a whole line. */
static void progress_line(sweep *s, const char *on, double eta, int last) {
    int items, compiled, failed;
    kt_compile_pool_counts(s->pool, &items, &compiled, &failed);
    fprintf(stderr,
            "%s[%ld/%ld] problems %d/%d, compiled %d/%d (%d failed), measured %ld (%ld failed); %s; "
            "%.1fs elapsed, ETA %.1fs%s",
            s->tty ? "\r" : "", s->done, s->total, s->settled, s->n_problems, compiled, items, failed, s->rep->measured,
            s->failures, on, kt_now() - s->start, eta, s->tty ? (last ? "\033[K\n" : "\033[K") : "\n");
}

/* Counts unit u's result; shows the progress line on a terminal each time, in a log every
 * period (--quiet: never). */
static void progress(sweep *s, const problem *pb, const kt_measurement *m) {
    s->done++;
    s->failures += m->status != KT_OK;
    if (s->o->quiet) return;
    double el = kt_now() - s->start;
    long now = s->done - s->done_before;
    if (!s->tty && el - s->last_line < s->period) return;
    s->last_line = el;
    char on[192];
    snprintf(on, sizeof on, "%s %s=%ld", pb->shape, s->f->m_name, pb->p.m);
    progress_line(s, on, now ? el / now * (s->total - s->done) : 0, 0);
}

/* A line of its own under the progress line (faults, restarts). */
__attribute__((format(printf, 2, 3))) static void note(const sweep *s, const char *fmt, ...) {
    if (s->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%skt: ", s->tty ? "\n" : "");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---------------------------------------------------------------- workers */

/* Stops the worker of sl after a failure (error set) and says so in the error. */
static int drop_worker(slot *sl, const char *what) {
    char why[128], msg[1024];
    snprintf(msg, sizeof msg, "%s", kt_error());
    kt_worker_stop(sl->w, why, sizeof why);
    sl->w = NULL;
    return kt_fail("GPU %d: %s: %s (worker %s)", sl->ordinal, what, msg, why);
}

/* Loads the family's GPU reference into the worker of sl (its setups compute with it). */
static int load_reference(sweep *s, slot *sl) {
    kt_worker_job job = {.kind = KT_JOB_REFERENCE, .n = 1, .config = {s->f->default_config}, .cubin = {&s->reference}};
    kt_worker_result r;
    int rc = kt_worker_send(sl->w, &job) ? -1 : kt_worker_receive(sl->w, START_TIMEOUT_S, &r);
    if (rc > 0)
        kt_fail("no answer in %g s", START_TIMEOUT_S);
    else if (!rc && r.outcome != KT_WORKER_DONE)
        rc = kt_fail("%s", r.error);
    return rc ? drop_worker(sl, "loading the reference module") : 0;
}

/* Starts the worker of slot sl (with the reference, once there is one); h gets its hello. */
static int start_worker(sweep *s, slot *sl, kt_worker_hello *h) {
    sl->job = IDLE;
    if (sl->loaded) memset(sl->loaded, 0, (size_t)s->n_space);
    if (!(sl->w = kt_worker_spawn(s->f, sl->ordinal))) return -1;
    if (kt_worker_hello_wait(sl->w, START_TIMEOUT_S, h)) return drop_worker(sl, "starting");
    if (!h->ok) { /* it said why itself */
        kt_worker_stop(sl->w, NULL, 0);
        sl->w = NULL;
        return kt_fail("GPU %d: %s", sl->ordinal, h->error);
    }
    return s->have_reference ? load_reference(s, sl) : 0;
}

/* Replaces the worker of a slot after a fault; a slot that cannot restart is dropped.
 * Right after a worker is killed in a hung kernel the driver may still be tearing its
 * context down, and a new process's cuInit fails for a while (seen on an H200): back off
 * and retry for about 20 s before giving the GPU up. */
static void restart_worker(sweep *s, slot *sl) {
    kt_worker_hello h;
    double wait_s = 0.25;
    for (int attempt = 0; start_worker(s, sl, &h); attempt++) {
        if (attempt == 7) {
            note(s, "%s; measuring without it", kt_error());
            return;
        }
        note(s, "GPU %d: restart failed (%s); retrying in %.2g s", sl->ordinal, kt_error(), wait_s);
        struct timespec ts = {(time_t)wait_s, (long)((wait_s - (time_t)wait_s) * 1e9)};
        nanosleep(&ts, NULL);
        if (wait_s < 4) wait_s *= 2;
    }
}

static int idle_workers_left(const sweep *s) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].w) return 1;
    return 0;
}

/* Worker 0 says what the GPU is and how many the host has; one worker per GPU like it
 * follows (a GPU of another kind would mix its times in: it is left out). */
static int start_workers(sweep *s) {
    kt_worker_hello h0, h;
    s->slots[0].ordinal = 0;
    if (start_worker(s, &s->slots[0], &h0)) return -1;
    s->rep->device = h0.info;
    s->n_slots = 1;
    int want = h0.gpu_count;
    if (s->o->max_workers > 0 && want > s->o->max_workers) want = s->o->max_workers;
    if (want > MAX_WORKERS) want = MAX_WORKERS;
    s->arch = h0.info.cc_major * 10 + h0.info.cc_minor;
    if (!kt_arch_name(s->arch))
        return kt_fail("no JIT target for this GPU (sm_%d): kt's kernels need sm_90 or newer", s->arch);
    if (s->f->launch_reference && s->f->gpu_reference_above > 0) {
        /* The reference kernel lives in every variant's module; the default config's serves. */
        if (kt_compile(s->f, &s->f->default_config, s->arch, &s->reference)) return -1;
        s->have_reference = 1;
        if (load_reference(s, &s->slots[0])) return -1;
    }
    for (int i = 1; i < want; i++) {
        slot *sl = &s->slots[s->n_slots];
        sl->ordinal = i;
        if (start_worker(s, sl, &h)) {
            note(s, "%s; measuring without it", kt_error());
            continue;
        }
        if (strcmp(h.info.name, h0.info.name) || h.info.cc_major != h0.info.cc_major ||
            h.info.cc_minor != h0.info.cc_minor || h.info.sm_count != h0.info.sm_count) {
            note(s, "GPU %d is a %s, unlike GPU 0: measuring without it", i, h.info.name);
            kt_worker_stop(sl->w, NULL, 0);
            sl->w = NULL;
            continue;
        }
        s->n_slots++;
    }
    s->rep->workers = s->n_slots;
    return 0;
}

/* --------------------------------------------------------------- the plan */

static int problem_cmp(const problem *x, const problem *y) {
    int c = strcmp(x->shape, y->shape);
    return c ? c : (x->p.m > y->p.m) - (x->p.m < y->p.m);
}

/* Whether all[j] is the first problem of its shape in all[]. */
static int first_of_shape(const problem *all, int j) {
    for (int i = 0; i < j; i++)
        if (!strcmp(all[i].shape, all[j].shape)) return 0;
    return 1;
}

/* The (shape, M) problems of the request, each once, those of this shard only. A problem
 * belongs to shard (its rank in the list sorted by shape and M) mod n; under fast, whose
 * Ms of a shape learn from each other, a whole shape does: (its rank among the sorted
 * distinct shapes) mod n. Every shard of one command agrees whatever order it lists shapes
 * in. Under fast the units of a shape go before those of the shapes after it (one GPU
 * finishes shape by shape; more GPUs take later shapes while a shape waits for a round). */
static int plan_problems(sweep *s) {
    const kt_sweep_options *o = s->o;
    const kt_strategy *st = kt_strategy_find(o->strategy);
    int fast = st && st->anchored, groups = 0;
    problem *all = malloc(sizeof *all * MAX_PROBLEMS);
    int n_all = 0;
    if (!all) return kt_fail("out of memory");
    for (int i = 0; i < o->n_shapes; i++)
        for (int j = 0; j < o->n_ms; j++) {
            problem pb = {.p = o->shapes[i]};
            pb.p.m = o->ms[j];
            kt_format_shape(s->f, &pb.p, pb.shape, sizeof pb.shape);
            int seen = 0;
            for (int k = 0; k < n_all && !seen; k++) seen = !problem_cmp(&all[k], &pb);
            if (!seen && n_all < MAX_PROBLEMS) all[n_all++] = pb;
        }
    int shards = o->shard_count > 1 ? o->shard_count : 1;
    for (int k = 0; k < n_all; k++) {
        int rank = 0;
        for (int j = 0; j < n_all; j++)
            rank += fast ? first_of_shape(all, j) && strcmp(all[j].shape, all[k].shape) < 0
                         : problem_cmp(&all[j], &all[k]) < 0;
        if (rank % shards != (shards > 1 ? o->shard_index : 0)) continue;
        problem *pb = &s->problems[s->n_problems];
        *pb = all[k];
        pb->seed = kt_problem_seed(o->seed, pb->shape, pb->p.m);
        pb->group = fast ? groups : 0;
        for (int i = 0; i < s->n_problems; i++)
            if (!strcmp(s->problems[i].shape, pb->shape)) pb->group = s->problems[i].group;
        if (fast && pb->group == groups) groups++;
        s->n_problems++;
    }
    free(all);
    return 0;
}

/* The search chose config k for problem pi: its result when the database has it already,
 * else a unit waiting for a worker (its variant queued for compiling: ahead of the first
 * phase's when a later phase chose it, since that phase's rounds wait on it). */
static int choose(void *ctx, int pi, int k, int choice, int phase, kt_status *status, double *median_us) {
    sweep *s = ctx;
    const problem *pb = &s->problems[pi];
    int have = kt_db_find_measurement(s->db, s->device_id, s->f->name, s->source_hash, s->space_ids[k], pb->shape,
                                      pb->p.m, status, median_us);
    if (have > 0) {
        s->rep->already++;
        s->done++;
        s->total++;
    }
    if (have) return have;
    if (s->variant_of[k] < 0 && (s->variant_of[k] = kt_compile_pool_add(s->pool, &s->space[k], phase > 1)) < 0)
        return -1;
    unit *units = kt_grow(s->units, &s->cap_units, (size_t)s->n_units, sizeof *units);
    if (units) s->units = units;
    int *todo = units ? kt_grow(s->todo, &s->cap_todo, (size_t)s->n_todo, sizeof *todo) : NULL;
    if (!todo) return -1;
    s->todo = todo;
    s->units[s->n_units] = (unit){pi, k, choice, phase};
    int at = s->n_todo++;
    for (; at > 0 && s->problems[s->units[s->todo[at - 1]].problem].group > pb->group; at--)
        s->todo[at] = s->todo[at - 1];
    s->todo[at] = s->n_units++;
    s->total++;
    return 0;
}

/* The search has every result of problem pi: queue its re-timing. */
static int settled(void *ctx, int pi) {
    sweep *s = ctx;
    s->queue[s->n_queue++] = pi;
    return 0;
}

/* ------------------------------------------------------------ recording */

/* The measurement row of a unit, before its outcome. */
static kt_measurement row_of(const sweep *s, const unit *u) {
    const problem *pb = &s->problems[u->problem];
    const kt_cubin *cubin = kt_compile_pool_wait(s->pool, s->variant_of[u->k], NULL); /* NULL: did not compile */
    kt_measurement m = {.run_id = s->run_id, .device_id = s->device_id, .family = s->f->name, .m = pb->p.m};
    snprintf(m.source_hash, sizeof m.source_hash, "%s", s->source_hash);
    memcpy(m.variant_id, s->space_ids[u->k], sizeof m.variant_id);
    kt_format_config(s->f, &s->space[u->k], m.config, sizeof m.config);
    snprintf(m.shape, sizeof m.shape, "%s", pb->shape);
    m.rel_err = m.median_us = m.min_us = m.max_us = NAN;
    if (cubin) {
        m.registers = cubin->report.registers;
        m.spill_bytes = cubin->report.spill_bytes;
        m.compile_ms = cubin->compile_ms;
    }
    return m;
}

/* Another process sharing the database (a sweep per GPU or shard) committed unit u first:
 * the search gets that row's result, so every process makes the same choices. Returns 1
 * when it had, 0 when not, -1 on error. */
static int committed_elsewhere(sweep *s, unit u) {
    const problem *pb = &s->problems[u.problem];
    kt_status status;
    double median_us;
    int have = kt_db_find_measurement(s->db, s->device_id, s->f->name, s->source_hash, s->space_ids[u.k], pb->shape,
                                      pb->p.m, &status, &median_us);
    if (have <= 0) return have;
    s->rep->already++;
    kt_measurement theirs = {.status = status}; /* counted as done, as its row says */
    progress(s, pb, &theirs);
    return kt_search_answer(s->search, u.problem, u.choice, status, median_us) ? -1 : 1;
}

/* Commits unit u's row and hands its result to the search (which may choose more units:
 * u is a copy, the units array may move); when another process committed the unit first,
 * its row stays and decides. */
static int record(sweep *s, unit u, const kt_measurement *m) {
    int existed = kt_db_add_measurement(s->db, m);
    if (existed) return existed < 0 || committed_elsewhere(s, u) < 0 ? -1 : 0;
    s->rep->measured++;
    s->rep->by_phase[u.phase - 1]++;
    progress(s, &s->problems[u.problem], m);
    return kt_search_answer(s->search, u.problem, u.choice, m->status, m->median_us);
}

/* Records unit u as a fault (how its worker ended, or the watchdog). */
static int record_fault(sweep *s, unit u, const char *why) {
    kt_measurement m = row_of(s, &u);
    m.status = KT_LAUNCH_ERROR;
    snprintf(m.error, sizeof m.error, "%s", why);
    s->rep->faults++;
    note(s, "%s: %s", m.config, why);
    return record(s, u, &m);
}

static int update_winner(sweep *s, const problem *pb) {
    s->settled++;
    return kt_db_update_winner(s->db, s->device_id, s->f->name, s->source_hash, pb->shape, pb->p.m);
}

/* -------------------------------------------------------------- dispatch */

/* Finds the cubin of a finalist: compiled by this run's pool, else through the JIT cache. */
static const kt_cubin *finalist_cubin(sweep *s, int space_index, kt_cubin *own) {
    int v = s->variant_of[space_index];
    if (v >= 0) return kt_compile_pool_wait(s->pool, v, NULL);
    return kt_compile(s->f, &s->space[space_index], s->arch, own) ? NULL : own;
}

/* Starts the re-timing of a measured problem's finalists on sl, or, when there is nothing
 * to re-time (one finalist, or re-timed by an earlier run), updates its winner now.
 * Finalists may come from earlier runs, of another random sample too: they are looked
 * up in the whole space. Returns 1 when sl got the job, 0 when not (-1 on error). */
static int start_retime(sweep *s, slot *sl, int problem_index) {
    problem *pb = &s->problems[problem_index];
    char ids[FINALISTS][17];
    int retimed = 0;
    int n =
        kt_db_finalists(s->db, s->device_id, s->f->name, s->source_hash, pb->shape, pb->p.m, FINALISTS, ids, &retimed);
    if (n < 0) return -1;
    kt_worker_job job = {.kind = KT_JOB_RETIME, .problem = pb->p, .seed = pb->seed};
    kt_cubin own[FINALISTS];
    memset(own, 0, sizeof own);
    for (int i = 0; i < n && n > 1 && !retimed; i++)
        for (int k = 0; k < s->n_space; k++) {
            if (strcmp(s->space_ids[k], ids[i])) continue;
            const kt_cubin *c = finalist_cubin(s, k, &own[job.n]);
            if (c) {
                job.config[job.n] = s->space[k];
                job.loaded[job.n] = s->variant_of[k] >= 0 && sl->loaded[s->variant_of[k]];
                job.cubin[job.n++] = c;
            }
            break;
        }
    /* Only the re-timed compete, so a finalist left out (no longer in the space, or not
     * compiling) would lose unheard: then there is no re-timing. */
    if (n > 1 && !retimed && job.n < n)
        note(s, "%s M=%ld: %d of %d finalists cannot be compiled or found in the space: not re-timed", pb->shape,
             pb->p.m, n - job.n, n);
    int given = 0, requeued = 0;
    if (job.n == n && n > 1 && !kt_worker_send(sl->w, &job)) {
        sl->job = RETIMING;
        sl->problem = problem_index;
        sl->sent = job;
        for (int i = 0; i < job.n; i++) sl->sent.cubin[i] = NULL; /* may be own[], freed below */
        sl->since = kt_now();
        given = 1;
    } else if (job.n == n && n > 1) { /* it died idle, so not of this job: a new worker takes it */
        char why[128];
        kt_worker_stop(sl->w, why, sizeof why);
        note(s, "GPU %d: worker %s while idle; restarting it", sl->ordinal, why);
        restart_worker(s, sl);
        s->queue[s->n_queue++] = problem_index;
        requeued = 1;
    }
    for (int i = 0; i < FINALISTS; i++) kt_cubin_free(&own[i]);
    return given || requeued ? given : update_winner(s, pb);
}

static int busy(const sweep *s) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].w && s->slots[i].job != IDLE) return 1;
    return 0;
}

/* The position in todo of the first unit whose variant has finished compiling, or -1. */
static int first_compiled(sweep *s) {
    for (int i = 0; i < s->n_todo; i++)
        if (kt_compile_pool_ready(s->pool, s->variant_of[s->units[s->todo[i]].k])) return i;
    return -1;
}

static void todo_remove(sweep *s, int at) {
    memmove(s->todo + at, s->todo + at + 1, sizeof *s->todo * (size_t)(s->n_todo - at - 1));
    s->n_todo--;
}

/* Puts unit ui back at position at of todo (just removed from there: there is room). */
static void todo_insert(sweep *s, int at, int ui) {
    memmove(s->todo + at + 1, s->todo + at, sizeof *s->todo * (size_t)(s->n_todo - at));
    s->todo[at] = ui;
    s->n_todo++;
}

/* Gives sl its next job: a waiting re-timing first, else the first waiting unit whose
 * variant is compiled (when none is, sl stays idle a moment: s->compiling). Returns 1 when
 * it got one, 0 when there is none, -1 on error. */
static int dispatch(sweep *s, slot *sl) {
    while (s->n_queue) {
        int pi = s->queue[0];
        memmove(s->queue, s->queue + 1, sizeof *s->queue * (size_t)--s->n_queue);
        int rc = start_retime(s, sl, pi);
        if (rc || !sl->w) return rc;
    }
    while (s->n_todo) {
        int at = first_compiled(s);
        if (at < 0) {
            s->compiling = 1;
            return 0;
        }
        int ui = s->todo[at];
        unit u = s->units[ui];
        const problem *pb = &s->problems[u.problem];
        /* Not measured yet when it was chosen; a sweep sharing the database may have since. */
        todo_remove(s, at);
        int elsewhere = committed_elsewhere(s, u);
        if (elsewhere) {
            if (elsewhere < 0) return -1;
            continue;
        }
        todo_insert(s, at, ui);
        const char *err = NULL;
        int v = s->variant_of[u.k];
        const kt_cubin *cubin = kt_compile_pool_wait(s->pool, v, &err); /* compiled: no wait */
        kt_worker_job job = {.kind = KT_JOB_MEASURE,
                             .problem = pb->p,
                             .seed = pb->seed,
                             .n = 1,
                             .config = {s->space[u.k]},
                             .cubin = {cubin},
                             .loaded = {sl->loaded[v]}};
        /* A variant that spills to local memory, here or on the arch kt ships for, is refused
         * like one that does not build: winners must never spill (local memory traffic on
         * the hot path). */
        if (!cubin || cubin->report.spill_bytes > 0 || cubin->ship_spill_bytes != 0) {
            kt_measurement m = row_of(s, &u);
            m.status = KT_COMPILE_ERROR;
            if (cubin && cubin->report.spill_bytes > 0)
                snprintf(m.error, sizeof m.error, "ptxas spills %d bytes to local memory: refused",
                         cubin->report.spill_bytes);
            else if (cubin && cubin->ship_spill_bytes > 0)
                snprintf(m.error, sizeof m.error, "ptxas spills %d bytes to local memory on %s: refused",
                         cubin->ship_spill_bytes, kt_arch_name(KT_SHIP_ARCH));
            else if (cubin)
                snprintf(m.error, sizeof m.error, "does not build for %s: refused", kt_arch_name(KT_SHIP_ARCH));
            else
                snprintf(m.error, sizeof m.error, "%s", err ? err : "compile failed");
            todo_remove(s, at);
            if (record(s, u, &m)) return -1;
            continue;
        }
        if (kt_worker_send(sl->w, &job)) {
            /* It died idle, so not of this unit: restart it; the unit waits for a worker. */
            char why[128];
            kt_worker_stop(sl->w, why, sizeof why);
            note(s, "GPU %d: worker %s while idle; restarting it", sl->ordinal, why);
            restart_worker(s, sl);
            return 0;
        }
        todo_remove(s, at);
        sl->job = ui;
        sl->since = kt_now();
        return 1;
    }
    return s->n_queue ? dispatch(s, sl) : 0;
}

/* ---------------------------------------------------------------- answers */

static void add_busy(sweep *s, const kt_worker_result *r) {
    for (int k = 0; k < KT_BUSY_KINDS; k++) s->rep->busy_s[k] += r->busy_s[k];
    s->rep->setups += r->setups;
}

static int on_measured(sweep *s, slot *sl, const kt_worker_result *r) {
    unit u = s->units[sl->job];
    kt_measurement m = row_of(s, &u);
    add_busy(s, r);
    if (r->outcome == KT_WORKER_SETUP_FAILED) return kt_fail("GPU %d: %s", sl->ordinal, r->error);
    m.status = r->status;
    snprintf(m.error, sizeof m.error, "%s", r->error);
    if (r->status == KT_OK) {
        m.rel_err = r->rel_err;
        m.median_us = r->timing[0].median_us;
        m.min_us = r->timing[0].min_us;
        m.max_us = r->timing[0].max_us;
    } else if (r->status == KT_WRONG_RESULT) {
        m.rel_err = r->rel_err;
    }
    sl->job = IDLE;
    if (r->outcome == KT_WORKER_DONE) sl->loaded[s->variant_of[u.k]] = (unsigned char)r->kept;
    if (r->outcome == KT_WORKER_LOST) {
        s->rep->faults++;
        note(s, "%s: %s", m.config, r->error);
        kt_worker_stop(sl->w, NULL, 0);
        restart_worker(s, sl);
    }
    return record(s, u, &m);
}

static int on_retimed(sweep *s, slot *sl, const kt_worker_result *r) {
    const problem *pb = &s->problems[sl->problem];
    sl->job = IDLE;
    add_busy(s, r);
    if (r->outcome != KT_WORKER_DONE) {
        note(s, "re-timing %s: %s", pb->shape, r->error);
        if (r->outcome == KT_WORKER_LOST) {
            kt_worker_stop(sl->w, NULL, 0);
            restart_worker(s, sl);
        }
        return update_winner(s, pb);
    }
    kt_retime rt[KT_RETIME_MAX];
    for (int i = 0; i < sl->sent.n; i++) {
        rt[i] = (kt_retime){.rounds = r->timing[i].repeats,
                            .median_us = r->timing[i].median_us,
                            .min_us = r->timing[i].min_us,
                            .max_us = r->timing[i].max_us};
        kt_variant_id(s->f, &sl->sent.config[i], s->arch, rt[i].variant_id);
    }
    s->rep->retimed++;
    return kt_db_add_retimes(s->db, s->run_id, s->device_id, s->f->name, s->source_hash, pb->shape, pb->p.m, rt,
                             sl->sent.n) ||
                   update_winner(s, pb)
               ? -1
               : 0;
}

/* The worker of sl died (why) or outlived the watchdog: record the fault of its job,
 * then restart it. */
static int on_fault(sweep *s, slot *sl, const char *why) {
    int rc;
    if (sl->job == RETIMING) {
        note(s, "re-timing %s: %s", s->problems[sl->problem].shape, why);
        rc = update_winner(s, &s->problems[sl->problem]);
    } else {
        rc = record_fault(s, s->units[sl->job], why);
    }
    restart_worker(s, sl);
    return rc;
}

/* Waits for answers (or the watchdog) and handles them. */
static int collect(sweep *s) {
    struct pollfd fds[MAX_WORKERS];
    int who[MAX_WORKERS], n = 0;
    double now = kt_now(), wait_s = s->compiling ? COMPILE_POLL_S : s->watchdog_s;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->w || sl->job == IDLE) continue;
        fds[n] = (struct pollfd){.fd = kt_worker_fd(sl->w), .events = POLLIN};
        who[n++] = i;
        double left = sl->since + s->watchdog_s - now;
        if (left < wait_s) wait_s = left;
    }
    if (poll(fds, (nfds_t)n, wait_s > 0 ? (int)(wait_s * 1e3) + 1 : 0) < 0 && errno != EINTR)
        return kt_fail("poll: %s", strerror(errno));
    for (int k = 0; k < n; k++) {
        slot *sl = &s->slots[who[k]];
        char why[192];
        if (fds[k].revents) {
            kt_worker_result r;
            int got = kt_worker_receive(sl->w, 0, &r);
            if (got == 1) continue;
            if (got == 0 && (sl->job == RETIMING ? on_retimed(s, sl, &r) : on_measured(s, sl, &r))) return -1;
            if (got == 0) continue;
            char how[128];
            kt_worker_stop(sl->w, how, sizeof how);
            snprintf(why, sizeof why, "worker fault: %s", how);
        } else if (kt_now() - sl->since >= s->watchdog_s) {
            kt_worker_stop(sl->w, NULL, 0);
            snprintf(why, sizeof why, "watchdog: no answer in %g s", s->watchdog_s);
        } else {
            continue;
        }
        sl->w = NULL;
        if (on_fault(s, sl, why)) return -1;
    }
    return 0;
}

/* Runs the search to the end: keeps every worker busy, collects answers. */
static int run(sweep *s) {
    for (;;) {
        s->compiling = 0;
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].w && s->slots[i].job == IDLE && dispatch(s, &s->slots[i]) < 0) return -1;
        if (!busy(s)) {
            if (!s->n_todo && !s->n_queue) return 0;
            if (!idle_workers_left(s)) return kt_fail("no GPU worker left: every restart failed");
            if (!s->compiling) continue; /* a worker restarted: give it its job */
        }
        if (collect(s)) return -1; /* answers, the watchdog, or (compiling) a moment's wait */
    }
}

/* ---------------------------------------------------------------- entry */

static double watchdog_seconds(void) {
    const char *e = getenv("KT_WATCHDOG_S");
    char *end;
    double v = e ? strtod(e, &end) : 0;
    return e && end != e && v > 0 ? v : 20.0;
}

int kt_sweep(const kt_sweep_options *o, kt_sweep_report *report) {
    kt_sweep_report unused;
    if (o->family->n_stages) return kt_fail("%s is a pipeline: tune its stages' families", o->family->name);
    sweep *s = calloc(1, sizeof *s);
    if (!s) return kt_fail("out of memory");
    s->o = o;
    s->f = o->family;
    s->rep = report ? report : &unused;
    memset(s->rep, 0, sizeof *s->rep);
    s->watchdog_s = watchdog_seconds();
    s->start = kt_now();
    s->tty = isatty(STDERR_FILENO);
    s->period = progress_period();
    s->last_line = -s->period; /* a log gets its first line at once */
    kt_hex64(kt_family_source_hash(s->f), s->source_hash);
    char why[256];
    int rc = 0;
    for (int i = 0; i < o->n_shapes && !rc; i++)
        for (int j = 0; j < o->n_ms && !rc; j++) {
            kt_problem p = o->shapes[i];
            p.m = o->ms[j];
            if (s->f->check_problem(&p, why, sizeof why) || kt_check_problem_size(s->f, &p, why, sizeof why))
                rc = kt_fail("%s", why);
        }
    if (!rc && o->shard_count > 1 && (o->shard_index < 0 || o->shard_index >= o->shard_count))
        rc = kt_fail("shard %d/%d does not exist (0 <= i < n)", o->shard_index, o->shard_count);
    kt_db_device dev;
    if (!rc) rc = plan_problems(s) || start_workers(s);
    if (!rc) {
        kt_gpu_db_device(&s->rep->device, &dev);
        rc = kt_db_open(o->db_path, 0, &s->db) || kt_db_device_id(s->db, &dev, &s->device_id) ||
             kt_db_run_begin(s->db, s->device_id, o->commit ? o->commit : "unknown", o->cmdline ? o->cmdline : "",
                             &s->run_id);
    }
    if (!rc && (s->n_space = kt_space_enumerate(s->f, s->arch, NULL, o->where, &s->space, NULL)) < 0) rc = -1;
    /* Random and fast walk one seeded shuffle of the space, the same for every problem, so
     * the problems' samples overlap wherever the same configs fit: fewer variants to compile. */
    const kt_strategy *st = kt_strategy_find(o->strategy);
    if (!rc && !st) rc = kt_fail("no search strategy '%s'", o->strategy ? o->strategy : "");
    if (!rc && st->shuffled) kt_space_sample(s->f, s->space, s->n_space, s->n_space, o->seed);
    if (!rc && (!(s->space_ids = malloc(sizeof *s->space_ids * (size_t)(s->n_space + 1))) ||
                !(s->variant_of = malloc(sizeof *s->variant_of * (size_t)(s->n_space + 1)))))
        rc = kt_fail("out of memory");
    for (int i = 0; !rc && i < s->n_space; i++) {
        kt_variant_id(s->f, &s->space[i], s->arch, s->space_ids[i]);
        s->variant_of[i] = -1;
    }
    for (int i = 0; !rc && i < s->n_slots; i++)
        if (!(s->slots[i].loaded = calloc((size_t)s->n_space + 1, 1))) rc = kt_fail("out of memory");
    if (!rc && !(s->pool = kt_compile_pool_start(s->f, NULL, 0, s->arch, o->compile_threads)))
        rc = kt_fail("out of memory");
    kt_problem problems[MAX_PROBLEMS];
    for (int i = 0; i < s->n_problems; i++) problems[i] = s->problems[i].p;
    kt_search_host host = {s, choose, settled};
    if (!rc && !(s->search = kt_search_new(s->f, s->space, (const char(*)[17])s->space_ids, s->n_space, problems,
                                           s->n_problems, o, host, s->rep)))
        rc = -1;
    if (!rc) rc = kt_search_start(s->search);
    s->done_before = s->rep->already;
    if (!rc && !o->quiet)
        fprintf(stderr,
                "kt: %s: %d problems, %d units to measure on %d x %s%s, %ld already measured; %ld "
                "(config, shape, M) worth timing, %ld pruned as hopeless\n",
                s->f->name, s->n_problems, s->n_units, s->n_slots, s->rep->device.name,
                st->anchored ? " (phases 2 and 3 will add more)" : "", s->rep->already, s->rep->space, s->rep->pruned);
    double run_start = kt_now();
    if (!rc) rc = run(s);
    s->rep->worker_s = (kt_now() - run_start) * s->n_slots;
    if (!o->quiet && s->pool && s->n_problems) progress_line(s, rc ? "stopped" : "done", 0, 1);
    for (int i = 0; i < s->n_slots; i++) {
        kt_worker_stop(s->slots[i].w, NULL, 0);
        free(s->slots[i].loaded);
    }
    kt_compile_pool_free(s->pool);
    kt_cubin_free(&s->reference);
    kt_db_close(s->db);
    free(s->space);
    free(s->space_ids);
    kt_search_free(s->search);
    free(s->variant_of);
    free(s->units);
    free(s->todo);
    free(s);
    return rc ? -1 : 0;
}
