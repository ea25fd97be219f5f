/* search.c — the sweep's search strategies (exhaustive, random, fast; see search.h): the
 * configs each problem measures, chosen round by round from the results of earlier rounds.
 * The sweep (sweep.c) runs the choices and hands the results back; the search never sees
 * workers, compiles or the database. */
#include "search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ANCHOR_RATIO 4 /* consecutive anchors are at most this far apart in M */
#define LOCAL_TOP 3    /* local search walks from a problem's 3 fastest only */
#define TRANSFER_TOP 5 /* an M between anchors starts from each anchor's 5 fastest */
#define BETWEEN_CAP 12 /* units of an M between anchors, all phases */

enum strategy { EXHAUSTIVE, RANDOM, FAST };
/* A problem's phase. Exhaustive and random problems have phase 1 only; fast anchors 1 and
 * 2; the other fast problems wait for their two anchors to settle, then have phase 3. */
enum phase { WAITING_FOR_ANCHORS, PHASE_1, PHASE_2, PHASE_3, SETTLED };

/* A config chosen for a problem, and how it went once answered. */
typedef struct choice {
    int k;           /* index in the space */
    int from;        /* the choice this one is one step from (local search), -1 if none */
    int param, step; /* that step: which parameter, and -1 or +1 along its value list */
    int answered;
    int next_param;  /* local search: the parameter whose neighbours it times next */
    int line_tried;       /* local search: its line step was considered */
    kt_status status;
    double us;       /* median; NAN unless ok */
} choice;

typedef struct problem {
    kt_problem p;
    int anchor;      /* fast: an anchor M of its shape */
    int lo, hi;      /* fast, not an anchor: the nearest anchors below and above (problem indices) */
    enum phase phase;
    int waiting;     /* choices not answered yet */
    int cap;         /* local search stops once the problem has this many choices */
    choice *c;
    int n;
    size_t cap_c;
} problem;

struct kt_search {
    const kt_family *f;
    const kt_config *space;
    const char (*ids)[17];
    int n_space;
    int default_k;   /* the family default's index in the space, -1 if not in it */
    int *where;      /* mixed-radix index of a point of the parameter grid -> space index, or -1 */
    enum strategy strategy;
    int budget;
    kt_search_host host;
    problem *pr;
    int n;
};

/* ------------------------------------------------------------ the space */

/* The config's point of the parameter grid, counted like nested loops in parameter order. */
static long point_of(const kt_family *f, const kt_config *c) {
    long point = 0;
    for (int i = 0; i < f->n_params; i++)
        point = point * f->params[i].n_values + kt_param_value_index(&f->params[i], c->v[i]);
    return point;
}

/* The space index of config k with parameter `param` moved one step (-1 or +1) along its
 * value list, or -1 when that leaves the list or the space (a config the arch rejects). */
static int neighbour(const kt_search *s, int k, int param, int step) {
    const kt_param *p = &s->f->params[param];
    int j = kt_param_value_index(p, s->space[k].v[param]) + step;
    if (j < 0 || j >= p->n_values) return -1;
    kt_config c = s->space[k];
    c.v[param] = p->values[j];
    return s->where[point_of(s->f, &c)];
}

/* Whether config k can run problem pi and is worth timing there. */
static int eligible(const kt_search *s, int pi, int k) {
    const kt_family *f = s->f;
    const kt_problem *p = &s->pr[pi].p;
    return f->config_fits(&s->space[k], p) && !(f->hopeless && f->hopeless(&s->space[k], p));
}

static int chosen(const problem *pb, int k) {
    for (int i = 0; i < pb->n; i++)
        if (pb->c[i].k == k) return 1;
    return 0;
}

/* ---------------------------------------------------------- the choices */

/* Chooses config k for problem pi (one step of `param` from choice `from`, or from = -1). */
static int pick(kt_search *s, int pi, int k, int from, int param, int step) {
    problem *pb = &s->pr[pi];
    choice *grown = kt_grow(pb->c, &pb->cap_c, (size_t)pb->n, sizeof *grown);
    if (!grown) return -1;
    pb->c = grown;
    choice *c = &pb->c[pb->n];
    *c = (choice){.k = k, .from = from, .param = param, .step = step, .us = NAN};
    int known = s->host.choose(s->host.ctx, pi, k, pb->n++, (int)pb->phase, &c->status, &c->us);
    if (known < 0) return -1;
    if (known) c->answered = 1;
    else pb->waiting++;
    return 0;
}

/* Whether a ranks before b: faster, ties to the lower variant id (the winner rule's order). */
static int before(const kt_search *s, const choice *a, const choice *b) {
    return a->us != b->us ? a->us < b->us : strcmp(s->ids[a->k], s->ids[b->k]) < 0;
}

/* The (up to) max fastest ok choices of a problem, fastest first, as choice indices. */
static int fastest(const kt_search *s, const problem *pb, int *out, int max) {
    int n = 0;
    for (int i = 0; i < pb->n; i++) {
        const choice *c = &pb->c[i];
        if (!c->answered || c->status != KT_OK) continue;
        if (n == max && !before(s, c, &pb->c[out[n - 1]])) continue;
        int j = n < max ? n++ : n - 1;
        for (; j > 0 && before(s, c, &pb->c[out[j - 1]]); j--) out[j] = out[j - 1];
        out[j] = i;
    }
    return n;
}

