/* db_write.c — the winners database's write side (libktdev): devices, runs, measurements
 * and re-timings, winner selection per M bucket, and the merge of shard databases. */
#include "db_internal.h"
#include "kt_db_write.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------- devices, runs, rows */

int kt_db_device_id(kt_db *db, const kt_db_device *d, long long *id) {
    const sql_arg args[] = {TEXT_ARG(d->name), INT_ARG(d->cc), INT_ARG(d->sm_count), INT_ARG(d->driver_version),
                            INT_ARG(d->nvrtc_version)};
    int n = (int)(sizeof args / sizeof *args);
    *id = -1;
    if (kt_db_sql(db,
                  "INSERT INTO devices (name, cc, sm_count, driver_version, nvrtc_version) VALUES (?1, ?2, ?3, ?4, ?5) "
                  "ON CONFLICT (name, cc, sm_count, driver_version, nvrtc_version) DO NOTHING",
                  args, n, NULL, NULL) ||
        kt_db_sql(db,
                  "SELECT id FROM devices WHERE name = ?1 AND cc = ?2 AND sm_count = ?3 AND driver_version = ?4 "
                  "AND nvrtc_version = ?5",
                  args, n, kt_db_row_int, id))
        return -1;
    return *id < 0 ? kt_fail("%s: device row for %s was not stored", db->path, d->name) : 0;
}

int kt_db_run_begin(kt_db *db, long long device_id, const char *commit, const char *cmdline, long long *run_id) {
    /* started_at defaults to the current ISO-8601 UTC time (see schema.sql) */
    if (kt_db_sql(db, "INSERT INTO runs (kt_commit, cmdline, device_id) VALUES (?1, ?2, ?3)",
                  ARGS(TEXT_ARG(commit), TEXT_ARG(cmdline), INT_ARG(device_id)), NULL, NULL))
        return -1;
    *run_id = sqlite3_last_insert_rowid(db->h);
    return 0;
}

