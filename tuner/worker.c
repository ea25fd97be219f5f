/* worker.c — the measuring worker processes of a sweep. A worker is a forked child that
 * owns one GPU and serves jobs from the sweep over a socket pair: set up a problem, verify
 * and time one variant, or re-time a few interleaved. A variant that faults poisons only
 * the worker's CUDA context and a hanging one only the worker, so the sweep records it
 * and starts a new worker. The parent side (spawn, send, receive, stop) is here too.
 * With KT_FAKE_GPU=1 the worker never touches CUDA: fake_gpu.c answers its jobs. */
#include "fake_gpu.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Problems a worker keeps set up, while their device memory stays within a quarter of the
 * GPU's: all of the 5 x 18 target sweep (~20 GB by the tensors' sizes). With 24, fewer than
 * its 35 anchors, a cold sweep (units in the order their compiles finish) set problems up
 * again and again: 17.3 s of setup on the H200 (run I); with all held, 7.3 s, each of its 90
 * problems set up once (run K). */
#define WORKER_SETUPS 128

struct kt_worker {
    pid_t pid;
    int fd;
};

/* On the wire a job is this head, then per variant a variant_head and its cubin image.
 * Both ends are the same binary, so the structs travel as they are in memory. */
typedef struct job_head {
    kt_job_kind kind;
    int n;
    kt_problem problem;
    uint64_t seed;
} job_head;

typedef struct variant_head {
    kt_config config;
    char variant_id[17];
    uint64_t size;
} variant_head;

/* ------------------------------------------------------------- transport */