/* Chooses, in the space's order, up to `limit` configs worth timing on pi, skipping `skip`. */
static int walk(kt_search *s, int pi, int limit, int skip) {
    for (int k = 0, taken = 0; k < s->n_space && taken < limit; k++) {
        if (k == skip || !eligible(s, pi, k)) continue;
        if (pick(s, pi, k, -1, 0, 0)) return -1;
        taken++;
    }
    return 0;
}

/* One round of local search on pi (first improvement, one parameter at a time): of its 3
 * fastest, the fastest whose neighbourhood is not exhausted gets the next parameter's two
 * neighbours (that parameter one step down and up its value list) that are worth timing
 * and not chosen yet; a faster one found becomes the fastest and is searched from next
 * round. A config reached by a step that paid off first tries the next step the same way,
 * alone (a line search: several steps along a parameter for one unit each). Stops at the
 * problem's cap. Returns how many it chose: 0 when the 3 fastest are exhausted or the cap
 * is reached. */
static int local_round(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    int best[LOCAL_TOP], n_best = fastest(s, pb, best, LOCAL_TOP);
    for (int b = 0; b < n_best && pb->n < pb->cap; b++) {
        int x = best[b]; /* an index: pick() may move pb->c */
        int from = pb->c[x].from, param = pb->c[x].param, step = pb->c[x].step;
        if (!pb->c[x].line_tried && from >= 0 && before(s, &pb->c[x], &pb->c[from])) {
            pb->c[x].line_tried = 1;
            int k = neighbour(s, pb->c[x].k, param, step);
            if (k >= 0 && eligible(s, pi, k) && !chosen(pb, k)) return pick(s, pi, k, x, param, step) ? -1 : 1;
        }
        for (; pb->c[x].next_param < s->f->n_params; pb->c[x].next_param++) {
            int made = 0, p = pb->c[x].next_param;
            for (int d = -1; d <= 1 && pb->n < pb->cap; d += 2) {
                int k = neighbour(s, pb->c[x].k, p, d);
                if (k < 0 || !eligible(s, pi, k) || chosen(pb, k)) continue;
                if (pick(s, pi, k, x, p, d)) return -1;
                made++;
            }
            if (made) {
                pb->c[x].next_param++;
                return made;
            }
        }
    }
    return 0;
}

/* Phase 3 of an M between anchors: the 5 fastest of each nearest anchor that are worth
 * timing here, alternating between the two. */
static int transfer(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    const problem *side[2] = {&s->pr[pb->lo], &s->pr[pb->hi]};
    int top[2][TRANSFER_TOP], n[2];
    for (int i = 0; i < 2; i++) n[i] = fastest(s, side[i], top[i], TRANSFER_TOP);
    for (int r = 0; r < TRANSFER_TOP; r++)
        for (int i = 0; i < 2 && pb->n < pb->cap; i++) {
            if (r >= n[i]) continue;
            int k = side[i]->c[top[i][r]].k;
            if (eligible(s, pi, k) && !chosen(pb, k) && pick(s, pi, k, -1, 0, 0)) return -1;
        }
    return 0;
}

static int advance(kt_search *s, int pi);

/* Problem pi chooses nothing more. When it is a fast anchor, the Ms between it and the
 * next anchor whose other anchor has settled too start their phase 3. */
static int settle(kt_search *s, int pi) {
    s->pr[pi].phase = SETTLED;
    if (s->host.settled(s->host.ctx, pi)) return -1;
    if (s->strategy != FAST) return 0;
    for (int b = 0; b < s->n; b++) {
        problem *q = &s->pr[b];
        if (q->phase != WAITING_FOR_ANCHORS || (q->lo != pi && q->hi != pi) ||
            s->pr[q->lo].phase != SETTLED || s->pr[q->hi].phase != SETTLED)
            continue;
        q->phase = PHASE_3;
        q->cap = BETWEEN_CAP;
        if (transfer(s, b) || advance(s, b)) return -1;
    }
    return 0;
}

/* Once every choice of pi is answered: its next round, or it settles. Choices whose
 * results are known already (a resumed sweep) let it run several rounds at once. */
static int advance(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    while (!pb->waiting && pb->phase != SETTLED && pb->phase != WAITING_FOR_ANCHORS) {
        if (s->strategy == FAST && pb->phase == PHASE_1) {
            pb->phase = PHASE_2;
            pb->cap = pb->n + (s->budget / 2 > 0 ? s->budget / 2 : 1);
        }
        int made = pb->phase == PHASE_1 ? 0 : local_round(s, pi);
        if (made < 0 || (!made && settle(s, pi))) return -1;
    }
    return 0;
}

/* -------------------------------------------------------------- anchors */

static int same_shape(const kt_problem *a, const kt_problem *b) {
    return a->n_dims == b->n_dims && !memcmp(a->dim, b->dim, sizeof a->dim);
}