const char *kt_status_name(kt_status s) {
    static const char *const names[] = {"ok", "compile-error", "launch-error", "wrong-result", "skipped"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "unknown";
}

/* A measurement to insert, and whether its unit had a row already. */
typedef struct new_measurement {
    const kt_measurement *m;
    int *existed;
} new_measurement;

static int insert_measurement(kt_db *db, const void *ctx) {
    const new_measurement *n = ctx;
    const kt_measurement *m = n->m;
    int rc =
        kt_db_sql(db,
                  "INSERT INTO measurements (run_id, device_id, family, source_hash, variant_id, config, shape, m, "
                  "status, error, median_us, min_us, max_us, rel_err, registers, spill_bytes, compile_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) "
                  "ON CONFLICT (device_id, family, source_hash, shape, m, variant_id) DO NOTHING",
                  ARGS(INT_ARG(m->run_id), INT_ARG(m->device_id), TEXT_ARG(m->family), TEXT_ARG(m->source_hash),
                       TEXT_ARG(m->variant_id), TEXT_ARG(m->config), TEXT_ARG(m->shape), INT_ARG(m->m),
                       TEXT_ARG(kt_status_name(m->status)), TEXT_ARG(m->error[0] ? m->error : NULL),
                       REAL_ARG(m->median_us), REAL_ARG(m->min_us), REAL_ARG(m->max_us), REAL_ARG(m->rel_err),
                       INT_ARG(m->registers), INT_ARG(m->spill_bytes), REAL_ARG(m->compile_ms)),
                  NULL, NULL);
    *n->existed = !rc && sqlite3_changes(db->h) == 0;
    return rc;
}

int kt_db_add_measurement(kt_db *db, const kt_measurement *m) {
    int existed = 0;
    new_measurement n = {m, &existed};
    return kt_db_transaction(db, insert_measurement, &n) ? -1 : existed;
}

/* The status and median of a found row, for kt_db_find_measurement. */
typedef struct found_row {
    int found;
    kt_status status;
    double median_us;
} found_row;

static int found_row_fn(sqlite3_stmt *st, void *ctx) {
    found_row *r = ctx;
    const char *status = (const char *)sqlite3_column_text(st, 0);
    r->found = 1;
    r->status = KT_SKIPPED;
    for (kt_status k = KT_OK; k <= KT_SKIPPED; k++)
        if (!strcmp(status, kt_status_name(k))) r->status = k;
    r->median_us = r->status == KT_OK ? sqlite3_column_double(st, 1) : NAN;
    return 0;
}

int kt_db_find_measurement(kt_db *db, long long device_id, const char *family, const char *source_hash,
                           const char *variant_id, const char *shape, long m, kt_status *status, double *median_us) {
    found_row r = {0};
    if (kt_db_sql(
            db,
            "SELECT status, median_us FROM measurements WHERE device_id = ?1 AND family = ?2 AND source_hash = ?3 "
            "AND shape = ?4 AND m = ?5 AND variant_id = ?6 ORDER BY id LIMIT 1",
            ARGS(INT_ARG(device_id), TEXT_ARG(family), TEXT_ARG(source_hash), TEXT_ARG(shape), INT_ARG(m),
                 TEXT_ARG(variant_id)),
            found_row_fn, &r))
        return -1;
    if (r.found && status) *status = r.status;
    if (r.found && median_us) *median_us = r.median_us;
    return r.found;
}

/* ------------------------------------------------------------------ winners */

typedef struct winner_key {
    long long device_id;
    const char *family, *source_hash, *shape;
    long m_bucket;
} winner_key;

/* The measurements of one winner key (?1..?5 = device, family, source hash, shape, bucket). */
#define WINNER_ROWS "device_id = ?1 AND family = ?2 AND source_hash = ?3 AND shape = ?4 AND kt_bucket(family, m) = ?5"
/* The variants with a failure in the bucket: they cannot win (nor be re-timed). */
#define FAILED_IN_BUCKET                                                                                               \
    "(SELECT variant_id FROM measurements WHERE " WINNER_ROWS " AND status IN ('wrong-result', 'launch-error'))"
/* The rows of the latest re-timing group of each re-timed m of the bucket. */
#define LATEST_RETIMES                                                                                                 \
    "WITH latest AS (SELECT m, max(id) AS last FROM retimes WHERE " WINNER_ROWS " GROUP BY m), "                       \
    "groups AS (SELECT r.m, r.variant_id, r.median_us, r.min_us, r.max_us FROM retimes r "                             \
    "JOIN latest l ON l.m = r.m WHERE r.device_id = ?1 AND r.family = ?2 AND r.source_hash = ?3 "                      \
    "AND r.shape = ?4 AND r.run_id = (SELECT run_id FROM retimes WHERE id = l.last)) "

/* A row that competes for a winner key with the times that decide: re-timed ones where
 * its m was re-timed, else its first-pass ones. */
typedef struct candidate {
    long long id;
    char variant_id[17];
    double t, min_us, max_us;
    int retimed;
} candidate;

typedef struct candidates {
    candidate *c;
    int n;
    size_t cap;
} candidates;

static int candidate_row(sqlite3_stmt *st, void *ctx) {
    candidates *cs = ctx;
    candidate *grown = kt_grow(cs->c, &cs->cap, (size_t)cs->n, sizeof *grown);
    if (!grown) return -1;
    cs->c = grown;
    candidate *c = &cs->c[cs->n++];
    c->id = sqlite3_column_int64(st, 0);
    snprintf(c->variant_id, sizeof c->variant_id, "%s", (const char *)sqlite3_column_text(st, 1));
    c->retimed = sqlite3_column_type(st, 5) != SQLITE_NULL;
    int first = c->retimed ? 5 : 2;
    c->t = sqlite3_column_double(st, first);
    c->min_us = sqlite3_column_double(st, first + 1);
    c->max_us = sqlite3_column_double(st, first + 2);
    return 0;
}

/* Whether a ranks before b by (time, variant id). */
static int faster(const candidate *a, const candidate *b) {
    return a->t != b->t ? a->t < b->t : strcmp(a->variant_id, b->variant_id) < 0;
}

/* The winner among n candidates (kt_db_update_winner's rule): the lowest variant id of
 * those whose median is within KT_NOISE_BAND of the fastest, at its own fastest row. */
static const candidate *choose(const candidates *cs) {
    const candidate *best = NULL, *win = NULL;
    for (int i = 0; i < cs->n; i++)
        if (!best || faster(&cs->c[i], best)) best = &cs->c[i];
    for (int i = 0; i < cs->n; i++) {
        const candidate *c = &cs->c[i];
        int tied = c->t <= best->t * (1 + KT_NOISE_BAND);
        int order = win ? strcmp(c->variant_id, win->variant_id) : -1;
        if (tied && (order < 0 || (order == 0 && c->t < win->t))) win = c;
    }
    return win;
}

/* Replaces the winner of one key by kt_db_update_winner's rule. A variant with a wrong
 * result or a failed launch anywhere in the bucket is out even where it passed: it would
 * be served for the bucket's other batch sizes too. */
static int replace_winner(kt_db *db, const void *ctx) {
    const winner_key *k = ctx;
    const sql_arg args[] = {INT_ARG(k->device_id), TEXT_ARG(k->family), TEXT_ARG(k->source_hash), TEXT_ARG(k->shape),
                            INT_ARG(k->m_bucket)};
    int n = (int)(sizeof args / sizeof *args);
    if (kt_db_sql(db,
                  "DELETE FROM winners WHERE device_id = ?1 AND family = ?2 AND source_hash = ?3 AND shape = ?4 "
                  "AND m_bucket = ?5",
                  args, n, NULL, NULL))
        return -1;
    candidates cs = {0};
    int rc = kt_db_sql(db,
                       LATEST_RETIMES
                       "SELECT m.id, m.variant_id, m.median_us, m.min_us, m.max_us, g.median_us, g.min_us, g.max_us "
                       "FROM measurements m LEFT JOIN groups g ON g.m = m.m AND g.variant_id = m.variant_id "
                       "WHERE m.device_id = ?1 AND m.family = ?2 AND m.source_hash = ?3 AND m.shape = ?4 "
                       "AND kt_bucket(m.family, m.m) = ?5 AND m.status = 'ok' AND m.variant_id NOT IN " FAILED_IN_BUCKET
                       " AND (g.variant_id IS NOT NULL OR m.m NOT IN (SELECT m FROM latest))",
                       args, n, candidate_row, &cs);
    const candidate *w = rc || !cs.n ? NULL : choose(&cs);
    if (w)
        rc = kt_db_sql(
            db,
            "INSERT INTO winners (device_id, family, source_hash, shape, m_bucket, variant_id, config, "
            "median_us, min_us, max_us, measurement_id) "
            "SELECT device_id, family, source_hash, shape, ?2, variant_id, config, ?3, ?4, ?5, id "
            "FROM measurements WHERE id = ?1",
            ARGS(INT_ARG(w->id), INT_ARG(k->m_bucket), REAL_ARG(w->t), REAL_ARG(w->min_us), REAL_ARG(w->max_us)), NULL,
            NULL);
    free(cs.c);
    return rc;
}

int kt_db_update_winner(kt_db *db, long long device_id, const char *family, const char *source_hash, const char *shape,
                        long m) {
    winner_key k = {device_id, family, source_hash, shape, kt_db_bucket_of(family, m)};
    return kt_db_transaction(db, replace_winner, &k);
}

/* ----------------------------------------------------------------- retimes */

/* Variant ids collected from column 0 of a query, at most max. */
typedef struct id_list {
    char (*ids)[17];
    int n, max;
} id_list;

static int id_row(sqlite3_stmt *st, void *ctx) {
    id_list *l = ctx;
    if (l->n < l->max) snprintf(l->ids[l->n++], 17, "%s", (const char *)sqlite3_column_text(st, 0));
    return 0;
}

static int has_id(const id_list *l, const char *id) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->ids[i], id)) return 1;
    return 0;
}