/* Writes all of buf; MSG_NOSIGNAL turns a vanished peer into EPIPE instead of SIGPIPE. */
static int send_all(int fd, const void *buf, size_t n) {
    for (const char *p = buf; n;) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads exactly n bytes; -1 on end of stream or error. */
static int recv_all(int fd, void *buf, size_t n) {
    for (char *p = buf; n;) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 1 when fd is readable (or closed) within timeout_s, 0 if not. */
static int readable(int fd, double timeout_s) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double end = kt_now() + timeout_s;
    for (;;) {
        double left = end - kt_now();
        int r = poll(&p, 1, left > 0 ? (int)(left * 1e3 + 1) : 0);
        if (r > 0) return 1;
        if (r == 0 && kt_now() >= end) return 0;
        if (r < 0 && errno != EINTR) return 1; /* let the read report it */
    }
}

/* ------------------------------------------------------------ the child */

/* A problem set up on the GPU (inputs, outputs, reference) for the jobs that need it. */
typedef struct problem_setup {
    kt_bench *bench;
    kt_problem problem;
    uint64_t seed;
    long used; /* when a job last used it (a job count): the least recent goes first */
} problem_setup;

/* What one worker holds between jobs: the problems it has set up, each once for all its jobs
 * (a sweep's search moves between a shape's Ms round by round: setting a problem up again
 * on each move would cost inputs, uploads and the reference every time), and the modules
 * it has loaded (a sweep measures each variant at many Ms: it loads once). */
typedef struct worker_state {
    const kt_family *f;
    kt_fake_gpu *fake; /* KT_FAKE_GPU=1: answers the jobs in place of the GPU */
    problem_setup setups[WORKER_SETUPS];
    size_t setup_budget; /* device bytes the setups may hold (0: not known yet) */
    long jobs;
    kt_bench *bench; /* the current job's */
    kt_module reference;
    int have_reference;
    kt_module modules[KT_WORKER_MODULES];
    char module_ids[KT_WORKER_MODULES][17];
    int n_modules;
} worker_state;

/* A job as received: the head, and each variant's config, id and image. */
typedef struct job {
    job_head head;
    variant_head v[KT_RETIME_MAX];
    void *image[KT_RETIME_MAX];
} job;

static void job_free(job *j) {
    for (int i = 0; i < j->head.n; i++) free(j->image[i]);
}

static int job_read(int fd, job *j) {
    memset(j, 0, sizeof *j);
    if (recv_all(fd, &j->head, sizeof j->head) || j->head.n < 0 || j->head.n > KT_RETIME_MAX) return -1;
    for (int i = 0; i < j->head.n; i++) {
        if (recv_all(fd, &j->v[i], sizeof j->v[i]) || j->v[i].size > (1u << 30) ||
            !(j->image[i] = malloc(j->v[i].size ? j->v[i].size : 1)) || recv_all(fd, j->image[i], j->v[i].size))
            return -1;
    }
    return 0;
}

/* Variant i of a job as the cubin kt_module_load takes. */
static kt_cubin job_cubin(const job *j, int i) {
    kt_cubin c = {.image = j->image[i], .size = j->v[i].size};
    memcpy(c.variant_id, j->v[i].variant_id, sizeof c.variant_id);
    return c;
}

/* The module of job variant i: the one this worker loaded before, else loaded from the
 * job's image and kept while there is room (*kept says so; else the caller unloads it
 * from spare). NULL with the error set when it cannot be loaded. */
static kt_module *module_of(worker_state *s, const job *j, int i, kt_module *spare, int *kept) {
    for (int k = 0; k < s->n_modules; k++)
        if (!strcmp(s->module_ids[k], j->v[i].variant_id)) return *kept = 1, &s->modules[k];
    *kept = 0;
    if (!j->v[i].size) {
        kt_fail("variant %s: no image sent and no module loaded before", j->v[i].variant_id);
        return NULL;
    }
    int keep = s->n_modules < KT_WORKER_MODULES;
    kt_module *m = keep ? &s->modules[s->n_modules] : spare;
    kt_cubin cubin = job_cubin(j, i);
    if (kt_module_load(s->f, &j->v[i].config, &cubin, m)) return NULL;
    if (keep) memcpy(s->module_ids[s->n_modules++], j->v[i].variant_id, 17);
    *kept = keep;
    return m;
}

/* Frees the least recently used setups other than keep while all of them hold more device
 * memory than the budget (a quarter of the GPU's, taken at the first setup). */
static void evict_over_budget(worker_state *s, const problem_setup *keep) {
    if (!s->setup_budget)
        s->setup_budget = kt_gpu_current()->mem_bytes ? kt_gpu_current()->mem_bytes / 4 : (size_t)4 << 30;
    for (;;) {
        size_t held = 0;
        problem_setup *lru = NULL;
        for (int i = 0; i < WORKER_SETUPS; i++) {
            problem_setup *p = &s->setups[i];
            if (!p->bench) continue;
            held += kt_bench_device_bytes(p->bench);
            if (p != keep && (!lru || p->used < lru->used)) lru = p;
        }
        if (held <= s->setup_budget || !lru) return;
        kt_bench_free(lru->bench);
        *lru = (problem_setup){0};
    }
}

/* Makes the job's problem current (s->bench): one set up before, else set up now in place
 * of the least recently used. When the GPU's memory is short, every other setup is freed
 * and it is tried once more. */
static int setup(worker_state *s, const job *j, kt_worker_result *r) {
    problem_setup *slot = &s->setups[0];
    s->jobs++;
    for (int i = 0; i < WORKER_SETUPS; i++) {
        problem_setup *p = &s->setups[i];
        if (p->bench && !memcmp(&p->problem, &j->head.problem, sizeof p->problem) && p->seed == j->head.seed) {
            p->used = s->jobs;
            s->bench = p->bench;
            return 0;
        }
        if (p->used < slot->used) slot = p;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        kt_bench_free(slot->bench);
        *slot = (problem_setup){.problem = j->head.problem, .seed = j->head.seed, .used = s->jobs};
        r->setups++;
        if (!kt_bench_setup(s->f, &j->head.problem, j->head.seed, s->have_reference ? &s->reference : NULL,
                            &slot->bench)) {
            s->bench = slot->bench;
            evict_over_budget(s, slot);
            return 0;
        }
        char why[512];
        snprintf(why, sizeof why, "%s", kt_error());
        kt_bench_free(slot->bench);
        slot->bench = NULL;
        int freed = 0;
        for (int i = 0; i < WORKER_SETUPS; i++) {
            freed += s->setups[i].bench != NULL;
            kt_bench_free(s->setups[i].bench);
            s->setups[i] = (problem_setup){0};
        }
        kt_fail("%s", why);
        if (!freed) break;
    }
    r->outcome = KT_WORKER_SETUP_FAILED;
    snprintf(r->error, sizeof r->error, "problem setup: %s", kt_error());
    return -1;
}

/* Charges the seconds since *since to kind and restarts the clock. */
static void busy(kt_worker_result *r, int kind, double *since) {
    double now = kt_now();
    r->busy_s[kind] += now - *since;
    *since = now;
}

static void measure(worker_state *s, const job *j, kt_worker_result *r) {
    if (s->fake) {
        kt_fake_gpu_measure(s->fake, &j->head.problem, &j->v[0].config, j->v[0].variant_id, r);
        return;
    }
    kt_timing *t = &r->timing[0];
    double since = kt_now();
    if (setup(s, j, r)) return;
    busy(r, KT_BUSY_SETUP, &since);
    kt_module spare;
    kt_module *mod = module_of(s, j, 0, &spare, &r->kept);
    busy(r, KT_BUSY_LOAD, &since);
    if (!mod) {
        r->status = KT_LAUNCH_ERROR;
        snprintf(r->error, sizeof r->error, "%s", kt_error());
        return;
    }
    kt_measurement m = {0};
    double timed = kt_bench_timing_seconds(s->bench);
    int lost = kt_bench_variant(s->bench, mod, &m);
    timed = kt_bench_timing_seconds(s->bench) - timed;
    busy(r, KT_BUSY_CHECK, &since);
    r->busy_s[KT_BUSY_CHECK] -= timed;
    r->busy_s[KT_BUSY_TIME] += timed;
    if (lost) {
        r->outcome = KT_WORKER_LOST;
        r->status = KT_LAUNCH_ERROR;
        snprintf(r->error, sizeof r->error, "%s", kt_error());
        return; /* the context is gone: the worker exits after answering */
    }
    if (!r->kept) kt_module_unload(mod);
    r->status = m.status;
    snprintf(r->error, sizeof r->error, "%s", m.error);
    r->rel_err = m.rel_err;
    t->median_us = m.median_us;
    t->min_us = m.min_us;
    t->max_us = m.max_us;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times every variant once per round, in turn (A B C A B C ...), so drift in clocks or
 * temperature hits all alike; each keeps the median, min and max of its round medians. */
static void retime(worker_state *s, const job *j, kt_worker_result *r) {
    int n = j->head.n, loaded = 0, kept[KT_RETIME_MAX];
    kt_module spare[KT_RETIME_MAX], *mods[KT_RETIME_MAX];
    double us[KT_RETIME_MAX][KT_RETIME_ROUNDS], since = kt_now();
    if (!s->fake && setup(s, j, r)) return;
    busy(r, KT_BUSY_SETUP, &since);
    for (; !s->fake && loaded < n; loaded++)
        if (!(mods[loaded] = module_of(s, j, loaded, &spare[loaded], &kept[loaded]))) {
            r->outcome = KT_WORKER_SETUP_FAILED;
            snprintf(r->error, sizeof r->error, "%s", kt_error());
            break;
        }
    busy(r, KT_BUSY_LOAD, &since);
    for (int round = 0; round < KT_RETIME_ROUNDS && r->outcome == KT_WORKER_DONE; round++)
        for (int i = 0; i < n && r->outcome == KT_WORKER_DONE; i++) {
            kt_timing t;
            if (s->fake) {
                us[i][round] = kt_fake_gpu_us(s->fake, &j->head.problem, &j->v[i].config, j->v[i].variant_id, round);
            } else if (kt_bench_time_variant(s->bench, mods[i], KT_RETIME_REPEATS, &t)) {
                r->outcome = KT_WORKER_LOST; /* a verified variant that fails now lost the context */
                snprintf(r->error, sizeof r->error, "%s", kt_error());
            } else {
                us[i][round] = t.median_us;
            }
        }
    busy(r, KT_BUSY_TIME, &since);
    if (r->outcome == KT_WORKER_LOST) return;
    for (int i = 0; i < loaded; i++)
        if (!kept[i]) kt_module_unload(mods[i]);
    for (int i = 0; i < n && r->outcome == KT_WORKER_DONE; i++) {
        qsort(us[i], KT_RETIME_ROUNDS, sizeof(double), cmp_double);
        r->timing[i] =
            (kt_timing){us[i][KT_RETIME_ROUNDS / 2], us[i][0], us[i][KT_RETIME_ROUNDS - 1], KT_RETIME_ROUNDS};
    }
}

static void load_reference(worker_state *s, const job *j, kt_worker_result *r) {
    if (s->fake) return;
    if (s->have_reference) kt_module_unload(&s->reference);
    kt_cubin cubin = job_cubin(j, 0);
    s->have_reference = !kt_module_load(s->f, &j->v[0].config, &cubin, &s->reference);
    if (!s->have_reference) {
        r->outcome = KT_WORKER_SETUP_FAILED;
        snprintf(r->error, sizeof r->error, "reference module: %s", kt_error());
    }
}

static void hello(worker_state *s, int ordinal, kt_worker_hello *h) {
    if (s->fake) {
        kt_fake_gpu_hello(h);
        return;
    }
    memset(h, 0, sizeof *h);
    if (kt_gpu_init() || kt_gpu_open(ordinal, &h->info)) {
        snprintf(h->error, sizeof h->error, "%s", kt_error());
        return;
    }
    h->ok = 1;
    h->gpu_count = kt_gpu_count();
}

/* Closes every descriptor inherited from the sweep but fd: other workers' sockets and
 * the database stay with the parent, and the sweep sees this worker's end of stream
 * exactly when this worker is gone. */
static void close_inherited(int fd) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        int k = atoi(e->d_name);
        if (k > 2 && k != fd && k != dirfd(d)) close(k);
    }
    closedir(d);
}

