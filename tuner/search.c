/* search.c — the sweep's search strategies (exhaustive, random, fast; see search.h), one
 * table of them at the end (`strategies`): the configs each problem measures, chosen round
 * by round from the results of earlier rounds. The sweep (sweep.c) runs the choices and
 * hands the results back; the search never sees workers, compiles or the database. */
#include "search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ANCHOR_RATIO 4          /* consecutive anchors are at most this far apart in M */
#define LOCAL_TOP 3             /* local search walks from a problem's 3 fastest strata first */
#define TRANSFER_TOP 5          /* an M between anchors starts from each anchor's 5 fastest */
#define BETWEEN_CAP 12          /* units of an M between anchors, all phases */
#define UNCENTRED_PER_STRATUM 2 /* first-sample configs of a stratum where the default is no centre */
#define SEED_TOP 2              /* an anchor's local search also starts from its next anchors' 2 fastest */
/* From the family's search_full_budget_from_m on an anchor's local search gets all of --budget
 * more, below it half; anchors from there up to its search_tile_sweep_to_m end by timing all
 * of their winner's tile (sweep_tile). Why the GEMMs' values: bench/NOTES.md, "The fast
 * search's M thresholds". */

/* The strategies (search.h says what each does and why). `first` makes a problem's first
 * choices; `round`, once every choice of the problem is answered, its next: how many it
 * chose (> 0: or that it moved on), 0 when it has nothing more to time (it settles), WAIT,
 * or -1 on error. Anchored strategies start only their anchors (place_anchors); the other
 * problems wait for their two anchors to settle, then run phase 3 (transfer, then rounds). */
typedef struct strategy {
    kt_strategy info;
    int (*first)(kt_search *s, int pi);
    int (*round)(kt_search *s, int pi);
} strategy;

/* A problem's phase. Exhaustive and random problems have phase 1 only; fast anchors 1 and
 * 2; the other fast problems wait for their two anchors to settle, then have phase 3. */
enum phase { WAITING_FOR_ANCHORS, PHASE_1, PHASE_2, PHASE_3, SETTLED };

/* A config chosen for a problem, and how it went once answered. */
typedef struct choice {
    int k;           /* index in the space */
    int from;        /* the choice this one is one step from (local search), -1 if none */
    int param, step; /* that step: which parameter, and -1 or +1 along its value list */
    int answered;
    int next_param; /* local search: the parameter whose neighbours it times next */
    int line_tried; /* local search: its line step was considered */
    kt_status status;
    double us; /* median; NAN unless ok */
} choice;

typedef struct problem {
    kt_problem p;
    int anchor;       /* fast: an anchor M of its shape */
    int lo, hi;       /* fast, not an anchor: the nearest anchors below and above (problem indices) */
    int below, above; /* fast anchor: its shape's next anchors in M (problem indices), -1 if none */
    int sampled;      /* fast anchor: its first sample is all answered... */
    int first_n;      /* ...and was this many choices */
    int spare;        /* fast anchor: units of its budget the first sample left to the local search */
    int tile_swept;   /* fast anchor from search_full_budget_from_m: its winner's tile shape is all chosen */
    enum phase phase;
    int waiting; /* choices not answered yet */
    int cap;     /* local search stops once the problem has this many choices */
    choice *c;
    int n;
    size_t cap_c;
} problem;

struct kt_search {
    const kt_family *f;
    const kt_config *space;
    const char (*ids)[17];
    int n_space;
    int default_k; /* the family default's index in the space, -1 if not in it */
    int *where;    /* mixed-radix index of a point of the parameter grid -> space index, or -1 */
    const strategy *strategy;
    int budget;
    int sms; /* the GPU's SM count, for the family's per-problem default */
    kt_search_host host;
    problem *pr;
    int n;
};

/* Fast: 1 if problems of batch m get the whole budget again in their local search (the
 * family's search_full_budget_from_m; 0: never). */
static int full_budget(const kt_family *f, long m) {
    return f->search_full_budget_from_m > 0 && m >= f->search_full_budget_from_m;
}

/* Fast: 1 if anchor pb's local search ends by timing its winner's whole tile (sweep_tile):
 * from search_full_budget_from_m up to the family's search_tile_sweep_to_m, once. */