int kt_db_finalists(kt_db *db, long long device_id, const char *family, const char *source_hash, const char *shape,
                    long m, int max, char (*variant_ids)[17], int *retimed) {
    const sql_arg args[] = {INT_ARG(device_id),
                            TEXT_ARG(family),
                            TEXT_ARG(source_hash),
                            TEXT_ARG(shape),
                            INT_ARG(kt_db_bucket_of(family, m)),
                            INT_ARG(m),
                            INT_ARG(max)};
    int n = (int)(sizeof args / sizeof *args);
    id_list finalists = {variant_ids, 0, max};
    char(*group)[17] = calloc((size_t)max + 1, sizeof *group);
    id_list latest = {group, 0, max + 1}; /* one more than max: a larger group is not equal */
    if (!group) return kt_fail("out of memory");
    int rc = kt_db_sql(db,
                       "SELECT variant_id, min(median_us) AS t FROM measurements WHERE " WINNER_ROWS
                       " AND m = ?6 AND status = 'ok' AND variant_id NOT IN " FAILED_IN_BUCKET
                       " GROUP BY variant_id ORDER BY t, variant_id LIMIT ?7",
                       args, n, id_row, &finalists) ||
             kt_db_sql(db,
                       "SELECT variant_id FROM retimes WHERE device_id = ?1 AND family = ?2 AND source_hash = ?3 "
                       "AND shape = ?4 AND m = ?5 AND run_id = (SELECT run_id FROM retimes WHERE device_id = ?1 "
                       "AND family = ?2 AND source_hash = ?3 AND shape = ?4 AND m = ?5 ORDER BY id DESC LIMIT 1)",
                       ARGS(INT_ARG(device_id), TEXT_ARG(family), TEXT_ARG(source_hash), TEXT_ARG(shape), INT_ARG(m)),
                       id_row, &latest);
    int same = !rc && latest.n == finalists.n;
    for (int i = 0; same && i < finalists.n; i++) same = has_id(&latest, finalists.ids[i]);
    free(group);
    *retimed = same;
    return rc ? -1 : finalists.n;
}

