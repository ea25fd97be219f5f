/* search.h — the search strategies of a sweep (private to tuner/): which configs each
 * (shape, M) problem measures, round by round. A strategy decides only from the seed, the
 * space and the results of the configs it chose itself, so a sweep run again after a kill
 * makes the same choices, finds the committed ones' results in the database, and goes on
 * where it stopped. The strategies are one table, search.c's `strategies`: per name its
 * default --budget, whether it walks the space shuffled and whether it is anchored (chooses in
 * phases across a shape's Ms), its first choices and its later rounds; the fast strategy's
 * per-family thresholds (kt_family.search_full_budget_from_m, search_tile_sweep_to_m) are
 * read where they apply (full_budget, tile_sweep_applies).
 *   exhaustive: every config that fits and is not hopeless, in the space's order.
 *   random:     the first `budget` of those in one seeded shuffle of the space.
 *   fast:       per shape, the M values sorted; anchors are the smallest, the largest and
 *               enough between that consecutive anchors are at most 4x apart. Phase 1
 *               times at each anchor the default plus one config of each stratum (the
 *               family's leading parameters): the one nearest the default in the others
 *               where the default is worth timing, else the shuffle's first; `budget` at
 *               most. Phase 2 is a local search (budget/2 more units and what phase 1
 *               left) from the best of the 3 best strata, then, once those are searched
 *               out, from the next fastest: one parameter's two neighbours at a time,
 *               moving as soon as one is faster, and after a step that paid off the next
 *               step the same way first; anchors at M 128-256 then time the rest of
 *               their winner's tile (every config of its stratum but the last
 *               parameter). Phase 3 times at every other M the top 5 of
 *               its two nearest anchors, then the same local search, 12 units in all. On
 *               a planted smooth optimum (KT_FAKE_TIME=smooth, fp8_gemm, 30 random
 *               optima) this found it at 146 of 150 (optimum, M) where timing whole
 *               neighbourhoods of the top 3 for up to 2 rounds, in the same units, found
 *               it at 65: a whole neighbourhood in 9 dimensions costs 10-15 units per
 *               move, one parameter 2. */
#ifndef KT_SEARCH_H
#define KT_SEARCH_H
#include "tuner.h"

typedef struct kt_search kt_search;

/* The sweep side of a search: what it calls back. */
typedef struct kt_search_host {
    void *ctx;
    /* Config k of the space is chosen as choice number `choice` of problem pi, in phase 1, 2
     * or 3. Returns 1 when its result is already known (an earlier run measured it: *status
     * and *median_us filled), 0 when the sweep will measure it and hand the result to
     * kt_search_answer, -1 on error. */
    int (*choose)(void *ctx, int pi, int k, int choice, int phase, kt_status *status, double *median_us);
    /* Problem pi has every result it will ever ask for (it may be re-timed and decided). */
    int (*settled)(void *ctx, int pi);
} kt_search_host;

/* A search of o->strategy over space[n_space] (variant ids ids[], which break ties) for
 * problems[n_problems]; counts into rep->space and rep->pruned the (config, problem) pairs
 * that fit and are worth timing, and those pruned as hopeless. NULL with error set if out
 * of memory. */
kt_search *kt_search_new(const kt_family *f, const kt_config *space, const char (*ids)[17], int n_space,
                         const kt_problem *problems, int n_problems, const kt_sweep_options *o, kt_search_host host,
                         kt_sweep_report *rep);
/* Makes every problem's first choices (and, where their results are known, the choices
 * that follow from them). */
int kt_search_start(kt_search *s);
/* The result of choice `choice` of problem pi (a failure has median NAN); may choose more. */
int kt_search_answer(kt_search *s, int pi, int choice, kt_status status, double median_us);
void kt_search_free(kt_search *s);

#endif