/* The child: says hello, then answers jobs until the sweep closes the socket. Never returns. */
static _Noreturn void serve(int fd, const kt_family *f, int ordinal) {
    worker_state *s = calloc(1, sizeof *s); /* half a megabyte of module slots: not on the stack */
    if (!s) _exit(1);
    s->f = f;
    if (kt_fake_gpu_open(f, &s->fake)) _exit(1);
    kt_worker_hello h;
    hello(s, ordinal, &h);
    if (send_all(fd, &h, sizeof h) || !h.ok) _exit(1);
    for (job j; !job_read(fd, &j); job_free(&j)) {
        kt_worker_result r;
        memset(&r, 0, sizeof r);
        if (s->fake) kt_fake_gpu_delay(s->fake);
        if (j.head.kind == KT_JOB_REFERENCE)
            load_reference(s, &j, &r);
        else if (j.head.kind == KT_JOB_MEASURE)
            measure(s, &j, &r);
        else
            retime(s, &j, &r);
        if (send_all(fd, &r, sizeof r) || r.outcome == KT_WORKER_LOST) _exit(1);
    }
    _exit(0); /* _exit: the parent's atexit handlers and stdio buffers are not ours */
}

int kt_worker_main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], KT_WORKER_ARG)) return 0;
    const kt_family *f = argc == 5 ? kt_family_find(argv[2]) : NULL;
    if (!f) _exit(2);
    serve(atoi(argv[4]), f, atoi(argv[3]));
}