typedef struct retime_group {
    long long run_id, device_id;
    const char *family, *source_hash, *shape;
    long m;
    const kt_retime *r;
    int n;
} retime_group;

/* Stores a re-timing group unless the latest stored group of its (shape, m) has the same
 * variants and was stored by another run while this one was running: then a process
 * sharing the database re-timed these finalists first, and its group decides. */
static int insert_retimes(kt_db *db, const void *ctx) {
    const retime_group *g = ctx;
    char(*ids)[17] = calloc((size_t)g->n + 1, sizeof *ids);
    id_list latest = {ids, 0, g->n + 1}; /* one more than n: a larger group is not equal */
    if (!ids) return kt_fail("out of memory");
    int rc = kt_db_sql(db,
                       "WITH latest AS (SELECT run_id, created_at FROM retimes WHERE device_id = ?1 AND family = ?2 "
                       "AND source_hash = ?3 AND shape = ?4 AND m = ?5 ORDER BY id DESC LIMIT 1) "
                       "SELECT r.variant_id FROM retimes r JOIN latest l ON r.run_id = l.run_id WHERE r.device_id = ?1 "
                       "AND r.family = ?2 AND r.source_hash = ?3 AND r.shape = ?4 AND r.m = ?5 AND l.run_id <> ?6 "
                       "AND l.created_at >= (SELECT started_at FROM runs WHERE id = ?6)",
                       ARGS(INT_ARG(g->device_id), TEXT_ARG(g->family), TEXT_ARG(g->source_hash), TEXT_ARG(g->shape),
                            INT_ARG(g->m), INT_ARG(g->run_id)),
                       id_row, &latest);
    int same = !rc && latest.n == g->n;
    for (int i = 0; same && i < g->n; i++) same = has_id(&latest, g->r[i].variant_id);
    free(ids);
    if (rc) return -1;
    for (int i = 0; !same && i < g->n; i++)
        if (kt_db_sql(db,
                      "INSERT INTO retimes (run_id, device_id, family, source_hash, variant_id, shape, m, rounds, "
                      "median_us, min_us, max_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                      ARGS(INT_ARG(g->run_id), INT_ARG(g->device_id), TEXT_ARG(g->family), TEXT_ARG(g->source_hash),
                           TEXT_ARG(g->r[i].variant_id), TEXT_ARG(g->shape), INT_ARG(g->m), INT_ARG(g->r[i].rounds),
                           REAL_ARG(g->r[i].median_us), REAL_ARG(g->r[i].min_us), REAL_ARG(g->r[i].max_us)),
                      NULL, NULL))
            return -1;
    return 0;
}

int kt_db_add_retimes(kt_db *db, long long run_id, long long device_id, const char *family, const char *source_hash,
                      const char *shape, long m, const kt_retime *r, int n) {
    retime_group g = {run_id, device_id, family, source_hash, shape, m, r, n};
    return kt_db_transaction(db, insert_retimes, &g);
}