static int tile_sweep_applies(const kt_family *f, const problem *pb) {
    return pb->phase == PHASE_2 && full_budget(f, pb->p.m) && pb->p.m <= f->search_tile_sweep_to_m && !pb->tile_swept;
}

/* ------------------------------------------------------------ the space */

/* The config's point of the parameter grid, counted like nested loops in parameter order;
 * -1 when a value is not on its parameter's list. */
static long point_of(const kt_family *f, const kt_config *c) {
    long point = 0;
    for (int i = 0; i < f->n_params; i++) {
        int j = kt_param_value_index(&f->params[i], c->v[i]);
        if (j < 0) return -1;
        point = point * f->params[i].n_values + j;
    }
    return point;
}

/* The space index of config c, or -1 when it is not in the space (off the grid, or a config
 * the arch rejects). */
static int index_of(const kt_search *s, const kt_config *c) {
    long point = point_of(s->f, c);
    return point < 0 ? -1 : s->where[point];
}

/* The space index of config k with parameter `param` moved one step (-1 or +1) along its
 * value list, or -1 when that leaves the list or the space (a config the arch rejects). */
static int neighbour(const kt_search *s, int k, int param, int step) {
    const kt_param *p = &s->f->params[param];
    int j = kt_param_value_index(p, s->space[k].v[param]) + step;
    if (j < 0 || j >= p->n_values) return -1;
    kt_config c = s->space[k];
    c.v[param] = p->values[j];
    return index_of(s, &c);
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

/* How many leading parameters make a stratum (kt_family.strata_params). */
static int strata_params(const kt_family *f) {
    int n = f->strata_params ? f->strata_params : 2;
    return n < f->n_params ? n : f->n_params;
}

/* The step of `param` from config k for problem pi: its plain neighbour when that is worth
 * timing and new; when it is not in the space or not worth timing, the same step with one
 * other parameter moved as well, as few value steps as will do (the first such that is):
 * parameters are coupled (warps must tile the CTA tile, K-split warps need TILE_K 128), and
 * without the repair a search stalls. The second parameter is one outside the stratum where
 * any will do: a repair that changes the tile shape or DIRECT lands in another basin
 * (bench/NOTES.md, "The fast search's evidence"). -1 if none (or the neighbour was timed). */
static int step_from(const kt_search *s, int pi, int k, int param, int step) {
    const problem *pb = &s->pr[pi];
    int plain = neighbour(s, k, param, step);
    if (plain >= 0 && eligible(s, pi, plain)) return chosen(pb, plain) ? -1 : plain; /* timed: no detour */
    const kt_param *p = &s->f->params[param];
    int j = kt_param_value_index(p, s->space[k].v[param]) + step;
    if (j < 0 || j >= p->n_values) return -1;
    kt_config c = s->space[k];
    c.v[param] = p->values[j];
    int lead = strata_params(s->f);
    for (int inside = 0; inside < 2; inside++) /* the stratum's own parameters last */
        for (int dist = 1; dist < (int)(sizeof p->values / sizeof p->values[0]); dist++)
            for (int q = inside ? 0 : lead; q < (inside ? lead : s->f->n_params); q++)
                for (int d = -dist; d <= dist && q != param; d += 2 * dist) {
                    const kt_param *pq = &s->f->params[q];
                    int i = kt_param_value_index(pq, c.v[q]) + d;
                    if (i < 0 || i >= pq->n_values) continue;
                    kt_config r = c;
                    r.v[q] = pq->values[i];
                    int x = index_of(s, &r);
                    if (x >= 0 && eligible(s, pi, x) && !chosen(pb, x)) return x;
                }
    return -1;
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
    if (known)
        c->answered = 1;
    else
        pb->waiting++;
    return 0;
}

/* Whether a ranks before b: faster, ties to the lower variant id (the winner rule's order). */
static int before(const kt_search *s, const choice *a, const choice *b) {
    return a->us != b->us ? a->us < b->us : strcmp(s->ids[a->k], s->ids[b->k]) < 0;
}

/* The (up to) max fastest ok choices among a problem's first `upto`, fastest first, as
 * choice indices. */
static int fastest_upto(const kt_search *s, const problem *pb, int *out, int max, int upto) {
    int n = 0;
    for (int i = 0; i < upto; i++) {
        const choice *c = &pb->c[i];
        if (!c->answered || c->status != KT_OK) continue;
        if (n == max && !before(s, c, &pb->c[out[n - 1]])) continue;
        int j = n < max ? n++ : n - 1;
        for (; j > 0 && before(s, c, &pb->c[out[j - 1]]); j--) out[j] = out[j - 1];
        out[j] = i;
    }
    return n;
}

static int fastest(const kt_search *s, const problem *pb, int *out, int max) {
    return fastest_upto(s, pb, out, max, pb->n);
}

/* A config's stratum: the value indices of the family's first strata_params parameters. */
static int stratum_of(const kt_family *f, const kt_config *c) {
    int stratum = 0;
    for (int i = 0; i < strata_params(f); i++)
        stratum = stratum * f->params[i].n_values + kt_param_value_index(&f->params[i], c->v[i]);
    return stratum;
}

/* Where pb's local search starts from, in order, as choice indices: the fastest ok choice
 * of each of its (up to) `strata` fastest strata, fastest first (local searches from
 * configs of one tile shape only would all explore the same basin), then every other ok
 * choice, fastest first. Returns how many (out has room for pb->n), -1 if out of memory. */
static int search_order(const kt_search *s, const problem *pb, int *out, int strata) {
    int *all = malloc(sizeof *all * (size_t)(pb->n + 1)), n = 0;
    if (!all) return kt_fail("out of memory");
    int sorted = fastest(s, pb, all, pb->n);
    for (int i = 0; i < sorted && n < strata; i++) {
        int stratum = stratum_of(s->f, &s->space[pb->c[all[i]].k]), dup = 0;
        for (int j = 0; j < n; j++) dup |= stratum_of(s->f, &s->space[pb->c[out[j]].k]) == stratum;
        if (!dup) out[n++] = all[i], all[i] = -1;
    }
    for (int i = 0; i < sorted; i++)
        if (all[i] >= 0) out[n++] = all[i];
    free(all);
    return n;
}

/* Chooses, in the space's order, up to `limit` more configs worth timing on pi that it has
 * not chosen yet. */
static int walk(kt_search *s, int pi, int limit) {
    for (int k = 0, taken = 0; k < s->n_space && taken < limit; k++) {
        if (!eligible(s, pi, k) || chosen(&s->pr[pi], k)) continue;
        if (pick(s, pi, k, -1, 0, 0)) return -1;
        taken++;
    }
    return 0;
}

/* How many value steps config c is from the family default in the parameters that do not
 * make a stratum, summed. */
static int off_default(const kt_family *f, const kt_config *c) {
    int steps = 0;
    for (int i = strata_params(f); i < f->n_params; i++)
        steps += abs(kt_param_value_index(&f->params[i], c->v[i]) -
                     kt_param_value_index(&f->params[i], f->default_config.v[i]));
    return steps;
}

/* The fast strategy's first sample on pi: configs of each combination of values of the
 * leading parameters worth timing (a family lists its parameters most telling first: for
 * fp8_gemm the CTA tile and whether weights skip shared memory), up to `limit`, in the
 * space's (shuffled) order; what it leaves of `limit` goes to pi's local search. Where the
 * family default is worth timing on pi, each stratum's config is the one nearest the default
 * in the other parameters (the first such in the shuffle); where the family prunes the
 * default, each stratum takes the shuffle's first two configs, in the shuffle's order. Why
 * each choice, with the replays that decided it: bench/NOTES.md, "The fast search's evidence". */
static int stratified_walk(kt_search *s, int pi, int limit) {
    const kt_family *f = s->f;
    int strata = 1;
    for (int i = 0; i < strata_params(f); i++) strata *= f->params[i].n_values;
    /* centred: a stratum's least off_default, -1 once taken; else how many it has taken */
    int *mark = malloc(sizeof *mark * (size_t)strata);
    if (!mark) return kt_fail("out of memory");
    int centred = s->default_k >= 0 && eligible(s, pi, s->default_k);
    for (int i = 0; i < strata; i++) mark[i] = centred ? INT_MAX : 0;
    for (int k = 0; centred && k < s->n_space; k++) {
        if (!eligible(s, pi, k)) continue;
        int stratum = stratum_of(f, &s->space[k]), off = off_default(f, &s->space[k]);
        if (off < mark[stratum]) mark[stratum] = off;
    }
    int taken = 0, rc = 0;
    for (int k = 0; k < s->n_space && taken < limit && !rc; k++) {
        if (!eligible(s, pi, k) || chosen(&s->pr[pi], k)) continue;
        int stratum = stratum_of(f, &s->space[k]);
        if (centred ? mark[stratum] != off_default(f, &s->space[k]) : mark[stratum] == UNCENTRED_PER_STRATUM) continue;
        mark[stratum] = centred ? -1 : mark[stratum] + 1;
        rc = pick(s, pi, k, -1, 0, 0);
        taken++;
    }
    free(mark);
    s->pr[pi].spare = limit - taken;
    return rc;
}

/* One step of pi's local search from its choice x: when x was reached by a step that paid
 * off, the next step the same way, alone (a line search: several steps along a parameter
 * for one unit each); else the next parameter's two neighbours (that parameter one step
 * down and up its value list, repaired by step_from where the step alone leaves the space)
 * that are worth timing and not chosen yet. Returns how many it chose: 0 when x's
 * neighbourhood is exhausted or pi's cap is reached. */
static int search_from(kt_search *s, int pi, int x) { /* x an index: pick() may move pb->c */
    problem *pb = &s->pr[pi];
    int from = pb->c[x].from, param = pb->c[x].param, step = pb->c[x].step;
    if (!pb->c[x].line_tried && from >= 0 && before(s, &pb->c[x], &pb->c[from])) {
        pb->c[x].line_tried = 1;
        int k = neighbour(s, pb->c[x].k, param, step);
        if (k >= 0 && eligible(s, pi, k) && !chosen(pb, k)) return pick(s, pi, k, x, param, step) ? -1 : 1;
    }
    for (; pb->c[x].next_param < s->f->n_params; pb->c[x].next_param++) {
        int made = 0, p = pb->c[x].next_param;
        for (int d = -1; d <= 1 && pb->n < pb->cap; d += 2) {
            int k = step_from(s, pi, pb->c[x].k, p, d);
            if (k < 0) continue;
            if (pick(s, pi, k, x, p, d)) return -1;
            made++;
        }
        if (made) {
            pb->c[x].next_param++;
            return made;
        }
    }
    return 0;
}

/* One round of local search on pi (first improvement, one parameter at a time): the first
 * config in search_order (the fastest of its 3 fastest tile shapes first) whose
 * neighbourhood is not exhausted takes a step (search_from); a faster one found becomes
 * the fastest and is searched from next round. Once those 3 are searched out, the search
 * goes on from the next fastest configs, so that what the cap allows is spent (stopping
 * there lost up to 20% at large M: bench/NOTES.md, "The fast search's evidence"). Returns
 * how many it chose: 0 when every config is searched out or the cap is reached. */
static int local_round(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    int *order = malloc(sizeof *order * (size_t)(pb->n + 1));
    if (!order) return kt_fail("out of memory");
    int n = search_order(s, pb, order, LOCAL_TOP), made = n < 0 ? -1 : 0;
    for (int b = 0; b < n && !made && pb->n < pb->cap; b++) made = search_from(s, pi, order[b]);
    free(order);
    return made;
}

/* The end of a large-M anchor's local search: every config worth timing of its fastest
 * config's stratum with the stratum's last parameter free (for fp8_gemm: the winner's CTA
 * tile, through shared memory or not), beyond the cap: there the fastest configs sit among
 * neighbours that do not build, and the first sample ranks a stratum by two random configs
 * (bench/NOTES.md, "The fast search's evidence"). Returns how many it chose. */
static int sweep_tile(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    int best, made = 0;
    pb->tile_swept = 1;
    if (fastest(s, pb, &best, 1) < 1) return 0;
    const kt_config w = s->space[pb->c[best].k];
    for (int k = 0; k < s->n_space; k++) {
        int same = 1;
        for (int i = 0; i < strata_params(s->f) - 1; i++) same &= s->space[k].v[i] == w.v[i];
        if (!same || !eligible(s, pi, k) || chosen(pb, k)) continue;
        if (pick(s, pi, k, -1, 0, 0)) return -1;
        made++;
    }
    return made;
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

/* An anchor's phase 2 first times the 2 fastest of the first sample of each next anchor of
 * its shape (one config of each tile shape, so a basin its own sample may have missed).
 * Only the first samples, once answered, so the choice does not depend on how far the
 * neighbours' searches have come: a resumed sweep chooses the same. (Seeds from the same M
 * at other shapes did better in replays, mean regret 2.2% against 3.3%, but would make a
 * shard of whole shapes choose differently from the whole sweep.) */
static int seeds_ready(const kt_search *s, const problem *pb) {
    return (pb->below < 0 || s->pr[pb->below].sampled) && (pb->above < 0 || s->pr[pb->above].sampled);
}

static int seed(kt_search *s, int pi) {
    const int side[2] = {s->pr[pi].below, s->pr[pi].above};
    for (int i = 0; i < 2; i++) {
        if (side[i] < 0) continue;
        const problem *o = &s->pr[side[i]];
        int top[SEED_TOP], n = fastest_upto(s, o, top, SEED_TOP, o->first_n);
        for (int j = 0; j < n; j++) {
            int k = o->c[top[j]].k; /* o's choices do not move: pick() grows pi's */
            if (eligible(s, pi, k) && !chosen(&s->pr[pi], k) && pick(s, pi, k, -1, 0, 0)) return -1;
        }
    }
    return 0;
}

/* Problem pi chooses nothing more. When it is a fast anchor, the Ms between it and the
 * next anchor whose other anchor has settled too start their phase 3. */
static int settle(kt_search *s, int pi) {
    s->pr[pi].phase = SETTLED;
    if (s->host.settled(s->host.ctx, pi)) return -1;
    if (!s->strategy->info.anchored) return 0;
    for (int b = 0; b < s->n; b++) {
        problem *q = &s->pr[b];
        if (q->phase != WAITING_FOR_ANCHORS || (q->lo != pi && q->hi != pi) || s->pr[q->lo].phase != SETTLED ||
            s->pr[q->hi].phase != SETTLED)
            continue;
        q->phase = PHASE_3;
        q->cap = BETWEEN_CAP;
        if (transfer(s, b) || advance(s, b)) return -1;
    }
    return 0;
}

/* A strategy's round returns this while its problem waits for others (fast: an anchor's
 * phase 2 for its next anchors' first samples). */
#define WAIT (-2)

/* Once every choice of pi is answered: its strategy's next round, or it settles. Choices
 * whose results are known already (a resumed sweep) let it run several rounds at once. */
static int advance(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    while (!pb->waiting && pb->phase != SETTLED && pb->phase != WAITING_FOR_ANCHORS) {
        int made = s->strategy->round(s, pi);
        if (made == WAIT) return 0;
        if (made < 0 || (!made && settle(s, pi))) return -1;
    }
    return 0;
}

/* Exhaustive and random: one round, the first; then the problem settles. */
static int no_more(kt_search *s, int pi) {
    (void)s, (void)pi;
    return 0;
}

static int exhaustive_first(kt_search *s, int pi) { return walk(s, pi, s->n_space); }
static int random_first(kt_search *s, int pi) { return walk(s, pi, s->budget); }

/* Fast, phase 1 of an anchor: the default as a baseline wherever it runs, hopeless or not,
 * the config dispatch would serve it untuned, then the stratified sample. */
static int fast_first(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    int def = s->default_k, rc = 0;
    if (def >= 0 && s->f->config_fits(&s->space[def], &pb->p)) rc = pick(s, pi, def, -1, 0, 0);
    /* and the config dispatch would serve this problem untuned (1.14x the best on the
     * H200): replays of the six recorded H200 exhaustive sweeps, 6 seeds each, mean
     * regret 0.50% -> 0.32% for 1% more units, (1536,4096) M = 64 5.5% -> 0%. With
     * --budget 32 as well the replays kept that regret for 13% fewer units, but on the
     * GPU (one cold sweep, 97 s against 120.6 s) the search never reached the best
     * config of (4096,512) M = 16 (4.6%): the noisier landscape wants the slack. */
    if (!rc && s->f->default_for) {
        kt_config c = s->f->default_config; /* default_for may leave fields it does not choose */
        s->f->default_for(&pb->p, s->sms, &c);
        int k = index_of(s, &c);
        if (k >= 0 && eligible(s, pi, k) && !chosen(pb, k)) rc = pick(s, pi, k, -1, 0, 0);
    }
    return rc ? rc : stratified_walk(s, pi, s->budget);
}

/* Fast, an anchor whose first sample is answered: its next anchors waiting for that go on
 * (one of them may move this one on). */
static int fast_sampled(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    pb->sampled = 1;
    pb->first_n = pb->n;
    for (int i = 0; i < 2; i++) {
        int q = i ? pb->above : pb->below;
        if (q >= 0 && s->pr[q].phase == PHASE_1 && s->pr[q].sampled && !s->pr[q].waiting && advance(s, q)) return -1;
    }
    return 1;
}

/* Fast, a round after the first: an anchor marks its sample answered, then (once its next
 * anchors' samples are too) enters phase 2 with their seeds and its local search's cap;
 * phases 2 and 3 take local search rounds, and a phase-2 anchor the tile sweep where it
 * applies once they are spent. */
static int fast_round(kt_search *s, int pi) {
    problem *pb = &s->pr[pi];
    if (pb->phase == PHASE_1 && !pb->sampled) return fast_sampled(s, pi);
    if (pb->phase == PHASE_1) {
        if (!seeds_ready(s, pb)) return WAIT;
        pb->phase = PHASE_2;
        if (seed(s, pi)) return -1;
        int more = full_budget(s->f, pb->p.m) ? s->budget : s->budget / 2;
        pb->cap = pb->n + pb->spare + (more > 0 ? more : 1);
        return 1; /* the seeds' answers first */
    }
    int made = local_round(s, pi);
    if (!made && tile_sweep_applies(s->f, pb)) made = sweep_tile(s, pi);
    return made;
}

/* The strategies, by name: what each does and why, search.h. */
static const strategy strategies[] = {
    {.info = {.name = "fast", .default_budget = 40, .shuffled = 1, .anchored = 1},
     .first = fast_first,
     .round = fast_round},
    {.info = {.name = "exhaustive", .default_budget = 64}, .first = exhaustive_first, .round = no_more},
    {.info = {.name = "random", .default_budget = 64, .shuffled = 1}, .first = random_first, .round = no_more},
};
#define N_STRATEGIES (int)(sizeof strategies / sizeof *strategies)

const kt_strategy *kt_strategy_find(const char *name) {
    for (int i = 0; name && i < N_STRATEGIES; i++)
        if (!strcmp(strategies[i].info.name, name)) return &strategies[i].info;
    return NULL;
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
    for (int i = 0; i < s->n; i++) s->pr[i].lo = s->pr[i].below = s->pr[i].above = -1; /* -1: its shape unplaced */
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
            s->pr[group[a]].above = group[next];
            s->pr[group[next]].below = group[a];
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
                         const kt_problem *problems, int n_problems, const kt_sweep_options *o, kt_search_host host,
                         kt_sweep_report *rep) {
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
    const kt_strategy *info = kt_strategy_find(o->strategy);
    if (!info) {
        kt_search_free(s);
        kt_fail("no search strategy '%s'", o->strategy ? o->strategy : "");
        return NULL;
    }
    s->strategy = (const strategy *)info; /* info is a strategy's first member */
    s->budget = o->budget;
    s->sms = rep->device.sm_count;
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
        s->pr[i].phase = s->strategy->info.anchored ? WAITING_FOR_ANCHORS : PHASE_1;
        for (int k = 0; k < n_space; k++) {
            if (!f->config_fits(&space[k], &problems[i])) continue;
            if (f->hopeless && f->hopeless(&space[k], &problems[i]))
                rep->pruned++;
            else
                rep->space++;
        }
    }
    if (s->strategy->info.anchored && place_anchors(s)) {
        kt_search_free(s);
        return NULL;
    }
    return s;
}

int kt_search_start(kt_search *s) {
    for (int pi = 0; pi < s->n; pi++)
        if (s->pr[pi].phase == PHASE_1 && s->strategy->first(s, pi)) return -1;
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