/* Fast: per shape, its Ms sorted; the smallest is an anchor, and each next anchor is the
 * largest M at most ANCHOR_RATIO times the last (or the next M when none is), up to the
 * largest. The others learn their nearest anchors and wait for them. */
static int place_anchors(kt_search *s) {
    int *group = malloc(sizeof *group * (size_t)(s->n + 1));
    if (!group) return kt_fail("out of memory");
    for (int i = 0; i < s->n; i++) s->pr[i].lo = -1; /* -1 until its shape is placed */
    for (int i = 0; i < s->n; i++) {
        if (s->pr[i].lo != -1 || s->pr[i].anchor) continue;
        int n = 0;
        for (int j = 0; j < s->n; j++) {
            if (!same_shape(&s->pr[i].p, &s->pr[j].p)) continue;
            int at = n++;
            for (; at > 0 && s->pr[group[at - 1]].p.m > s->pr[j].p.m; at--) group[at] = group[at - 1];
            group[at] = j;
        }
        for (int a = 0;;) {
            s->pr[group[a]].anchor = 1;
            s->pr[group[a]].phase = PHASE_1;
            if (a == n - 1) break;
            int next = a + 1;
            for (int j = a + 1; j < n && s->pr[group[j]].p.m <= ANCHOR_RATIO * s->pr[group[a]].p.m; j++) next = j;
            for (int j = a + 1; j < next; j++) {
                s->pr[group[j]].lo = group[a];
                s->pr[group[j]].hi = group[next];
            }
            a = next;
        }
    }
    free(group);
    return 0;
}

/* ---------------------------------------------------------------- entry */

kt_search *kt_search_new(const kt_family *f, const kt_config *space, const char (*ids)[17], int n_space,
                         const kt_problem *problems, int n_problems, const kt_sweep_options *o,
                         kt_search_host host, kt_sweep_report *rep) {
    kt_search *s = calloc(1, sizeof *s);
    long points = 1;
    for (int i = 0; i < f->n_params; i++) points *= f->params[i].n_values;
    if (s) {
        s->where = malloc(sizeof *s->where * (size_t)points);
        s->pr = calloc((size_t)n_problems + 1, sizeof *s->pr);
    }
    if (!s || !s->where || !s->pr) {
        kt_search_free(s);
        kt_fail("out of memory");
        return NULL;
    }
    s->f = f;
    s->space = space;
    s->ids = ids;
    s->n_space = n_space;
    s->strategy = !strcmp(o->strategy, "fast") ? FAST : !strcmp(o->strategy, "random") ? RANDOM : EXHAUSTIVE;
    s->budget = o->budget;
    s->host = host;
    s->n = n_problems;
    s->default_k = -1;
    for (long i = 0; i < points; i++) s->where[i] = -1;
    for (int k = 0; k < n_space; k++) {
        s->where[point_of(f, &space[k])] = k;
        if (!memcmp(&space[k], &f->default_config, sizeof space[k])) s->default_k = k;
    }
    for (int i = 0; i < n_problems; i++) {
        s->pr[i].p = problems[i];
        s->pr[i].phase = s->strategy == FAST ? WAITING_FOR_ANCHORS : PHASE_1;
        for (int k = 0; k < n_space; k++) {
            if (!f->config_fits(&space[k], &problems[i])) continue;
            if (f->hopeless && f->hopeless(&space[k], &problems[i])) rep->pruned++;
            else rep->space++;
        }
    }
    if (s->strategy == FAST && place_anchors(s)) {
        kt_search_free(s);
        return NULL;
    }
    return s;
}

int kt_search_start(kt_search *s) {
    for (int pi = 0; pi < s->n; pi++) {
        problem *pb = &s->pr[pi];
        if (pb->phase != PHASE_1) continue;
        int rc = 0;
        if (s->strategy == EXHAUSTIVE) {
            rc = walk(s, pi, s->n_space, -1);
        } else if (s->strategy == RANDOM) {
            rc = walk(s, pi, s->budget, -1);
        } else { /* the default as a baseline wherever it runs, hopeless or not */
            int def = s->default_k;
            if (def >= 0 && s->f->config_fits(&s->space[def], &pb->p)) rc = pick(s, pi, def, -1, 0, 0);
            if (!rc) rc = walk(s, pi, s->budget, def);
        }
        if (rc) return -1;
    }
    /* Only now the rounds that follow known results: every first choice comes first. */
    for (int pi = 0; pi < s->n; pi++)
        if (s->pr[pi].phase == PHASE_1 && advance(s, pi)) return -1;
    return 0;
}

int kt_search_answer(kt_search *s, int pi, int choice_index, kt_status status, double median_us) {
    problem *pb = &s->pr[pi];
    choice *c = &pb->c[choice_index];
    c->answered = 1;
    c->status = status;
    c->us = status == KT_OK ? median_us : NAN;
    pb->waiting--;
    return advance(s, pi);
}

void kt_search_free(kt_search *s) {
    if (!s) return;
    for (int i = 0; s->pr && i < s->n; i++) free(s->pr[i].c);
    free(s->pr);
    free(s->where);
    free(s);
}