/* -------------------------------------------------------------------- merge */

/* The source of a merge is attached as schema "src"; temp.merge_devices and
 * temp.merge_runs map its row ids to dst's. A run is the same run when its device,
 * start time, commit and command line are, so merging a file twice copies nothing twice. */
#define SAME_RUN                                                                                                       \
    "x.device_id = md.dst_id AND x.started_at = r.started_at AND x.kt_commit IS r.kt_commit "                          \
    "AND x.cmdline IS r.cmdline"

static const char *const merge_steps[] = {
    "INSERT INTO main.devices (name, cc, sm_count, driver_version, nvrtc_version) "
    "SELECT name, cc, sm_count, driver_version, nvrtc_version FROM src.devices WHERE true "
    "ON CONFLICT (name, cc, sm_count, driver_version, nvrtc_version) DO NOTHING",
    "CREATE TEMP TABLE merge_devices AS SELECT s.id AS src_id, d.id AS dst_id FROM src.devices s "
    "JOIN main.devices d USING (name, cc, sm_count, driver_version, nvrtc_version)",
    "INSERT INTO main.runs (started_at, kt_commit, cmdline, device_id) "
    "SELECT r.started_at, r.kt_commit, r.cmdline, md.dst_id FROM src.runs r "
    "JOIN temp.merge_devices md ON md.src_id = r.device_id "
    "WHERE NOT EXISTS (SELECT 1 FROM main.runs x WHERE " SAME_RUN ") ORDER BY r.id",
    "CREATE TEMP TABLE merge_runs AS SELECT r.id AS src_id, "
    "(SELECT min(x.id) FROM main.runs x WHERE " SAME_RUN ") AS dst_id "
    "FROM src.runs r JOIN temp.merge_devices md ON md.src_id = r.device_id",
    "INSERT INTO main.measurements (run_id, device_id, family, source_hash, variant_id, config, shape, m, "
    "status, error, median_us, min_us, max_us, rel_err, registers, spill_bytes, compile_ms, created_at) "
    "SELECT mr.dst_id, md.dst_id, s.family, s.source_hash, s.variant_id, s.config, s.shape, s.m, s.status, "
    "s.error, s.median_us, s.min_us, s.max_us, s.rel_err, s.registers, s.spill_bytes, s.compile_ms, s.created_at "
    "FROM src.measurements s JOIN temp.merge_runs mr ON mr.src_id = s.run_id "
    "JOIN temp.merge_devices md ON md.src_id = s.device_id "
    "WHERE NOT EXISTS (SELECT 1 FROM main.measurements x WHERE x.device_id = md.dst_id AND x.family = s.family "
    "AND x.source_hash = s.source_hash AND x.shape = s.shape AND x.m = s.m AND x.variant_id = s.variant_id) "
    "ORDER BY s.id",
    "INSERT INTO main.retimes (run_id, device_id, family, source_hash, variant_id, shape, m, rounds, median_us, "
    "min_us, max_us, created_at) "
    "SELECT mr.dst_id, md.dst_id, s.family, s.source_hash, s.variant_id, s.shape, s.m, s.rounds, s.median_us, "
    "s.min_us, s.max_us, s.created_at FROM src.retimes s JOIN temp.merge_runs mr ON mr.src_id = s.run_id "
    "JOIN temp.merge_devices md ON md.src_id = s.device_id "
    "WHERE NOT EXISTS (SELECT 1 FROM main.retimes x WHERE x.device_id = md.dst_id AND x.family = s.family "
    "AND x.source_hash = s.source_hash AND x.shape = s.shape AND x.m = s.m AND x.variant_id = s.variant_id "
    "AND x.created_at = s.created_at) "
    "ORDER BY s.id",
    "INSERT INTO main.allreduce_winners (device_id, world, bytes_bucket, bytes, proto, algo, median_us, min_us, "
    "max_us, default_us, floor_us, nccl_version, run_id, updated_at) "
    "SELECT md.dst_id, s.world, s.bytes_bucket, s.bytes, s.proto, s.algo, s.median_us, s.min_us, s.max_us, "
    "s.default_us, s.floor_us, s.nccl_version, mr.dst_id, s.updated_at FROM src.allreduce_winners s "
    "JOIN temp.merge_devices md ON md.src_id = s.device_id JOIN temp.merge_runs mr ON mr.src_id = s.run_id "
    "WHERE true ON CONFLICT (device_id, world, bytes_bucket) DO UPDATE SET bytes = excluded.bytes, "
    "proto = excluded.proto, algo = excluded.algo, median_us = excluded.median_us, min_us = excluded.min_us, "
    "max_us = excluded.max_us, default_us = excluded.default_us, floor_us = excluded.floor_us, "
    "nccl_version = excluded.nccl_version, run_id = excluded.run_id, updated_at = excluded.updated_at "
    "WHERE excluded.updated_at > allreduce_winners.updated_at",
};