/* ----------------------------------------------------------- the parent */

kt_worker *kt_worker_spawn(const kt_family *f, int ordinal) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        kt_fail("socketpair: %s", strerror(errno));
        return NULL;
    }
    kt_worker *w = calloc(1, sizeof *w);
    pid_t parent = getpid();
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t pid = w ? fork() : -1;
    if (pid == 0) {
        /* The worker must not outlive the sweep (kill -9 included); if the sweep died
         * before this line, getppid() has already changed. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent) _exit(1);
        close_inherited(sv[1]);
        /* A fresh image, not a copy of the sweep: once the sweep has run NVRTC, a forked
         * copy's cuInit fails ("initialization error", seen on an H200 with a cold JIT
         * cache), so the worker re-executes this program (kt_worker_main). The parent-death
         * signal survives the exec. */
        char ord[16], fd[16];
        snprintf(ord, sizeof ord, "%d", ordinal);
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl("/proc/self/exe", "kt-worker", KT_WORKER_ARG, f->name, ord, fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        free(w);
        kt_fail("cannot start a worker for GPU %d: %s", ordinal, w ? strerror(errno) : "out of memory");
        return NULL;
    }
    w->pid = pid;
    w->fd = sv[0];
    return w;
}

int kt_worker_hello_wait(kt_worker *w, double timeout_s, kt_worker_hello *h) {
    if (!readable(w->fd, timeout_s)) return kt_fail("the worker said nothing in %g s", timeout_s);
    if (recv_all(w->fd, h, sizeof *h)) return kt_fail("the worker ended before it said hello");
    return 0;
}

int kt_worker_send(kt_worker *w, const kt_worker_job *job) {
    job_head head = {job->kind, job->n, job->problem, job->seed};
    int rc = send_all(w->fd, &head, sizeof head);
    for (int i = 0; i < job->n && !rc; i++) {
        variant_head v = {.config = job->config[i], .size = job->loaded[i] ? 0 : job->cubin[i]->size};
        memcpy(v.variant_id, job->cubin[i]->variant_id, sizeof v.variant_id);
        rc = send_all(w->fd, &v, sizeof v) || send_all(w->fd, job->cubin[i]->image, v.size);
    }
    return rc ? kt_fail("the worker is gone: %s", strerror(errno)) : 0;
}

int kt_worker_fd(const kt_worker *w) { return w->fd; }

int kt_worker_receive(kt_worker *w, double timeout_s, kt_worker_result *r) {
    if (!readable(w->fd, timeout_s)) return 1;
    if (recv_all(w->fd, r, sizeof *r)) return kt_fail("the worker ended without an answer");
    return 0;
}

void kt_worker_stop(kt_worker *w, char *why, size_t n) {
    if (!w) return;
    close(w->fd);
    kill(w->pid, SIGKILL); /* a no-op on a worker that has already ended: its status stays */
    int status = 0;
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {}
    if (why && WIFSIGNALED(status))
        snprintf(why, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (why)
        snprintf(why, n, "exited with status %d", WEXITSTATUS(status));
    free(w);
}