/* The winner keys a merge touched, collected before any of them is recomputed. */
typedef struct merge_keys {
    winner_key *k;
    int n;
    size_t cap;
} merge_keys;

static int merge_key_row(sqlite3_stmt *st, void *ctx) {
    merge_keys *mk = ctx;
    winner_key *grown = kt_grow(mk->k, &mk->cap, (size_t)mk->n, sizeof *grown);
    if (!grown) return -1;
    mk->k = grown;
    winner_key *k = &mk->k[mk->n];
    k->device_id = sqlite3_column_int64(st, 0);
    k->family = strdup((const char *)sqlite3_column_text(st, 1));
    k->source_hash = strdup((const char *)sqlite3_column_text(st, 2));
    k->shape = strdup((const char *)sqlite3_column_text(st, 3));
    k->m_bucket = (long)sqlite3_column_int64(st, 4);
    mk->n++;
    if (!k->family || !k->source_hash || !k->shape) return kt_fail("out of memory");
    return 0;
}

static int merge_body(kt_db *db, const void *unused) {
    (void)unused;
    for (size_t i = 0; i < sizeof merge_steps / sizeof *merge_steps; i++)
        if (kt_db_sql(db, merge_steps[i], NO_ARGS, NULL, NULL)) return -1;
    merge_keys mk = {0};
    int rc = kt_db_sql(db,
                       "SELECT DISTINCT md.dst_id, s.family, s.source_hash, s.shape, kt_bucket(s.family, s.m) "
                       "FROM src.measurements s JOIN temp.merge_devices md ON md.src_id = s.device_id",
                       NO_ARGS, merge_key_row, &mk);
    for (int i = 0; !rc && i < mk.n; i++) rc = replace_winner(db, &mk.k[i]);
    for (int i = 0; i < mk.n; i++) {
        free((char *)mk.k[i].family);
        free((char *)mk.k[i].source_hash);
        free((char *)mk.k[i].shape);
    }
    free(mk.k);
    return rc || kt_db_sql(db, "DROP TABLE temp.merge_devices", NO_ARGS, NULL, NULL) ||
                   kt_db_sql(db, "DROP TABLE temp.merge_runs", NO_ARGS, NULL, NULL)
               ? -1
               : 0;
}

/* ------------------------------------------------------ all-reduce settings */

/* The first thing wrong with r as a stored setting, or NULL. */
static const char *allreduce_row_problem(const kt_allreduce_row *r) {
    if (r->world < 1 || r->world > 8) return "world size outside 1..8";
    if (r->bytes < 1 || r->bytes > (size_t)1 << 40) return "message size outside 1 byte..1 TiB";
    if (!kt_allreduce_setting_known(r->proto, r->algo)) return "unknown NCCL protocol/algorithm";
    if (!isfinite(r->median_us) || !isfinite(r->min_us) || !isfinite(r->max_us) || !isfinite(r->default_us) ||
        !(r->min_us > 0) || r->min_us > r->median_us || r->max_us < r->median_us || !(r->default_us > 0))
        return "times not finite, positive and min <= median <= max";
    if (!isfinite(r->floor_us) || r->floor_us < 0) return "floor not finite and >= 0";
    if (r->nccl_version < 1) return "no NCCL version";
    return NULL;
}

int kt_db_set_allreduce(kt_db *db, const kt_allreduce_row *r) {
    const char *problem = allreduce_row_problem(r);
    if (problem)
        return kt_fail("%s: all-reduce setting '%s/%s' of %zu bytes on %d GPUs refused: %s", db->path, r->proto,
                       r->algo, r->bytes, r->world, problem);
    return kt_db_sql(
        db,
        "INSERT OR REPLACE INTO allreduce_winners (device_id, world, bytes_bucket, bytes, proto, algo, median_us, "
        "min_us, max_us, default_us, floor_us, nccl_version, run_id) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        ARGS(INT_ARG(r->device_id), INT_ARG(r->world), INT_ARG(kt_allreduce_bucket(r->bytes)),
             INT_ARG((long long)r->bytes), TEXT_ARG(r->proto), TEXT_ARG(r->algo), REAL_ARG(r->median_us),
             REAL_ARG(r->min_us), REAL_ARG(r->max_us), REAL_ARG(r->default_us),
             r->floor_us > 0 ? REAL_ARG(r->floor_us) : TEXT_ARG(NULL), INT_ARG(r->nccl_version), INT_ARG(r->run_id)),
        NULL, NULL);
}

/* Refuses src_path unless it is a readable kt database other than the file dst_path. */
static int check_merge_input(const char *src_path, const char *dst_path) {
    struct stat s, d;
    if (stat(src_path, &s) || access(src_path, R_OK)) return kt_fail("cannot read %s: %s", src_path, strerror(errno));
    if (!stat(dst_path, &d) && s.st_dev == d.st_dev && s.st_ino == d.st_ino)
        return kt_fail("cannot merge %s into itself (%s)", src_path, dst_path);
    return 0;
}

/* Refuses src_path (with kt_db_open's message, before anything is attached or copied) unless
 * it is a readable kt database of this build's schema other than dst_path. */
static int check_merge_source(const char *src_path, const char *dst_path) {
    kt_db *src = NULL;
    if (check_merge_input(src_path, dst_path) || kt_db_open(src_path, 1, &src)) return -1;
    int version = src->version;
    kt_db_close(src);
    if (version != KT_SCHEMA_VERSION)
        return kt_fail("%s: schema version %d is older than this build's %d; open it writable once to migrate",
                       src_path, version, KT_SCHEMA_VERSION);
    return 0;
}

int kt_db_merge(kt_db *dst, const char *src_path) {
    if (check_merge_source(src_path, dst->path)) return -1;
    if (kt_db_sql(dst, "ATTACH DATABASE ?1 AS src", ARGS(TEXT_ARG(src_path)), NULL, NULL)) return -1;
    int rc = kt_db_transaction(dst, merge_body, NULL);
    char first[2048];
    snprintf(first, sizeof first, "%s", kt_error());
    if (kt_db_sql(dst, "DETACH DATABASE src", NO_ARGS, NULL, NULL) && !rc) return -1;
    return rc ? kt_fail("merging %s: %s", src_path, first) : 0;
}

/* Replaces the whole content of `to` by that of `from` (SQLite's online backup, one step:
 * one write transaction on `to`). */
static int copy_db(kt_db *to, kt_db *from) {
    sqlite3_backup *b = sqlite3_backup_init(to->h, "main", from->h, "main");
    if (!b) return kt_db_fail(to);
    int rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    return rc == SQLITE_DONE ? 0 : kt_fail("copying %s into %s: %s", from->path, to->path, sqlite3_errstr(rc));
}

/* Removes a database file and its WAL side files. */
static void remove_db_files(const char *path) {
    char side[4300];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

int kt_db_merge_files(const char *out, const char *const *in, int n) {
    struct stat st;
    int exists = !stat(out, &st);
    if (exists && S_ISDIR(st.st_mode)) return kt_fail("%s is a folder, not a database file", out);
    for (int i = 0; i < n; i++)
        if (check_merge_source(in[i], out)) return -1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.merge-%d.tmp", out, (int)getpid());
    kt_db *dst = NULL, *t = NULL;
    int rc = (exists && kt_db_open(out, 0, &dst)) || kt_db_open(tmp, 0, &t) || (exists && copy_db(t, dst));
    for (int i = 0; !rc && i < n; i++) rc = kt_db_merge(t, in[i]);
    if (!rc && exists) rc = copy_db(dst, t);
    kt_db_close(t);
    kt_db_close(dst);
    if (!rc && !exists && rename(tmp, out)) rc = kt_fail("cannot rename %s to %s: %s", tmp, out, strerror(errno));
    remove_db_files(tmp);
    return rc ? -1 : 0;
}
